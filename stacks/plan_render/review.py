"""Planning stacks for review and comparing a fresh plan with the reviewed one (`trainctl plan | apply`).

Plans are redacted before anything is written; a training stack's plan carries its cost quote
(`trainstack.prices`) so `plan --from-json` renders it without credentials.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from stacks.errors import ConfigError, TrainstackError
from stacks.project import Project
from stacks.targets import target_of

PLANFILE = "trainctl.tfplan"  # saved plan in the stack's synth folder (cdktf.out, git-ignored)


@dataclass
class Planned:
    plan: "object"  # StackPlan
    doc: dict  # redacted `terraform show -json`
    tf: "object | None"  # the stack's Terraform runner; None when its plan failed


def write_json(json_out: Path | None, env: str, name: str, doc: dict, written: list[dict]) -> None:
    """DIR/<env>/<stack>.json, or FILE.json holding every stack planned so far (rewritten each time)."""
    if not json_out:
        return
    if json_out.suffix == ".json" and not json_out.is_dir():
        from stacks.plan_render.parse import BUNDLE_KEY

        written.append(doc)
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(written[0] if len(written) == 1 else {BUNDLE_KEY: written}, indent=1))
        return
    target = json_out / env / f"{name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(doc, indent=1))


def _stack_hint(only: str, names: list[str], env: str) -> str:
    if f"train-{only}" in names:  # a language code given for its stack
        return f"a language's stack is train-LANG: --stack train-{only}"
    if not names:
        return f"configure a language in envs/{env}.yaml (languages:), then plan its stack"
    example = next((n for n in names if n.startswith("train-")), names[0])
    return f"name one of them, e.g. --stack {example}, or leave --stack out to plan them all"


def plan_stacks(
    env: str,
    sets,
    only: str | None,
    json_out: Path | None,
    *,
    preflight: bool,
    lock: bool,
    keep_going: bool,
    prices: bool = False,
    foundation: bool = True,
    show: Callable[[str, str], None] = lambda s, t: None,
    reporter=None,
    echo: Callable | None = None,
) -> tuple[list[Planned], TrainstackError | None]:
    """Plan each stack -> (results, the first error). With `keep_going` a failed stack is
    recorded (its error rendered in the review) and the others are still planned."""
    from stacks.naming import FOUNDATION
    from stacks.plan_render import plan_from_document
    from stacks.plan_render.redact import redact
    from stacks.runs.language_run import resolve
    from stacks.runs.stack_ops import open_foundation, open_stack

    written: list[dict] = []  # the documents FILE.json holds: this command's plans
    try:
        project = Project.discover()
        config = project.load(env, list(sets or []))
    except TrainstackError as exc:
        # The review still shows why this env has no plan.
        write_json(
            json_out, env, "_env", {"trainstack": {"env": env, "stack": "(config)", "error": exc.message}}, written
        )
        raise
    target = target_of(config)
    names = [*(target.stacks_before_training if foundation else ()), *(f"train-{lang}" for lang in config.languages)]
    if only:
        if only not in names:
            raise ConfigError(
                f"no stack {only!r} in env {env!r}; stacks: {', '.join(names) or 'none'}",
                hint=_stack_hint(only, names, env),
            )
        names = [only]
    project.work_outdir(env).parent.mkdir(parents=True, exist_ok=True)  # cdktf's App makes one level only
    results, first_error = [], None
    books: dict = {}  # one price book per plan command
    for name in names:
        meta = {"env": env, "stack": name, "target": config.target}
        tf = None
        try:
            if name == FOUNDATION:
                tf = open_foundation(project, config, echo=echo)
            else:
                tf = open_stack(
                    resolve(project, config, name.removeprefix("train-")),
                    echo=echo,
                    preflight=preflight,
                    reporter=reporter,
                ).tf
            planfile = tf.workdir / PLANFILE
            text = tf.plan(lock=lock, out=planfile)
            # Redacted before anything is written: plan JSON carries sensitive values in clear.
            doc = redact(tf.show_json(planfile))
        except TrainstackError as exc:
            if not keep_going:
                raise
            first_error = first_error or exc
            doc, tf = {"trainstack": {**meta, "error": exc.message}}, None
        else:
            show(name, text)
            doc["trainstack"] = meta
            if name.startswith("train-") and prices:
                quote_prices(doc, target, config, books)
        write_json(json_out, env, name, doc, written)
        results.append(Planned(plan_from_document(doc, env=env, stack=name, source=name), doc, tf))
    return results, first_error


def quote_prices(doc: dict, target, config, books: dict) -> None:
    """Store with the plan what its VMs cost and which source said so (rendered by --from-json)."""
    from stacks.plan_render import plan_from_document

    def book():
        if "book" not in books:  # asked for once per plan command, and only when a plan has machines to price
            books["book"] = target.prices_for_plan(config)
        return books["book"]

    prices = target.quote_plan(plan_from_document(doc, env=config.env, stack="", source=""), book)
    if prices is not None:
        doc["trainstack"]["prices"] = prices


def stale_stacks(results: list[Planned], reviewed: Path, env: str) -> list[str]:
    """Why each fresh plan is not the reviewed one (empty: every stack plans as reviewed)."""
    from stacks.plan_render.reviewed import differences, reviewed_document

    stale = []
    for r in results:
        doc = reviewed_document(reviewed, env, r.plan.stack)
        if doc is None:
            if r.plan.has_changes:
                stale.append(f"{r.plan.stack}: no reviewed plan in {reviewed}")
            continue
        diff = differences(doc, r.doc)
        if diff:
            stale.append(f"{r.plan.stack}: differs from the review at {', '.join(diff[:10])}")
    return stale
