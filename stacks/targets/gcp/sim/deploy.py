"""The simulated cloud's `apply` and `destroy` of a synthesized training stack (Terraform cannot run the google
provider here): read its cdk.tf.json and create exactly its resources through the sim's Compute Engine API with
google-cloud-compute, as the google provider would; Compute Engine's own rules then hold (a group in a zone
whose template asks for a GPU the zone lacks lists RESOURCE_NOT_FOUND errors and never gets a VM).

What the stack holds and the sim does with it:
- google_cloud_quotas_quota_info data and the quota locals: read from the sim's Cloud Quotas, evaluated as
  Terraform does (the QuotaGuard's expression only: anything else is refused, never guessed);
- terraform_data (the run id record): `var.run_id`, else one generated as the stack would;
- google_compute_resource_policy, google_compute_instance_template (name_prefix + a unique suffix),
  google_compute_instance_group_manager (its lifecycle preconditions checked first: a failing one stops the
  apply with its error_message, as Terraform does), google_compute_per_instance_config (createInstances),
  google_compute_resize_request (instanceGroupManagerResizeRequests.insert: the request is queued, not waited for).
A resource of another type stops the apply: the sim never pretends to have created what it cannot.
What was created is kept in a state file beside the stack (destroy reads it).
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from stacks.errors import InfraError

STATE_FILE = "simulated.tfstate.json"
HANDLED = {
    "google_compute_instance_template",
    "google_compute_instance_group_manager",
    "google_compute_per_instance_config",
    "google_compute_resource_policy",
    "google_compute_resize_request",
    "terraform_data",
}
REF = re.compile(r"(?<!\$)\$\{([^{}]+)\}")  # `$${` is Terraform's escape of a literal `${`


class SimApplyError(InfraError):
    """The simulated apply or destroy could not do what the stack asks."""


@dataclass
class SimState:
    run_id: str = ""
    templates: list[str] = field(default_factory=list)
    groups: list[list[str]] = field(default_factory=list)  # [zone, name]
    policies: list[list[str]] = field(default_factory=list)  # [region, name]
    resize_requests: list[list[str]] = field(default_factory=list)  # [zone, group, name]
    outputs: dict = field(default_factory=dict)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> "SimState":
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            return cls()


def apply(stack_dir: Path, endpoint: str, *, variables: dict | None = None, state_file: Path | None = None) -> SimState:
    """Create the stack's resources in the sim at `endpoint`; its outputs, resolved, in the returned state (kept in
    `state_file`, default beside the stack)."""
    state_file = state_file or stack_dir / STATE_FILE
    doc = json.loads((stack_dir / "cdk.tf.json").read_text())
    resources = doc.get("resource") or {}
    unknown = sorted(set(resources) - HANDLED)
    if unknown:
        raise SimApplyError(
            f"simulated apply: the stack holds resources the simulated cloud does not create: {', '.join(unknown)}",
            hint="rehearse the training stack (train-<lang>) only",
        )
    state = SimState.load(state_file)
    if state.groups or state.templates:
        raise SimApplyError(
            f"simulated apply: {stack_dir.name} is already applied in the simulated cloud", hint="destroy it first"
        )
    refs = _Refs(doc, endpoint, variables or {})
    clients = _Clients(endpoint)
    state.run_id = refs.run_id
    for body in _items(resources, "google_compute_instance_group_manager"):  # checked at plan: nothing created
        for check in (body.get("lifecycle") or {}).get("precondition") or []:
            if not refs.condition(check["condition"]):
                raise SimApplyError(f"simulated apply: precondition failed: {check['error_message']}")
    try:
        for body in _items(resources, "google_compute_resource_policy"):
            region = body["region"]
            clients.policies.insert(
                project=body["project"],
                region=region,
                resource_policy_resource={
                    "name": body["name"],
                    "group_placement_policy": body.get("group_placement_policy") or {},
                },
            ).result()
            state.policies.append([region, body["name"]])
            refs.known[f"google_compute_resource_policy.{body['_id']}.self_link"] = (
                f"projects/{body['project']}/regions/{region}/resourcePolicies/{body['name']}"
            )
        for body in _items(resources, "google_compute_instance_template"):
            name = f"{body.get('name_prefix') or body.get('name')}{uuid.uuid4().hex[:20]}"
            clients.templates.insert(
                project=body["project"], instance_template_resource=_template(name, refs.resolve(body))
            ).result()
            state.templates.append(name)
            link = f"projects/{body['project']}/global/instanceTemplates/{name}"
            for attr in ("self_link", "self_link_unique", "id"):
                refs.known[f"google_compute_instance_template.{body['_id']}.{attr}"] = link
        for body in _items(resources, "google_compute_instance_group_manager"):
            resolved = refs.resolve({k: v for k, v in body.items() if k != "lifecycle"})
            version = resolved["version"][0]
            clients.groups.insert(
                project=resolved["project"],
                zone=resolved["zone"],
                instance_group_manager_resource={
                    "name": resolved["name"],
                    "base_instance_name": resolved["base_instance_name"],
                    "description": resolved.get("description", ""),
                    "instance_template": version["instance_template"],
                    "versions": [{"name": version.get("name", ""), "instance_template": version["instance_template"]}],
                    "target_size": int(resolved.get("target_size") or 0),
                },
            ).result()
            state.groups.append([resolved["zone"], resolved["name"]])
            refs.known[f"google_compute_instance_group_manager.{body['_id']}.name"] = resolved["name"]
        configs: dict[tuple[str, str, str], list] = {}
        for body in _items(resources, "google_compute_per_instance_config"):
            resolved = refs.resolve(body)
            key = (resolved["project"], resolved["zone"], resolved["instance_group_manager"])
            preserved = {"metadata": (resolved.get("preserved_state") or {}).get("metadata") or {}}
            configs.setdefault(key, []).append({"name": resolved["name"], "preserved_state": preserved})
        for (project, zone, group), instances in configs.items():
            clients.groups.create_instances(
                project=project,
                zone=zone,
                instance_group_manager=group,
                instance_group_managers_create_instances_request_resource={"instances": instances},
            ).result()
        for body in _items(resources, "google_compute_resize_request"):
            resolved = refs.resolve(body)
            clients.resize_requests.insert(
                project=resolved["project"],
                zone=resolved["zone"],
                instance_group_manager=resolved["instance_group_manager"],
                instance_group_manager_resize_request_resource={
                    "name": resolved["name"],
                    "resize_by": int(resolved["resize_by"]),
                    "description": resolved.get("description", ""),
                },
            ).result()
            state.resize_requests.append([resolved["zone"], resolved["instance_group_manager"], resolved["name"]])
        state.outputs = {name: refs.resolve(out.get("value")) for name, out in (doc.get("output") or {}).items()}
    finally:
        state.save(state_file)
    return state


def destroy(stack_dir: Path, endpoint: str, *, state_file: Path | None = None) -> SimState:
    """Delete what the simulated apply created (groups, then templates, then policies); gone already is fine."""
    from google.api_core import exceptions as gexc

    state_file = state_file or stack_dir / STATE_FILE
    state = SimState.load(state_file)
    clients = _Clients(endpoint)
    project = json.loads((stack_dir / "cdk.tf.json").read_text()).get("provider", {}).get("google", [{}])[0]["project"]
    steps = [
        (clients.resize_requests.delete, {"zone": z, "instance_group_manager": g, "resize_request": n})
        for z, g, n in state.resize_requests
    ]
    steps += [(clients.groups.delete, {"zone": z, "instance_group_manager": n}) for z, n in state.groups]
    steps += [(clients.templates.delete, {"instance_template": n}) for n in state.templates]
    steps += [(clients.policies.delete, {"region": r, "resource_policy": n}) for r, n in state.policies]
    for call, args in steps:
        try:
            call(project=project, **args).result()
        except gexc.NotFound:
            pass
    state_file.unlink(missing_ok=True)
    return state


class _Clients:
    def __init__(self, endpoint: str):
        from google.cloud import compute_v1

        from trainer.launchers.vm.group import compute_client_kwargs

        kwargs = compute_client_kwargs(endpoint)
        self.templates = compute_v1.InstanceTemplatesClient(**kwargs)
        self.groups = compute_v1.InstanceGroupManagersClient(**kwargs)
        self.policies = compute_v1.ResourcePoliciesClient(**kwargs)
        self.resize_requests = compute_v1.InstanceGroupManagerResizeRequestsClient(**kwargs)


def _items(resources: dict, kind: str) -> list[dict]:
    return [{**body, "_id": name} for name, body in (resources.get(kind) or {}).items()]


def _template(name: str, body: dict) -> dict:
    """google_compute_instance_template's arguments as the API's InstanceTemplate (what the provider sends)."""
    disks = [
        {
            "boot": bool(d.get("boot")),
            "auto_delete": bool(d.get("auto_delete", True)),
            "initialize_params": {
                "source_image": d.get("source_image", ""),
                "disk_size_gb": int(d.get("disk_size_gb") or 10),
                "disk_type": d.get("disk_type", "pd-standard"),
            },
        }
        for d in body.get("disk") or []
    ]
    scheduling = body.get("scheduling") or {}
    return {
        "name": name,
        "description": body.get("description", ""),
        "properties": {
            "machine_type": body["machine_type"],
            "labels": body.get("labels") or {},
            "metadata": {"items": [{"key": k, "value": str(v)} for k, v in (body.get("metadata") or {}).items()]},
            "disks": disks,
            "guest_accelerators": [
                {"accelerator_type": a["type"], "accelerator_count": int(a["count"])}
                for a in body.get("guest_accelerator") or []
            ],
            "scheduling": {
                "provisioning_model": scheduling.get("provisioning_model", "STANDARD"),
                "preemptible": bool(scheduling.get("preemptible", False)),
                "automatic_restart": bool(scheduling.get("automatic_restart", True)),
                "on_host_maintenance": scheduling.get("on_host_maintenance", "MIGRATE"),
                **(
                    {"instance_termination_action": scheduling["instance_termination_action"]}
                    if scheduling.get("instance_termination_action")
                    else {}
                ),
                **(
                    {"max_run_duration": {"seconds": int(scheduling["max_run_duration"]["seconds"])}}
                    if scheduling.get("max_run_duration")
                    else {}
                ),
            },
            **(
                {"reservation_affinity": {"consume_reservation_type": body["reservation_affinity"]["type"]}}
                if body.get("reservation_affinity")
                else {}
            ),
            "service_accounts": [body["service_account"]] if body.get("service_account") else [],
            "network_interfaces": [
                {k: v for k, v in n.items() if v is not None} for n in body.get("network_interface") or []
            ],
            "tags": {"items": body.get("tags") or []},
            "shielded_instance_config": body.get("shielded_instance_config") or {},
            "resource_policies": [p.rsplit("/", 1)[-1] for p in body.get("resource_policies") or []],
        },
    }


class _Refs:
    """The `${...}` references the training stack uses, resolved as Terraform would (others are refused)."""

    def __init__(self, doc: dict, endpoint: str, variables: dict):
        self.doc, self.endpoint = doc, endpoint
        self.run_id = variables.get("run_id") or (
            datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:4]
        )
        self.known: dict[str, object] = {f"var.{k}": v for k, v in variables.items()}
        for name in (doc.get("resource") or {}).get("terraform_data") or {}:
            self.known[f"terraform_data.{name}.output.run_id"] = self.run_id
        self._infos: dict[str, dict] = {}

    def resolve(self, value):
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items() if k not in ("//", "_id")}
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, str):
            return value

        def one(match: re.Match) -> str:
            ref = match.group(1).strip()
            if ref not in self.known:
                raise SimApplyError(f"simulated apply: cannot evaluate ${{{ref}}}")
            return str(self.known[ref])

        return REF.sub(one, value).replace("$${", "${").replace("%%{", "%{")

    def condition(self, text: str) -> bool:
        """A precondition over the quota locals: `(local.A == -1 || local.A >= 2) || (...)`."""
        inner = text.strip().removeprefix("${").removesuffix("}")
        expr = re.sub(r"local\.(\w+)", lambda m: repr(self.local(m.group(1))), inner)
        expr = expr.replace("||", " or ").replace("&&", " and ")
        tree = ast.parse(expr, mode="eval")
        allowed = (ast.Expression, ast.BoolOp, ast.Or, ast.And, ast.Compare, ast.Constant, ast.UnaryOp, ast.USub)
        allowed += (ast.Eq, ast.GtE, ast.Gt, ast.Lt, ast.LtE, ast.NotEq)
        if not all(isinstance(node, allowed) for node in ast.walk(tree)):
            raise SimApplyError(f"simulated apply: cannot evaluate the precondition {text}")
        return bool(eval(compile(tree, "<precondition>", "eval"), {"__builtins__": {}}))  # numbers and comparisons

    def local(self, name: str) -> float:
        """A quota limit local: coalesce(try(one([for d in DATA.dimensions_infos : VALUE if COND]), null), ..., 0)."""
        text = (self.doc.get("locals") or {}).get(name)
        pick = re.compile(
            r"try\(one\(\[for d in data\.google_cloud_quotas_quota_info\.(\w+)\.dimensions_infos : "
            r"try\(tonumber\(d\.details\[0\]\.value\), null\) if (.+?)\]\), null\)"
        )
        picks = pick.findall(text or "")
        if not text or not picks or re.sub(pick, "P", text) != "${coalesce(" + ", ".join("P" * len(picks)) + ", 0)}":
            raise SimApplyError(f"simulated apply: cannot evaluate local.{name}")
        for data_name, cond in picks:
            found = [d for d in self._info(data_name).get("dimensionsInfos", []) if _matches(d, cond, name)]
            if len(found) == 1:  # one() of several is an error, which try() turns into null
                value = (found[0].get("details") or {}).get("value")
                if value is not None:
                    return float(value)
        return 0.0

    def _info(self, data_name: str) -> dict:
        if data_name not in self._infos:
            import requests

            spec = self.doc["data"]["google_cloud_quotas_quota_info"][data_name]
            url = (
                f"{self.endpoint}/v1/{spec['parent']}/locations/global/services/{spec['service']}/quotaInfos/"
                f"{spec['quota_id']}"
            )
            resp = requests.get(url, timeout=30)
            if resp.status_code != 200:
                raise SimApplyError(f"simulated apply: reading quota {spec['quota_id']}: HTTP {resp.status_code}")
            self._infos[data_name] = resp.json()
        return self._infos[data_name]


def _matches(entry: dict, cond: str, local: str) -> bool:
    for term in cond.split(" && "):
        if m := re.fullmatch(r'try\(d\.dimensions\["(\w+)"\], ""\) == "([^"]*)"', term):
            if (entry.get("dimensions") or {}).get(m.group(1), "") != m.group(2):
                return False
        elif m := re.fullmatch(r'contains\(d\.applicable_locations, "([^"]*)"\)', term):
            if m.group(1) not in (entry.get("applicableLocations") or []):
                return False
        else:
            raise SimApplyError(f"simulated apply: cannot evaluate local.{local} ({term})")
    return True
