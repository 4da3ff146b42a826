"""The trainer exit statuses a language may name in `restart_on_exit_codes` (trainer.launchers.restarts)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

# What these statuses already say; a death by signal N is 128 + N.
SAID = {0: "success", 2: "bad input, never restarted", 124: "max_run_hours", 143: "an interruption: max_restarts"}


def restartable(codes: list[int]) -> list[int]:
    """Refuses exit statuses that say something else, or that no process exits with."""
    wrong = [f"{c} ({SAID[c]})" if c in SAID else str(c) for c in codes if c in SAID or not 0 < c < 256]
    if wrong:
        raise ValueError(
            f"restart_on_exit_codes: {', '.join(wrong)} cannot be restarted as an error; name exit statuses "
            "1-255 other than 2, 124 and 143 (a death by signal N is 128+N, e.g. 137 for SIGKILL)"
        )
    return codes


RestartableExitCodes = Annotated[list[int], AfterValidator(restartable)]
