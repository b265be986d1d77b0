"""Render the scaling and reproduce reports' HTML in a real headless browser and save
screenshots (issue 19: reports checked as a reader sees them). Needs Chromium (Debian:
apt-get install chromium); without it, says so and exits 1.

Usage: python bench/report_screenshots.py [--model llama-1.8b] [--hardware vista-gh200]
       [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reports.reproduce import write_report as reproduce_report  # noqa: E402
from reports.scaling import write_report  # noqa: E402

# a fresh profile, no network chatter (this machine reaches no other host)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")


def screenshot(html: Path, png: Path, width: int = 1200, height: int = 3600) -> Path:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("no Chromium found: apt-get install chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}",
                        f"--window-size={width},{height}", f"--screenshot={png}",
                        html.resolve().as_uri()], check=True, capture_output=True, timeout=120)
    if not png.exists() or png.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"the browser wrote no PNG to {png}")
    return png


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-1.8b")
    parser.add_argument("--hardware", default="vista-gh200")
    parser.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        files = write_report(args.model, args.hardware, Path(tmp), quick=True)
        png = screenshot(files["html"], out / f"scaling-{args.model}-{args.hardware}.png")
        print(f"{png} ({png.stat().st_size:,} bytes), report built and rendered in "
              f"{time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        files = reproduce_report(Path(tmp) / "reproduce")
        png = screenshot(files["html"], out / "reproduce.png", height=2600)
        print(f"{png} ({png.stat().st_size:,} bytes), report built and rendered in "
              f"{time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
