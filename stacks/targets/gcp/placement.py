"""Where a gcp run's VMs go and what they boot: decided by the target before synth, read by the train stack."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GcpPlacement:
    """Decided before synth: the zone (quota preflight), the image (content hash), the VM scripts."""

    zone: str
    image: str
    quota_metrics: list[str]  # the preflight's governing metric, or the candidates when none was decided
    startup_script: str
    shutdown_script: str

    @property
    def region(self) -> str:
        from stacks.targets.gcp.gpus import region_of

        return region_of(self.zone)
