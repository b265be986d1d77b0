"""Render the reports' HTML in a real headless browser, save screenshots, and check that no
table runs wider than the page (issues 19 and 42: reports checked as a reader sees them).

Covers the scaling report of each --models on --hardware, the reproduce report, and the
external validation's figure (`scape validate --external scape-sc26` writes no HTML page: its
figure is copied beside the screenshots). Needs Chromium: where it is absent, the script
installs it from the system's packages when it runs as root with apt-get, and otherwise says
how to install it and skips (exit 0).

Exit status: 0 when every page rendered and no table overflows (or Chromium is absent and
the run was skipped, with a message); 1 when a table is wider than the page (each one named);
2 when the browser failed to render a page.

Usage: python bench/report_screenshots.py [--models llama-7b,llama-70b] [--hardware dgx-h100]
       [--full] [--out reports/screenshots]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reports.external import validate_external  # noqa: E402
from reports.external import write_outputs as external_outputs  # noqa: E402
from reports.reproduce import write_report as reproduce_report  # noqa: E402
from reports.scaling import write_report  # noqa: E402

WIDTH = 1200  # px: the report template's column (body max-width)
INSTALL = "apt-get install chromium (Debian/Ubuntu; as root, or with sudo)"
# a fresh profile, no network chatter (this machine reaches no other host)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")
# Injected before </body>: each table's width against the page's, written into the DOM for
# --dump-dom to carry out (the page column is the narrower of the window and the body).
PROBE = """<script>
(function () {
  const page = Math.min(document.documentElement.clientWidth, document.body.clientWidth);
  const found = [];
  document.querySelectorAll("table").forEach(function (t, i) {
    let h = t.previousElementSibling || t.parentElement;
    while (h && !/^H[1-3]$/.test(h.tagName)) { h = h.previousElementSibling || h.parentElement; }
    found.push({index: i, heading: h ? h.textContent.trim() : "", width: t.scrollWidth});
  });
  const pre = document.createElement("pre");
  pre.id = "overflow";
  pre.textContent = JSON.stringify({page: page, tables: found});
  document.body.appendChild(pre);
})();
</script>"""


class BrowserFailed(RuntimeError):
    """Chromium ran but left no screenshot or no probe result."""


def find_browser() -> str | None:
    """Chromium's path; installed from the system's packages when absent and this runs as
    root with apt-get (a container), else None."""
    names = ("chromium", "chromium-browser", "google-chrome")
    found = next((p for p in map(shutil.which, names) if p), None)
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    print("no Chromium found: apt-get install -y chromium ...", flush=True)
    for cmd in (["apt-get", "install", "-y", "chromium"],
                ["sh", "-c", "apt-get update && apt-get install -y chromium"]):
        if subprocess.run(cmd, capture_output=True, timeout=900).returncode == 0:
            break
    return next((p for p in map(shutil.which, names) if p), None)


def _run(browser: str, args: list[str], profile: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)


def screenshot(browser: str, html: Path, png: Path, height: int = 3600) -> Path:
    with tempfile.TemporaryDirectory() as profile:
        _run(browser, [f"--window-size={WIDTH},{height}", f"--screenshot={png}",
                       html.resolve().as_uri()], profile)
    if not png.exists() or png.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        raise BrowserFailed(f"the browser wrote no PNG to {png}")
    return png


def overflowing_tables(browser: str, html: Path) -> list[dict]:
    """The tables of `html` wider than the page at WIDTH px, each with its index, the
    heading above it and its width, from a probed copy rendered with --dump-dom."""
    text = html.read_text(encoding="utf-8")
    probed = html.with_name(f".probe-{html.name}")
    probed.write_text(text.replace("</body>", PROBE + "</body>", 1), encoding="utf-8")
    try:
        with tempfile.TemporaryDirectory() as profile:
            done = _run(browser, [f"--window-size={WIDTH},2000", "--dump-dom",
                                  probed.resolve().as_uri()], profile)
    finally:
        probed.unlink(missing_ok=True)
    match = re.search(r'<pre id="overflow">(.*?)</pre>', done.stdout, re.S)
    if match is None:
        raise BrowserFailed(f"no probe result for {html.name}: {done.stderr.strip()[-300:]}")
    result = json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    return [t | {"page": result["page"]} for t in result["tables"]
            if t["width"] > result["page"]]


def check_page(browser: str, html: Path, png: Path, height: int) -> list[str]:
    """Screenshot `html` to `png`; the lines naming each table that overflows."""
    t0 = time.perf_counter()
    screenshot(browser, html, png, height)
    wide = overflowing_tables(browser, html)
    print(f"{png} ({png.stat().st_size:,} bytes), rendered in {time.perf_counter() - t0:.1f} s;"
          f" {len(wide)} table(s) wider than the page")
    return [f"{html.name}: table {t['index']} under '{t['heading']}' is {t['width']} px wide, "
            f"the page {t['page']} px" for t in wide]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama-7b,llama-70b",
                        help="comma-separated models of the scaling reports")
    parser.add_argument("--hardware", default="dgx-h100")
    parser.add_argument("--full", action="store_true",
                        help="the full scaling sweep (default: --quick's, as the demos)")
    parser.add_argument("--out", default=str(REPO / "reports" / "screenshots"))
    args = parser.parse_args()
    browser = find_browser()
    if browser is None:
        print(f"SKIPPED: no Chromium here to render the reports; install it: {INSTALL}")
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for model in filter(None, (m.strip() for m in args.models.split(","))):
                files = write_report(model, args.hardware, Path(tmp) / model,
                                     quick=not args.full)
                problems += check_page(browser, files["html"],
                                       out / f"scaling-{model}-{args.hardware}.png", 3600)
            files = reproduce_report(Path(tmp) / "reproduce")
            problems += check_page(browser, files["html"], out / "reproduce.png", 2600)
            table, fit, meta = validate_external("scape-sc26")
            files = external_outputs(table, fit, meta, Path(tmp) / "external")
            png = shutil.copyfile(files["png"], out / "validate-external-scape-sc26.png")
            print(f"{png} (validate --external writes no HTML page: its figure, copied)")
    except BrowserFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in problems:
        print(f"OVERFLOW {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
