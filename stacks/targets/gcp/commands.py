"""The gcp target's own commands: `trainctl quota`, `trainctl image build`, `trainctl bootstrap`.

Registered by the target (stacks.targets.Target.register_commands) with the CLI's shared options and helpers
passed in (`kit`), so this package never imports the CLI above it. No `from __future__ import annotations`:
the options' types are the kit's, resolved when the commands are defined."""

import dataclasses
import json
from typing import Annotated

import typer


def register(app: typer.Typer, kit) -> None:
    """Add the commands to `app`; heavy imports stay inside each command (shell completion starts trainctl)."""
    app.command("quota")(_quota(kit))
    image = typer.Typer(help="Build the trainer image (Cloud Build, Artifact Registry).", no_args_is_help=True)
    image.command("build")(_image_build(kit))
    app.add_typer(image, name="image")
    app.command("bootstrap")(_bootstrap(kit))


def _quota(kit):
    EnvOpt, SetOpt = kit.env_option, kit.set_option
    LangOpt = Annotated[str | None, typer.Option("--lang", "-l", help="only this language (default: all configured)")]
    QuotaJsonOpt = Annotated[bool, typer.Option("--json", help="print the decisions as JSON (see the README)")]

    def quota(env: EnvOpt = "local", lang: LangOpt = None, sets: SetOpt = None, as_json: QuotaJsonOpt = False):
        """Check GPU quota (Spot quota for Spot VMs) and pick each language's zone (gcp envs)."""
        from stacks.targets.gcp.prices import estimate
        from stacks.targets.gcp.quota import ComputeQuotas, QuotaError, choose_zones

        _, config = kit.load(env, sets)
        config.require_target(
            "gcp",
            f"quota applies to gcp environments; env {config.env!r} has target {config.target!r}",
            hint="pick a gcp environment with --env (e.g. --env dev)",
        )
        compute = ComputeQuotas(config.gcp.project)
        book = None
        decisions = []
        # several languages share regional quota when their runs overlap: decided together
        for name, decision in choose_zones(config, [lang] if lang else list(config.languages), compute=compute).items():
            if isinstance(decision, QuotaError):
                raise decision
            if as_json:
                data = dataclasses.asdict(decision)
                if book is None:
                    from stacks.targets.gcp.pricing import price_book
                    from trainer.storage import open_bucket

                    book = price_book(
                        config,
                        open_bucket(config.bucket),
                        [config.language(n).gcp.machine_type for n in config.languages],
                        compute=compute,
                    )
                data["cost_estimate"] = estimate(config.language(name), decision.region, book).as_dict()
                data["cost_estimate"]["prices_warning"] = book.warning
                decisions.append(data)
            else:
                _print_decision(kit, decision)
        if as_json:
            typer.echo(json.dumps(decisions, indent=2))

    return quota


def _image_build(kit):
    EnvOpt, SetOpt = kit.env_option, kit.set_option

    def build(env: EnvOpt = "local", sets: SetOpt = None):
        """Build and push the trainer image, tagged with the hash of its build context.

        Skips the build when the registry already has that tag (tags are immutable: a tree that
        changes what the image holds gets a new tag, and so a new build).
        Prints the image reference on stdout and the progress on stderr.
        """
        from stacks.targets.gcp.image import SOURCE_ROOT, submit_build

        _, config = kit.load(env, sets)
        config.require_target(
            "gcp",
            f"env {env!r} has target {config.target!r}: image build applies to gcp "
            "environments; the local target runs the trainer from this checkout",
            hint="pick a gcp env, e.g. --env dev",
        )

        def say(line: str) -> None:
            kit.err_console.print(line, markup=False, soft_wrap=True)

        result = submit_build(config, SOURCE_ROOT, echo=say)
        say(f"built and pushed {result.ref}" if result.built else f"found {result.ref}")
        typer.echo(result.ref)

    return build


def _bootstrap(kit):
    EnvOpt, SetOpt = kit.env_option, kit.set_option

    def bootstrap(env: EnvOpt = "local", sets: SetOpt = None):
        """Create the env's Terraform state bucket (versioned) and enable the APIs the stacks use; safe to run again."""
        from stacks.naming import FOUNDATION
        from stacks.targets.gcp.services import enable_required_apis
        from stacks.targets.gcp.state_bucket import ensure_state_bucket

        _, config = kit.load(env, sets)
        config.require_target(
            "gcp",
            f"env {env!r} targets {config.target}: its Terraform state is local, nothing to bootstrap",
            hint="bootstrap applies to gcp environments (e.g. --env dev)",
        )
        state = ensure_state_bucket(config)
        verb = "created" if state.created else "exists"
        kit.console.print(
            f"state bucket gs://{state.name} {verb} ({state.location}, versioning "
            f"{'on' if state.versioning else 'OFF'})"
        )
        enabled = enable_required_apis(config)
        kit.console.print(
            f"APIs: enabled {', '.join(enabled)}" if enabled else "APIs: every API the stacks use is on", soft_wrap=True
        )
        kit.console.print(
            f"next: CHECKPOINT_DISABLE=1 TRAINCTL_ENV={env} npx cdktf deploy {FOUNDATION}   "
            "(APIs, bucket, registry, identities; CHECKPOINT_DISABLE=1: no cdktf telemetry)",
            soft_wrap=True,
        )

    return bootstrap


def _print_decision(kit, decision) -> None:
    from rich.table import Table

    from stacks.targets.gcp.quota import HEADERS, row_cells

    table = Table(*HEADERS, title=f"train-{decision.lang}: {decision.needed} GPU(s)", title_justify="left")
    for row in decision.rows:
        cells = list(row_cells(row))
        cells[-1] = f"[green]{cells[-1]}[/]" if row.ok else f"[red]{cells[-1]}[/]"
        table.add_row(*cells)
    kit.print_table(table)
    kit.console.print(f"train-{decision.lang} → {decision.zone} ({decision.metric})")
