"""`gcp:` of an env: the Google Cloud project, region and zones its runs use, and where their images and state
live. Named by the registry (stacks/config/targets.py), so EnvConfig has it as `config.gcp`."""

from __future__ import annotations

from pydantic import Field

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
