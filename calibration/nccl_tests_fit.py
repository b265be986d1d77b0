"""Fit a hardware profile's NCCL path on nccl-tests logs of one node (issue 41, part 3).

A profile with an [nccl] table prices a collective as NCCL runs it (simulator/nccl.py): the
(algorithm, protocol) NCCL's tuner picks, the protocol's per-step latency from NCCL's source,
its bandwidth on the node's links, and the host's launch of the call (one per GPU the launching
process drives). Of those, two numbers are the system's own and the logs tell them: how much
of the NVLink rate a call reaches ([intra_node] efficiency) and what launching a call costs
([nccl] launch_us). Both are solved (golden-section, in turn) to minimize the sum of
|predicted / measured - 1| over the fitted rows, priced by the simulator itself (`sweep`), so
the written profile prices every op, size and GPU count through the same code as the shipped
profiles; a held-out op of the logs is predicted by it. Multi-node logs are left to the link
fit (calibration/nccl_tests.py): their NICs are a second tier these two numbers do not cover.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from profiles import HardwareProfile
from simulator.collective import sweep

BOUNDS = {"efficiency": (0.05, 1.0), "launch_us": (0.0, 100.0)}
ROUNDS, STEPS = 3, 30  # coordinate rounds, golden-section steps each


@dataclass(frozen=True)
class NcclFit:
    hardware: HardwareProfile
    efficiency: float
    launch_us: float
    algo: str
    base_efficiency: float
    base_launch_us: float

    def text(self) -> str:
        return (f"fit: NCCL's path on the base profile ({self.algo}): [intra_node] efficiency "
                f"{self.efficiency:.3f} (base {self.base_efficiency:g}), [nccl] launch_us "
                f"{self.launch_us:.2f} (base {self.base_launch_us:g})")


def with_constants(hw: HardwareProfile, efficiency: float, launch_us: float) -> HardwareProfile:
    return replace(hw, intra_node=replace(hw.intra_node, efficiency=efficiency),
                   nccl=replace(hw.nccl, launch_us=launch_us))


def predict(hw: HardwareProfile, rows: list[dict], algo: str) -> list[float]:
    """Seconds `hw` gives each row ({op, size_bytes, world, gpus_per_process}), in order."""
    out: dict[int, float] = {}
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r["op"], int(r["world"]), int(r["gpus_per_process"])), []).append(i)
    for (op, world, gpp), idx in groups.items():
        got = sweep(hw, world, op, algo, [float(rows[i]["size_bytes"]) for i in idx],
                    gpus_per_process=gpp)
        out.update({i: g.time_s for i, g in zip(idx, got, strict=True)})
    return [out[i] for i in range(len(rows))]


def _loss(hw: HardwareProfile, rows: list[dict], algo: str) -> float:
    return sum(abs(p / r["seconds"] - 1) for p, r in zip(predict(hw, rows, algo), rows,
                                                         strict=True))


def _golden(f, lo: float, hi: float) -> float:
    g = (5**0.5 - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(STEPS):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def fit_nccl(base: HardwareProfile, rows: list[dict], algo: str = "auto") -> NcclFit:
    """`base` with [intra_node] efficiency and [nccl] launch_us solved on `rows`."""
    eff, launch = base.intra_node.efficiency, base.nccl.launch_us
    for _ in range(ROUNDS):
        eff = _golden(lambda e, u=launch: _loss(with_constants(base, e, u), rows, algo),
                      *BOUNDS["efficiency"])
        launch = _golden(lambda u, e=eff: _loss(with_constants(base, e, u), rows, algo),
                         *BOUNDS["launch_us"])
    return NcclFit(with_constants(base, eff, launch), eff, launch, algo,
                   base.intra_node.efficiency, base.nccl.launch_us)
