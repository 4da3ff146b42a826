"""GPU quota preflight for target gcp: pick the first preferred zone with quota for the GPUs.

A zone fits when its region's governing GPU metric (Spot quota for Spot VMs when the
project has any, else on-demand quota) and the global GPUS_ALL_REGIONS both have room
for nodes x gpu.count, and the zone offers the accelerator type. GPUs whose per-GPU metric
regions.get does not report (H100, H200) are decided by their Cloud Quotas family quota
(GPUS-PER-GPU-FAMILY-per-project-region, a limit without usage) where the project has one.
Google client imports stay inside functions so `trainctl --help` never pays for them.

Size: over 400 lines because the zone decision and the rows `trainctl quota` shows for it are one
reading of the same metrics; split, what it prints and what it decides could disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from urllib.parse import quote

from stacks.config.models import EnvConfig, LanguageSettings
from stacks.errors import InfraError, UnknownLanguageError
from stacks.targets.gcp import api
from stacks.targets.gcp.gpus import (
    FAMILY_METRIC,
    GLOBAL_METRIC,
    GPU_TYPES,
    SPOT_FAMILY_METRIC,
    GpuType,
    capacity_rung,
    region_of,
)

# The same client factory the VM agent uses; ENDPOINT_ENV points it at a test server.
from trainer.launchers.vm.group import ENDPOINT_ENV, compute_endpoint

CALL_TIMEOUT_S = 30.0
CLOUDQUOTAS_ENDPOINT_ENV = "TRAINSTACK_CLOUDQUOTAS_ENDPOINT"
CLOUDQUOTAS_API = "https://cloudquotas.googleapis.com"
FAMILY_METRICS = (FAMILY_METRIC, SPOT_FAMILY_METRIC)  # quotas of several GPU families, told by `gpu_family`


@dataclass(frozen=True)
class QuotaRow:
    """One line of the quota table: a global row, then one row per candidate zone."""

    scope: str  # region name, or "global"
    zone: str  # "" on the global row
    metric: str
    limit: float | None  # None: the metric is not reported
    usage: float | None
    needed: int
    ok: bool
    note: str = ""


@dataclass(frozen=True)
class ZoneDecision:
    lang: str
    zone: str
    region: str
    metric: str
    needed: int
    rows: tuple[QuotaRow, ...]
    reported: bool = True  # False: regions.get gave no figure for the metric; the plan's quota guard decides


class QuotaError(InfraError):
    """No candidate zone fits; `rows` says why for each, `summary` is the first line."""

    def __init__(self, summary: str, rows: list[QuotaRow], *, hint: str):
        super().__init__(f"{summary}\n{format_rows(rows)}", hint=hint)
        self.summary, self.rows = summary, tuple(rows)


@dataclass
class RegionInfo:
    quotas: dict[str, tuple[float, float]]  # metric -> (limit, usage)
    zones: set[str]
    missing: bool = False  # regions.get answered 404
    warning: str = ""  # quotaStatusWarning: fetching the quotas failed and `quotas` was left out


@dataclass
class ComputeQuotas:
    """Read-only Compute Engine look-ups for one project, cached for one preflight."""

    project: str
    endpoint: str | None = None
    _regions: dict[str, RegionInfo] = field(default_factory=dict)
    _global: dict[str, tuple[float, float]] | None = None
    _clients: dict = field(default_factory=dict)
    _quota_infos: dict[str, dict] = field(default_factory=dict)

    def _client(self, name: str):
        if name not in self._clients:
            self._clients[name] = self._guard(f"a Compute {name}", lambda: api.compute_client(name, self.endpoint))
        return self._clients[name]

    def global_quotas(self) -> dict[str, tuple[float, float]]:
        if self._global is None:
            found = self._guard(
                f"project {self.project}",
                lambda: self._client("ProjectsClient").get(project=self.project, **_call_options()),
            )
            self._global = {q.metric: (q.limit, q.usage) for q in found.quotas}
        return self._global

    def region(self, region: str) -> RegionInfo:
        if region not in self._regions:
            found = self._guard(
                f"region {region}",
                lambda: self._client("RegionsClient").get(project=self.project, region=region, **_call_options()),
                none_if_missing=True,
            )
            warning = found.quota_status_warning if found is not None else None
            self._regions[region] = (
                RegionInfo({}, set(), missing=True)
                if found is None
                else RegionInfo(
                    {q.metric: (q.limit, q.usage) for q in found.quotas},
                    {url.rsplit("/", 1)[-1] for url in found.zones},
                    warning=f"{warning.code}: {warning.message}".strip(": ") if warning else "",
                )
            )
        return self._regions[region]

    def offers(self, zone: str, accelerator: str) -> bool:
        """acceleratorTypes.get answers 404 where the zone does not offer the type."""
        found = self._guard(
            f"accelerator {accelerator} in {zone}",
            lambda: self._client("AcceleratorTypesClient").get(
                project=self.project, zone=zone, accelerator_type=accelerator, **_call_options()
            ),
            none_if_missing=True,
        )
        return found is not None

    def machine_shape(self, zone: str, machine_type: str) -> dict | None:
        """{"vcpus", "memory_gib"} of a machine type (machineTypes.get); None where the zone lacks it."""
        found = self._guard(
            f"machine type {machine_type} in {zone}",
            lambda: self._client("MachineTypesClient").get(
                project=self.project, zone=zone, machine_type=machine_type, **_call_options()
            ),
            none_if_missing=True,
        )
        if found is None:
            return None
        return {"vcpus": int(found.guest_cpus), "memory_gib": round(found.memory_mb / 1024, 3)}

    def family_quotas(self, region: str, gpu_family: str) -> dict[str, tuple[float, float]]:
        """{SPOT_FAMILY_METRIC / FAMILY_METRIC: (limit, 0)} of `gpu_family` in `gcp.region`: Cloud Quotas reports
        limits, not usage. A quota the project lacks, or without an entry for the family there, is left out."""
        found = {}
        for metric in (SPOT_FAMILY_METRIC, FAMILY_METRIC):
            limit = family_limit(self.quota_info(quota_id(metric)), region, gpu_family)
            if limit is not None:
                found[metric] = (limit, 0.0)
        return found

    def quota_info(self, quota: str) -> dict:
        """Cloud Quotas quotaInfos.get of a compute.googleapis.com quota; {} where the project has no such quota."""
        if quota not in self._quota_infos:
            session, base = api.session(CLOUDQUOTAS_ENDPOINT_ENV, quota_project=self.project)
            url = (
                f"{base or CLOUDQUOTAS_API}/v1/projects/{self.project}/locations/global/services/"
                f"compute.googleapis.com/quotaInfos/{quota}"
            )
            resp = api.call(session, "GET", url, f"cannot read the quota {quota}")
            if resp.status_code not in (200, 404):
                raise InfraError(
                    f"Cloud Quotas answered HTTP {resp.status_code} for {quota}: {api.api_message(resp)}",
                    hint=f"you need roles/cloudquotas.viewer on project {self.project}, and the API "
                    "enabled: gcloud services enable cloudquotas.googleapis.com "
                    f"--project={self.project}",
                )
            self._quota_infos[quota] = resp.json() if resp.status_code == 200 else {}
        return self._quota_infos[quota]

    def _guard(self, what: str, call, none_if_missing: bool = False):
        """Run one API call; cloud failures become InfraError with what to do next (api.google_error)."""
        from google.api_core import exceptions as gexc

        try:
            return call()
        except api.client_failures() as exc:
            if none_if_missing and isinstance(exc, gexc.NotFound):
                return None
            where = self.endpoint or compute_endpoint()
            raise api.google_error(
                exc,
                f"reading {what}",
                project=self.project,
                api_name="Compute Engine API",
                service="compute.googleapis.com",
                role="roles/compute.viewer",
                where=f"{where} (set by {ENDPOINT_ENV})" if where else None,
            ) from exc


def _call_options() -> dict:
    from google.api_core import exceptions as gexc
    from google.api_core import retry as gretry

    transient = gretry.if_exception_type(gexc.ServiceUnavailable, gexc.TooManyRequests, gexc.DeadlineExceeded)
    return {
        "retry": gretry.Retry(predicate=transient, initial=0.5, maximum=4.0, timeout=CALL_TIMEOUT_S),
        "timeout": CALL_TIMEOUT_S,
    }


def draws_preemptible(settings) -> bool:
    """Spot and flex-start VMs both draw on the preemptible quotas (PREEMPTIBLE_*; Cloud Quotas' PREEMPTIBLE-...)
    (https://cloud.google.com/compute/docs/instances/about-flex-start-vms, read 2026-11-29); on-demand VMs on the
    standard ones. `settings`: a language's, at the rung the run asks for now."""
    return capacity_rung(settings) in ("spot", "flex_start")


def governing_metric(gpu: GpuType, spot: bool, quotas: dict[str, tuple[float, float]]) -> str:
    """Spot VMs draw on PREEMPTIBLE_* quota where the project has some, else on on-demand quota."""
    if spot and quotas.get(gpu.spot_metric, (0.0, 0.0))[0] > 0:
        return gpu.spot_metric
    return gpu.metric


def governing_family_metric(spot: bool, family: dict[str, tuple[float, float]]) -> str:
    """governing_metric of the family quotas; a Spot request without an on-demand family entry stays on
    the Spot one, so a zero grant refuses rather than passing as unknown."""
    if spot and (family.get(SPOT_FAMILY_METRIC, (0.0, 0.0))[0] > 0 or FAMILY_METRIC not in family):
        return SPOT_FAMILY_METRIC
    return FAMILY_METRIC


def family_limit(info: dict, region: str, gpu_family: str) -> float | None:
    """The limit of `gpu_family` in `gcp.region` in a family quota's QuotaInfo: its first dimensionsInfos entry
    (they are ordered from more to less specific) whose dimensions the pair matches and whose
    applicableLocations hold the region. -1 (unlimited) is infinity; empty details (never granted) 0."""
    wanted = {"region": region, "gpu_family": gpu_family}
    for entry in info.get("dimensionsInfos", []):
        if any(wanted.get(key) != value for key, value in (entry.get("dimensions") or {}).items()):
            continue
        if region not in entry.get("applicableLocations", [region]):
            continue
        value = float((entry.get("details") or {}).get("value", 0))
        return math.inf if value == -1 else value
    return None


# Besides GPUs a VM draws on CPU and disk quota, checked here too: a short CPUS, PREEMPTIBLE_CPUS, A2_CPUS
# or SSD_TOTAL_GB quota otherwise only shows as the group's silent creation errors. Spot VMs use PREEMPTIBLE_CPUS
# where the project has some, else the family's own CPU quota (G2_CPUS, A2_CPUS, ...) where the region
# reports one, else CPUS; pd-balanced and pd-ssd boot disks count against SSD_TOTAL_GB, pd-standard
# against DISKS_TOTAL_GB (https://cloud.google.com/compute/resource-usage, read 2026-11-27).
DISK_METRICS = {"pd-balanced": "SSD_TOTAL_GB", "pd-ssd": "SSD_TOTAL_GB", "pd-standard": "DISKS_TOTAL_GB"}


def cpu_metric(machine_type: str, spot: bool, quotas: dict[str, tuple[float, float]]) -> str:
    if spot and quotas.get("PREEMPTIBLE_CPUS", (0.0, 0.0))[0] > 0:
        return "PREEMPTIBLE_CPUS"
    family = f"{machine_type.split('-', 1)[0].upper()}_CPUS"
    return family if family in quotas else "CPUS"


def other_needs(compute: "ComputeQuotas", zone: str, settings, quotas) -> dict[str, int]:
    """{metric: amount} of the CPU and disk quota the language's VMs need in `zone` (a metric the region does
    not report, or a machine type whose shape is unknown, is left to Compute Engine)."""
    needs = {}
    shape = compute.machine_shape(zone, settings.gcp.machine_type)
    if shape:
        needs[cpu_metric(settings.gcp.machine_type, draws_preemptible(settings), quotas)] = (
            settings.nodes * shape["vcpus"]
        )
    disk = DISK_METRICS.get(settings.gcp.disk_type)
    if disk:
        needs[disk] = settings.nodes * settings.gcp.disk_gb
    return {metric: amount for metric, amount in needs.items() if metric in quotas}


def gpus_needed(settings: LanguageSettings) -> int:
    """The GPUs a language's run holds: its nodes' GPUs."""
    return settings.nodes * settings.gcp.gpu.count


def given_up(region: str, metrics: list[str], gpus: int) -> dict[tuple[str, str], int]:
    """`gpus` a run holds in `region` (on `metrics`) and gives up, as `choose_zone`'s `reserved`: a credit there and
    in GPUS_ALL_REGIONS."""
    return {("global", GLOBAL_METRIC): -gpus, **{(region, metric): -gpus for metric in metrics}}


def candidate_zones(config: EnvConfig) -> list[str]:
    return list(dict.fromkeys([*config.gcp.zones, *config.gcp.fallback_zones]))


def choose_zone(
    config: EnvConfig,
    lang: str,
    *,
    compute: ComputeQuotas | None = None,
    reserved: dict[tuple[str, str], int] | None = None,
) -> ZoneDecision:
    """The first zone (zones, then fallback_zones) whose quota and offer fit `lang`'s GPUs.

    `reserved` holds GPUs already promised to other languages in this preflight,
    keyed by (scope, metric), so two runs never count the same free GPUs.
    """
    config.require_target(
        "gcp",
        f"quota applies to gcp environments; env {config.env!r} has target {config.target!r}",
        hint="pick a gcp environment with --env (e.g. --env dev)",
    )
    if lang not in config.languages:
        raise UnknownLanguageError(lang, config.env, sorted(config.languages))
    settings = config.language(lang)
    request = _Request(
        config,
        lang,
        settings,
        GPU_TYPES[settings.gcp.gpu.type],  # known: config validation checked it for target gcp
        gpus_needed(settings),
        compute or ComputeQuotas(config.gcp.project),
        reserved if reserved is not None else {},
    )
    rows = [_global_row(request)]
    for zone in candidate_zones(config):
        check = _check_zone(request, zone)
        rows.append(check.row(request.needed))
        if check.ok:
            request.reserve(check)
            return ZoneDecision(
                lang, zone, check.region, check.metric, request.needed, tuple(rows), reported=not check.unknown
            )
    raise _no_zone_fits(request, rows)


@dataclass
class _Request:
    """One language's GPUs asked of one preflight: what choose_zone's steps share."""

    config: EnvConfig
    lang: str
    settings: LanguageSettings
    gpu: GpuType
    needed: int  # nodes x gpu.count
    compute: ComputeQuotas
    reserved: dict[tuple[str, str], int]  # the caller's dict: choose_zones sums languages in it
    # (region, metric) -> the limit to ask for, in preference order
    short: dict[tuple[str, str], float] = field(default_factory=dict)

    def room(
        self, scope: str, metric: str, quota: tuple[float, float] | None
    ) -> tuple[float | None, float | None, bool]:
        """(limit, usage counting what is reserved, whether `needed` fits); all unknown without a quota."""
        if quota is None:
            return None, None, False
        usage = quota[1] + self.reserved.get((scope, metric), 0)
        return quota[0], usage, quota[0] - usage >= self.needed

    def reserve(self, check: _ZoneCheck) -> None:
        """Promise the chosen zone's GPUs, CPUs and disk, so the languages after this one do not count them."""
        for key in (("global", GLOBAL_METRIC), (check.region, check.slot)):
            self.reserved[key] = self.reserved.get(key, 0) + self.needed
        for m, need in check.others.items():
            self.reserved[(check.region, m)] = self.reserved.get((check.region, m), 0) + need


@dataclass
class _ZoneCheck:
    """What choose_zone found for one candidate zone, filled in step by step; `row` is its table line."""

    zone: str
    region: str
    info: RegionInfo
    metric: str
    family: str = ""  # the gpu_family whose Cloud Quotas family quota decides, where one does
    limit: float | None = None
    usage: float | None = None
    ok: bool = False
    note: str = ""
    unknown: bool = False  # the region reports no figure for the metric; the plan's quota guard decides
    others: dict[str, int] = field(default_factory=dict)  # CPU and disk quota the VMs need: metric -> amount

    @property
    def slot(self) -> str:
        """The `reserved` key's metric: one family quota holds every family's GPUs."""
        return f"{self.metric}:{self.family}" if self.family else self.metric

    def row(self, needed: int) -> QuotaRow:
        return QuotaRow(self.region, self.zone, self.metric, self.limit, self.usage, needed, self.ok, self.note)


def _global_row(request: _Request) -> QuotaRow:
    """The GPUS_ALL_REGIONS row; a global quota without room refuses every zone at once."""
    needed = request.needed
    limit, usage, ok = request.room("global", GLOBAL_METRIC, request.compute.global_quotas().get(GLOBAL_METRIC))
    if limit is None:  # not every project reports it; the regional check still applies
        ok = True
    row = QuotaRow("global", "", GLOBAL_METRIC, limit, usage, needed, ok, "not reported" if limit is None else "")
    if not ok:
        raise QuotaError(
            f"the global GPU quota {GLOBAL_METRIC} is the blocker for train-{request.lang}: limit {_num(limit)}, "
            f"usage {_num(usage)}, needs {needed}; no zone in any region can start its GPUs",
            [row],
            hint=request_hint(request.config.gcp.project, GLOBAL_METRIC, None, usage + needed),
        )
    return row


def _check_zone(request: _Request, zone: str) -> _ZoneCheck:
    """One candidate zone: its GPU quota, then (where that allows it) its offer, CPUs and disk, then the notes."""
    check = _gpu_quota(request, zone)
    if check.ok:  # quota allows it (or is unknown): does the zone exist and offer the GPU? CPUs and disk?
        _check_offer(request, check)
    _add_notes(request, check)
    return check


def _gpu_quota(request: _Request, zone: str) -> _ZoneCheck:
    """The zone's region's governing GPU metric (or family quota) and whether `needed` GPUs fit in it."""
    gpu, spot, region = request.gpu, draws_preemptible(request.settings), region_of(zone)
    info = request.compute.region(region)
    metric = governing_metric(gpu, spot, info.quotas)
    quotas, family = info.quotas, ""
    if metric not in quotas and gpu.gpu_family and not info.missing:
        found = request.compute.family_quotas(region, gpu.gpu_family)
        if found:  # the family quota decides where regions.get has no figure for the GPU's own metric
            quotas, family = found, gpu.gpu_family
            metric = governing_family_metric(spot, found)
    check = _ZoneCheck(zone, region, info, metric, family)
    check.limit, check.usage, check.ok = request.room(region, check.slot, quotas.get(metric))
    # regions.get is documented as fail-open: `quotas` may be left out (quotaStatusWarning says
    # why), so a metric without a figure is unknown, not zero. Like a missing GPUS_ALL_REGIONS it
    # passes here; the plan's quota guard (Cloud Quotas limits, QuotaGuard) still checks it.
    check.unknown = check.limit is None and not info.missing
    if info.missing:
        check.note = f"region {region} not found"
    elif check.unknown:
        check.ok = True
        why = f"regions.get left quotas out ({info.warning})" if info.warning else f"{metric} is not reported"
        check.note = f"{why} in {region}: the plan's quota guard checks the limit"
    elif not check.ok:
        check.note = f"{_num(max(check.limit - check.usage, 0))} free, needs {request.needed}"
        request.short[(region, metric)] = check.usage + request.needed
    return check


def _check_offer(request: _Request, check: _ZoneCheck) -> None:
    """Whether the zone exists and offers the GPU, and the region has the CPU and disk quota for the VMs."""
    info, zone, region, gpu = check.info, check.zone, check.region, request.gpu
    if info.zones and zone not in info.zones:
        check.ok, check.note = False, f"no zone {zone} in {region}"
    elif not request.compute.offers(zone, gpu.name):
        check.ok, check.note = False, f"{gpu.name} not offered in {zone}"
    else:
        check.others = other_needs(request.compute, zone, request.settings, info.quotas)
        lacking = [
            (m, info.quotas[m][0] - info.quotas[m][1] - request.reserved.get((region, m), 0), need)
            for m, need in check.others.items()
            if info.quotas[m][0] - info.quotas[m][1] - request.reserved.get((region, m), 0) < need
        ]
        if lacking:
            check.ok = False
            check.note = "; ".join(f"{m} {_num(max(free, 0))} free, needs {need}" for m, free, need in lacking)
            for m, free, need in lacking:
                request.short[(region, m)] = info.quotas[m][0] - free + need
        else:
            check.note = "chosen" + (f"; {check.note}" if check.unknown else "")


def _add_notes(request: _Request, check: _ZoneCheck) -> None:
    """What the row's reader should know besides fit or not: on-demand quota for Spot, a family quota,
    GPUs counted for the languages before this one."""
    gpu, spot, key = request.gpu, draws_preemptible(request.settings), (check.region, check.slot)
    if spot and check.metric in (gpu.metric, FAMILY_METRIC) and not check.info.missing and not check.unknown:
        what = "flex-start" if capacity_rung(request.settings) == "flex_start" else "Spot"
        check.note += f"; no preemptible quota in region, {what} VMs use on-demand quota"
    if check.family:
        check.note += f"; gpu_family={check.family}: the Cloud Quotas limit (usage not reported)"
    if request.reserved.get(key):
        check.note += f"; usage counts {request.reserved[key]} for languages above"


def _no_zone_fits(request: _Request, rows: list[QuotaRow]) -> QuotaError:
    """The error when no candidate zone fits: every zone's row, and each quota to raise (or zones to add)."""
    config, settings, gpu = request.config, request.settings, request.gpu
    asks = [
        request_hint(config.gcp.project, m, region, value, gpu.gpu_family if m in FAMILY_METRICS else "")
        for (region, m), value in request.short.items()
    ]
    asks.append(f"or add zones with room to `gcp.zones` / `gcp.fallback_zones` in envs/{config.env}.yaml")
    kind = {"spot": "Spot, ", "flex_start": "flex-start, "}.get(capacity_rung(settings), "")
    return QuotaError(
        f"no zone fits train-{request.lang}: it needs {request.needed} x {gpu.name} ({kind}{settings.nodes} node(s) x "
        f"{settings.gcp.gpu.count}) and none of {len(rows) - 1} candidate zone(s) has both quota and the GPU",
        rows,
        hint="\n    ".join(asks),
    )


def choose_zones(
    config: EnvConfig, langs: list[str], *, compute: ComputeQuotas | None = None
) -> dict[str, ZoneDecision | QuotaError]:
    """choose_zone for several languages as if all their runs were up at once: each language's GPUs
    count against the quota of those after it. The one summed-quota rule (the preflight of runs
    started together, `trainctl doctor`, `trainctl quota`) -> each language's decision, or why it
    does not fit."""
    compute = compute or ComputeQuotas(config.gcp.project)
    reserved: dict[tuple[str, str], int] = {}
    out: dict[str, ZoneDecision | QuotaError] = {}
    for lang in langs:
        try:
            out[lang] = choose_zone(config, lang, compute=compute, reserved=reserved)
        except QuotaError as exc:
            out[lang] = exc
    return out


def quota_id(metric: str) -> str:
    """Cloud Quotas id of a Compute metric: NVIDIA_L4_GPUS -> NVIDIA-L4-GPUS-per-project-region."""
    suffix = "per-project" if metric.endswith("_ALL_REGIONS") else "per-project-region"
    return f"{metric.replace('_', '-')}-{suffix}"


def request_hint(project: str | None, metric: str, region: str | None, value: float, gpu_family: str = "") -> str:
    """Where to ask for more: the console quota page filtered by metric, or gcloud (a family quota's
    preference names the gpu_family too)."""
    console = (
        f"https://console.cloud.google.com/iam-admin/quotas?project={project}"
        f"&metric={quote('compute.googleapis.com/' + metric.lower(), safe='')}"
    )
    dims = f" --dimensions=region={region}" if region else ""
    dims += f",gpu_family={gpu_family}" if region and gpu_family else ""
    where = (f" in {region}" if region else "") + (f" for gpu_family {gpu_family}" if gpu_family else "")
    return (
        f"raise {metric}{where} to >= {_num(value)}: {console} or `gcloud quotas preferences create "
        f"--service=compute.googleapis.com --project={project} --quota-id={quota_id(metric)}{dims} "
        f"--preferred-value={_num(value)}`"
    )


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


HEADERS = ("region/zone", "metric", "limit", "usage", "needed", "status")


def row_cells(row: QuotaRow) -> tuple[str, ...]:
    status = ("ok" if not row.note else row.note) if row.ok else f"NO: {row.note}"
    return (row.zone or row.scope, row.metric, _num(row.limit), _num(row.usage), str(row.needed), status)


def format_rows(rows: list[QuotaRow] | tuple[QuotaRow, ...]) -> str:
    """A plain-text table (error messages go to a terminal or a CI log alike)."""
    cells = [HEADERS, *(row_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADERS))]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells)
