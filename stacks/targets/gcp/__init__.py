"""The Google Cloud target, everything GCP-specific in one package (SkyPilot's provision/<cloud>/):

target.py (GcpTarget: the Target protocol for gcp) · config_checks.py (what only gcp refuses) ·
gpus.py (the GPU and boot-image catalogue) · prices.py, pricing.py, cost.py (price books, estimates,
a run's cost) · quota.py (zone choice by quota) · image.py (the trainer image, Cloud Build) ·
doctor.py, deploy_checks.py, access.py, lookups.py (`trainctl doctor`) · group_errors.py (VM creation
errors) · services.py, state_bucket.py (`trainctl bootstrap`) · iam_grants.py (what the CI accounts
hold) · api.py (Google clients and errors) · cdk_google.py (the google provider's CDK classes, for
the constructs).
"""
