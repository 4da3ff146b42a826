"""The gcp target: a Spot (or on-demand) GPU instance group per run, the bucket in GCS.

Everything that differs from the local target on the operator side is here; the Google API
plumbing it uses lives in stacks/targets/gcp/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from stacks import SOURCE_ROOT
from stacks.errors import InfraError
from stacks.naming import FOUNDATION
from stacks.targets.base import TargetBase

if TYPE_CHECKING:
    from stacks.config import EnvConfig
    from stacks.targets.gcp.placement import GcpPlacement

VM_SCRIPTS = SOURCE_ROOT / "images" / "trainer"  # the VMs' start-up and shutdown scripts


def gcp_placement(config: "EnvConfig", lang: str, zone: str | None = None, metric: str | None = None) -> "GcpPlacement":
    """Where and what a language's VMs run; without a quota decision: the first preferred zone."""
    from stacks.targets.gcp.gpus import FAMILY_METRIC, GPU_TYPES, SPOT_FAMILY_METRIC, capacity_rung
    from stacks.targets.gcp.image import image_ref
    from stacks.targets.gcp.placement import GcpPlacement

    s = config.language(lang)
    gpu = GPU_TYPES[s.gcp.gpu.type]
    # GPUs of the family quota have no per-GPU Cloud Quotas quota for the plan's guard to read.
    on_demand, spot = (FAMILY_METRIC, SPOT_FAMILY_METRIC) if gpu.gpu_family else (gpu.metric, gpu.spot_metric)
    return GcpPlacement(
        zone=zone or config.gcp.zones[0],
        image=image_ref(config, SOURCE_ROOT),
        quota_metrics=[metric]
        if metric
        else ([spot, on_demand] if capacity_rung(s) in ("spot", "flex_start") else [on_demand]),
        startup_script=(VM_SCRIPTS / "startup.sh").read_text(),
        shutdown_script=(VM_SCRIPTS / "shutdown.sh").read_text(),
    )


