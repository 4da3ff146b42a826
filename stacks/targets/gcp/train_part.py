"""The gcp target's part of `train-<lang>`: state in the env's GCS bucket, the run's Spot GPU instance group
behind a quota guard, the trainer's VM metadata."""

from __future__ import annotations

from stacks.cdk import GcsBackend, LocalBackend, TerraformOutput
from stacks.config import EnvConfig
from stacks.constructs.run_identity import RunIdentity
from stacks.naming import TRAINER_SA, group_name, node_tag, sa_email, state_prefix
from stacks.targets.gcp.cdk_google import GoogleProvider
from stacks.targets.gcp.constructs.foundation_stack import provider_settings
from stacks.targets.gcp.constructs.gpu_instance_group import GpuInstanceGroup
from stacks.targets.gcp.constructs.quota_guard import QuotaGuard
from stacks.targets.gcp.gpus import (
    GPU_TYPES,
    default_boot_image,
    installs_driver_at_boot,
    required_nic_type,
    signed_driver,
)
from stacks.targets.gcp.placement import GcpPlacement
from trainer.launchers.run_spec import RunSpec
from trainer.launchers.vm.spec import VmSpec


def add_gcp_part(stack, *, spec: RunSpec, config: EnvConfig, placement: GcpPlacement) -> str:
    """Adds `stack.vms` (GpuInstanceGroup) and the outputs of where it runs -> the run id as applied."""
    lang, vm = spec.lang, config.language(spec.lang).gcp
    boot_image = vm.boot_image or default_boot_image(vm.machine_type)
    region = placement.region
    name = group_name(config.env, lang)
    if config.gcp.simulated is None:
        GoogleProvider(stack, "google", **provider_settings(config, region))
        GcsBackend(stack, bucket=config.gcp.state_bucket_name, prefix=state_prefix(config.env, stack.node.id))
    else:  # never Google: Terraform run on it by hand (cdktf deploy) meets only the simulated cloud, gone by then
        GoogleProvider(stack, "google", **provider_settings(config, region), **simulated_provider())
        LocalBackend(stack, path="simulated.tfstate")
    run_id = RunIdentity(stack, "run", run_id=stack.run_id_expression, replace_on=stack.run_id_var.string_value).run_id
    spec = spec.for_run(run_id)
    guard = QuotaGuard(
        stack,
        "quota",
        project=config.gcp.project,
        region=region,
        metrics=placement.quota_metrics,
        needed=spec.nodes * vm.gpu.count,
        gpu_family=GPU_TYPES[vm.gpu.type].gpu_family,
    )
    stack.vms = GpuInstanceGroup(
        stack,
        "vms",
        project=config.gcp.project,
        name=name,
        zone=placement.zone,
        machine_type=vm.machine_type,
        gpu_type=vm.gpu.type,
        gpu_count=vm.gpu.count,
        nodes=spec.nodes,
        spot=spec.spot,
        rung=spec.rung,
        max_run_hours=spec.max_run_hours,
        boot_image=boot_image,
        secure_boot=signed_driver(boot_image) if vm.secure_boot is None else vm.secure_boot,
        disk_gb=vm.disk_gb,
        disk_type=vm.disk_type,
        service_account=sa_email(TRAINER_SA, config.gcp.project),
        network=config.gcp.network,
        subnetwork=config.gcp.subnetwork,
        network_tags=[node_tag(config.env)],
        labels={"app": "trainstack", "env": config.env, "lang": lang, "run": run_id},
        metadata=_vm_metadata(spec, config, placement, boot_image=boot_image),
        preconditions=[guard.precondition],
        compact_placement=vm.compact_placement,
        nic_type=required_nic_type(vm.machine_type),
    )
    outputs = {
        "zone": placement.zone,
        "group": name,
        "image": placement.image,
        "quota_metrics": ",".join(placement.quota_metrics),
    }
    for key, value in outputs.items():
        TerraformOutput(stack, key, value=value, static_id=True)
    return run_id


def simulated_provider() -> dict:
    """The google provider's endpoints at the simulated cloud this process started, a token that is no one's."""
    from stacks.targets.gcp.sim.session import current

    session = current()
    url = session.url if session is not None else "http://127.0.0.1:9"  # discard: nothing answers
    return {
        "access_token": "simulated",
        "compute_custom_endpoint": f"{url}/compute/v1/",
        "cloud_quotas_custom_endpoint": f"{url}/v1/",
        "storage_custom_endpoint": f"{url}/storage/v1/",
    }


def _vm_metadata(spec: RunSpec, config: EnvConfig, placement: GcpPlacement, *, boot_image: str) -> dict:
    vm = config.language(spec.lang).gcp
    name = group_name(config.env, spec.lang)
    return {
        "startup-script": terraform_literal(placement.startup_script),
        "shutdown-script": terraform_literal(placement.shutdown_script),
        "enable-oslogin": "TRUE",
        "block-project-ssh-keys": "TRUE",
        "serial-port-enable": "FALSE",
        # Container-Optimized OS ships its logs (journal, the start-up script, the containers) to
        # Cloud Logging only when asked: without it first-boot failures show on the serial port only.
        "google-logging-enabled": "true",
        # Deep Learning VM images install (or verify) the NVIDIA driver at first boot only when asked;
        # on Container-Optimized OS the start-up script installs this version (cos-extensions).
        "install-nvidia-driver": "True",
        **VmSpec.of(
            spec,
            gpus_per_node=vm.gpu.count,
            project=config.gcp.project,
            zone=placement.zone,
            mig=name,
            base_name=name,
            image=placement.image,
            shm_size=vm.shm_size,
            docker_flags=tuple(vm.docker_flags),
            gpu_driver=vm.gpu_driver if installs_driver_at_boot(boot_image) else None,
            kept_bucket=config.gcp.kept_bucket,
        ).to_metadata(),
    }


def terraform_literal(text: str) -> str:
    """`text` as Terraform reads it back unchanged: every string in cdk.tf.json is a template, so a shell
    script's `${VAR:-default}` would be an (invalid) interpolation; `$${` and `%%{` are its literal forms."""
    return text.replace("${", "$${").replace("%{", "%%{")
