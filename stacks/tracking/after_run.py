"""The mirror along the commands that make or promote runs: each training run as it ends (RunEndMirror, the
lifecycle's on_ended), a promoted run with its alias (mirror_if_tracked). The command says what became of them."""

from __future__ import annotations

from stacks import tracking
from stacks.tracking import MirrorResult


def mirror_if_tracked(config, bucket, runs: list[tuple[str, str]], *, champions: list[str] = ()) -> MirrorResult | None:
    """`mirror` when the env tracks runs and there are runs to mirror, else None."""
    if not runs or tracking.mlflow_settings(config) is None:
        return None
    return tracking.mirror(config, bucket, runs, champions=champions)


class RunEndMirror:
    """A training command's runs in the env's tracker: `run_ended` is the command's on_ended (stacks.runs.
    orchestrate), which mirrors each run from its worker thread as soon as it has ended (moving the alias when
    it was promoted); `result` is what became of them, in the order of the command's languages."""

    def __init__(self, config, langs: list[str]):
        self.config, self.langs = config, langs
        self.mirrored: dict[str, MirrorResult] = {}

    def run_ended(self, result) -> None:
        champions = [result.lang] if (result.promotion or "").startswith("promoted") else []
        done = mirror_if_tracked(
            self.config, result.outcome.bucket, [(result.lang, result.outcome.run_id)], champions=champions
        )
        if done is not None:
            self.mirrored[result.lang] = done

    def result(self) -> MirrorResult | None:
        """The runs mirrored so far as one result; None when none was."""
        parts = [self.mirrored[lang] for lang in self.langs if lang in self.mirrored]
        return tracking.merged(parts) if parts else None
