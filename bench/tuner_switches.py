"""Where NCCL's tuner makes a call faster on a slower machine (issue 45).

NCCL picks each call's (algorithm, protocol) by its own cost model (simulator/network/nccl.py); the
simulator then prices that pair. Every pair is monotone (a lower rate never makes it faster:
tests/test_physics_properties.py), but the tuner's model does not see NVLS_TREE's pipeline fill
nor, on a profile without [nccl], the simulator's own phases, so near a switch point it can
keep a pair this model prices slower than another; a lower rate that moves the switch then
makes the call faster. This scan counts those cases over every shipped profile, collective,
node count and size 1 KiB-1 GiB, with each rate lowered by 10% and by half.

Usage: python bench/tuner_switches.py
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles import UserError, load_hardware  # noqa: E402
from simulator.network.collective import sweep  # noqa: E402
from tests.test_physics_properties import OPS, PROFILES, slower  # noqa: E402

SIZES = [2.0**e for e in range(10, 31)]


def main() -> int:
    cases, drops = 0, []
    for name in PROFILES:
        hw = load_hardware(name)
        for nodes in (1, 2, 4, 16, 64):
            gpus = max(2, nodes * hw.node.gpus_per_node)
            for op in OPS:
                try:
                    fast = sweep(hw, gpus, op, "auto", SIZES)
                except UserError:
                    continue
                for what in ("intra", "nic", "nic_latency"):
                    for factor in (1.1, 2.0):
                        for f, s in zip(fast, sweep(slower(hw, what, factor), gpus, op, "auto",
                                                    SIZES), strict=True):
                            cases += 1
                            if s.time_s < f.time_s * (1 - 1e-9):
                                drops.append((name, nodes, op, f.size_bytes, what, factor,
                                              f"{f.algo}/{f.proto or 'simple'}",
                                              f"{s.algo}/{s.proto or 'simple'}",
                                              100 * (s.time_s / f.time_s - 1)))
    print(f"{cases} cases (profile x nodes x op x size x rate lowered), {len(drops)} where "
          "the tuner's pick on the slower machine is faster")
    for d in drops:
        print(f"  {d[0]}, {d[1]} nodes, {d[2]} {d[3] / 2**20:g} MiB, {d[4]} / {d[5]:g}: "
              f"{d[6]} -> {d[7]}, {d[8]:+.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
