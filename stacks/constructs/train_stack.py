"""`train-<lang>`: the infrastructure of one language's training run."""
from __future__ import annotations

from stacks.cdk import LocalBackend, TerraformOutput, TerraformStack, TerraformVariable
from constructs import Construct

from stacks.config import EnvConfig
from stacks.config.trainer_command import trainer_args
from stacks.targets.gcp.placement import GcpPlacement
from stacks.targets.local.host import LocalHost
from stacks.naming import TRAINER_SA, group_name, node_tag, sa_email, state_prefix


class TrainStack(TerraformStack):
    """Exposes `run_id_var` and `trainer` (LocalTrainer) on local, `vms` (GpuInstanceGroup) on gcp."""

    def __init__(self, scope: Construct, id: str, *, config: EnvConfig, lang: str,
                 local: LocalHost | None = None, gcp: GcpPlacement | None = None) -> None:
        super().__init__(scope, id)
        self.run_id_var = TerraformVariable(
            self, "run_id", type="string", default="",
            description="run folder name; empty = generated at apply time (trainctl always sets it)",
        )
        # Written as HCL: cdktf's Op.neq renders "" as `undefined`.
        self.run_id_expression = ('${var.run_id != "" ? var.run_id : join("-", '
                       '[formatdate("YYYYMMDD-hhmmss", plantimestamp()), substr(uuid(), 0, 4)])}')
        if (local is None) == (gcp is None):
            raise ValueError("a train stack runs on one host: a LocalHost or a GcpPlacement")
        if local is not None:
            self._local(config, lang, local)
        else:
            self._gcp(config, lang, gcp)
        TerraformOutput(self, "lang", value=lang, static_id=True)
        TerraformOutput(self, "env", value=config.env, static_id=True)

    def _local(self, config: EnvConfig, lang: str, local: LocalHost) -> None:
        from stacks.constructs.local_trainer import LocalTrainer

        LocalBackend(self, path=str(local.state_file))
        self.trainer = LocalTrainer(
            self, "trainer", run_id=self.run_id_expression, replace_on=self.run_id_var.string_value, python=local.python,
            workdir=local.workdir, procs_dir=local.procs_dir,
            max_run_hours=config.language(lang).max_run_hours, trainer_args=trainer_args(config, lang),
            processes=config.language(lang).processes, max_restarts=config.language(lang).max_restarts,
            cores=config.language(lang).cores, cores_dir=local.cores_dir, zone=local.zone, market=local.market,
        )
        TerraformOutput(self, "run_id_out", value=self.trainer.run_id, static_id=True).override_logical_id("run_id")

    def _gcp(self, config: EnvConfig, lang: str, gcp: GcpPlacement) -> None:
        from stacks.cdk import GcsBackend
        from stacks.targets.gcp.cdk_google import GoogleProvider
        from trainer.launchers.vm.spec import VmSpec

        from stacks.constructs.foundation_stack import provider_settings
        from stacks.constructs.gpu_instance_group import GpuInstanceGroup
        from stacks.constructs.quota_guard import QuotaGuard
        from stacks.constructs.run_identity import RunIdentity

        from stacks.targets.gcp.gpus import GPU_TYPES, default_boot_image, installs_driver_at_boot, signed_driver

        s = config.language(lang)
        boot_image = s.boot_image or default_boot_image(s.machine_type)
        region = gcp.zone.rsplit("-", 1)[0]
        name = group_name(config.env, lang)
        GoogleProvider(self, "google", **provider_settings(config, region))
        GcsBackend(self, bucket=config.state_bucket_name, prefix=state_prefix(config.env, self.node.id))
        run_id = RunIdentity(self, "run", run_id=self.run_id_expression, replace_on=self.run_id_var.string_value).run_id
        guard = QuotaGuard(self, "quota", project=config.project, region=region, metrics=gcp.quota_metrics,
                           needed=s.nodes * s.gpu.count, gpu_family=GPU_TYPES[s.gpu.type].gpu_family)
        metadata = {
            "startup-script": gcp.startup_script, "shutdown-script": gcp.shutdown_script,
            "enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE", "serial-port-enable": "FALSE",
            # Container-Optimized OS ships its logs (journal, the start-up script, the containers) to
            # Cloud Logging only when asked: without it first-boot failures show on the serial port only.
            "google-logging-enabled": "true",
            # Deep Learning VM images install (or verify) the NVIDIA driver at first boot only when asked;
            # on Container-Optimized OS the start-up script installs this version (cos-extensions).
            "install-nvidia-driver": "True",
            **VmSpec(
                run_id=run_id, lang=lang, env=config.env, bucket=config.bucket, args=trainer_args(config, lang),
                nodes=s.nodes, gpus_per_node=s.gpu.count, max_run_hours=s.max_run_hours, project=config.project,
                zone=gcp.zone, mig=name, base_name=name, max_restarts=s.max_restarts, image=gcp.image,
                shm_size=s.shm_size, docker_flags=tuple(s.docker_flags),
                gpu_driver=s.gpu_driver if installs_driver_at_boot(boot_image) else None,
                kept_bucket=config.kept_bucket).to_metadata(),
        }
        self.vms = GpuInstanceGroup(
            self, "vms", project=config.project, name=name, zone=gcp.zone, machine_type=s.machine_type,
            gpu_type=s.gpu.type, gpu_count=s.gpu.count, nodes=s.nodes, spot=s.spot, boot_image=boot_image,
            secure_boot=signed_driver(boot_image) if s.secure_boot is None else s.secure_boot,
            disk_gb=s.disk_gb, disk_type=s.disk_type, service_account=sa_email(TRAINER_SA, config.project),
            network=config.network, subnetwork=config.subnetwork, network_tags=[node_tag(config.env)],
            labels={"app": "trainstack", "env": config.env, "lang": lang, "run": run_id},
            metadata=metadata, preconditions=[guard.precondition], compact_placement=s.compact_placement,
        )
        TerraformOutput(self, "run_id_out", value=run_id, static_id=True).override_logical_id("run_id")
        for key, value in {"zone": gcp.zone, "group": name, "image": gcp.image, "quota_metrics": ",".join(gcp.quota_metrics)}.items():
            TerraformOutput(self, key, value=value, static_id=True)
