"""Golden outputs: a fixed list of commands whose outputs were recorded before the layout
change of issue 43 ("behaviour unchanged") and must stay the same after any refactoring.

Each case runs `python -m cli ...` in a subprocess, as a user would, and compares what it
printed (and, for commands that write a folder, its CSV and Markdown files) with the file
recorded under tests/golden/. The checkout's path and the git revision are the only things
normalised away. Record again (only after a deliberate change of behaviour, said in the
commit) with `python -m tests.test_golden NAME...` (or `--all`).
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

from reports.tables import comment_lines, unwrapped

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


def run_case(name: str, tmp: Path, extra_env: dict[str, str] | None = None) -> dict:
    """What case `name` printed (stdout, stderr, exit code) and the text files it wrote;
    `extra_env` adds variables to the subprocess's environment."""
    out = tmp / name
    args = [a.replace("{out}", str(out)) for a in CASES[name]]
    writes = any("{out}" in a for a in CASES[name])
    if any(a.startswith("{out}/") for a in CASES[name]):  # a file in a folder of its own
        out.mkdir(parents=True)
    env = {**os.environ, "COLUMNS": "200", "SCAPE_PROFILE_DIR": str(tmp / "no-user-profiles")}
    env.pop("CI", None)
    env.update(extra_env or {})
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


# Floats printed in full may differ in their last digits when a sum is taken in another
# order (another CPU, BLAS or numpy build; issue 58 saw 1.8e-12 on an AMD host, where
# error_pct = pred / meas - 1 amplifies the last digit of a sum). 1e-9 relative is a
# thousand times that and still a million times finer than any behaviour change a test
# should notice. Numbers printed rounded compare as printed.
REL_TOL = 1e-9


def _same_text(a: str, b: str) -> bool:
    """Equal, or equal but for floats that differ by at most REL_TOL relative, once wrapped
    '#' header lines are joined back: a header wraps at 100 columns before the checkout's path
    is normalised to <root>, so a checkout at a path of another length (CI's) wraps it at other
    words."""
    a, b = unwrapped(a), unwrapped(b)
    if a == b:
        return True
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
        return False
    return all(math.isclose(float(x), float(y), rel_tol=REL_TOL, abs_tol=1e-12)
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


# Cases whose full-precision floats come from long sums (a plan's costs, a pipelined step's
# parts, a validation's errors): run again with every `sum` and 1-D `numpy.sum` reversed
# (tests/sum_order/sitecustomize.py) they must still match, so a golden file cannot again
# hold digits that only one machine's summation order gives.
SUM_ORDER_CASES = ("plan-7b", "simulate-70b-tp-pp", "simulate-7b-cp-fp8", "validate-external")


def test_golden_output_holds_under_reversed_summation(tmp_path):
    site = str(Path(__file__).resolve().parent / "sum_order")
    moved_digits = 0
    for name in SUM_ORDER_CASES:
        recorded = json.loads((GOLDEN / f"{name}.json").read_text())
        now = run_case(name, tmp_path, {"PYTHONPATH": site})
        assert now["rc"] == recorded["rc"], now["stderr"]
        for key in ("stdout", "stderr"):
            assert _same_text(now[key], recorded[key]), (name, key, now[key][:2000])
            moved_digits += now[key] != recorded[key]
    # the reversal must reach the code: some full-precision digits move (else this test
    # checks nothing)
    assert moved_digits > 0


def test_same_text_tolerance():
    assert _same_text("t 5.800517364518101 s", "t 5.8005173645180985 s")  # a reordered sum
    assert _same_text("e 0.09614219790934353", "e 0.0961421979091659")  # the AMD host's case
    assert not _same_text("t 5.800517364518101 s", "t 5.800527364518101 s")  # 2e-6: a change
    assert not _same_text("t 1.23 s", "t 1.24 s")
    assert not _same_text("t 1.23 s", "n 1.23 s")


def test_same_text_ignores_where_the_checkout_path_wrapped_a_header():
    # the failure CI saw (checkout at /check/work/main, recorded at /work/main): the same
    # header, wrapped with each path and then normalised, breaks at other words
    words = "options: model gpt-345m, hardware vista-gh200, hardware_profile {root}/profiles/" \
            "hardware/vista-gh200.toml, gpus 32, baseline dense-adams, micro_batch 1, seq_len 1024"
    texts = ["\n".join(comment_lines(words.format(root=root))).replace(root, "<root>")
             for root in ("/work/main", "/check/work/main/with/a/longer/path")]
    assert texts[0] != texts[1]
    assert _same_text(texts[0], texts[1])
    assert not _same_text(texts[0], texts[1].replace("gpus 32", "gpus 64"))


def record(names: list[str]) -> None:
    """Record the named cases again (all of them with --all)."""
    import tempfile

    unknown = sorted(set(names) - set(CASES) - {"--all"})
    if not names or unknown:
        sys.exit(f"usage: python -m tests.test_golden NAME... | --all (unknown: {unknown}); "
                 f"cases: {', '.join(CASES)}")
    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES if "--all" in names else names:
            result = run_case(name, Path(tmp))
            (GOLDEN / f"{name}.json").write_text(
                json.dumps(result, indent=1, sort_keys=True) + "\n")
            print(f"{name}: rc {result['rc']}, {len(result['stdout'])} chars, "
                  f"{len(result['files'])} files")


if __name__ == "__main__":
    record(sys.argv[1:])
