"""`trainctl quota`: GPU quota per candidate zone and the zone each language would get."""
from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer

from stacks.cli.common import EnvOpt, SetOpt, console, load, mapped_errors

LangOpt = Annotated[str | None, typer.Option("--lang", "-l", help="only this language (default: all configured)")]


def register(app: typer.Typer) -> None:
    app.command("quota")(quota)


@mapped_errors
def quota(env: EnvOpt = "local", lang: LangOpt = None, sets: SetOpt = None,
          as_json: Annotated[bool, typer.Option("--json", help="print the decisions as JSON (see the README)")] = False):
    """Check GPU quota (Spot quota for Spot VMs) and pick each language's zone (gcp envs)."""
    from stacks.targets.gcp.prices import estimate
    from stacks.targets.gcp.quota import ComputeQuotas, QuotaError, choose_zones

    _, config = load(env, sets)
    compute = ComputeQuotas(config.project)
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

                book = price_book(config, open_bucket(config.bucket),
                                  [config.language(n).machine_type for n in config.languages], compute=compute)
            data["cost_estimate"] = estimate(config.language(name), decision.region, book).as_dict()
            data["cost_estimate"]["prices_warning"] = book.warning
            decisions.append(data)
        else:
            print_decision(decision)
    if as_json:
        typer.echo(json.dumps(decisions, indent=2))


def print_decision(decision) -> None:
    from rich.table import Table

    from stacks.cli.run_console import print_table
    from stacks.targets.gcp.quota import HEADERS, row_cells

    table = Table(*HEADERS, title=f"train-{decision.lang}: {decision.needed} GPU(s)", title_justify="left")
    for row in decision.rows:
        cells = list(row_cells(row))
        cells[-1] = f"[green]{cells[-1]}[/]" if row.ok else f"[red]{cells[-1]}[/]"
        table.add_row(*cells)
    print_table(table)
    console.print(f"train-{decision.lang} → {decision.zone} ({decision.metric})")
