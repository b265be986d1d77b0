"""Golden outputs: a fixed list of commands whose outputs were recorded before the layout
change of issue 43 ("behaviour unchanged") and must stay the same after any refactoring.

Each case runs `python -m cli ...` in a subprocess, as a user would, and compares what it
printed (and, for commands that write a folder, its CSV and Markdown files) with the file
recorded under tests/golden/. The checkout's path and the git revision are the only things
normalised away. Record again (only after a deliberate change of behaviour, said in the
commit) with `python tests/test_golden.py`.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"

# name -> arguments of `scape`; "{out}" is a fresh folder for commands that write one (its
# CSV, Markdown and JSON files are compared too)
CASES: dict[str, list[str]] = {
    "simulate-scape-gh200": ["simulate", "-m", "llama-1.8b", "-H", "vista-gh200", "--gpus", "32",
                             "--scheme", "scape:0.99", "--micro-batch", "8",
                             "--global-batch", "1024", "--format", "json"],
    "simulate-70b-tp-pp": ["simulate", "-m", "llama-70b", "-H", "dgx-h100", "--gpus", "256",
                           "--tp", "8", "--pp", "4", "--pp-schedule", "interleaved",
                           "--recompute", "selective", "--tp-comm-overlap",
                           "--global-batch", "512", "--format", "json"],
    "simulate-7b-cp-fp8": ["simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", "32",
                           "--tp", "2", "--cp", "2", "--fp8", "--global-batch", "64",
                           "--format", "json"],
    "simulate-warmup": ["simulate", "-m", "gpt-345m", "-H", "vista-gh200", "--gpus", "32",
                        "--scheme", "scape-partitioned:0.99", "--density-warmup", "100",
                        "--density-dense-steps", "10", "--grad-dtype", "fp32",
                        "--format", "json"],
    "simulate-topk-table": ["simulate", "-m", "llama-500m", "-H", "dgx-a100", "--gpus", "64",
                            "--scheme", "topk:0.99", "--algo", "ring"],
    "simulate-dense-buckets": ["simulate", "-m", "llama-500m", "-H", "dgx-a100", "--gpus", "64",
                               "--scheme", "dense-adamw", "--no-overlap-grad",
                               "--bucket-mb", "50", "--trace", "{out}/trace.json"],
    "refused-topk-overlap": ["simulate", "-m", "llama-500m", "-H", "dgx-a100", "--gpus", "64",
                             "--scheme", "topk:0.99", "--no-overlap-grad"],
    "simulate-quantized-mfu": ["simulate", "-m", "llama-7b", "-H", "aws-p5", "--gpus", "128",
                               "--scheme", "quantized", "--bits", "4", "--mfu", "0.4",
                               "--pp", "2", "--recompute", "full", "--format", "csv"],
    "compare-gh200": ["compare", "-m", "llama-1.8b", "-H", "vista-gh200", "--gpus", "32",
                      "--micro-batch", "8", "--global-batch", "1024", "--format", "json"],
    "compare-socket": ["compare", "-m", "llama-1.8b", "-H", "vista-gh200-socket", "--gpus", "32",
                       "--micro-batch", "8", "--global-batch", "1024", "--grad-dtype", "fp32",
                       "--no-overlap-grad", "--bucket-mb", "100000",
                       "--schemes", "dense-adams,scape:0.99,scape-partitioned:0.99",
                       "--format", "json"],
    "compare-table": ["compare", "-m", "gpt-345m", "-H", "vista-gh200", "--gpus", "32",
                      "--density-warmup", "1000"],
    "plan-7b": ["plan", "-m", "llama-7b", "--tokens", "2e11", "-H", "dgx-h100,dgx-a100",
                "--max-gpus", "64", "--workers", "1", "--top", "15", "--format", "json"],
    "plan-7b-table": ["plan", "-m", "llama-7b", "--tokens", "2e11", "-H", "dgx-h100",
                      "--max-gpus", "128", "--workers", "1", "--deadline-hours", "500",
                      "--density-warmup-frac", "0.1", "--tp-comm-overlap"],
    "collective-auto": ["collective", "-H", "dgx-h100", "--gpus", "16", "--op", "all_reduce",
                        "--sizes", "1KiB..1GiB", "--format", "csv"],
    "collective-ops": ["collective", "-H", "aws-p5", "--gpus", "64", "--op", "all_gather",
                       "--algo", "ring", "--sizes", "64KiB..64MiB"],
    "collective-published": ["collective", "-H", "dgx-h100", "--gpus", "8", "--published",
                             "A1-nvls", "--format", "json"],
    "reproduce": ["reproduce", "--out", "{out}"],
    "scaling-quick": ["report", "scaling", "-m", "llama-1.8b", "-H", "vista-gh200",
                      "--quick", "--out", "{out}"],
    "validate-external": ["validate", "--external", "scape-sc26", "--format", "json"],
    "profiles-show": ["profiles", "show", "dgx-h100", "--format", "json"],
    "profiles-list": ["profiles", "list", "--format", "csv"],
    "refused-sp-tp1": ["simulate", "-m", "llama-7b", "-H", "dgx-h100", "--gpus", "8",
                       "--sequence-parallel"],
    "refused-plan-top": ["plan", "-m", "llama-7b", "--tokens", "1e9", "-H", "dgx-h100",
                         "--top", "0"],
}

# Files moved since the recording, by the layout change of issue 43 (data out of code
# folders, the plan contract a package): a recorded output that named the old place names
# the new one now.
MOVED = {
    "profiles/external/research/": "docs/research/",
    "reports/validation-gpu/": "results/gpu-sessions/",
    "reports/validation/": "results/validation/",
    "reports/convergence": "results/convergence/convergence",
    "reports/screenshots/": "docs/screenshots/",
    "scape/plan_authors.py": "scape/plan/scape_authors.py",
}

_REV = re.compile(r"\b(git( revision)?) [0-9a-f]{7,40}(\+dirty)?")


def _normalise(text: str, out: Path | None) -> str:
    text = text.replace(str(ROOT), "<root>")
    if out is not None:
        text = text.replace(str(out), "<out>")
    return _REV.sub(r"\1 <rev>", text)


def run_case(name: str, tmp: Path) -> dict:
    """What case `name` printed (stdout, stderr, exit code) and the text files it wrote."""
    out = tmp / name
    args = [a.replace("{out}", str(out)) for a in CASES[name]]
    writes = any("{out}" in a for a in CASES[name])
    if any(a.startswith("{out}/") for a in CASES[name]):  # a file in a folder of its own
        out.mkdir(parents=True)
    env = {**os.environ, "COLUMNS": "200", "SCAPE_PROFILE_DIR": str(tmp / "no-user-profiles")}
    env.pop("CI", None)
    proc = subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    files = {}
    if writes:
        for f in sorted(out.iterdir()):
            if f.suffix in (".csv", ".md", ".json"):
                files[f.name] = _normalise(f.read_text(), out)
    return {"args": CASES[name], "rc": proc.returncode,
            "stdout": _normalise(proc.stdout, out), "stderr": _normalise(proc.stderr, out),
            "files": files}


_NUMBER = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")


def _same_text(a: str, b: str) -> bool:
    """Equal, or equal but for floats printed in full that differ in the last digits (a sum
    taken in another order): 1e-12 relative."""
    if a == b:
        return True
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
        return False
    return all(math.isclose(float(x), float(y), rel_tol=1e-12, abs_tol=1e-15)
               for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b), strict=True))


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_output(name, tmp_path):
    text = (GOLDEN / f"{name}.json").read_text()
    for old, new in MOVED.items():
        text = text.replace(old, new)
    recorded = json.loads(text)
    now = run_case(name, tmp_path)
    assert now["rc"] == recorded["rc"], now["stderr"]
    assert sorted(now["files"]) == sorted(recorded["files"])
    for key in ("stdout", "stderr"):
        assert _same_text(now[key], recorded[key]), (key, now[key][:2000])
    for fname, text in recorded["files"].items():
        assert _same_text(now["files"][fname], text), fname


def record() -> None:
    import tempfile

    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            result = run_case(name, Path(tmp))
            (GOLDEN / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
            print(f"{name}: rc {result['rc']}, {len(result['stdout'])} chars, "
                  f"{len(result['files'])} files")


if __name__ == "__main__":
    record()
