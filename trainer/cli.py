"""`python -m trainer`: train one language's ULMFiT classifier from a bucket.

Argument parsing only; the work is in trainer.jobs.harness (imported after parsing,
so `--help` is instant and the supervisor can reuse the parser).
"""

from __future__ import annotations

import argparse
import sys

from trainer.params import JOBS, PARAMS, Job


def _flag(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _checked(name: str):
    """The argparse type of a parameter: its Python type, then its bounds (as the config model has them)."""
    param = PARAMS[name]
    convert = _flag if isinstance(param.default, bool) else type(param.default)

    def parse(text: str):
        value = convert(text)
        if not isinstance(value, bool) and (problem := param.problem(value)):
            raise argparse.ArgumentTypeError(f"{text} {problem}")
        return value

    parse.__name__ = convert.__name__  # argparse names the type in its "invalid ... value" message
    return parse


def _run_id(text: str) -> str:
    """--run-id: checked as every trainctl command checks one (trainer.runfiles.run_ids.check_run_id)."""
    from trainer.runfiles.run_ids import run_id_problem

    if problem := run_id_problem(text):
        raise argparse.ArgumentTypeError(problem)
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trainer",
        description="Train a ULMFiT text classifier (base LM -> LM fine-tuning -> classifier) "
        "from <bucket>/<lang>/data/ and upload model.pth, metrics.json and predictions to "
        "<bucket>/<lang>/runs/<run-id>/.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--lang", required=True, help="language key, the bucket prefix (e.g. fr)")
    p.add_argument("--lang-code", default=None, help="ISO 639-1 code for the tokenizer (default: --lang)")
    p.add_argument("--bucket", required=True, help="file:///path or gs://bucket[/prefix]")
    p.add_argument(
        "--run-id", required=True, type=_run_id, help="run folder name; an unfinished run with this id is resumed"
    )
    p.add_argument("--env", default="local", help="environment name recorded in status.json")
    p.add_argument("--text-col", default="text", help="text column of the labelled data")
    p.add_argument(
        "--label-col", default="labels", help="label column: a label, labels separated by --label-sep, or a list"
    )
    p.add_argument("--label-sep", default=";", help="separator of several labels (multi-label)")
    p.add_argument(
        "--label-cols",
        action="append",
        default=[],
        metavar="COL",
        help="a 0/1 column per label instead of --label-col (repeat for each label)",
    )
    p.add_argument(
        "--task",
        default="auto",
        choices=("auto", "single_label", "multi_label"),
        help="auto: multi-label when a row has several labels",
    )
    p.add_argument(
        "--job",
        default=Job.CLASSIFIER.value,
        choices=JOBS,
        help="classifier: the ULMFiT run; pretrain-lm: pretrain a base LM on <lang>/data/corpus/ "
        "and publish it to <lang>/lm/<id>/ (CURRENT)",
    )
    p.add_argument("--work-dir", default=None, help="local scratch folder (default: a temp dir)")
    for name, param in PARAMS.items():
        p.add_argument(
            f"--{name.replace('_', '-')}",
            type=_checked(name),
            default=param.default,
            choices=param.choices,
            help=param.help,
        )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from trainer.jobs.harness import run_job

    return run_job(args)


if __name__ == "__main__":
    sys.exit(main())
