"""`gcp:` of an env (the Google Cloud project, region and zones its runs use, and where their images and state
live) and of a language (`defaults.gcp`, `languages.<lang>.gcp`: the VM, GPU, disk and image of its runs). Named
by the registry (stacks/config/targets.py): `config.gcp`, `config.language(lang).gcp`."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from stacks.config.strict import StrictModel


class SimulatedCloud(StrictModel):
    """a simulated Google Cloud on 127.0.0.1 instead of Google (stacks/targets/gcp/sim/): every command of the env
    starts it, talks only to it, and stops it when it ends."""

    scenario: str | None = Field(
        None, description="scenario YAML, relative to the project (default: stacks/targets/gcp/sim/scenario.yaml)"
    )
    speedup: float | None = Field(None, gt=0, description="simulated seconds per wall second (default: the scenario's)")
    overrides: dict = Field(
        {}, description="scenario keys merged over the file's (e.g. zones.europe-west4-a.outages: [{start_s: 0}])"
    )


class GcpSettings(StrictModel):
    """the Google Cloud project, region and zones, the registry, state bucket and network of the VMs."""

    project: str | None = Field(None, description="the Google Cloud project id")
    region: str | None = Field(None, description="the region of the bucket, registry and VMs")
    zones: list[str] = Field([], description="zones of `gcp.region`, in order of preference")
    fallback_zones: list[str] = Field([], description="zones of other regions, tried when `gcp.zones` lack GPU quota")
    state_bucket: str | None = Field(None, description="Terraform state bucket (default <project>-trainstack-tfstate)")
    kept_bucket: str | None = Field(
        None,
        description="where a VM copies a run's work folder when its artifacts "
        "could not be uploaded (gs://BUCKET[/prefix]; the trainer account needs "
        "roles/storage.objectCreator there); unset: <lang>/runs/<run-id>/kept/ of the bucket",
        pattern=r"^gs://[a-z0-9][a-z0-9._-]{1,220}(/.*)?$",
    )
    registry: str = Field("trainstack", description="Artifact Registry repository id")
    image: str | None = Field(None, description="trainer image; default: the registry's trainer at the tree's hash")
    network: str = Field(
        "default",
        description="VPC network of the VMs; set it (and subnetwork) when the project "
        "has no `default` network (org policy compute.skipDefaultNetworkCreation)",
    )
    access_log_grant: bool = Field(
        True,
        description="let cloud-storage-analytics@google.com write the access-log "
        "bucket; false under domain restricted sharing (no usage logs then)",
    )
    subnetwork: str | None = Field(None, description="subnetwork self-link (needs Private Google Access)")
    simulated: SimulatedCloud | None = Field(
        None, description="rehearse on a simulated Google Cloud (docs/gcp.md); unset: the real one"
    )

    @property
    def state_bucket_name(self) -> str:
        return self.state_bucket or f"{self.project}-trainstack-tfstate"

    @property
    def image_repository(self) -> str:
        """Where `trainctl image build` pushes: <region>-docker.pkg.dev/<project>/<registry>/trainer."""
        return f"{self.region}-docker.pkg.dev/{self.project}/{self.registry}/trainer"

    def offered_rungs(self, settings) -> set[str]:
        """The rungs of the capacity ladder this env can create a language's VMs at (stacks.config.capacity):
        flex_start only for a one-node run of a series flex-start offers, with provider bindings that write its
        template (or on the simulated cloud)."""
        from stacks.targets.gcp.gpus import rung_problem
        from stacks.targets.gcp.provider_release import flex_start_problem

        machine = settings.gcp.machine_type if settings.gcp is not None else None
        rungs = {"spot", "flex_start", "on_demand"}
        if machine is None or rung_problem(machine, "on_demand"):
            rungs.discard("on_demand")
        if (
            machine is None
            or settings.nodes > 1
            or rung_problem(machine, "flex_start")
            or (self.simulated is None and flex_start_problem())
        ):
            rungs.discard("flex_start")
        return rungs


class GpuSettings(StrictModel):
    # the defaults are the language's: a block that sets one key (gpu: {count: 2}) keeps the other
    type: str | None = Field("nvidia-l4", description="accelerator type")
    count: int = Field(1, ge=0, le=16, description="accelerators per VM (0: none)")


class GcpLanguageSettings(StrictModel):
    """the VM, GPU, disk, boot image and container of a language's runs."""

    # what a resumed run may change (stacks.runs.resume_check): the machine, never its accelerators
    SAFE_ON_RESUME: ClassVar[frozenset[str]] = frozenset(
        {
            "machine_type",
            "disk_gb",
            "disk_type",
            "shm_size",
            "boot_image",
            "gpu_driver",
            "secure_boot",
            "docker_flags",
            "compact_placement",
        }
    )

    machine_type: str = Field("g2-standard-8", description="the VM's machine type")
    gpu: GpuSettings = GpuSettings()
    compact_placement: bool = Field(
        True,
        description="nodes > 1: a best-effort COLLOCATED placement policy "
        "for lower latency between nodes; off: nodes go wherever capacity is",
    )
    disk_gb: int = Field(100, ge=10, description="boot disk size of each VM")
    disk_type: str = Field("pd-balanced", description="boot disk type (pd-balanced, pd-ssd, hyperdisk-balanced)")
    shm_size: str = Field(
        "16g", pattern=r"^\d+[kmg]?$", description="/dev/shm of the trainer container (data loader workers)"
    )
    boot_image: str | None = Field(
        None,
        description="VM boot image or image family; default: the machine "
        "series' image in the GPU catalogue (stacks/targets/gcp/catalogue.yaml)",
    )
    gpu_driver: str = Field(
        "latest",
        description="NVIDIA driver Container-Optimized OS installs at boot (COS "
        "images): default, latest, an exact version (580.95.05) or a branch (R580)",
    )
    secure_boot: bool | None = Field(
        None,
        description="Shielded VM Secure Boot; default: on where the boot image's driver is signed (COS), off otherwise",
    )
    docker_flags: list[str] = Field([], description="extra `docker run` flags for the trainer container")

    @field_validator("gpu_driver", mode="before")
    @classmethod
    def _driver_as_written(cls, value):
        # YAML reads `gpu_driver: 580` as a number: keep it as written, for the gcp check to refuse
        # for what it says (stacks/targets/gcp/config_checks.py)
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value
