"""Resize this VM's own managed instance group through google-cloud-compute.

`TRAINSTACK_COMPUTE_ENDPOINT=http://127.0.0.1:PORT` points the client at a
recorded API (tests) with anonymous credentials; on a VM the client uses the
instance's service account.
"""
from __future__ import annotations

import os

from trainer.vm import log

ENDPOINT_ENV = "TRAINSTACK_COMPUTE_ENDPOINT"


def groups_client():
    """An InstanceGroupManagersClient, honouring TRAINSTACK_COMPUTE_ENDPOINT."""
    from google.cloud import compute_v1  # imported lazily: a slow import most commands never need

    endpoint = os.environ.get(ENDPOINT_ENV)
    if not endpoint:
        return compute_v1.InstanceGroupManagersClient()
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials

    return compute_v1.InstanceGroupManagersClient(
        client_options=ClientOptions(api_endpoint=endpoint), transport="rest",
        credentials=AnonymousCredentials())


def stop_group(project: str, zone: str, mig: str, client=None) -> str:
    """Asks for size 0 and returns the operation name.

    It does not wait for the operation: deleting the group's VMs deletes this
    one, so a wait would be cut short by our own shutdown.
    """
    client = client or groups_client()
    log(f"resizing instance group {mig} ({project}/{zone}) to 0")
    op = client.resize(project=project, zone=zone, instance_group_manager=mig, size=0)
    error = getattr(op, "error_message", None)
    if error:
        raise RuntimeError(f"resize of {mig} to 0 failed: {error}")
    name = getattr(op, "name", "") or ""
    log(f"resize requested (operation {name or '?'})")
    return name
