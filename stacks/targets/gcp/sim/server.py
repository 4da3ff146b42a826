"""The simulated Google Cloud's HTTP server on 127.0.0.1: one port answers Compute Engine (/compute/v1/...),
Cloud Quotas (/v1/projects/.../quotaInfos/...), the Billing Catalog (/v1/services/.../skus) and each simulated
VM's metadata server (/sim-vm/<instance>/computeMetadata/v1/...: GCE_METADATA_HOST=127.0.0.1:PORT/sim-vm/NAME),
its values with an ETag and long polls (`?wait_for_change=true&last_etag=E&timeout_sec=N`) as Compute Engine's
(https://cloud.google.com/compute/docs/metadata/querying-metadata, "Waiting for change").

Every TRAINSTACK_<API>_ENDPOINT variable the gcp target reads can point at it (`endpoints`); the real
client libraries talk to it as to Google. A background thread moves the simulated clock even when nobody asks.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, unquote, urlsplit

from stacks.targets.gcp.sim import advice, answers, flex_start
from stacks.targets.gcp.sim.cloud import SimCloud, SimError
from trainer.launchers.vm.spec import RDZV_ATTRIBUTE

NAME = r"([^/]+)"
SCOPE = r"((?:zones|regions)/[^/]+)"
TICK_S = 0.2  # how often (wall seconds) the clock moves on its own
METADATA_WAIT_MAX_S = 300.0  # the longest long poll of the metadata server (its timeout_sec), wall seconds
METADATA_WAIT_STEP_S = 0.05  # how often a long poll looks at the value again


def endpoints(url: str) -> dict[str, str]:
    """The environment that points the gcp target (and the VM agent's Compute client) at the sim."""
    names = ("COMPUTE", "CLOUDQUOTAS", "CLOUDBILLING", "REGISTRY")
    return {f"TRAINSTACK_{n}_ENDPOINT": url for n in names}


class SimServer:
    """`with SimServer(cloud) as sim:` serves `cloud` at `sim.url` until the block ends."""

    def __init__(self, cloud: SimCloud, port: int = 0):
        self.cloud, self.port = cloud, port
        # (method, path) of the latest calls, for tests and the log: bounded, as a cloud served for hours gets many
        self.requests: deque[tuple[str, str]] = deque(maxlen=10_000)

    def __enter__(self) -> "SimServer":
        handler = _handler(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._stop = threading.Event()
        self.stopping = self._stop.is_set  # long polls under way answer as the server closes
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        threading.Thread(target=self._tick, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def metadata_host(self, instance: str) -> str:
        """GCE_METADATA_HOST for a simulated VM (trainer.launchers.vm.metadata reads it)."""
        return f"{self.url.removeprefix('http://')}/sim-vm/{instance}"

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            self.cloud.advance()


def _handler(sim: SimServer):
    cloud = sim.cloud

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            parts = urlsplit(self.path)
            path, query = unquote(parts.path), {k: v[-1] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            sim.requests.append((self.command, path))
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                return self._send(400, {"error": {"code": 400, "message": "Invalid JSON payload received."}})
            try:
                if path.startswith("/sim-vm/"):
                    return self._metadata(path, query)
                status, payload = route(cloud, self.command, path, query, body)
            except SimError as exc:
                status, payload = exc.status, answers.error_body(exc)
            self._send(status, payload)

        def _metadata(self, path: str, query: dict) -> None:
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._send(403, "Missing required header: Metadata-Flavor", text=True)
            match = re.fullmatch(r"/sim-vm/([^/]+)/computeMetadata/v1/(.*)", path)
            if match is None:
                return self._send(404, "Not Found", text=True)
            if query.get("wait_for_change") == "true":
                value = wait_for_change(cloud, match.group(1), match.group(2), query, sim.stopping)
            else:
                value = metadata_value(cloud, match.group(1), match.group(2))
            if value is None:
                return self._send(404, "Not Found", text=True)
            self._send(200, value, text=True, etag=etag_of(value))

        def _send(self, status: int, payload, text: bool = False, etag: str | None = None) -> None:
            data = (payload if text else json.dumps(payload)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/text" if text else "application/json")
            if text:
                self.send_header("Metadata-Flavor", "Google")
            if etag:
                self.send_header("ETag", etag)
            self.send_header("Content-Length", str(len(data)))
            try:
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the caller went away (a VM deleted during its long poll): nobody is left to answer

        do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = do_HEAD = _serve

        def log_message(self, *args) -> None:  # the sim's own lines say "simulated"; requests are in sim.requests
            pass

    return Handler


def route(cloud: SimCloud, method: str, path: str, query: dict, body: dict) -> tuple[int, dict]:
    """(HTTP status, JSON) of one API call."""
    if m := re.fullmatch(
        r"/v1/projects/([^/]+)/locations/global/services/compute\.googleapis\.com/quotaInfos/(.+)", path
    ):
        _project(cloud, m.group(1))
        return 200, answers.quota_info(cloud, m.group(2))
    if re.fullmatch(r"/v1/services/[^/]+/skus", path) and method == "GET":
        return 200, answers.sku_page(cloud, int(query.get("pageSize") or 5000), query.get("pageToken", ""))
    if re.fullmatch(r"/v2/.+/manifests/[^/]+", path) and method in ("HEAD", "GET"):
        return 200, {}  # Artifact Registry: every trainer image is taken as built (the VMs run this checkout)
    if (m := re.fullmatch(r"/compute/v1/projects/([a-z-]+-cloud)/global/images/family/([^/]+)", path)) and method == (
        "GET"
    ):
        return 200, answers.public_image(m.group(1), m.group(2))
    m = re.fullmatch(r"/compute/v1/projects/([^/]+)(/.*)?", path)
    if m is None:
        raise SimError(404, f"no simulated API at {path}")
    _project(cloud, m.group(1))
    rest = m.group(2) or ""
    with cloud.lock:
        cloud.advance()
        status, answer = _compute(cloud, method, rest, query, body)
    cloud.wait_s(answer.pop(answers.WAIT_KEY, 0.0))  # the other requests and the clock go on meanwhile
    return status, answer


def _project(cloud: SimCloud, name: str) -> None:
    if name != cloud.scenario.project:
        raise SimError(404, f"The resource 'projects/{name}' was not found")


def _compute(cloud: SimCloud, method: str, rest: str, query: dict, body: dict) -> tuple[int, dict]:
    p = cloud.scenario.project
    get = method == "GET"
    if rest == "" and get:
        return 200, answers.project(cloud)
    if (m := re.fullmatch(rf"/regions/{NAME}", rest)) and get:
        return 200, answers.region(cloud, m.group(1))
    if (m := re.fullmatch(rf"/zones/{NAME}", rest)) and get:
        return 200, answers.zone(cloud, m.group(1))
    if (m := re.fullmatch(rf"/zones/{NAME}/acceleratorTypes/{NAME}", rest)) and get:
        return 200, answers.accelerator_type(cloud, m.group(1), m.group(2))
    if (m := re.fullmatch(rf"/zones/{NAME}/machineTypes/{NAME}", rest)) and get:
        return 200, answers.machine_type(cloud, m.group(1), m.group(2))
    if (m := re.fullmatch(rf"/zones/{NAME}/instances/{NAME}", rest)) and get:
        return 200, _instance(cloud, m.group(1), m.group(2))
    if rest == "/global/instanceTemplates" and method == "POST":
        cloud.insert_template(body)
        target = cloud.template_url(body["name"])
        return 200, answers.operation(cloud, "compute.instanceTemplates.insert", target, None)
    if m := re.fullmatch(rf"/global/instanceTemplates/{NAME}", rest):
        if get:
            return 200, answers.template(cloud, m.group(1))
        if method == "DELETE":
            cloud.delete_template(m.group(1))
            target = cloud.template_url(m.group(1))
            return 200, answers.operation(cloud, "compute.instanceTemplates.delete", target, None)
    if (m := re.fullmatch(rf"/regions/{NAME}/advice/capacity", rest)) and method == "POST":
        return 200, advice.capacity_advice(cloud, m.group(1), body)
    if (m := re.fullmatch(rf"/regions/{NAME}/advice/capacityHistory", rest)) and method == "POST":
        return 200, advice.capacity_history(cloud, m.group(1), body)
    if (m := re.fullmatch(rf"/regions/{NAME}/resourcePolicies", rest)) and method == "POST":
        cloud.insert_policy(m.group(1), body)
        target = cloud.policy_url(m.group(1), body.get("name", ""))
        return 200, answers.operation(cloud, "compute.resourcePolicies.insert", target, f"regions/{m.group(1)}")
    if m := re.fullmatch(rf"/regions/{NAME}/resourcePolicies/{NAME}", rest):
        key = (m.group(1), m.group(2))
        if get and key in cloud.policies:
            return 200, {"kind": "compute#resourcePolicy", **cloud.policies[key]}
        if method == "DELETE":
            cloud.delete_policy(*key)
            return 200, answers.operation(
                cloud, "compute.resourcePolicies.delete", cloud.policy_url(*key), f"regions/{m.group(1)}"
            )
        raise SimError(404, f"The resource '{cloud.policy_url(*key)}' was not found")
    if (m := re.fullmatch(rf"/{SCOPE}/instanceGroupManagers", rest)) and method == "POST":
        group = cloud.insert_group(m.group(1), body)
        target = cloud.group_url(group.scope, group.name)
        return 200, answers.operation(cloud, "compute.instanceGroupManagers.insert", target, group.scope)
    if m := re.fullmatch(rf"/{SCOPE}/instanceGroupManagers/{NAME}/resizeRequests(?:/{NAME}(?:/(cancel))?)?", rest):
        return _resize_request_call(cloud, method, *m.groups(), body)
    if m := re.fullmatch(rf"/{SCOPE}/instanceGroupManagers/{NAME}(?:/(\w+))?", rest):
        return _group_call(cloud, method, m.group(1), m.group(2), m.group(3) or "", query, body)
    if (m := re.fullmatch(rf"/((?:{SCOPE[1:-1]})|global)/operations/{NAME}(?:/wait)?", rest)) and method in (
        "GET",
        "POST",
    ):
        found = cloud.operations.get(m.group(2))
        if found is None:
            raise SimError(404, f"The resource 'projects/{p}/{m.group(1)}/operations/{m.group(2)}' was not found")
        return 200, found
    raise SimError(404, f"no simulated Compute Engine call {method} {rest or '/'}")


def _group_call(
    cloud: SimCloud, method: str, scope: str, name: str, verb: str, query: dict, body: dict
) -> tuple[int, dict]:
    target = cloud.group_url(scope, name)
    if verb == "" and method == "GET":
        return 200, answers.group(cloud, cloud.group(scope, name))
    if verb == "" and method == "DELETE":
        cloud.delete_group(scope, name)
        return 200, answers.operation(cloud, "compute.instanceGroupManagers.delete", target, scope)
    if verb == "resize" and method == "POST":
        if "size" not in query:
            raise SimError(400, "Required field 'size' not specified", "required")
        cloud.resize(scope, name, int(query["size"]))
        return 200, answers.operation(cloud, "compute.instanceGroupManagers.resize", target, scope)
    if verb == "listManagedInstances" and method == "POST":
        return 200, answers.managed_instances(cloud, cloud.group(scope, name))
    if verb == "listErrors" and method == "GET":
        return 200, answers.list_errors(cloud.group(scope, name))
    if verb in ("updatePerInstanceConfigs", "createInstances") and method == "POST":
        listed = body.get("perInstanceConfigs") or body.get("instances") or []
        configs = {c["name"]: (c.get("preservedState") or {}).get("metadata") or {} for c in listed if c.get("name")}
        cloud.set_per_instance_configs(scope, name, configs, create=verb == "createInstances")
        return 200, answers.operation(cloud, f"compute.instanceGroupManagers.{verb}", target, scope)
    raise SimError(404, f"no simulated instanceGroupManagers call {method} {verb or 'get'}")


def _resize_request_call(
    cloud: SimCloud, method: str, scope: str, name: str, request: str | None, verb: str | None, body: dict
) -> tuple[int, dict]:
    """instanceGroupManagerResizeRequests: insert, list, get, delete, cancel."""
    kind = "compute.instanceGroupManagerResizeRequests"
    if request is None and method == "POST":
        created = flex_start.insert(cloud, scope, name, body)
        target = flex_start.url(cloud, scope, name, created.name)
        return 200, answers.operation(cloud, f"{kind}.insert", target, scope)
    group = cloud.group(scope, name)
    if request is None and method == "GET":
        items = [answers.resize_request(cloud, group, r) for r in group.resize_requests.values()]
        return 200, {"kind": "compute#instanceGroupManagerResizeRequestList", "items": items}
    if request is not None and verb is None and method == "GET":
        return 200, answers.resize_request(cloud, group, flex_start.get(cloud, scope, name, request))
    if request is not None and (method == "DELETE" or (verb == "cancel" and method == "POST")):
        flex_start.delete(cloud, scope, name, request)
        target = flex_start.url(cloud, scope, name, request)
        return 200, answers.operation(cloud, f"{kind}.{'cancel' if verb else 'delete'}", target, scope)
    raise SimError(404, f"no simulated instanceGroupManagerResizeRequests call {method} {verb or ''}")


def _instance(cloud: SimCloud, zone: str, name: str) -> dict:
    vm = cloud.instance(zone, name)
    p = cloud.scenario.project
    api = answers.API
    return {
        "kind": "compute#instance",
        "id": str(vm.id),
        "name": vm.name,
        "zone": f"{api}/projects/{p}/zones/{zone}",
        "machineType": f"{api}/projects/{p}/zones/{zone}/machineTypes/{vm.shape.machine_type}",
        "status": vm.status,
        "scheduling": {"provisioningModel": vm.shape.provisioning_model, "preemptible": False},
        "guestAccelerators": [
            {"acceleratorType": f"{api}/projects/{p}/zones/{zone}/acceleratorTypes/{t}", "acceleratorCount": n}
            for t, n in vm.shape.accelerators.items()
        ],
        "metadata": {"items": [{"key": k, "value": v} for k, v in vm.shape.metadata.items()]},
        "selfLink": f"{api}/projects/{p}/zones/{zone}/instances/{vm.name}",
    }


def etag_of(value: str) -> str:
    """The metadata server's ETag of a value: changes when the value does."""
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def wait_for_change(cloud: SimCloud, instance: str, key: str, query: dict, stopping: Callable[[], bool]) -> str | None:
    """`?wait_for_change=true`: the value once its ETag differs from `last_etag` (at once if it does already;
    without one, from the value's ETag now), else the same value after `timeout_sec` (default and at most
    METADATA_WAIT_MAX_S), as the metadata server answers a long poll."""
    value = metadata_value(cloud, instance, key)
    if value is None:
        return None
    last = query.get("last_etag") or etag_of(value)
    try:
        timeout = min(float(query.get("timeout_sec") or METADATA_WAIT_MAX_S), METADATA_WAIT_MAX_S)
    except ValueError:
        timeout = METADATA_WAIT_MAX_S
    until = time.monotonic() + timeout
    while value is not None and etag_of(value) == last and time.monotonic() < until and not stopping():
        time.sleep(METADATA_WAIT_STEP_S)  # the clock thread moves the cloud meanwhile
        value = metadata_value(cloud, instance, key)
    return value


def metadata_value(cloud: SimCloud, instance: str, key: str) -> str | None:
    """What the metadata server answers a VM for `key` (instance/name, instance/attributes/X, ...), None: 404."""
    found = cloud.instance_and_group(instance)
    if found is None:
        return None
    vm, group = found
    number = answers.numeric_id(cloud.scenario.project)
    # Every simulated VM is this host: no VM resolves another by its instance name, as the VMs of a group do on
    # Compute Engine, so node 0's rendezvous store is told here, on a port of the group's own (two runs, or a
    # moved run's old and new group, never meet on one).
    attributes = {RDZV_ATTRIBUTE: f"127.0.0.1:{group.rdzv_port}", **vm.shape.metadata}
    fixed = {
        "instance/name": vm.name,
        "instance/hostname": f"{vm.name}.{vm.zone}.c.{cloud.scenario.project}.internal",
        "instance/id": str(vm.id),
        "instance/zone": f"projects/{number}/zones/{vm.zone}",
        "instance/machine-type": f"projects/{number}/machineTypes/{vm.shape.machine_type}",
        "instance/preempted": "TRUE" if vm.preempted else "FALSE",
        "instance/scheduling/provisioning-model": vm.shape.provisioning_model,
        "project/project-id": cloud.scenario.project,
        "project/numeric-project-id": number,
        "instance/attributes/": "\n".join(attributes),
    }
    if key in fixed:
        return fixed[key]
    if key.startswith("instance/attributes/"):
        return attributes.get(key.removeprefix("instance/attributes/"))
    return None
