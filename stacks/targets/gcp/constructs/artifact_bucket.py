"""ArtifactBucket: the environment's bucket (data, base LMs, runs) and its access-log bucket."""

from __future__ import annotations

from constructs import Construct

from stacks.cdk import ITerraformDependable
from stacks.targets.gcp.cdk_google import StorageBucket, StorageBucketIamMember, StorageBucketLifecycleRule

# The trainer names every checkpoint object `*.ckpt.<ext>` (trainer/runtime/callbacks.py, pipeline.py).
CHECKPOINT_SUFFIXES = [".ckpt.pth", ".ckpt.json", ".ckpt.pkl"]
BUILD_SOURCES = "_cloudbuild/"


def _delete_when(**condition) -> StorageBucketLifecycleRule:
    return StorageBucketLifecycleRule(action={"type": "Delete"}, condition=condition)


def _hardened(**kwargs) -> dict:
    return dict(uniform_bucket_level_access=True, public_access_prevention="enforced", force_destroy=False, **kwargs)


class ArtifactBucket(Construct):
    """Exposes `bucket`, `log_bucket` (its access logs) and `log_writer` (the log delivery grant, or None)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        project: str,
        name: str,
        location: str,
        noncurrent_days: int = 30,
        keep_versions: int = 3,
        checkpoint_days: int = 30,
        log_days: int = 90,
        build_source_days: int = 30,
        access_log_grant: bool = True,
        depends_on: list[ITerraformDependable] | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.log_bucket = StorageBucket(
            self,
            "access_logs",
            project=project,
            name=f"{name}-access-logs",
            location=location,
            depends_on=depends_on,
            versioning={"enabled": True},
            lifecycle_rule=[_delete_when(age=log_days)],
            **_hardened(),
        )
        self.log_bucket.add_override(
            "//.checkov.skip.CKV_GCP_62", "this bucket is the access-log sink; logging it into itself would loop"
        )
        # Cloud Storage writes usage and storage logs as this Google group. Domain restricted
        # sharing (org policy iam.allowedPolicyMemberDomains) refuses the grant: `access_log_grant:
        # false` leaves it out (the bucket still names its log bucket; no logs arrive then).
        self.log_writer = (
            StorageBucketIamMember(
                self,
                "log_delivery",
                bucket=self.log_bucket.name,
                role="roles/storage.objectCreator",
                member="group:cloud-storage-analytics@google.com",
            )
            if access_log_grant
            else None
        )
        self.bucket = StorageBucket(
            self,
            "bucket",
            project=project,
            name=name,
            location=location,
            depends_on=depends_on,
            versioning={"enabled": True},
            logging={"log_bucket": self.log_bucket.name},
            lifecycle_rule=[
                # An overwritten or deleted object stays recoverable for `noncurrent_days`.
                _delete_when(days_since_noncurrent_time=noncurrent_days, with_state="ARCHIVED"),
                _delete_when(num_newer_versions=keep_versions, with_state="ARCHIVED"),
                # Checkpoints only matter while a run may resume; model.pth and metrics stay.
                _delete_when(age=checkpoint_days, matches_suffix=CHECKPOINT_SUFFIXES, with_state="LIVE"),
                # Image build contexts (`trainctl image build`); the image itself is in the registry.
                _delete_when(age=build_source_days, matches_prefix=[BUILD_SOURCES], with_state="LIVE"),
            ],
            **_hardened(),
        )
