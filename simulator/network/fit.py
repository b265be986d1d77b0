"""Fit a link tier's latency and bandwidth to collective measurements (DESIGN section 7).

The simulator's time for a collective alone on an idle network is linear in the tier's one-hop
latency alpha and its inverse bandwidth: t = alpha * A + S * C / B, where A (latency steps) and
C (bytes on the busiest link per byte of S) come from the registered algorithm itself. So the fit
uses the simulator's own algorithms, not a closed form beside them:

1. For each measured (collective, S, P) and each registered algorithm of that collective, read A
   and C off the simulator (once with alpha = 1 s and infinite bandwidth, once with alpha = 0 and
   1 B/s).
2. Least absolute relative error, |t_pred / t_meas - 1|, with one alpha for the tier and one
   inverse bandwidth per collective and rank count; each collective takes the algorithm that
   fits it best (gloo, for one, runs reduce-scatter as a full all-reduce and broadcasts flat
   from the root).
3. The tier's bandwidth is the best collective's; the others carry an efficiency <= 1 against it
   (several TCP flows through one shaped port share it less well than a ring's single flow).

The topology is the testbed's: one rank per node, one link per rank, one switch. Its links are
token buckets (tbf, scape/netbed.py): a call that starts with the bucket full sends its first
`burst_bytes` at veth speed and the rest at the rate, so the data term is
max(0, S * C - burst) / B. Fitted without it, the bucket reads as a bandwidth above the rate at
small sizes and drags the fitted bandwidth up: the H200's 1 Gbit/s sweep under MPS
(2026-11-26) missed its own rows from 1 MiB up by a median 8.5%, 1.6% with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiles import UserError
from simulator.network.collectives import ALGORITHMS, software_algorithms
from simulator.network.engine import PhaseCache, time_alone
from simulator.network.topology import Topology

BIG = 1e30  # bytes/s: a bandwidth at which the data term vanishes


def testbed_topology(ranks: int, link_Bps: float, latency_s: float,
                     chunk_bytes: float = 0.0) -> Topology:
    """One rank per node behind one link each, all on one switch (the netbed)."""
    return Topology(gpus=ranks, gpus_per_node=1, nics_per_node=1, nodes_per_leaf=max(2, ranks),
                    intra_Bps=link_Bps, nic_Bps=link_Bps, uplink_Bps=link_Bps * ranks,
                    intra_latency_s=0.0, nic_latency_s=latency_s, switch_latency_s=0.0,
                    name="netbed", nic_chunk_bytes=chunk_bytes)


def coefficients(op: str, algo: str, ranks: int, size: float,
                 chunk_bytes: float = 0.0) -> tuple[float, float]:
    """(A, C): simulated time = alpha * A + size * C / bandwidth for `op` alone. With a
    store-and-forward chunk, C includes the pipeline's fill, which also crosses at the
    bandwidth."""
    group = [np.arange(ranks)]
    lat = testbed_topology(ranks, BIG, 1.0, chunk_bytes)
    bw = testbed_topology(ranks, 1.0, 0.0, chunk_bytes)
    a = time_alone(lat, PhaseCache(lat).phases(op, algo, group, size))
    c = time_alone(bw, PhaseCache(bw).phases(op, algo, group, size)) / size
    return a, c


@dataclass(frozen=True)
class CollectiveFit:
    algo: str
    efficiency: float  # of the tier's bandwidth, at the largest rank count measured
    residual_median_pct: float  # |t_pred / t_meas - 1| over this collective's sizes
    residual_max_pct: float
    ranks: tuple[int, ...] = ()  # rank counts measured
    efficiencies: tuple[float, ...] = ()  # efficiency at each of them
    overheads_s: tuple[float, ...] = ()  # fixed cost per call beyond the hop latencies


@dataclass(frozen=True)
class TierFit:
    latency_s: float  # one hop
    bandwidth_Bps: float  # effective, per link per direction
    collectives: dict[str, CollectiveFit]
    predictions: list[float]  # seconds, one per measured row, in order

    @property
    def residual_median_pct(self) -> float:
        return float(np.median([c.residual_median_pct for c in self.collectives.values()]))


def _solve(rows_a: np.ndarray, rows_c: np.ndarray, t: np.ndarray, op_idx: np.ndarray,
           n_ops: int) -> np.ndarray:
    """x = [alpha, gamma_0..gamma_{k-1}] (gamma = 1/bandwidth) minimizing the sum of absolute
    relative errors (L1, by iteratively reweighted least squares): small messages on a busy
    host have heavy-tailed times, and a few of them must not drag the bandwidth."""
    design = np.zeros((len(t), 1 + n_ops))
    design[:, 0] = rows_a / t
    design[np.arange(len(t)), 1 + op_idx] = rows_c / t
    w = np.ones(len(t))
    for _ in range(30):
        x = scaled_lstsq(design * w[:, None], w)
        if x[0] < 0:  # no negative latency: refit the bandwidths alone
            x[0] = 0.0
            x[1:] = scaled_lstsq(design[:, 1:] * w[:, None], w)
        r = np.abs(design @ x - 1)
        w = 1 / np.sqrt(np.maximum(r, 1e-3))  # weights^2 = 1/|r|: L1
    return x


def _gamma_given_alpha(lat: np.ndarray, c: np.ndarray, t: np.ndarray) -> float:
    """The inverse bandwidth minimizing sum |(lat + g c) / t - 1|: a weighted median of the
    per-point solutions (t - lat) / c, weights c / t (the L1 optimum of one parameter)."""
    data = c > 0  # a call inside the links' bucket says nothing about the bandwidth
    if not data.any():
        return 0.0
    lat, c, t = lat[data], c[data], t[data]
    sol, w = (t - lat) / c, c / t
    order = np.argsort(sol)
    cum = np.cumsum(w[order])
    return float(sol[order][np.searchsorted(cum, cum[-1] / 2)])


def scaled_lstsq(design: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Least squares with columns scaled to unit norm (seconds and seconds per byte differ
    by ten orders of magnitude)."""
    norms = np.linalg.norm(design, axis=0)
    norms[norms == 0] = 1.0
    x, *_ = np.linalg.lstsq(design / norms, rhs, rcond=None)
    return x / norms


