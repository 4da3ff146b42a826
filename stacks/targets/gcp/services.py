"""`trainctl bootstrap` enables the APIs the stacks use before the first foundation apply.

A first `cdktf deploy foundation` enabled them itself (ProjectService) and, in the same apply,
created resources of the APIs it had just enabled: Google documents that enabling can take a
few minutes to reach every service, so those resources failed with SERVICE_DISABLED and the
apply had to be run again. Enabled here first, and waited for, the foundation's
ProjectService resources find them on and its other resources do not race them.
"""

from __future__ import annotations

import time

from stacks.config import EnvConfig
from stacks.errors import InfraError
from stacks.targets.gcp import api
from stacks.targets.gcp.doctor import REQUIRED_APIS, SERVICEUSAGE_API, SERVICEUSAGE_ENDPOINT_ENV, enabled_apis

BATCH = 20  # services:batchEnable takes at most 20 services per call
WAIT_S = 600


def enable_required_apis(config: EnvConfig, *, poll_s: float = 5.0) -> list[str]:
    """Enables the stacks' APIs that are off (Service Usage batchEnable, waiting for each operation) ->
    the ones it enabled."""
    missing = [
        f"{a}.googleapis.com" for a in REQUIRED_APIS if f"{a}.googleapis.com" not in enabled_apis(config.gcp.project)
    ]
    session, base = api.session(SERVICEUSAGE_ENDPOINT_ENV)
    root = base or SERVICEUSAGE_API
    for start in range(0, len(missing), BATCH):
        chunk = missing[start : start + BATCH]
        resp = api.call(
            session,
            "POST",
            f"{root}/v1/projects/{config.gcp.project}/services:batchEnable",
            "cannot enable the project's APIs",
            json={"serviceIds": chunk},
        )
        if resp.status_code != 200:
            raise InfraError(
                f"Service Usage answered HTTP {resp.status_code} enabling {', '.join(chunk)}: {api.api_message(resp)}",
                hint="you need roles/serviceusage.serviceUsageAdmin on the project (and a billing "
                "account linked to it)",
            )
        operation, deadline = resp.json(), time.monotonic() + WAIT_S
        while not operation.get("done"):
            if time.monotonic() > deadline:
                raise InfraError(
                    f"enabling {', '.join(chunk)} did not finish within {WAIT_S // 60} min",
                    hint="run `trainctl bootstrap` again (it only enables what is still off)",
                )
            time.sleep(poll_s)
            resp = api.call(session, "GET", f"{root}/v1/{operation['name']}", "cannot follow the API enablement")
            operation = resp.json() if resp.status_code == 200 else operation
        if operation.get("error"):
            raise InfraError(
                f"enabling {', '.join(chunk)} failed: {operation['error'].get('message', operation['error'])}",
                hint="see the project's APIs page in the console; run `trainctl bootstrap` again",
            )
    return missing
