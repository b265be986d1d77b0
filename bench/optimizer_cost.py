"""Benchmark: the optimizer's own cost on one rank, no communication (issue 3).

Dense AdamS (ZeRO-1 code path, world 1) against SCAPE (selection + pack + masked update) on
N = 1e6, 1e7, 1e8 fp32 parameters, one CPU thread, median of timed steps after a warm-up.
Target: SCAPE at most 1.3x the dense AdamS step at N = 1e7. `--schemes` adds the authors'
per-tensor reducer (`scape`, 8 tensors of N/8); `--memory` also runs each case alone in a fresh
process and prints the peak resident memory it added, in bytes per parameter.
Usage: python bench/optimizer_cost.py [--sizes 1e6,1e7,1e8] [--sparsity 0.99,0.9]
       [--schemes scape-partitioned,scape] [--memory]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from scape.adams import Hyper
from scape.comm import Comm
from scape.plan import make_config
from scape.schemes import make_scheme

TENSORS = 8  # the authors' reducer selects per tensor: give it weight matrices to select in


def _params(spec: str, n: int) -> list[torch.nn.Parameter]:
    count = TENSORS if spec == "scape" else 1
    sizes = [n // count] * (count - 1) + [n - (n // count) * (count - 1)]
    return [torch.nn.Parameter(torch.randn(s, 1) * 0.02) for s in sizes]  # [s, 1] fp32


def step_times(scheme, params, repeats: int,
               sync: Callable[[], None] = lambda: None) -> tuple[list[float], dict]:
    """`repeats` optimizer steps of `scheme` after two untimed ones (SCAPE's first step is
    dense), each on fresh gradients: the seconds of each (`sync`: wait for the device before
    and after) and the median seconds of each kernel the scheme reports."""
    times, parts = [], []
    for i in range(repeats + 2):
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        sync()
        t0 = time.perf_counter()
        kernels = scheme.step()
        sync()
        if i >= 2:
            times.append(time.perf_counter() - t0)
            parts.append(kernels)
    keys = sorted({k for p in parts for k in p})
    return times, {k: statistics.median(p.get(k, 0.0) for p in parts) for k in keys}


def time_steps(spec: str, n: int, repeats: int, **opts) -> tuple[float, dict]:
    params = _params(spec, n)
    scheme = make_scheme(make_config(spec, **opts), params, Comm(), Hyper())
    torch.manual_seed(1)
    times, parts = step_times(scheme, params, repeats)
    return statistics.median(times), parts


def _peak_rss() -> int:
    """This address space's peak resident bytes (Linux VmHWM; getrusage's ru_maxrss would
    carry the parent's peak across the spawn's exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status (Linux only)")


def _peak_worker(spec: str, n: int, opts: dict, out) -> None:
    torch.set_num_threads(1)
    before = _peak_rss()
    time_steps(spec, n, 1, **opts)
    out.put(_peak_rss() - before)


def peak_bytes(spec: str, n: int, **opts) -> float:
    """Peak resident bytes the case adds, alone in a fresh process (params and grads
    included: 2 x 4 B per parameter of them)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_peak_worker, args=(spec, n, opts, out))
    proc.start()
    value = out.get()
    proc.join()
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7,1e8")
    parser.add_argument("--sparsity", default="0.99,0.9")
    parser.add_argument("--schemes", default="scape-partitioned")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("# one rank, one thread, no communication; step = pull grads + scheme + push params")
    print(f"{'N':>6} {'scheme':>12} {'step_ms':>9} {'x dense':>8}  kernels (ms)")
    worst_1e7 = 0.0
    def memory(spec: str, n: int, **opts) -> str:
        return f"  peak {peak_bytes(spec, n, **opts) / n:.1f} B/param" if args.memory else ""

    for n in (int(float(s)) for s in args.sizes.split(",")):
        dense, _ = time_steps("dense-adams", n, args.repeats)
        print(f"{n:>6.0e} {'dense-adams':>12} {dense * 1e3:>9.1f} {1.0:>8.2f}"
              + memory("dense-adams", n))
        for spec in args.schemes.split(","):
            for sp in (float(s) for s in args.sparsity.split(",")):
                t, parts = time_steps(spec, n, args.repeats, sparsity=sp)
                detail = " ".join(f"{k}={v * 1e3:.1f}" for k, v in parts.items())
                label = f"{'scape-part' if spec == 'scape-partitioned' else spec}:{sp}"
                print(f"{n:>6.0e} {label:>12} {t * 1e3:>9.1f} {t / dense:>8.2f}  {detail}"
                      + memory(spec, n, sparsity=sp))
                if n == 10**7 and sp == 0.99 and spec == "scape-partitioned":
                    worst_1e7 = t / dense
    if worst_1e7:
        print(f"# SCAPE 99% / dense AdamS at N=1e7: {worst_1e7:.2f}x (target <= 1.3x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
