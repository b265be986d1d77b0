"""Benchmark: how fast `scape train` ends, and what it leaves, when signalled or when a peer
hangs (issue 16, deliverable 3: within a few seconds, one line, nothing left; a hung peer
within 1.5x --timeout).

For each launch path (torchrun on loopback; the netbed, one namespace per rank, needs root and
ip/tc) and each of SIGTERM and SIGINT: start a 2-rank run, wait until it has logged 2 steps,
send the signal to the CLI process, and time until it exits. Then SIGSTOP one rank of a run
with --timeout T and time until the run ends. After each: the processes naming the run's
folder and the namespaces of this run that are still there (both should be none).
Usage: python bench/signals.py [--timeout 10] [--repeats 3] [--no-netbed]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scape.train.launch import descendants  # noqa: E402


def live_naming(text: str) -> int:
    """Live processes whose command line contains `text` (from /proc)."""
    count = 0
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                count += 1
        except OSError:  # ended while we looked
            pass
    return count


def run_namespaces(pid: int) -> list[str]:
    """Namespaces the run started by `pid` created (the netbed names them scape-<pid>-...)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if f"scape-{pid}-" in line]


def start(out: Path, extra: list[str]) -> subprocess.Popen:
    """A 2-rank run of many steps, returned once its log holds 2 steps."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "train", "--steps", "5000", "--nprocs", "2",
         "--micro-batch", "2", "--seq-len", "32", "--eval-every", "0", "--out", str(out),
         *extra], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = out / "log.jsonl"
    deadline = time.monotonic() + 120
    while not (log.exists() and log.read_text().count("\n") >= 2):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"signals: the run did not start: {proc.stderr.read()}")
        time.sleep(0.1)
    return proc


def ended(proc: subprocess.Popen, t0: float, out: Path) -> dict:
    _, err = proc.communicate(timeout=300)
    seconds = time.monotonic() - t0
    time.sleep(0.5)  # anything left would still be there
    return {"seconds": seconds, "exit": proc.returncode, "lines": err.count("\n"),
            "message": err.strip().splitlines()[-1] if err.strip() else "",
            "left_processes": live_naming(str(out)),
            "left_namespaces": len(run_namespaces(proc.pid))}


def signalled(sig: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="scape-signals-") as tmp:
        proc = start(Path(tmp), extra)
        t0 = time.monotonic()
        proc.send_signal(sig)
        return ended(proc, t0, Path(tmp))


def hung_peer(timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="scape-signals-") as tmp:
        proc = start(Path(tmp), ["--timeout", str(timeout)])
        ranks = [pid for pid in descendants(proc.pid)
                 if b"scape.train.worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
                 and b"torch.distributed.run" not in Path(f"/proc/{pid}/cmdline").read_bytes()]
        os.kill(max(ranks), signal.SIGSTOP)
        t0 = time.monotonic()
        return ended(proc, t0, Path(tmp))


def show(label: str, results: list[dict], limit: str) -> None:
    secs = [r["seconds"] for r in results]
    last = results[-1]
    print(f"{label:<34} median {statistics.median(secs):6.2f} s (runs: "
          f"{', '.join(f'{s:.2f}' for s in secs)}; {limit}); exit {last['exit']}, "
          f"{last['lines']} line(s): {last['message'][:70]!r}; left: "
          f"{max(r['left_processes'] for r in results)} process(es), "
          f"{max(r['left_namespaces'] for r in results)} namespace(s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-netbed", action="store_true")
    args = ap.parse_args()
    paths = [("torchrun", [])]
    if not args.no_netbed and os.geteuid() == 0:
        paths.append(("netbed rate=1gbit", ["--netbed", "rate=1gbit"]))
    print(f"# scape train, 2 ranks, signal sent once 2 steps are logged; {args.repeats} runs "
          "each")
    for name, extra in paths:
        for sig in (signal.SIGTERM, signal.SIGINT):
            show(f"{name}, {sig.name}", [signalled(sig, extra) for _ in range(args.repeats)],
                 "goal: a few seconds")
    show(f"torchrun, SIGSTOP a rank, --timeout {args.timeout:g}",
         [hung_peer(args.timeout) for _ in range(args.repeats)],
         f"goal <= {1.5 * args.timeout:g} s")


if __name__ == "__main__":
    main()
