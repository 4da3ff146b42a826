"""docs/cli.md from the CLI itself: `python docs/cli_reference.py > docs/cli.md` (tests/unit/test_docs.py keeps
the two equal, so the reference cannot rot)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HEADER = """# trainctl: every command

Generated from the CLI (`python docs/cli_reference.py > docs/cli.md`; a test fails when they differ).
`--debug` anywhere on the line (or `TRAINCTL_DEBUG=1`) shows tracebacks and Terraform's output.
`trainctl --install-completion` installs tab completion for your shell (bash, zsh, fish, PowerShell);
`trainctl --show-completion` prints the script instead.

| exit status | meaning |
|---|---|
| 0 | success |
| 1 | the run failed (its status says why) |
| 2 | bad usage, config or input; the language's stack busy with another command |
| 3 | infrastructure: Terraform, quota, a cloud API, VM creation |
| 4 | `trainctl plan` only: the plan has changes |
| 130 | interrupted (Ctrl-C) |
"""


FOOTER = """## Output for logs and scripts

**Logs and scripts.** Without a terminal (`> run.log`, `| tee`, CI) nothing is wrapped or
coloured: every path and URI sits whole on one line, and tables print as a title line, a
tab-separated header and rows, and a caption line. Runs of languages that are not in the
env's config are listed too (`fr (not in env dev)`).

**JSON output** (stable keys; new keys may be added, none renamed):
- `runs --json`: a list, one object per run: `run_id, lang, configured, state` (PENDING, RUNNING,
  SUCCEEDED, FAILED, STARTING = applied without a status yet, UNKNOWN = no status and too old to be
  starting, UNREADABLE = a damaged run file, its path in `error`), `stage, started_at, finished_at, duration_s,
  macro_f1, tfidf_macro_f1` (the TF-IDF
  baseline on the same rows) `, scored_rows` (valid or test) `, resumed, restarts` (the resumes that were
  restarts after a failure not the code's: metadata/restarts.json) `, placements` (zones applied, in
  order) `, ran_in` (those where a VM trained) `, preemptions, capacity_wait_s, interrupted_s` (preemption to
  training again, summed) `, error, url,
  machine_type, gpu_type, gpu_count, spot, nodes, vm_boots, billed_vm_s, vm_per_hour, est_cost`
  (USD; 0 for local runs, null when unknown) `, cost_note, prices_source, promoted` (the model
  `predict` uses for its language) `, kept` (`classifier` or `blend`; null for runs without metrics).
- `runs compare A B --json`: `a, b, rows` (the fingerprint of the rows both scored) `, n_rows, scored_rows,
  per_label{label: {a, b, support}}, macro_f1{a, b}, tfidf_macro_f1{a, b}`.
- `runs show RUN --json`: `{run: <as above>, metrics: {labels, macro_f1, micro_f1, accuracy, n_train,
  n_valid, n_test, rows, duration_s} | null, baselines: {baseline_tfidf, baseline: {macro_f1, micro_f1, accuracy}} |
  null,
  kept: {kept, blend_weight, classifier: {…}, blend: {…}} | null, metadata: <metadata/trainctl.json> | null,
  artifacts: {name: uri}}`.
- `status LANG --json`: `run_id, lang, env, state, stage, epoch, epochs, started_at, updated_at,
  finished_at, error, resumed, job, progress, url` (`job`: `classifier`, or `pretrain-lm` for `lm pretrain`;
  `progress`: inside a long epoch `{epoch, batch, batches, tokens_per_s, eta_s, stage_eta_s}`, else null).
- `logs LANG --json`: JSON lines, one `{run_id, lang, line}` per log line (also with `--follow`).
- `quota --json`: a list, one object per language: `lang, zone, region, metric, needed, rows[{scope,
  zone, metric, limit, usage, needed, ok, note}], cost_estimate{region, spot, nodes, vm_per_hour,
  per_hour, max_run_hours, at_max_run_hours, prices_source, note, prices_warning}`.
- `lm list LANG --json`: a list, oldest first, one object per base LM: its meta.json (`id, source, tokenizer,
  arch, vocab_size, tokens, corpus_hash, perplexity, run_id, created_at, origin`) plus `current, small`.
- `config show --json`: the effective config.
- `train`, `runs export`, `data push`, `doctor`, `promote`, `predict` with `--json`: their keys are in their
  `--json` rows above. stdout holds the JSON document alone; progress, notes and errors go to stderr.
"""


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\\\|")


def _commands(cmd, path: list[str]):
    subs = getattr(cmd, "commands", None)  # typer's own click: a group has `commands`
    if not subs or (cmd.callback is not None and cmd.params and path != ["trainctl"]):
        yield path, cmd
    for name in sorted(subs or {}):
        yield from _commands(subs[name], [*path, name])


def render() -> str:
    import typer

    from stacks.cli.main import app

    out = [HEADER]
    for path, cmd in _commands(typer.main.get_command(app), ["trainctl"]):
        if len(path) == 1:
            continue
        out.append(f"## `{' '.join(path)}`\n")
        out.append(" ".join((cmd.help or "").strip().split("\n\n")[0].split()) + "\n")
        rows = [p for p in cmd.params if not getattr(p, "hidden", False)]
        if rows:
            out.append("| argument / option | what |\n|---|---|")
            for p in rows:
                name = " / ".join(p.opts) if p.param_type_name == "option" else p.name.upper()
                out.append(f"| `{name}` | {_cell(getattr(p, 'help', None))} |")
            out.append("")
    return "\n".join(out).rstrip() + "\n\n" + FOOTER


if __name__ == "__main__":
    sys.stdout.write(render())
