"""Fit a hardware profile's NCCL path on nccl-tests logs of one node (issue 41, part 3).

A profile with an [nccl] table prices a collective as NCCL runs it (simulator/network/nccl.py): the
(algorithm, protocol) NCCL's tuner picks, the protocol's per-step latency from NCCL's source,
its bandwidth on the node's links, and the host's launch of the call (one per GPU the launching
process drives). Of those, two numbers are the system's own and the logs tell them: how much
of the NVLink rate a call reaches ([intra_node] efficiency) and what launching a call costs
([nccl] launch_us). Both are solved (golden-section, in turn) to minimize the sum of
|predicted / measured - 1| over the fitted rows, priced by the simulator itself (`sweep`), so
the written profile prices every op, size and GPU count through the same code as the shipped
profiles; a held-out op of the logs is predicted by it.

Logs of several whole nodes (the default there too since 2026-11-29; `--model link` takes
the link fit, calibration/nccl_tests.py) solve the inter-node transport instead, the launch
cost staying the base profile's (a host property the one-node path measures): the NICs' share
of their line rate ([transport] efficiency) and what each network message costs that NCCL's
tuner does not see ([transport] message_us: the proxy's and the network plugin's own cost per
request, TCPXO's 22.9 us on A3 Mega, paid at every network step of a call's critical path;
simulator/network/nccl.py latency_us), both properties of the cluster's transport; a base without a
[transport] table gets one of its NICs as NCCL's InfiniBand verbs sees them (kind ib-verbs,
[nic] efficiency and latency), which prices as the base does until message_us is above 0.
And one discrete property: whether NCCL had GPUDirect RDMA to the NICs. Without it
NCCL turns LL128 off on every communicator spanning nodes (tuning.cc's LL128 rule, typeInter
above PXN), and no nccl-tests table says so; both are fitted and the one whose rows fit better
is written ([nccl] gdr = false where it is off).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from profiles import HardwareProfile
from profiles.hardware import Transport
from simulator.network.collective import sweep

BOUNDS = {"efficiency": (0.05, 1.0), "launch_us": (0.0, 100.0), "message_us": (0.0, 200.0)}
ROUNDS, STEPS = 3, 30  # coordinate rounds, golden-section steps each
# rows tell the second constant (launch, cost per message) where doubling it (from 0: adding
# 10 us) moves some row's price by 5% or more; rows that do not (nccl-tests -b 32M: every call
# far longer than a launch) keep the base's, the fit wandering otherwise to a bound
TELLS, PROBE_US = 0.05, 10.0
# the GPUDirect RDMA choice is told by the rows where one choice's loss is this much below the
# other's (relative); closer, neither is preferred and the base's stays, said as untold
GDR_TELLS = 0.01


@dataclass(frozen=True)
class NcclFit:
    hardware: HardwareProfile
    efficiency: float
    launch_us: float
    algo: str
    base_efficiency: float
    base_launch_us: float
    tier: str = "intra_node"  # whose efficiency: the NVLink (one node) or the transport
    message_us: float | None = None  # several nodes: [transport] message_us fitted
    base_message_us: float | None = None
    at_bound: tuple[str, ...] = ()  # constants the fit left at an end of its range
    untold: bool = False  # the rows do not tell the second constant: the base's kept
    gdr: bool | None = None  # several nodes: GPUDirect RDMA as the logs' LL128 use tells it
    # several nodes: both GPUDirect RDMA choices fit the rows alike (their ops run no LL128
    # across nodes), so the base's is kept untold
    gdr_untold: bool = False
    launch_adds: bool | None = None  # -g N logs of one node: whether the launches add
    intervals: tuple = ()  # the constants' bootstrap intervals (calibration/fit_intervals.py)

    def text(self) -> str:
        gdr = ("" if self.tier == "intra_node" else
               "; [nccl] gdr " + ("false (LL128 off across nodes fits the rows better)"
                                  if self.gdr is False else
                                  "as the base (LL128 on; the rows do not tell it: with LL128 "
                                  "off across nodes they fit as well, and ring all-gathers and "
                                  "reduce-scatters of 1-512 MiB price slower with it off, 1.7x "
                                  "at 32 MiB on 10 x 8 H100; logs of those ops tell it)"
                                  if self.gdr_untold else
                                  "as the base (LL128 on)"))
        untold = " (kept: the rows do not tell it)" if self.untold else ""
        launch = (f"[nccl] launch_us {self.launch_us:.2f} (base {self.base_launch_us:g}){untold}"
                  if self.tier == "intra_node" else
                  f"[transport] message_us {self.message_us:.1f} (base "
                  f"{self.base_message_us or 0:g}){untold}, [nccl] launch_us kept at the base's "
                  f"{self.launch_us:g}")
        adds = ("" if self.launch_adds is None else
                "; [nccl] launch_adds " + ("true (the GPU time follows the process's launches "
                                           "on its other GPUs: fits the rows better)"
                                           if self.launch_adds else
                                           "false (the GPU time overlaps the launches)"))
        sure = "".join(f"\n  {i.text()}" for i in self.intervals)
        return (f"fit: NCCL's path on the base profile ({self.algo}): [{self.tier}] efficiency "
                f"{self.efficiency:.3f} (base {self.base_efficiency:g}), {launch}{gdr}{adds}"
                f"{sure}")


def with_transport(hw: HardwareProfile) -> HardwareProfile:
    """`hw` with a [transport] table: its own, else its NICs as NCCL's InfiniBand verbs
    transport sees them (simulator/network/nccl.py takes a profile without one as ib-verbs), which
    prices every call as `hw` does while message_us is 0."""
    if hw.transport is not None:
        return hw
    return replace(hw, transport=Transport(
        kind="ib-verbs", efficiency=hw.nic.efficiency, latency_us=hw.nic.latency_us,
        call_us=0.0, message_us=0.0,
        source=f"{hw.name}'s [nic]: NCCL's InfiniBand verbs transport on its NICs (no [transport] "
               "table there), with message_us fitted (calibration/nccl_tests_fit.py)"))


def with_constants(hw: HardwareProfile, efficiency: float, launch_us: float,
                   tier: str = "intra_node", gdr: bool | None = None,
                   launch_adds: bool | None = None,
                   message_us: float | None = None) -> HardwareProfile:
    link = replace(getattr(hw, tier), efficiency=efficiency)
    if message_us is not None:
        link = replace(link, message_us=message_us)
    adds = hw.nccl.launch_adds if launch_adds is None else launch_adds
    several = tier == "transport"
    return replace(hw, **{tier: link}, nccl=replace(hw.nccl, launch_us=launch_us,
                                                    gdr=gdr if several else hw.nccl.gdr,
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


def _candidate(base: HardwareProfile, nodes: int, efficiency: float, other: float,
               gdr: bool | None, add: bool | None) -> HardwareProfile:
    """`base` with the fit's two constants: on one node the NVLink's efficiency and the launch
    cost (`other`), on several the transport's efficiency and its cost per message (`other`),
    the launch staying the base's."""
    if nodes == 1:
        return with_constants(base, efficiency, other, "intra_node", gdr, add)
    return with_constants(base, efficiency, base.nccl.launch_us, "transport", gdr, add, other)


