"""The suite's own helpers behave the same however the suite was started."""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.support.trainctl import start_trainctl

SHOW_SIGINT = (
    "import signal; handler = signal.getsignal(signal.SIGINT); "
    "print('ignored' if handler == signal.SIG_IGN else handler.__name__)"
)


def test_start_trainctl_gives_the_child_sigint_at_its_default_even_when_this_process_ignores_it(tmp_path):
    # as a background job of a non-interactive shell starts the suite (CI runners, nohup)
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        plain = subprocess.run([sys.executable, "-c", SHOW_SIGINT], capture_output=True, text=True, timeout=60)
        helped = start_trainctl(tmp_path, "-c", SHOW_SIGINT, program=sys.executable)
        out, _ = helped.communicate(timeout=60)
    finally:
        signal.signal(signal.SIGINT, before)
    assert plain.stdout.strip() == "ignored"  # what a test pressing Ctrl-C would face without the helper
    assert out.strip() == "default_int_handler", out