def fit_tier(rows: list[dict], burst_bytes: float = 0.0,
             algorithms: dict[str, tuple[str, ...]] | None = None) -> TierFit:
    """Fit rows of {op, size_bytes, world, seconds} (calibration.collectives).

    One latency for the tier; one algorithm per collective; one inverse bandwidth per
    collective and rank count (gloo's all-gather and all-to-all reach a different share of the
    link at 2 ranks than at 3, which no algorithm registered here explains). `burst_bytes`:
    the links' token bucket (the netbed's; 0 elsewhere), off each call's busiest-link bytes.
    `algorithms`: the candidates per collective where the backend is known (NCCL runs a
    reduce-scatter as a ring, never as gloo's all-reduce); default: every software one."""
    if burst_bytes < 0:
        raise UserError(f"burst_bytes must be >= 0, got {burst_bytes}")
    if not rows:
        raise UserError("no measurements to fit")
    ops = sorted({r["op"] for r in rows})
    unknown = set(ops) - set(ALGORITHMS)
    if unknown:
        raise UserError(f"cannot fit unknown collective(s) {sorted(unknown)}")
    t = np.array([r["seconds"] for r in rows], dtype=float)
    sizes = np.array([float(r["size_bytes"]) for r in rows])
    for values, what in ((t, "times must be positive numbers"),
                         (sizes, "sizes must be positive byte counts")):
        bad = ~(np.isfinite(values) & (values > 0))
        if bad.any():
            raise UserError(f"measured {what} (a row has {float(values[bad][0])})")
    bad_world = [r["world"] for r in rows if not (float(r["world"]) >= 2
                                                  and float(r["world"]) % 1 == 0)]
    if bad_world:
        raise UserError(f"a collective's rank count must be a whole number of at least 2, got "
                        f"{bad_world[0]!r}")
    rows = [{**r, "world": int(r["world"])} for r in rows]
    groups = sorted({(r["op"], r["world"]) for r in rows})
    for op, world in groups:  # a latency and a bandwidth: one size cannot tell them apart
        distinct = {r["size_bytes"] for r in rows if (r["op"], r["world"]) == (op, world)}
        if len(distinct) < 2:
            raise UserError(f"{op} on {world} ranks was measured at one size only "
                            f"({int(next(iter(distinct)))} B): a latency and a bandwidth need "
                            "two sizes or more (calibrate collectives --sizes)")
    group_idx = np.array([groups.index((r["op"], r["world"])) for r in rows])
    op_of = np.array([r["op"] for r in rows])
    def candidates(op: str) -> list[str]:
        given = (algorithms or {}).get(op)
        return list(given) if given else software_algorithms(op)

    coef = {(r["op"], algo, r["world"], r["size_bytes"]):
            coefficients(r["op"], algo, r["world"], r["size_bytes"])
            for r in rows for algo in candidates(r["op"])}

    def columns(choice: dict[str, str]):
        ac = np.array([coef[(r["op"], choice[r["op"]], r["world"], r["size_bytes"])]
                       for r in rows])
        # latency steps; bytes on the busiest link past the bucket (none past it: no data
        # term, only the latency)
        return ac[:, 0], np.maximum(0.0, ac[:, 1] * sizes - burst_bytes)

    choice = {op: candidates(op)[0] for op in ops}
    x = _solve(*columns(choice), t, group_idx, len(groups))
    for _ in range(3):  # alternate: each collective's best algorithm, then a joint refit
        for op in ops:
            best = None
            for algo in candidates(op):
                a, c = columns({**choice, op: algo})
                err = 0.0
                for g, (gop, _) in enumerate(groups):
                    if gop != op:
                        continue
                    mine = group_idx == g
                    # this group's inverse bandwidth alone (L1), the tier's alpha fixed
                    gamma = _gamma_given_alpha(x[0] * a[mine], c[mine], t[mine])
                    err += np.sum(np.abs((x[0] * a[mine] + gamma * c[mine]) / t[mine] - 1))
                if best is None or err < best[0] - 1e-12:
                    best = (err, algo)
            choice[op] = best[1]
        x = _solve(*columns(choice), t, group_idx, len(groups))
    if (x[1:] <= 0).any():
        raise UserError("the fit found a non-positive inverse bandwidth: measurements too "
                        "noisy or too small; measure larger sizes (calibrate collectives "
                        "--sizes)")
    a, c = columns(choice)
    # Last, each group's own fixed cost per call beyond alpha * steps (a backend's software
    # overhead: thread wake-ups, bookkeeping), with its inverse bandwidth refitted; never < 0.
    overhead = np.zeros(len(groups))
    gamma = x[1:].copy()
    for g in range(len(groups)):
        mine = group_idx == g
        fixed = x[0] * a[mine]
        sol = _solve(np.ones(mine.sum()), c[mine], t[mine],
                     np.zeros(mine.sum(), dtype=int), 1)
        const, gam = sol[0], sol[1]
        if const > fixed[0] and gam > 0:
            overhead[g], gamma[g] = const - fixed[0], gam
    pred = x[0] * a + overhead[group_idx] + gamma[group_idx] * c
    res = pred / t - 1
    best_gamma = gamma.min()
    fits = {}
    for op in ops:
        mine = [g for g, (gop, _) in enumerate(groups) if gop == op]
        worlds = tuple(groups[g][1] for g in mine)
        effs = tuple(float(best_gamma / gamma[g]) for g in mine)
        err = np.abs(res[op_of == op])
        fits[op] = CollectiveFit(choice[op], effs[-1], float(100 * np.median(err)),
                                 float(100 * np.max(err)), worlds, effs,
                                 tuple(float(overhead[g]) for g in mine))
    return TierFit(float(x[0]), float(1 / best_gamma), fits, list(pred))
