"""Fit a hardware profile's NCCL path on nccl-tests logs of one node (issue 41, part 3).

A profile with an [nccl] table prices a collective as NCCL runs it (simulator/nccl.py): the
(algorithm, protocol) NCCL's tuner picks, the protocol's per-step latency from NCCL's source,
its bandwidth on the node's links, and the host's launch of the call (one per GPU the launching
process drives). Of those, two numbers are the system's own and the logs tell them: how much
of the NVLink rate a call reaches ([intra_node] efficiency) and what launching a call costs
([nccl] launch_us). Both are solved (golden-section, in turn) to minimize the sum of
|predicted / measured - 1| over the fitted rows, priced by the simulator itself (`sweep`), so
the written profile prices every op, size and GPU count through the same code as the shipped
profiles; a held-out op of the logs is predicted by it.

Logs of several whole nodes (the default there too since 2026-11-29; `--model link` takes
the link fit, calibration/nccl_tests.py) solve the NICs' share of their line rate ([nic] efficiency)
instead, the launch cost staying the base profile's (a host property the one-node path
measures), and one discrete property: whether NCCL had GPUDirect RDMA to the NICs. Without it
NCCL turns LL128 off on every communicator spanning nodes (tuning.cc's LL128 rule, typeInter
above PXN), and no nccl-tests table says so; both are fitted and the one whose rows fit better
is written ([nccl] gdr = false where it is off).
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
    tier: str = "intra_node"  # whose efficiency: the NVLink (one node) or the NICs (several)
    gdr: bool | None = None  # several nodes: GPUDirect RDMA as the logs' LL128 use tells it
    launch_adds: bool | None = None  # -g N logs of one node: whether the launches add

    def text(self) -> str:
        gdr = ("" if self.tier == "intra_node" else
               "; [nccl] gdr " + ("false (LL128 off across nodes fits the rows better)"
                                  if self.gdr is False else "as the base (LL128 on)"))
        launch = (f"[nccl] launch_us {self.launch_us:.2f} (base {self.base_launch_us:g})"
                  if self.tier == "intra_node" else
                  f"[nccl] launch_us kept at the base's {self.launch_us:g}")
        adds = ("" if self.launch_adds is None else
                "; [nccl] launch_adds " + ("true (the GPU time follows the process's launches "
                                           "on its other GPUs: fits the rows better)"
                                           if self.launch_adds else
                                           "false (the GPU time overlaps the launches)"))
        return (f"fit: NCCL's path on the base profile ({self.algo}): [{self.tier}] efficiency "
                f"{self.efficiency:.3f} (base {self.base_efficiency:g}), {launch}{gdr}{adds}")


def with_constants(hw: HardwareProfile, efficiency: float, launch_us: float,
                   tier: str = "intra_node", gdr: bool | None = None,
                   launch_adds: bool | None = None) -> HardwareProfile:
    link = replace(getattr(hw, tier), efficiency=efficiency)
    adds = hw.nccl.launch_adds if launch_adds is None else launch_adds
    return replace(hw, **{tier: link}, nccl=replace(hw.nccl, launch_us=launch_us,
                                                    gdr=gdr if tier == "nic" else hw.nccl.gdr,
                                                    launch_adds=adds))


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


def fit_nccl(base: HardwareProfile, rows: list[dict], algo: str = "auto",
             nodes: int = 1) -> NcclFit:
    """`base` with [intra_node] efficiency and [nccl] launch_us solved on `rows` (one node).
    Rows of several nodes solve the NICs' [nic] efficiency instead, once with the base's
    GPUDirect RDMA and once without it ([nccl] gdr = false: LL128 off across nodes, NCCL's
    rule where the NICs are not reached directly, which no nccl-tests table prints), keeping
    the one whose rows fit better: a discrete property of the cluster the logs tell.
    Rows of one node launched by a process driving several GPUs (nccl-tests -g N) are solved
    twice the same way, with the GPU time overlapping the process's launches and following
    them ([nccl] launch_adds, simulator/collective.py `launched`), the better kept: how a
    system's -g N tables grow with size past the launch floor, which no table prints."""
    tier = "intra_node" if nodes == 1 else "nic"
    gdrs = [base.nccl.gdr] if nodes == 1 or base.nccl.gdr is False else [base.nccl.gdr, False]
    several = nodes == 1 and any(int(r["gpus_per_process"]) > 1 for r in rows)
    adds = [base.nccl.launch_adds, not base.nccl.launch_adds] if several else [None]
    best = None
    for gdr in gdrs:
        for add in adds:
            eff, launch = getattr(base, tier).efficiency, base.nccl.launch_us

            def loss(e, u, g=gdr, a=add):
                return _loss(with_constants(base, e, u, tier, g, a), rows, algo)

            for _ in range(ROUNDS if nodes == 1 else 1):
                eff = _golden(lambda e, u=launch: loss(e, u), *BOUNDS["efficiency"])
                if nodes == 1:
                    launch = _golden(lambda u, e=eff: loss(e, u), *BOUNDS["launch_us"])
            got = (loss(eff, launch), gdr, add, eff, launch)
            if best is None or got[0] < best[0]:
                best = got
    _, gdr, add, eff, launch = best
    return NcclFit(with_constants(base, eff, launch, tier, gdr, add), eff, launch, algo,
                   getattr(base, tier).efficiency, base.nccl.launch_us, tier, gdr,
                   bool(add) if several else None)
