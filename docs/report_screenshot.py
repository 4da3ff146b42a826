"""Render a run's report.html in headless Chromium to a PNG, as a person would see it.

    .venv/bin/python docs/report_screenshot.py REPORT.html docs/report-screenshot.png [--height 3400]

Needs the Debian `chromium` package (apt-get install chromium). The page is self-contained, so
Chromium loads nothing but the file.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, default=3400)
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("error: no chromium on PATH\n  → apt-get install chromium", file=sys.stderr)
        return 2
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={args.width},{args.height}",
            f"--screenshot={args.png.resolve()}",
            args.report.resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    print(f"{args.png}: {args.png.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
