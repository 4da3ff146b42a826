"""The google provider classes the stacks use, from the provider package of stacks.cdk.KIND
(cdktf-cdktf-provider-google or cdktn-provider-google: same submodules, same classes)."""

from __future__ import annotations

import importlib
import importlib.util
import sys

from stacks.cdk import KIND

# The google provider's prebuilt package for each CDK.
GOOGLE_PACKAGE = {"cdktf": "cdktf_cdktf_provider_google", "cdktn": "cdktn_provider_google"}[KIND]


def _package_without_its_init() -> None:
    """cdktf's prebuilt package's __init__ imports all of its ~1,470 resource modules (~10 CPU-s, every synth)
    where the stacks use 20 (cdktn's imports them when asked). Each resource module imports the provider's jsii
    assembly itself (`from .._jsii import *`), so the package is registered as an empty one at its folder and
    only the modules named below are loaded: the same cdk.tf.json, byte for byte."""
    if KIND != "cdktf" or GOOGLE_PACKAGE in sys.modules:
        return
    spec = importlib.util.find_spec(GOOGLE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return  # not installed: the import below says so
    sys.modules[GOOGLE_PACKAGE] = importlib.util.module_from_spec(spec)


def _module(name: str):
    return importlib.import_module(f"{GOOGLE_PACKAGE}.{name}")


_package_without_its_init()


_registry = _module("artifact_registry_repository")
ArtifactRegistryRepository = _registry.ArtifactRegistryRepository
ArtifactRegistryRepositoryCleanupPolicies = _registry.ArtifactRegistryRepositoryCleanupPolicies
ArtifactRegistryRepositoryIamMember = _module(
    "artifact_registry_repository_iam_member"
).ArtifactRegistryRepositoryIamMember
ComputeFirewall = _module("compute_firewall").ComputeFirewall
_group = _module("compute_instance_group_manager")
ComputeInstanceGroupManager = _group.ComputeInstanceGroupManager
ComputeInstanceGroupManagerVersion = _group.ComputeInstanceGroupManagerVersion
_template = _module("compute_instance_template")
ComputeInstanceTemplate = _template.ComputeInstanceTemplate
ComputeInstanceTemplateDisk = _template.ComputeInstanceTemplateDisk
ComputeInstanceTemplateGuestAccelerator = _template.ComputeInstanceTemplateGuestAccelerator
ComputeInstanceTemplateNetworkInterface = _template.ComputeInstanceTemplateNetworkInterface
ComputePerInstanceConfig = _module("compute_per_instance_config").ComputePerInstanceConfig
ComputeResizeRequest = _module("compute_resize_request").ComputeResizeRequest
ComputeResourcePolicy = _module("compute_resource_policy").ComputeResourcePolicy
DataGoogleCloudQuotasQuotaInfo = _module("data_google_cloud_quotas_quota_info").DataGoogleCloudQuotasQuotaInfo
IamWorkloadIdentityPool = _module("iam_workload_identity_pool").IamWorkloadIdentityPool
IamWorkloadIdentityPoolProvider = _module("iam_workload_identity_pool_provider").IamWorkloadIdentityPoolProvider
ProjectIamCustomRole = _module("project_iam_custom_role").ProjectIamCustomRole
ProjectIamMember = _module("project_iam_member").ProjectIamMember
ProjectService = _module("project_service").ProjectService
GoogleProvider = _module("provider").GoogleProvider
ServiceAccount = _module("service_account").ServiceAccount
ServiceAccountIamMember = _module("service_account_iam_member").ServiceAccountIamMember
_bucket = _module("storage_bucket")
StorageBucket = _bucket.StorageBucket
StorageBucketLifecycleRule = _bucket.StorageBucketLifecycleRule
StorageBucketIamMember = _module("storage_bucket_iam_member").StorageBucketIamMember
