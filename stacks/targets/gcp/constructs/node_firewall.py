"""NodeFirewall: training VMs of one environment may reach each other on every TCP/UDP port."""

from __future__ import annotations

from constructs import Construct

from stacks.cdk import ITerraformDependable
from stacks.targets.gcp.cdk_google import ComputeFirewall


class NodeFirewall(Construct):
    """Exposes `rule`: ingress from instances tagged `tag` to instances tagged `tag`, on `gcp.network`.

    Multi-node runs rendezvous on node 0's port 29500 and NCCL opens further TCP ports between the
    nodes; only the auto-created `default` network allows that (`default-allow-internal`), so a
    custom VPC would leave the nodes waiting out the join timeout. Tags, not ranges: nothing else
    on the network is let in. In the foundation, so the CI deployer needs no firewall rights.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        project: str,
        network: str,
        name: str,
        tag: str,
        depends_on: list[ITerraformDependable] | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.rule = ComputeFirewall(
            self,
            "rule",
            project=project,
            name=name,
            network=network,
            direction="INGRESS",
            priority=1000,
            description="trainstack: training VMs of one environment reach each other (torchrun, NCCL)",
            allow=[{"protocol": "tcp"}, {"protocol": "udp"}],
            source_tags=[tag],
            target_tags=[tag],
            depends_on=depends_on,
        )
