"""Issue 59's first acceptance figure: which public nccl-tests logs `scape calibrate nccl-tests`
reads, the system it reads off each (GPU, GPUs a host, NICs a node, NCCL version), and what the
fit on it says (the NCCL path's constants with their 95% intervals, or the refusal in full).

The logs are not shipped (their sources' licenses vary): give the folder they are in, one
file per run as published, and docs/research/nccl-logs-survey.md names where each came from (the
2026-12-03 set: 19 logs of 10 systems and 2 fragments, collected from CSCS's and Sigma2's docs,
CCI-MOC/roce-testing, NVIDIA/nccl-tests #290, NVIDIA/nccl #1453, SkyPilot, Red Hat's
nvidia-tools-image, eunomia-bpf/nccl-eBPF, Sheffield's HPC docs and an AWS EKS blueprint).

Each log is calibrated alone, every option left to the log (no --gpu-from, no --op), into a
scratch profile folder; a refusal is a row too, with its message: a log of a GPU no shipped
profile holds (T4, RTX 5090, RTX 6000D) or of a collective the simulator does not model
(sendrecv) is refused by design, and a corrupt run (a failed result check) must be.

Usage: python bench/nccl_logs_survey.py --logs DIR [--intervals]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from calibration.nccl_tests import calibrate_from_logs, parse_logs  # noqa: E402
from profiles import UserError  # noqa: E402


def survey(path: Path, intervals: bool) -> dict:
    row = {"log": path.name}
    try:
        logs = parse_logs(path)
    except UserError as exc:
        return {**row, "read": "refused", "said": str(exc).replace(str(path), path.name)}
    log = logs[0]
    row.update(read="yes", ops=",".join(x.op for x in logs), gpu=",".join(log.devices),
               ranks=log.ranks, hosts=len(log.hosts), per_host=log.ranks_per_node(),
               nics=log.nccl.nics, nccl=log.nccl.version or "-", rows=sum(len(x.rows)
                                                                       for x in logs))
    try:
        _, fit, _, _, notes = calibrate_from_logs("survey", [str(path)], force=True,
                                                  with_intervals=intervals)
    except UserError as exc:
        return {**row, "fit": "refused", "said": str(exc).replace(str(path), path.name)}
    said = (fit.text() if hasattr(fit, "text") else
            f"link fit: {fit.latency_s * 1e6:.1f} us a hop, {fit.bandwidth_Bps / 1e9:.1f} GB/s a "
            "link")
    picked = next((m[1] for n in notes if (m := re.search(r"fitted into (\S+?)'s", n))), "")
    return {**row, "fit": "nccl" if hasattr(fit, "text") else "link", "said": said,
            "profile": picked}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", required=True, help="a folder of nccl-tests logs")
    ap.add_argument("--intervals", action="store_true", help="fit the bootstrap intervals too")
    args = ap.parse_args()
    import profiles.measured as measured

    files = sorted(p for p in Path(args.logs).iterdir() if p.suffix in (".log", ".out", ".txt"))
    if not files:
        print(f"no .log, .out or .txt file in {args.logs}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        measured.FOLDER = Path(tmp)  # the profiles written go nowhere that lasts
        rows = [survey(p, args.intervals) for p in files]
    read = sum(r["read"] == "yes" for r in rows)
    fitted = sum(r.get("fit") in ("nccl", "link") for r in rows)
    print(f"# {len(rows)} logs in {args.logs}: {read} read, {fitted} fitted")
    for r in rows:
        shape = ("" if r["read"] != "yes" else
                 f" [{r['gpu']}; {r['ranks']} ranks on {r['hosts']} host(s), "
                 f"{r['per_host'] or 'uneven'} a host; NICs {r['nics'] or 'not printed'}; "
                 f"NCCL {r['nccl']}; ops {r['ops']}, {r['rows']} rows]")
        print(f"- {r['log']}: read {r['read']}{shape}; fit {r.get('fit', '-')}"
              + (f" into {r['profile']}" if r.get("profile") else ""))
        print("    " + r.get("said", "").replace("\n", "\n    "))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