def fit_nccl(base: HardwareProfile, rows: list[dict], algo: str = "auto",
             nodes: int = 1) -> NcclFit:
    """`base` with [intra_node] efficiency and [nccl] launch_us solved on `rows` (one node).
    Rows of several nodes solve the transport's [transport] efficiency and message_us instead
    (`with_transport`), once with the base's GPUDirect RDMA and once without it ([nccl] gdr =
    false: LL128 off across nodes, NCCL's rule where the NICs are not reached directly, which
    no nccl-tests table prints), keeping the one whose rows fit better: a discrete property of
    the cluster the logs tell.
    Rows of one node launched by a process driving several GPUs (nccl-tests -g N) are solved
    twice the same way, with the GPU time overlapping the process's launches and following
    them ([nccl] launch_adds, simulator/network/collective.py `launched`), the better kept: how a
    system's -g N tables grow with size past the launch floor, which no table prints."""
    tier = "intra_node" if nodes == 1 else "transport"
    if nodes > 1:
        base = with_transport(base)
    gdrs = [base.nccl.gdr] if nodes == 1 or base.nccl.gdr is False else [base.nccl.gdr, False]
    several = nodes == 1 and any(int(r["gpus_per_process"]) > 1 for r in rows)
    adds = [base.nccl.launch_adds, not base.nccl.launch_adds] if several else [None]
    # the second constant: the host's launch on one node, the transport's cost per message
    # on several (the launch staying the base's, a host property)
    second = "launch_us" if nodes == 1 else "message_us"
    start = base.nccl.launch_us if nodes == 1 else base.transport.message_us or 0.0
    best, by_gdr = None, {}
    for gdr in gdrs:
        for add in adds:
            eff, other = getattr(base, tier).efficiency, start

            def loss(e, o, g=gdr, a=add):
                return _loss(_candidate(base, nodes, e, o, g, a), rows, algo)

            # a launch of 100 us fitted on 32 MiB-16 GiB rows prices them as well as 4.5 us,
            # and every small call 20x too slow: only rows that tell it fit it
            now, probed = (predict(_candidate(base, nodes, eff, o, gdr, add), rows, algo)
                           for o in (start, 2 * start if start > 0 else PROBE_US))
            untold = not any(abs(y / x - 1) >= TELLS for x, y in zip(now, probed, strict=True))
            for _ in range(ROUNDS):
                eff = _golden(lambda e, o=other: loss(e, o), *BOUNDS["efficiency"])
                if not untold:
                    other = _golden(lambda o, e=eff: loss(e, o), *BOUNDS[second])
            got = (loss(eff, other), gdr, add, eff, other, untold)
            by_gdr[gdr] = min(by_gdr.get(gdr, got[0]), got[0])
            if best is None or got[0] < best[0]:
                best = got
    _, gdr, add, eff, other, untold = best
    # the two choices alike to GDR_TELLS: the rows say nothing of LL128 across nodes
    losses = list(by_gdr.values())
    gdr_untold = len(losses) == 2 and abs(losses[0] - losses[1]) <= GDR_TELLS * min(losses)
    launch = other if nodes == 1 else base.nccl.launch_us
    message = None if nodes == 1 else other
    hw = _candidate(base, nodes, eff, other, gdr, add)
    # a constant left at an end of its range: the rows wanted it further (a cost of 0 is a
    # cost the system does not have, not an end)
    ends = tuple(name for name, value, lows in (("efficiency", eff, True),
                                                (second, other, False))
                 if any(abs(value - b) < 1e-3 * (BOUNDS[name][1] - BOUNDS[name][0])
                        for b in BOUNDS[name][0 if lows else 1:]))
    return NcclFit(hw, eff, launch, algo, getattr(base, tier).efficiency, base.nccl.launch_us,
                   tier, message_us=message,
                   base_message_us=None if nodes == 1 else base.transport.message_us,
                   at_bound=ends, untold=untold, gdr=gdr, gdr_untold=gdr_untold,
                   launch_adds=bool(add) if several else None)


def intervals(base: HardwareProfile, fit: NcclFit, rows: list[dict], nodes: int = 1):
    """The fitted constants' bootstrap intervals over `rows` (calibration/fit_intervals.py),
    the fit's discrete choices (GPUDirect RDMA, launches adding) held as fitted; a constant
    the rows do not tell (`untold`) gets none."""
    from calibration.fit_intervals import bootstrap_constants

    if nodes > 1:
        base = with_transport(base)
    second = "launch_us" if nodes == 1 else "message_us"
    other = fit.launch_us if nodes == 1 else fit.message_us or 0.0
    add = fit.launch_adds if fit.launch_adds is not None else None

    def price(e: float, o: float) -> list[float]:
        o = other if fit.untold else o
        return predict(_candidate(base, nodes, e, o, fit.gdr, add), rows, fit.algo)

    return bootstrap_constants(
        price, rows, (f"[{fit.tier}] efficiency", fit.efficiency, *BOUNDS["efficiency"]),
        None if fit.untold else (f"[{'nccl' if nodes == 1 else 'transport'}] {second}",
                                 other, *BOUNDS[second]), PROBE_US)
