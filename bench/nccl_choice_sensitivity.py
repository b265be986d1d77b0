"""How `scape validate --external scape-sc26` moves with the NIC speed NCCL's tuner reads.

NCCL picks ring or tree from its own cost model (simulator/network/nccl.py), fed by the speed its
network plugin reports. Over TCP sockets that is the interface's /sys/class/net speed: an
IPoIB interface on an NDR port reads 400 Gb/s where the kernel knows NDR, and NCCL takes
10 Gb/s where the speed cannot be read (docs/research/nccl-socket-choice.md). The authors'
logs print no NCCL INFO lines, so which NCCL read is not known: the model ships the line rate
(400 Gb/s), and this script prints the held-out SCAPE rows at each speed, and which calls
change algorithm. Nothing is fitted to choose the speed.

Usage: python bench/nccl_choice_sensitivity.py
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from reports import external as x  # noqa: E402
from reports.roles import role_lines  # noqa: E402
from simulator.network import nccl  # noqa: E402

SPEEDS_GBPS = (400.0, 200.0, 100.0, 10.0)


def main() -> int:
    shipped = nccl.tuner_view
    for gbps in SPEEDS_GBPS:
        def view(hw, ranks, nodes=None, _gbps=gbps):
            m = shipped(hw, ranks, nodes)
            if m is None or hw.nccl is not None or m.nodes == 1:
                return m
            per_gpu = _gbps / 8 * hw.nic.nics_per_node / hw.node.gpus_per_node
            # channels as NCCL's search finds them: two of half the speed from 25 GB/s up
            return replace(m, inter_GBps=per_gpu, intra_GBps=max(m.intra_GBps, per_gpu)
                           if m.ppn > 1 else per_gpu, channels=2 if per_gpu >= 25 else 1)
        nccl.tuner_view = view
        nccl.decide.cache_clear()
        try:
            table, _, _ = x.validate_external("scape-sc26")
        finally:
            nccl.tuner_view = shipped
            nccl.decide.cache_clear()
        print(f"NIC read at {gbps:g} Gb/s" + (" (shipped: the line rate)" if gbps == 400 else ""))
        for text in role_lines(table[table["role"] != "fitted"]):
            print("  " + text)
        held = table[table["role"] == "held-out"]
        worst = held.loc[held["error_pct"].abs().idxmax()]
        print(f"  worst: {worst['series']} {worst['model']} {worst['gpus']} GPUs "
              f"{worst['error_pct']:+.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
