"""Flow-level, max-min fair bandwidth sharing over links, in simpy time (DESIGN section 6).

Active demands (classes of identical flows, see `network.Demand`) share links max-min fairly:
progressive filling raises every unfrozen flow's rate together until a link saturates, then
freezes the flows crossing it, and repeats. Rates are recomputed only when a demand starts or
ends; between those events every flow moves at a constant rate, so completion times are exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from simulator.network.topology import Demand

# Relative slack when comparing times and residual capacities: float rounding, not physics.
REL_EPS = 1e-12
TIE = 1e-9


def maxmin_rates(capacity: np.ndarray, demands: list[Demand]) -> np.ndarray:
    """Per-flow rate (bytes/s) of each demand under max-min fairness.

    capacity: [n_links] bytes/s. A demand with load l on a link consumes l * rate there.
    """
    n = len(demands)
    rates = np.zeros(n)
    if n == 0:
        return rates
    if n == 1:  # alone: the most loaded link sets the rate
        d = demands[0]
        rates[0] = np.min(capacity[d.links] / d.load)
        return rates
    crossed = np.zeros(len(capacity), dtype=bool)
    for d in demands:
        crossed[d.links] = True
    used = np.flatnonzero(crossed)  # [n_used] links any demand crosses
    position = np.cumsum(crossed) - 1  # link id -> index in used
    local = [position[d.links] for d in demands]
    residual = capacity[used].astype(np.float64)  # [n_used] bytes/s left
    scale = residual.copy()
    active = np.ones(n, dtype=bool)
    while active.any():
        denom = np.zeros(len(used))
        for i in np.flatnonzero(active):
            denom[local[i]] += demands[i].load
        touched = denom > 0
        step = np.min(residual[touched] / denom[touched])
        rates[active] += step
        residual -= step * denom
        saturated = touched & (residual <= REL_EPS * scale)
        for i in np.flatnonzero(active):
            if saturated[local[i]].any():
                active[i] = False
    return rates


def carries_bytes(demand: Demand) -> bool:
    """Whether a demand moves anything (one of no bytes or no flows is done when it starts)."""
    return demand.bytes_each > 0 and demand.n_flows != 0


@dataclass
class _Active:
    demand: Demand
    remaining: float  # bytes left per flow
    done: simpy.Event
    rate: float = 0.0


@dataclass
class FlowNetwork:
    """Links shared by every demand in flight in one simpy environment."""

    env: simpy.Environment
    capacity: np.ndarray  # [n_links] bytes/s
    active: list[_Active] = field(default_factory=list)
    _last: float = 0.0
    _generation: int = 0
    rate_changes: int = 0  # how many times rates were recomputed (for benchmarks)

    def transfer(self, demand: Demand) -> simpy.Event:
        """Start a demand now; the event fires when its last byte arrives."""
        return self.transfer_all([demand])[0]

    def transfer_all(self, demands) -> list[simpy.Event]:
        """Start several demands at once (a phase's): an event each, fired when its last byte
        arrives; the rates are computed once for all of them rather than once per demand
        added (the intermediate rates never held for any time)."""
        events = [self.env.event() for _ in demands]
        moving = [(d, e) for d, e in zip(demands, events, strict=True) if carries_bytes(d)]
        for d, e in zip(demands, events, strict=True):
            if not carries_bytes(d):
                e.succeed()
        if moving:
            self._advance()
            self.active += [_Active(d, d.bytes_each, e) for d, e in moving]
            self._reschedule()
        return events

    def _advance(self) -> None:
        dt = self.env.now - self._last
        if dt > 0:
            for a in self.active:
                a.remaining -= a.rate * dt
        self._last = self.env.now

    def _reschedule(self) -> None:
        self.rate_changes += 1
        rates = maxmin_rates(self.capacity, [a.demand for a in self.active])
        for a, r in zip(self.active, rates, strict=True):
            if r <= 0:
                raise ValueError(f"{a.demand.name}: crosses a link with no capacity")
            a.rate = r
        self._generation += 1
        if self.active:
            left = [a.remaining / a.rate for a in self.active]  # seconds to finish at these rates
            wait = max(min(left), 0.0)
            # Demands tied with the earliest finisher end with it: float rounding would leave
            # them a few bytes in 1e9 short, which is not a difference worth another event.
            due = [a for a, t in zip(self.active, left, strict=True) if t <= wait * (1 + TIE)]
            self.env.process(self._wake(wait, self._generation, due))

    def _wake(self, wait: float, generation: int, due: list[_Active]):
        yield self.env.timeout(wait)
        if generation != self._generation:
            return  # rates changed since this wake-up was planned
        self._advance()
        for a in due:
            self.active.remove(a)
            a.done.succeed()
        self._reschedule()
