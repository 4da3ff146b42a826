"""Resize this VM's own managed instance group through google-cloud-compute.

`TRAINSTACK_COMPUTE_ENDPOINT=http://127.0.0.1:PORT` points the client at a
recorded API (tests) with anonymous credentials; on a VM the client uses the
instance's service account.
"""

from __future__ import annotations

import os

from trainer.launchers.vm import log

ENDPOINT_ENV = "TRAINSTACK_COMPUTE_ENDPOINT"


def compute_endpoint() -> str | None:
    """The Compute API endpoint override, when tests or an emulator set one."""
    return os.environ.get(ENDPOINT_ENV) or None


def compute_client_kwargs(endpoint: str | None = None) -> dict:
    """Keyword arguments for google.cloud.compute_v1 clients (REST; anonymous on an override)."""
    endpoint = endpoint or compute_endpoint()
    kwargs: dict = {"transport": "rest"}
    if endpoint:
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials

        kwargs["client_options"] = ClientOptions(api_endpoint=endpoint)
        kwargs["credentials"] = AnonymousCredentials()
    return kwargs


def groups_client():
    """An InstanceGroupManagersClient, honouring TRAINSTACK_COMPUTE_ENDPOINT."""
    from google.cloud import compute_v1  # imported lazily: a slow import most commands never need

    return compute_v1.InstanceGroupManagersClient(**compute_client_kwargs())


def stop_group(project: str, zone: str, mig: str, client=None) -> str:
    """Asks for size 0 and returns the operation name.

    It does not wait for the operation: deleting the group's VMs deletes this
    one, so a wait would be cut short by our own shutdown.
    """
    client = client or groups_client()
    log(f"resizing instance group {mig} ({project}/{zone}) to 0")
    op = client.resize(project=project, zone=zone, instance_group_manager=mig, size=0)
    return _requested(op, f"resize of {mig} to 0", "resize")


def recreate_instance(project: str, zone: str, mig: str, instance: str, client=None) -> str:
    """Asks the group to recreate `instance` (this VM) on a new machine, the group's size unchanged; returns the
    operation name without waiting (the wait would be cut short by this VM's own deletion)."""
    from google.cloud import compute_v1

    client = client or groups_client()
    log(f"asking instance group {mig} ({project}/{zone}) to recreate {instance}")
    request = compute_v1.InstanceGroupManagersRecreateInstancesRequest(instances=[f"zones/{zone}/instances/{instance}"])
    op = client.recreate_instances(
        project=project,
        zone=zone,
        instance_group_manager=mig,
        instance_group_managers_recreate_instances_request_resource=request,
    )
    return _requested(op, f"recreating {instance} in {mig}", "recreation")


def _requested(op, doing: str, what: str) -> str:
    """The operation's name once the group took the request (logged); RuntimeError naming `doing` if it refused."""
    error = getattr(op, "error_message", None)
    if error:
        raise RuntimeError(f"{doing} failed: {error}")
    name = getattr(op, "name", "") or ""
    log(f"{what} requested (operation {name or '?'})")
    return name
