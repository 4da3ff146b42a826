"""What the CI identities are granted (stacks/targets/gcp/constructs/ci_identities.py): plain data, so doctor and its
tests read it without loading the Google provider bindings (~10 s)."""

# Read-only roles: enough for `terraform plan -lock=false` of every stack. No roles/viewer.
PLANNER_ROLES = [
    "roles/compute.viewer",
    "roles/iam.securityReviewer",
    "roles/iam.serviceAccountViewer",
    "roles/iam.workloadIdentityPoolViewer",
    "roles/artifactregistry.reader",
    "roles/serviceusage.serviceUsageViewer",
    "roles/cloudquotas.viewer",
    "roles/storage.bucketViewer",
    # The provider bills its calls to the project (user_project_override, foundation_stack.py).
    "roles/serviceusage.serviceUsageConsumer",
]
# The deployer applies and destroys `train-<lang>` stacks; the foundation stays an operator's
# job (it grants IAM). Compute rights come from DEPLOYER_PERMISSIONS, not compute.instanceAdmin.v1
# (which also creates, SSHes into and rewrites any VM, disk or snapshot of the project).
DEPLOYER_ROLES = [
    "roles/cloudquotas.viewer",
    "roles/artifactregistry.reader",
    "roles/storage.bucketViewer",
    "roles/serviceusage.serviceUsageConsumer",
]
DEPLOYER_ROLE_ID = "trainstackDeployer"
# What Terraform calls for the resources of a training stack (gpu_instance_group.py): the
# instance template, the managed group (and the instance group it owns), per-instance configs
# (group updates), the compact placement policy, and the operations it waits on. The VMs are
# created and deleted by the group's service agent, not by the caller, so no compute.instances.*
# or compute.disks.*; attaching the trainer account needs actAs on it (granted below).
DEPLOYER_PERMISSIONS = sorted(
    [
        "compute.instanceTemplates.create",
        "compute.instanceTemplates.delete",
        "compute.instanceTemplates.get",
        "compute.instanceTemplates.list",
        "compute.instanceTemplates.useReadOnly",
        "compute.instanceGroupManagers.create",
        "compute.instanceGroupManagers.delete",
        "compute.instanceGroupManagers.get",
        "compute.instanceGroupManagers.list",
        "compute.instanceGroupManagers.update",
        "compute.instanceGroups.create",
        "compute.instanceGroups.delete",
        "compute.instanceGroups.get",
        "compute.resourcePolicies.create",
        "compute.resourcePolicies.delete",
        "compute.resourcePolicies.get",
        "compute.resourcePolicies.use",
        "compute.networks.get",
        "compute.networks.use",
        "compute.subnetworks.get",
        "compute.subnetworks.use",
        "compute.globalOperations.get",
        "compute.regionOperations.get",
        "compute.zoneOperations.get",
    ]
)