@dataclass(frozen=True)
class GcpTarget(TargetBase):
    name: str = "gcp"
    status_appear_timeout_s: float = 45 * 60  # Spot capacity, boot, driver, a multi-GB image pull
    poll_s: float = 5.0
    stacks_before_training: tuple[str, ...] = (FOUNDATION,)
    runs_side_by_side: bool = True  # each run has its own VMs: the limit is quota, checked for the sum
    capacity_retry: tuple[float, float] = (60.0, 300.0)  # between passes over every zone (SkyPilot's 60 s -> 300 s)

    def preflight_together(self, config, langs, reporter) -> dict:
        """The GPU quota for every language's run at once (each counts the GPUs of those before it)
        -> each language's zone decision, so each stack is placed where the sum was found to fit."""
        from stacks.targets.gcp.quota import QuotaError, choose_zones

        decided, short, rows, hint = {}, [], [], ""
        for lang, decision in choose_zones(config, langs).items():
            if isinstance(decision, QuotaError):
                short.append(lang)
                rows.extend(decision.rows)
                hint = decision.hint
            else:
                decided[lang] = decision
                if reporter:
                    reporter.info(f"quota ok together: {lang} in {decision.zone} ({decision.metric})")
        if short:
            fit = [lang for lang in langs if lang not in short]
            raise QuotaError(
                f"the GPU quota does not fit all {len(langs)} runs at once: {', '.join(short)} would "
                f"not fit beside {', '.join(fit) or 'nothing'}; nothing was applied",
                rows,
                hint=f"train fewer at a time (--parallel {max(len(fit), 1)}), or {hint}",
            )
        return decided

    def doctor(self, config, echo):
        from stacks.targets.gcp.doctor import NOT_CHECKED, run_checks

        return run_checks(config, echo), NOT_CHECKED

    def check_config(self, config, origin) -> None:
        from stacks.targets.gcp.config_checks import check_gcp

        check_gcp(config, origin)

    def start_session(self, config, project) -> None:
        """`gcp.simulated`: this process talks to a simulated Google Cloud (never to Google): the one served for the
        env, else one it starts now."""
        if config.gcp.simulated is None:
            return
        from stacks.targets.gcp.sim.session import say_simulated, start

        start(config, project.env_dir(config.env), project.root, say_simulated)

    def stack_runner(self, config, workdir, stack, echo=None):
        """Terraform; on a simulated cloud the simulated apply and destroy (the google provider cannot run here)."""
        if config.gcp.simulated is None:
            from stacks.terraform import Terraform

            return Terraform(workdir, stack, echo=echo)
        from stacks.targets.gcp.sim.stack_runner import SimulatedStack

        return SimulatedStack(workdir, stack)

    def training_part(self, spec, config, project, *, python, placement):
        from functools import partial

        from stacks.targets.gcp.train_part import add_gcp_part

        return partial(add_gcp_part, spec=spec, config=config, placement=placement or gcp_placement(config, spec.lang))

    def before_training(self, app, config, name):
        from stacks.targets.gcp.constructs.foundation_stack import FoundationStack

        if name != FOUNDATION:
            raise ValueError(f"the gcp target has no stack {name!r}")
        return FoundationStack(app, config=config)

    def left_out_of_app(self, config) -> dict[str, str]:
        """A plain `cdktf synth|deploy` deploys the training stacks without CI identities; the foundation never
        trusts a default repository."""
        from stacks.targets.gcp.constructs.foundation_stack import CI_KEYS

        if all(getattr(config.ci, key) for key in CI_KEYS):
            return {}
        return {
            FOUNDATION: f"set {', '.join('ci.' + k for k in CI_KEYS)} in envs/{config.env}.yaml to synthesize "
            "or deploy it"
        }

    def register_commands(self, app, kit) -> None:
        from stacks.targets.gcp.commands import register

        register(app, kit)

    def preflight(self, config, lang, reporter, decided=None):
        """Quota (zone choice) and image checks of a gcp run -> the GcpPlacement to synthesize with."""
        from stacks.targets.gcp.doctor import check_boot_image
        from stacks.targets.gcp.image import image_ref, require_image
        from stacks.targets.gcp.quota import choose_zone

        decision = decided or choose_zone(config, lang)
        if reporter:
            together = " (checked with the languages started beside it)" if decided else ""
            reporter.info(f"quota ok: {lang} runs in {decision.zone} ({decision.metric}){together}")
        ref = image_ref(config, SOURCE_ROOT)
        require_image(ref, env=config.env)
        if reporter:
            reporter.info(f"image ok: {ref}")
        boot = check_boot_image(config, lang)  # trainctl doctor's cheap check: one API call
        if not boot.ok:
            raise InfraError(f"{boot.name}: {boot.detail}", hint=boot.fix)
        if reporter:
            reporter.info(f"{boot.name} ok: {boot.detail}")
        # A metric regions.get did not report: the plan's guard accepts Spot or on-demand quota.
        return gcp_placement(config, lang, zone=decision.zone, metric=decision.metric if decision.reported else None)

    def estimate(self, config, lang, bucket, reporter) -> None:
        from stacks.targets.gcp.prices import estimate
        from stacks.targets.gcp.pricing import price_book

        settings = config.language(lang)
        book = price_book(config, bucket, [settings.gcp.machine_type])
        if book.warning:
            reporter.warn(f"prices from the {book.source}: {book.warning}")
        reporter.info(estimate(settings, config.gcp.region, book).line(settings.gcp.machine_type))

    def waiting_note(self, config, lang, placement) -> str | None:
        from stacks.naming import group_name

        zone = placement.zone if placement else config.gcp.zones[0]
        return (
            f"waiting for the VM (Spot capacity, boot, driver, image pull: usually 3-10 min); "
            f"watch it: gcloud compute instance-groups managed list-instances "
            f"{group_name(config.env, lang)} --zone {zone} --project {config.gcp.project}"
        )

    def require_artifacts(self, config) -> None:
        """The trainer image of this tree (the reviewed plan's): without it every VM would pull five times and
        fail while its GPU is billed. The CI deployer may read the registry, not build (Cloud Build)."""
        from stacks.targets.gcp.image import image_ref, require_image

        require_image(image_ref(config, SOURCE_ROOT), env=config.env)

    def placements(self, config, lang, reporter, first=None, *, freed=False) -> list:
        """`first` (the preflight's zone), then every other zone of `gcp.zones` and `gcp.fallback_zones` whose quota
        fits (Spot or on-demand, as the language's settings say), in that order: where the lifecycle moves a run its
        zone cannot create VMs for (stacks.runs.failover). Never empty: without any, the preflight's choice.
        `freed`: the run's GPUs at `first` counted as free in its region and globally (a preempted VM holds them
        while it stops, up to 30 s, and the move deletes the group before it applies elsewhere)."""
        from stacks.targets.gcp.quota import (
            ComputeQuotas,
            QuotaError,
            candidate_zones,
            choose_zone,
            given_up,
            gpus_needed,
        )

        out, compute = [first] if first is not None else [], None  # `first`: checked by the preflight
        # on the metric the run's VMs draw on (every candidate the preflight named, where it decided none)
        credit = (
            given_up(first.region, first.quota_metrics, gpus_needed(config.language(lang)))
            if freed and first is not None
            else {}
        )
        for zone in candidate_zones(config):
            if first is not None and zone == first.zone:
                continue
            try:
                compute = compute or ComputeQuotas(config.gcp.project)
                decision = choose_zone(only_zone(config, zone), lang, compute=compute, reserved=dict(credit))
            except QuotaError:
                continue  # no quota there: never a candidate
            except Exception as exc:  # the API: the run still has its first zone
                if reporter:
                    reporter.warn(f"could not check the quota of {zone} for failover: {exc}")
                continue
            out.append(gcp_placement(config, lang, zone=zone, metric=decision.metric if decision.reported else None))
        return out or [gcp_placement(config, lang)]

    def describe_placement(self, placement) -> str:
        return f"zone {placement.zone}" if placement is not None else "its first zone"

    def zones(self, config, lang) -> list[list[str]]:
        """`gcp.zones`, then the `gcp.fallback_zones` not among them (other regions, egress billed: never first)."""
        fallback = [z for z in dict.fromkeys(config.gcp.fallback_zones) if z not in config.gcp.zones]
        return [tier for tier in (list(dict.fromkeys(config.gcp.zones)), fallback) if tier]

    def with_zone_order(self, config, lang, zones):
        """`gcp.zones` and `gcp.fallback_zones` each in the order `zones` gives."""
        position = {zone: i for i, zone in enumerate(zones)}
        ordered = {
            key: sorted(getattr(config.gcp, key), key=lambda z: position.get(z, len(position)))
            for key in ("zones", "fallback_zones")
        }
        return config.model_copy(update={"gcp": config.gcp.model_copy(update=ordered)})

    def capacity_advice(self, config, lang, zones):
        from stacks.targets.gcp.advice import capacity_advice

        return capacity_advice(config, lang, zones)

    def placement_of_run(self, config, lang, bucket, run_id):
        """Where the run's last apply put its group and with which image (metadata/trainctl.json, written at every
        apply and move): a re-attached run is followed, and moved, from there."""
        import dataclasses
        import json

        from trainer.runfiles.keys import TRAINCTL_META, run_key

        try:
            meta = json.loads(bucket.read_bytes(run_key(lang, run_id, TRAINCTL_META)))
        except Exception:  # no record: the caller keeps what it has
            return None
        if not meta.get("zone"):
            return None
        placement = gcp_placement(config, lang, zone=meta["zone"])
        return dataclasses.replace(placement, image=meta.get("image") or placement.image)

    def capacity_retry_s(self, config) -> tuple[float, float]:
        if config.gcp.simulated is not None:  # the simulated cloud's time runs `speedup` times faster
            from stacks.targets.gcp.sim.session import current

            session = current()
            if session is not None:
                return (self.capacity_retry[0] / session.speedup, self.capacity_retry[1] / session.speedup)
        return self.capacity_retry

    def runs_outlive_command(self, config) -> bool:
        """A real cloud's VMs, and a served simulated cloud's, go on after trainctl exits; a simulated cloud the
        command started itself stops with it, its VMs too."""
        if config.gcp.simulated is None:
            return True
        from stacks.targets.gcp.sim.session import current

        session = current()
        return session is not None and session.outlives_command

    def vm_running(self, project, config, lang, run_id, placement) -> bool | None:
        """The group's own view: does it hold a RUNNING VM with nothing pending? None when it cannot be asked."""
        from stacks.targets.gcp.group_errors import group_running

        return group_running(config, lang, placement.zone if placement is not None else config.gcp.zones[0])

    def creation_errors(self, config, lang, reporter, *, placement=None, bucket=None, run_id=None, project=None):
        from stacks.targets.gcp.group_errors import group_error_poller

        zone = placement.zone if placement else None
        if zone is None and bucket is not None and run_id:
            zone = recorded_zone(bucket, lang, run_id)
        return group_error_poller(config, lang, zone or config.gcp.zones[0], reporter)

    def run_metadata(self, config, lang, placement, bucket) -> dict:
        from stacks.targets.gcp.gpus import region_of

        vm = config.language(lang).gcp
        machine = {"machine_type": vm.machine_type, "gpu": {"type": vm.gpu.type, "count": vm.gpu.count}}
        if placement is None:
            return machine
        region = region_of(placement.zone)
        meta = {
            **machine,
            "image": placement.image,
            "zone": placement.zone,
            "region": region,
            "quota_metric": placement.quota_metrics[0],
        }
        try:  # bookkeeping after the apply: a pricing failure must not lose the run's metadata
            meta["cost_estimate"] = self._estimate_record(config, lang, region, bucket)
        except Exception as exc:
            meta["cost_estimate"] = {"note": f"cost unknown: {exc}"}
        return meta

    def launcher_alive(self, project, env, run_id):
        return None  # the instance group recreates VMs; the run's status and the deadline tell

    def run_cost(self, bucket, config, lang, run_id, status) -> dict:
        from stacks.targets.gcp.cost import vm_cost
        from stacks.targets.gcp.pricing import price_book

        return vm_cost(bucket, config, lang, run_id, status, lambda machine: price_book(config, bucket, [machine]))

    @staticmethod
    def _estimate_record(config, lang, region, bucket) -> dict:
        """The estimate metadata/trainctl.json keeps (the book the estimate before apply used)."""
        from stacks.targets.gcp.prices import estimate
        from stacks.targets.gcp.pricing import price_book

        settings = config.language(lang)
        return estimate(settings, region, price_book(config, bucket, [settings.gcp.machine_type])).as_dict()

    def cost_note(self, cost: dict) -> str | None:
        est = "cost unknown" if cost["est_cost"] is None else f"about ${cost['est_cost']:.2f}"
        return f"VM time {cost['billed_vm_s'] / 3600:.2f}h over {cost['vm_boots']} boot(s): {est}"

    def plan_line(self, plan):
        from stacks.targets.gcp.plan_costs import cost_line, training_facts

        facts = training_facts(plan)
        return None if facts is None else cost_line(facts, plan.prices)

    def quote_plan(self, plan, book):
        from stacks.targets.gcp.plan_costs import quote, training_facts

        facts = training_facts(plan)
        prices = None if facts is None else book()
        return None if prices is None else quote(facts, prices)

    def prices_for_plan(self, config):
        from stacks.targets.gcp.pricing import price_book
        from trainer.storage import open_bucket

        try:
            bucket = open_bucket(config.bucket)
        except Exception:  # the planner may not open the env bucket: then no cache, the API only
            bucket = None
        return price_book(config, bucket, [config.language(lang).gcp.machine_type for lang in config.languages])


GCP = GcpTarget()


def only_zone(config: "EnvConfig", zone: str) -> "EnvConfig":
    """The env with `zone` as its one candidate: the quota decision of that zone alone (the zones live in
    `config.gcp`; a copy that narrowed a top-level key would leave every zone a candidate)."""
    return config.model_copy(update={"gcp": config.gcp.model_copy(update={"zones": [zone], "fallback_zones": []})})


def recorded_zone(bucket, lang: str, run_id: str) -> str | None:
    """The zone metadata/trainctl.json recorded at apply (None: no record)."""
    import json

    from trainer.runfiles.keys import TRAINCTL_META, run_key

    try:
        return json.loads(bucket.read_bytes(run_key(lang, run_id, TRAINCTL_META))).get("zone")
    except Exception:  # no metadata: the first preferred zone, as a stack without a preflight decision
        return None
