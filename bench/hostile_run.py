"""A hostile-input run over every command, as a user would type them (issue 45's acceptance):
each case is a fresh `python -m cli ...` process with a timeout. A case passes when it exits 0
having printed something, or exits 2 with one `scape: error:` line; it fails on a traceback,
another exit code, a hang (the timeout), an exit 0 that printed nothing, or an exit 0 whose
output carries nan or inf where a number belongs (silently wrong).

The cases: every command crossed with hostile values of its options (zero, negative, huge,
nan, inf, fractional where whole, text, empty, unknown names, paths that are files or do not
exist, unicode), 300 and more. Usage: python bench/hostile_run.py [--jobs 2] [--csv OUT]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120
BAD_NUMBERS = ["0", "-1", "1e400", "nan", "inf", "-inf", "2.5", "abc", "", "99999999999"]
BAD_NAMES = ["", "nope", "../x", "é", "a" * 300]


def cases(tmp: Path) -> list[list[str]]:
    """The argument lists of the run (without `python -m cli`)."""
    afile = tmp / "a-file"
    afile.write_text("x")
    sim = ["simulate", "--model", "gpt-345m", "--hardware", "dgx-h100", "--gpus", "16"]
    out: list[list[str]] = []
    for flag in ("--gpus", "--micro-batch", "--seq-len", "--tp", "--pp", "--cp",
                 "--global-batch", "--grad-accum", "--sparsity", "--bits", "--mfu",
                 "--bucket-mb", "--virtual-stages"):
        out += [[*sim, flag, v] for v in BAD_NUMBERS]
    for flag in ("--model", "--hardware", "--scheme", "--algo", "--recompute", "--loss",
                 "--stack", "--attention", "--pp-schedule", "--optimizer-dtype"):
        out += [[*sim, flag, v] for v in BAD_NAMES]
    # FP8's scope and the unfused attention on models with and without experts or dropout
    moe = ["simulate", "--model", "mixtral-8x7b", "--hardware", "dgx-h100", "--gpus", "64",
           "--ep", "8"]
    out += [[*base, *extra, "--fp8-scope", v] for base in (sim, moe)
            for extra in ([], ["--fp8"]) for v in [*BAD_NAMES, "all", "experts"]]
    out += [[*moe, "--attention", "unfused"], [*sim, "--attention", "unfused"]]
    # the shared-expert overlap: no shared expert, a dense model, allgather, and one that runs
    dsv3 = ["simulate", "--model", "deepseek-v3", "--hardware", "dgx-h100", "--gpus", "1024",
            "--tp", "2", "--pp", "16", "--ep", "64", "--etp", "1"]
    out += [[*moe, "--moe-shared-overlap"], [*sim, "--moe-shared-overlap"],
            [*dsv3, "--moe-shared-overlap"], [*dsv3, "--moe-shared-overlap", "--moe-overlap"],
            [*dsv3, "--moe-shared-overlap", "--moe-dispatcher", "allgather"]]
    comp = ["compare", "--model", "gpt-345m", "--hardware", "dgx-h100", "--gpus", "16"]
    out += [[*comp, "--schemes", v] for v in ("", "dense-adams,,topk", "x:y", "scape:2")]
    out += [[*comp, "--gpus", v] for v in BAD_NUMBERS]
    plan = ["plan", "--model", "llama-7b", "--tokens", "1e11", "--hardware", "dgx-h100"]
    for flag in ("--max-gpus", "--tokens", "--deadline-hours", "--budget-usd",
                 "--price-per-gpu-hour", "--global-batch", "--top", "--workers"):
        out += [[*plan, flag, v] for v in BAD_NUMBERS]
    out += [[*plan, "--rank", v] for v in BAD_NAMES]
    # a run's options (cli/run_options.py), on plan and on simulate --tokens
    for flag in ("--failures-per-gpu-day", "--restart-min", "--checkpoint-gbps",
                 "--storage-gbps", "--checkpoint-every-min", "--pue"):
        out += [[*plan, flag, v] for v in BAD_NUMBERS]
        out += [[*sim, "--tokens", "1e10", flag, v] for v in BAD_NUMBERS]
    out += [[*sim, "--tokens", v] for v in BAD_NUMBERS]
    out += [[*sim, "--tokens", "1e10", "--grid", v] for v in BAD_NAMES]
    out += [[*sim, "--pue", "1.2"], [*sim, "--tokens", "1e10", "--async-checkpoint"]]
    coll = ["collective", "--hardware", "dgx-h100", "--op", "all_reduce", "--gpus", "16"]
    for flag in ("--gpus", "--sizes", "--gpus-per-process"):
        out += [[*coll, flag, v] for v in BAD_NUMBERS]
    out += [[*coll, flag, v] for flag, v in itertools.product(
        ("--op", "--algo", "--proto"), ("", "allreduce", "x", "tree,ring"))]
    out += [["profiles", "show", v] for v in BAD_NAMES]
    out += [["profiles", "check", str(afile)], ["profiles", "check", str(tmp / "none.toml")],
            ["profiles", "list", "--format", "x"]]
    out += [["validate", "--external", v] for v in BAD_NAMES]
    out += [["validate", "--external", "scape-sc26", "--profile", v] for v in BAD_NAMES]
    out += [["reproduce", "--out", str(afile)], ["reproduce", "-H", "nope"],
            ["reproduce", "--format", "x"]]
    out += [["report", "scaling", "-m", v, "-H", "dgx-h100", "--out", str(tmp / "r")]
            for v in BAD_NAMES]
    out += [["calibrate", "refit", "--profile", v] for v in BAD_NAMES]
    logs = REPO / "tests" / "fixtures" / "nccl-tests"
    log = str(logs / "a100-sxm4-40gb-all_reduce.out")
    given = {"--out": "hostile-nccl", "--gpu-from": "dgx-a100"}
    out += [["calibrate", "nccl-tests", v, "--out", "x", "--gpu-from", "dgx-a100"]
            for v in (str(afile), str(tmp / "none.out"), "")]
    for flag in ("--out", "--gpu-from", "--op", "--holdout", "--min-size"):
        rest = [x for k, v in given.items() if k != flag for x in (k, v)]
        out += [["calibrate", "nccl-tests", log, *rest, flag, v]
                for v in [*BAD_NAMES, "0", "-1", "nan"]]
    out += [["train", "--cleanup", v] for v in (str(afile), str(tmp / "none"), "")]
    out += [["train", "--steps", v, "--out", str(tmp / "t")] for v in ("0", "-1", "abc", "")]
    out += [["train", "--model", v, "--steps", "1"] for v in BAD_NAMES]
    for fmt in ("csv", "json", "x"):
        out += [[*sim, "--format", fmt], [*comp, "--format", fmt], [*coll, "--format", fmt]]
    return out


def judge(code: int | None, out: str, err: str) -> str:
    """'' for a pass, else what failed."""
    if code is None:
        return "hang"
    if "Traceback" in err or "Traceback" in out:
        return "traceback"
    if code == 2:
        lines = err.strip().splitlines()
        ok = lines and lines[-1].startswith("scape: error:") and sum(
            ln.startswith("scape: error:") for ln in lines) == 1
        return "" if ok else "refusal without one error line"
    if code != 0:
        return f"exit {code}"
    if not out.strip():
        return "exit 0, nothing printed"
    # a number that is nan or inf: a cell of its own (a path or name holding "nan" is not)
    if re.search(r"(?:^|(?<=[\s,:=\[]))[-+]?(nan|inf)(?=[\s,\]]|$)", out,
                 flags=re.IGNORECASE | re.MULTILINE):
        return "nan or inf in the output"
    return ""


def run(args: list[str]) -> tuple[list[str], int | None, str, float]:
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO, capture_output=True,
                           text=True, timeout=TIMEOUT_S)
        return args, p.returncode, judge(p.returncode, p.stdout, p.stderr), \
            time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return args, None, "hang", time.monotonic() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--csv", default=None)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="scape-hostile-") as tmp:
        todo = cases(Path(tmp))
        t0 = time.monotonic()
        # profiles the cases write go to this run's own folder, never the user's
        os.environ["SCAPE_PROFILE_DIR"] = str(Path(tmp) / "profiles")
        with ThreadPoolExecutor(a.jobs) as pool:
            results = list(pool.map(run, todo))
    failed = [r for r in results if r[2]]
    codes = {c: sum(1 for r in results if r[1] == c) for c in sorted(
        {r[1] for r in results}, key=lambda c: (c is None, c))}
    print(f"{len(results)} cases in {time.monotonic() - t0:.0f} s: {len(failed)} failed; "
          f"exit codes {codes}")
    kinds: dict[str, int] = {}
    for r in failed:
        kinds[r[2]] = kinds.get(r[2], 0) + 1
        print(f"  {r[2]}: scape {' '.join(r[0])}")
    if kinds:
        print("failures by kind: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
    if a.csv:
        with open(a.csv, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["args", "exit", "failure", "seconds"])
            for args, code, why, s in results:
                w.writerow([" ".join(args), code, why, f"{s:.2f}"])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
