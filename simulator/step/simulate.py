"""One training step of one scheme as simpy processes (DESIGN section 6). What a step is and
reports is simulator/step/step_config.py; the streams it runs on, simulator/step/streams.py.

A compute stream (forward and backward layer chunk by layer chunk, then the scheme's kernels and
the optimizer update) and a communication stream (the plan's collectives, one at a time, FIFO,
as NCCL runs them on one stream) share a simpy clock; each collective takes its time alone on
the topology's flow network (one call at a time moves bytes there; engine.PhaseCache.alone_s).
The step is the steady state: the ops a scheme launches at the end of a step for the next one
(`next_forward`, `next_step`) are the previous step's, launched at t=0.

- `backward` ops are split in buckets; bucket i is launched when backward has produced the
  gradients of its share of the layers (the last layer first), on the last micro-batch.
- `next_forward` ops (parameter all-gather with overlap) gate the forward chunk by chunk.
- `next_step` ops (SCAPE's mask all-gather) gate the pack, after backward: they cost step time
  only where they outlast forward and backward.
- Compute runs 1 + `interference` times slower while a collective runs beside it (the
  SMs its CTAs hold, profiles/hardware.py sm_share_interference): only the overlapped part.
- Tensor parallelism of degree t inside a node divides per-GPU compute by t and adds, per layer
  and micro-batch, two all-reduces of the activations in forward and two in backward
  (Megatron-LM, Shoeybi et al. 2019, section 3; with sequence parallelism each an all-gather
  and a reduce-scatter), blocking on the compute stream and simulated on the node's own
  links; with `tp_comm_overlap`, what Transformer Engine's overlap of them with
  the GEMMs leaves exposed (simulator/step/tp_overlap.py). A fully recomputed layer runs its
  forward's collectives again in the backward.
- Context parallelism of degree c splits each sequence: per-GPU compute of seq / c tokens, the
  ring exchange of keys and values beside attention (simulator/step/cp_comm.py), gradients reduced
  over the dp x c ranks.
- Expert parallelism: each MoE layer's token dispatch and combine (simulator/step/moe.py), on the
  compute stream per layer and micro-batch like the tensor-parallel collectives; the routed
  experts' gradients reduced over their own expert data-parallel group beside the dense ones
  (the scheme's plan for each, `merged_plan`), on the same comm stream.

Breakdown: compute (forward, backward, optimizer), compression (the scheme's other kernels),
tensor- and context-parallel communication, exposed data-parallel communication (compute
stream idle, waiting), overlapped communication (communication busy while compute runs).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import simpy

from scape.plan import Plan, StepPlan
from simulator.network.collective import Choice, calibrated
from simulator.network.engine import PhaseCache, Span
from simulator.network.topology import Topology, build_topology, distinct
from simulator.step.compute import fwd_bwd, host_slowdown, kernel_time, sharing_waits
from simulator.step.cp_comm import cp_bytes_per_layer, layer_cp_s
from simulator.step.moe import ep_bytes_per_layer, ep_layer_s
from simulator.step.per_step import with_step_work
from simulator.step.profile_memo import ProfileMemo
from simulator.step.step_config import StepConfig, StepResult
from simulator.step.streams import Prefetch, Stream, busy_overlap, pipeline_send_s, union_length
from simulator.step.tp_overlap import layer_tp_s, tp_bytes_per_layer
from vocabulary.names import COMPRESSION_KINDS


class _StepCosts:
    """What a step's pieces cost, before any simulation: one micro-batch's forward and
    backward, one layer's tensor- and context-parallel seconds, the host's slowdown, and the
    pipeline as its timeline takes it (what lower_bound_s needs, without a simulation's
    network and streams)."""

    def __init__(self, cfg: StepConfig, topo: Topology):
        self.cfg, self.topo = cfg, topo
        self.times = _fwd_bwd(cfg)
        # layers whose model-parallel seconds a micro-batch pays per pass (an MTP layer's too)
        self.n_layers = cfg.model.arch.n_layers + cfg.mtp_layers
        if cfg.mtp_layers:  # each MTP layer: a mean layer and the output layer and loss again
            t, m = self.times, cfg.mtp_layers
            self.times = replace(t, fwd_s=t.fwd_s + m * (t.layer_fwd_s + t.head_fwd_s),
                                 bwd_s=t.bwd_s + m * (t.layer_bwd_s + t.head_bwd_s))
        # one layer's tensor- and context-parallel seconds on the compute stream, forward and
        # backward (recomputed collectives included)
        self.tp_fwd_s, self.tp_bwd_s = layer_tp_s(cfg)
        self.cp_fwd_s, self.cp_bwd_s = layer_cp_s(cfg, topo, self.times.attn_fwd_s,
                                                  self.times.attn_bwd_s)
        # a mean layer's expert-parallel dispatch and combine, per micro-batch
        self.ep_fwd_s, self.ep_bwd_s = ep_layer_s(cfg, self.times.layer_fwd_s,
                                                  self.times.layer_bwd_s)
        self.slowdown = host_slowdown(cfg.hardware, cfg.gpus)

    def _send_s(self) -> float:
        """One activation (or its gradient) from a stage to the next (`pipeline_send_s`).
        Megatron sends b s h / t bytes per tensor-parallel rank (scatter-gather)."""
        cfg = self.cfg
        size = cfg.activation_values * cfg.dtypes.param_bytes / cfg.tp
        if cfg.tp_pp_dp_mapping and cfg.pp > 1:  # the next stage tp x cp ranks on
            return pipeline_send_s(self.topo, cfg.tp * cfg.cp * cfg.dp, size,
                                   hop=cfg.tp * cfg.cp, pp=cfg.pp)
        return pipeline_send_s(self.topo, cfg.tp * cfg.cp * cfg.dp, size)

    def _stage_times(self):
        """(stages, micro-batches, chunks, fwd[stage][chunk], bwd[stage][chunk], send seconds,
        layers[stage][chunk]): the pipeline as its timeline takes it."""
        cfg, t = self.cfg, self.times
        v, p = cfg.chunks_pp, cfg.pp
        layers = cfg.layer_split()  # [stage][chunk]
        # every stage's compute at the pace it runs: slowed as `_work` slows it where ranks
        # share one host (a CPU testbed); else the timeline would wait on faster stages than
        # the first one runs, and hide the bubble
        slow = self.slowdown
        per_f = t.layer_fwd_s * slow + self.tp_fwd_s + self.cp_fwd_s + self.ep_fwd_s  # s/layer
        per_b = t.layer_bwd_s * slow + self.tp_bwd_s + self.cp_bwd_s + self.ep_bwd_s
        fwd = [tuple(n * per_f for n in row) for row in layers]
        bwd = [tuple(n * per_b for n in row) for row in layers]
        # the output layer runs on the last stage's last chunk, and there the MTP layers, each
        # a layer (with its model-parallel seconds) and the output layer and loss again
        mtp = cfg.mtp_layers
        fwd[-1] = (*fwd[-1][:-1], fwd[-1][-1] + t.head_fwd_s * slow + mtp * (
            per_f + t.head_fwd_s * slow))
        bwd[-1] = (*bwd[-1][:-1], bwd[-1][-1] + t.head_bwd_s * slow + mtp * (
            per_b + t.head_bwd_s * slow))
        return p, cfg.accum, v, tuple(fwd), tuple(bwd), self._send_s(), layers


# fwd_bwd per hardware profile and step shape: a planner prices thousands of layouts that
# share a tensor-parallel degree, micro-batch and policy, and differ only in data and pipeline
# degrees
FWD_BWD = ProfileMemo()


def _fwd_bwd(cfg: StepConfig):
    """The step's compute times, remembered per shape: the micro-batches per step only scale
    the FLOP count (fwd_bwd's grad_accum), so layouts of other data and pipeline degrees
    share one pricing of the layers."""
    routing = cfg.routing
    # torchtitan runs a MoE layer's experts as one torch._grouped_mm; Megatron-Core and TE
    # launch each local expert's GEMMs apart (roofline.layer_times `expert_loop`)
    expert_loop = cfg.stack != "torchtitan"
    key = (cfg.model, cfg.micro_batch, cfg.seq, cfg.tp, cfg.mfu, cfg.recompute,
           cfg.sequence_parallel and cfg.tp > 1, cfg.attention, cfg.cp, cfg.fp8,
           cfg.metric_passes, routing, cfg.cuda_graphs, cfg.host_launch_us, cfg.eager_kernels,
           cfg.cast_recipe, cfg.accum_pass_bytes, expert_loop, cfg.quantized_gemms)
    one = FWD_BWD.get(cfg.hardware, key, lambda: fwd_bwd(
        cfg.model, cfg.hardware, cfg.micro_batch, cfg.seq, cfg.tp, 1, mfu=cfg.mfu,
        recompute=cfg.recompute, sequence_parallel=cfg.sequence_parallel and cfg.tp > 1,
        attention=cfg.attention, cp=cfg.cp, fp8=cfg.fp8, metric_passes=cfg.metric_passes,
        routing=routing, cuda_graphs=cfg.cuda_graphs, host_launch_us=cfg.host_launch_us,
        eager=cfg.eager_kernels, fp8_recipe=cfg.cast_recipe,
        accum_pass_bytes=cfg.accum_pass_bytes, expert_loop=expert_loop,
        fp8_scope=cfg.quantized_gemms))
    # the step's FLOP count, remembered too (dataclasses.replace is the frontier search's
    # most frequent small cost: thousands of bounds of a few shapes)
    return FWD_BWD.get(cfg.hardware, (*key, "accum", cfg.accum), lambda: replace(
        one, flops_per_step_per_gpu=one.flops_per_step_per_gpu * cfg.accum))


class _StepSim(_StepCosts):
    def __init__(self, cfg: StepConfig, topo: Topology, cache: PhaseCache, step: StepPlan):
        super().__init__(cfg, topo)
        self.cache, self.step = cache, step
        self.env = simpy.Environment()
        self.compute = Stream(self.env, "compute")
        self.comm = Stream(self.env, "comm")
        self.spans: list[Span] = []
        # gradient groups of the first pipeline stage (ranks: tp fastest, then cp, then dp, pp
        # slowest, Megatron-Core's default order); the other stages run theirs on other GPUs
        stage = cfg.tp * cfg.cp * cfg.dp  # tp fastest, then cp, then dp
        groups = [np.arange(r, stage, cfg.tp) for r in range(cfg.tp)]  # dp x cp each
        if cfg.tp_pp_dp_mapping and cfg.pp > 1:
            # tp, cp, pp, then dp (--use-tp-pp-dp-mapping): the first stage's cp peers beside
            # each other, its dp peers a model replica (tp x cp x pp GPUs) apart
            replica = cfg.tp * cfg.cp * cfg.pp
            groups = [(r + cfg.tp * np.arange(cfg.cp)[None, :]
                       + replica * np.arange(cfg.dp)[:, None]).ravel() for r in range(cfg.tp)]
        # the routed experts' groups: expert TP fastest, then EP, then expert data-parallel
        # (Megatron-Core's expert rank order); one of each per (ETP, EP) rank
        block = cfg.expert_tp * cfg.ep
        # hybrid sharding: each data-parallel group cut into shard groups of consecutive ranks
        # (a node's, with TP 1 and a node-sized group), and the replica groups across them
        s = cfg.shard_ranks
        # each kind's groups made on the first call over them: without hybrid sharding a shard
        # group is one rank, and 4,096 of them per step cost the planner 10% of its time
        self._group_makers = {
            "dp": lambda: groups,
            "expert": lambda: [np.arange(r, stage, block) for r in range(block)],
            "shard": lambda: [row for g in groups for row in g.reshape(-1, s)],
            "replica": lambda: [col for g in groups for col in g.reshape(-1, s).T],
            # a first-stage rank and its counterpart on the last stage (DeepSpeed's tied
            # embedding, StepConfig._tied): pp slowest, so (pp - 1) stages of ranks apart
            "tied": lambda: [np.array([r, r + (cfg.pp - 1) * stage]) for r in range(stage)]}
        # {group kind: (groups, their key, nodes one spans, ranks)}, filled by _groups
        self.groups: dict[str, tuple] = {}
        self.n_chunks = cfg.chunks or cfg.model.arch.n_layers
        self.compute_s = self.compression_s = self.tp_s = self.interference_s = 0.0
        self.cp_s = self.ep_s = 0.0
        self.per_step_s = 0.0  # of compute_s: the work once a step (_once_a_step)
        # ranks sharing one GPU: the measured wait per kernel call, already at that sharing,
        # so not scaled again by the host slowdown _work applies
        self.waits = {kind: wait / self.slowdown
                      for kind, wait in sharing_waits(cfg.hardware, cfg.gpus).items()}
        self.async_pending = False  # an issued async collective not yet waited for
        self.bubble_s = 0.0  # the first pipeline stage's idle time waiting for the others
        self.calls: dict[tuple[str, float], Choice] = {}  # (collective, bytes): how it runs

    # ---- communication ----
    def _groups(self, kind: str) -> tuple:
        """(groups, their key, nodes one spans, ranks) of a kind of group: "dp", "expert",
        "shard", "replica" or "tied"."""
        if kind not in self.groups:
            g = self._group_makers[kind]()
            self.groups[kind] = (g, tuple(hash(x.tobytes()) for x in g),
                                 distinct(self.topo.node_of(g[0])), len(g[0]))
        return self.groups[kind]

    def _comm(self, names: list[str], collective: str, sizes: list[float], group: str = "dp"):
        """Run collectives back to back on the comm stream (FIFO) over every data-parallel
        group (or, `group` "expert", every expert data-parallel group): one call per size,
        each named. Calls launched together (a layer's gradient buckets, the parameter
        gathers after the update) hold the stream for all of them in one process: what
        queueing them one process each gives (the stream is FIFO and they ask at the same
        instant), at a fraction of the simulation's events."""
        groups, group_key, group_nodes, ranks = self._groups(group)
        with self.comm.lock.request() as req:
            yield req
            self.comm.toggled()
            for name, size in zip(names, sizes, strict=True):
                t0 = self.env.now
                # how this backend runs it, where the profile was calibrated (once per shape:
                # a step issues the same bucket many times, and the answer depends on nothing
                # else)
                c = self.calls.get((collective, size, group))
                if c is None:
                    c = self.calls[(collective, size, group)] = calibrated(
                        self.cfg.hardware, collective, self.cfg.algo, ranks, size,
                        nodes=group_nodes)
                if c.overhead_s > 0:
                    yield self.env.timeout(c.overhead_s)
                # no launch floor here: in a step the host enqueues ahead of the GPU. The
                # stream runs one call at a time and nothing else moves bytes on this network
                # (tensor- and context-parallel traffic is priced on the compute stream), so
                # the call takes its time alone, simulated once per shape
                # (engine.PhaseCache.alone_s)
                moving = self.env.now
                yield self.env.timeout(self.cache.alone_s(
                    (collective, c, group_key),
                    lambda c=c: c.applied(self.cache.phases(collective, c.algo, groups,
                                                            c.moved))))
                if self.env.now - moving < c.min_s:  # the protocol's own rate limit (nccl.py)
                    yield self.env.timeout(c.min_s - (self.env.now - moving))
                self.comm.busy.append((t0, self.env.now))
                self.spans.append(Span("comm", name, t0, self.env.now, size))
        self.comm.toggled()

    def _launch(self, op, bucket_sizes=None, together: bool = False,
                numbered: bool | None = None) -> list[simpy.Process]:
        """A process per call of `op` (its buckets, or `bucket_sizes`), or with `together`
        one for all of them, run back to back (`_comm`); calls are named "op [i/n]" where
        there are several (`numbered`: say so, None: where there are several)."""
        sizes = bucket_sizes or [op.size_bytes / op.buckets] * op.buckets
        numbered = len(sizes) > 1 if numbered is None else numbered
        names = [f"{op.name} [{i + 1}/{len(sizes)}]" if numbered else op.name
                 for i in range(len(sizes))]
        if together:
            return [self.env.process(self._comm(names, op.collective, sizes, op.group))]
        return [self.env.process(self._comm([n], op.collective, [s], op.group))
                for n, s in zip(names, sizes, strict=True)]

    # ---- compute ----
    def _work(self, name: str, seconds: float, kind: str, tp_s: float = 0.0,
              cp_s: float = 0.0, ep_s: float = 0.0):
        """Occupy the compute stream; slowed while the comm stream is busy. `tp_s` seconds of
        tensor-parallel collectives, `cp_s` of context-parallel ring exchanges and `ep_s` of
        expert-parallel dispatch and combine that the work waits for on the stream run in the
        same event (one event instead of four; the time is attributed to each)."""
        if seconds <= 0 and tp_s <= 0 and cp_s <= 0 and ep_s <= 0:
            return
        if kind != "tp":
            seconds *= self.slowdown
        if self.async_pending:  # measured on backends whose async ops cost compute time
            scale = 1 + self.cfg.hardware.async_interference.get(self.cfg.grad_ranks, 0.0)
            seconds, tp_s, cp_s = seconds * scale, tp_s * scale, cp_s * scale
            ep_s *= scale
        t0 = self.env.now
        total = seconds + tp_s + cp_s + ep_s
        yield from self._run_beside_comm(total)
        extra = self.env.now - t0 - total
        # float residue of the subtraction (2e-19 s printed where nothing interfered) is none
        self.interference_s += extra if abs(extra) > 1e-9 * total else 0.0
        # the time the work took, collective slowdown included, shared by its parts
        share = (self.env.now - t0) / total
        seconds, tp_s, cp_s = seconds * share, tp_s * share, cp_s * share
        self.cp_s += cp_s
        self.ep_s += ep_s * share
        self.compute.busy.append((t0, self.env.now))
        self.spans.append(Span("compute", name, t0, self.env.now, 0.0))
        if kind == "compute":
            self.compute_s += seconds
        elif kind == "compression":
            self.compression_s += seconds
        else:
            self.tp_s += seconds
        self.tp_s += tp_s

    def _run_beside_comm(self, work_s: float):
        """Advance the compute stream by `work_s` seconds of work, at 1 / (1 + interference)
        of its rate while a collective runs on the comm stream (its CTAs hold SMs,
        profiles/hardware.py sm_share_interference) and at full rate otherwise: only the
        overlapped part of the work is slowed."""
        slow = self.cfg.hardware.compute.interference or 0.0
        if slow == 0.0:
            yield self.env.timeout(work_s)
            return
        left = work_s
        while left > 1e-15 * max(1.0, work_s):
            rate = 1.0 / (1.0 + slow) if self.comm.is_busy() else 1.0
            t0 = self.env.now
            done = self.env.timeout(left / rate)
            yield done | self.comm.changed
            if done.processed:
                return
            left -= (self.env.now - t0) * rate

    def _kernels(self, stage: str):
        for k in self.step.kernels:
            if k.stage == stage:
                kind = "compression" if k.kind in COMPRESSION_KINDS else "compute"
                seconds = kernel_time(k.kind, k.elements, self.cfg.hardware, k.tensors)
                yield from self._once_a_step(k.name, seconds + self.waits.get(k.kind, 0.0),
                                             kind)

    def _once_a_step(self, name: str, seconds: float, kind: str):
        """Work the step does once, after the backward: its compute part counted in
        per_step_s too (the optimizer update, simulator/step/per_step.py's kernels, the
        profile's fixed host work; a scheme's compression kernels are compression_s)."""
        t0 = self.env.now
        yield from self._work(name, seconds, kind)
        if kind == "compute":
            self.per_step_s += self.env.now - t0

    def run(self) -> float:
        self.env.process(self._compute())
        self.env.run()
        return self.env.now

    def _pipeline_ops(self):
        """The first stage's timeline summary (simulator.layout.pipeline.FirstStage) and its layers
        per chunk."""
        from simulator.layout.pipeline import first_stage

        p, m, v, fwd, bwd, send, layers = self._stage_times()
        return first_stage(p, m, v, fwd, bwd, send), layers[0]

    def _pipelined(self, gate, backward_ops, in_flight):
        """Forward and backward of the first pipeline stage as its timeline runs them: idle
        while it waits for other stages, gradient buckets leaving during its last backward.
        The ops between its first forward and its last backward run as one piece of work and
        one of waiting (their sum is exact; only which instants of the middle are idle is
        lost), so a step costs a few simulation events whatever its micro-batch count."""
        summary, chunk_layers = self._pipeline_ops()
        t, cfg = self.times, self.cfg

        def cost(kind, chunk):  # compute, tensor-, context- and expert-parallel seconds
            layers = chunk_layers[chunk]
            if kind == "F":
                return (layers * t.layer_fwd_s, layers * self.tp_fwd_s,
                        layers * self.cp_fwd_s, layers * self.ep_fwd_s)
            return (layers * t.layer_bwd_s, layers * self.tp_bwd_s, layers * self.cp_bwd_s,
                    layers * self.ep_bwd_s)

        first, last = summary.first, summary.last
        pieces = [(first[3], *cost(first[0], first[2]), "forward mb0", False)]
        if summary.count > 2:  # every op of the stage: m micro-batches through each chunk
            middle = [sum(cfg.accum * (cost("F", c)[i] + cost("B", c)[i])
                          for c in range(cfg.chunks_pp))
                      - cost(first[0], first[2])[i] - cost(last[0], last[2])[i]
                      for i in range(4)]  # compute, tensor-, context-, expert-parallel s
            pieces.append((summary.second_start, *middle,
                           f"forward/backward x{summary.count - 2}", False))
        if summary.count > 1:
            pieces.append((last[3], *cost(last[0], last[2]), f"backward mb{last[1]}", True))
        start = self.env.now
        for n, (op_start, work, tp, cp, ep, name, is_last) in enumerate(pieces):
            wait = op_start - (self.env.now - start)
            if wait > 1e-15:
                yield self.env.timeout(wait)  # the stage's input is not there yet: bubble
                self.bubble_s += wait
            if n == 0 and gate:
                yield simpy.AllOf(self.env, gate)
            # the last backward releases gradient buckets layer by layer
            parts = chunk_layers[last[2]] if is_last else 1
            for c in range(parts):
                yield from self._work(name, work / parts, "compute", tp_s=tp / parts,
                                      cp_s=cp / parts, ep_s=ep / parts)
                if is_last:
                    for bop in backward_ops:
                        ready = math.floor((c + 1) * bop.buckets / parts)
                        done = math.floor(c * bop.buckets / parts)
                        if ready > done:  # this slice's buckets, back to back
                            in_flight += self._launch(
                                bop, [bop.size_bytes / bop.buckets] * (ready - done),
                                together=True, numbered=False)

    def _compute(self):
        cfg, ops = self.cfg, self.step.ops
        carried = {ph: [p for op in ops if op.phase == ph for p in self._launch(op)]
                   for ph in ("next_forward", "next_step")}
        bwd_s = self.times.bwd_s  # recomputation included
        n_layers = self.n_layers  # model-parallel seconds per pass, per micro-batch
        tp_fwd, tp_bwd = self.tp_fwd_s * n_layers, self.tp_bwd_s * n_layers
        cp_fwd, cp_bwd = self.cp_fwd_s * n_layers, self.cp_bwd_s * n_layers
        ep_fwd, ep_bwd = self.ep_fwd_s * n_layers, self.ep_bwd_s * n_layers
        backward_ops = [op for op in ops if op.phase == "backward"]
        in_flight: list[simpy.Process] = []
        gate = carried["next_forward"]
        self.async_pending = bool(carried["next_step"])
        if cfg.pp > 1:
            yield from self._pipelined(gate, backward_ops, in_flight)
        # ZeRO-3: gathers and reduce-scatters issued again for every micro-batch
        fwd_each = [op for op in ops if op.phase == "next_forward" and op.every_micro_batch]
        every = [op for op in backward_ops if op.every_micro_batch]
        for mb in range(cfg.accum if cfg.pp == 1 else 0):
            last = mb == cfg.accum - 1
            if mb > 0 and fwd_each:  # this micro-batch's parameters, gathered again
                gate = [p for op in fwd_each for p in self._launch(op)]
                in_flight += gate
            gated = bool(gate) and (mb == 0 or bool(fwd_each))
            # Layer chunks matter only where something waits on them: a gated forward
            # (parameter buckets arrive chunk by chunk) and a backward that releases buckets
            # (the last one; with ZeRO-3, every one). Others run as one piece each.
            fwd_parts = self.n_chunks if gated else 1
            for c in range(fwd_parts):
                if gated:
                    yield simpy.AllOf(self.env, gate[:math.ceil((c + 1) * len(gate) / fwd_parts)])
                yield from self._work(f"forward mb{mb}", self.times.fwd_s / fwd_parts, "compute",
                                      tp_s=tp_fwd / fwd_parts, cp_s=cp_fwd / fwd_parts,
                                      ep_s=ep_fwd / fwd_parts)
            releases = [op for op in backward_ops if last or op.every_micro_batch]
            bwd_parts = self.n_chunks if releases else 1
            prefetch = Prefetch(self, [op for op in every if op.collective == "all_gather"],
                                 bwd_parts)
            for c in range(bwd_parts):
                yield from prefetch.before(c, in_flight)  # this chunk's parameters, the next's
                yield from self._work(f"backward mb{mb}", bwd_s / bwd_parts, "compute",
                                      tp_s=tp_bwd / bwd_parts, cp_s=cp_bwd / bwd_parts,
                                      ep_s=ep_bwd / bwd_parts)
                for op in releases:
                    if op in prefetch.ops:
                        continue
                    ready = math.floor((c + 1) * op.buckets / bwd_parts)
                    done = math.floor(c * op.buckets / bwd_parts)
                    if ready > done:  # this chunk's buckets, back to back
                        in_flight += self._launch(op, [op.size_bytes / op.buckets]
                                                  * (ready - done), together=True,
                                                  numbered=False)
        yield simpy.AllOf(self.env, carried["next_step"])  # the mask, before packing
        self.async_pending = False
        yield from self._kernels("pre")
        for op in ops:
            if op.phase == "after_backward":
                in_flight += self._launch(op, together=True)
        yield simpy.AllOf(self.env, in_flight)
        yield from self._kernels("update")
        yield from self._kernels("post")
        # the host's fixed work per step (a profile fitted to real steps knows it)
        yield from self._once_a_step("fixed per-step work",
                                     (cfg.hardware.compute.step_fixed_ms or 0.0) * 1e-3,
                                     "compute")
        yield simpy.AllOf(self.env, [p for op in ops if op.phase == "after_update"
                                     for p in self._launch(op, together=True)])
        yield simpy.AllOf(self.env, carried["next_forward"])


# ZeRO-3 issues the same gathers and reduce-scatters for every micro-batch, so after the first
# few a step's timeline repeats one micro-batch apart: from this many on, a step is simulated
# with STEADY, STEADY + 1 and STEADY + 2 micro-batches and, where those grow by the same amount
# in every reported quantity, extended linearly (simulator/layout/pipeline.py does the same for a
# pipeline's steady state); otherwise, or for a trace, every micro-batch is simulated. Other
# steps repeat too (their middle micro-batches are compute alone) but cost little to simulate
# whole: they are extended only from EXTEND_PLAIN_FROM on (--grad-accum 10^8 is answered in
# the time of a few micro-batches, not in hours).
EXTEND_FROM = 12
EXTEND_PLAIN_FROM = 256
STEADY = 4
_KEYS = ("step", "compute", "compression", "tp", "cp", "ep", "exposed", "overlap", "bubble",
         "interference", "per_step")


def _run_kind(cfg: StepConfig, topo: Topology, cache: PhaseCache, step: StepPlan
              ) -> tuple[dict[str, float], list[Span]]:
    """One step kind's reported quantities (seconds) and its spans, simulated."""
    sim = _StepSim(cfg, topo, cache, step)
    t = sim.run()
    busy = union_length(sim.compute.busy)
    comm = union_length(sim.comm.busy)
    overlap = busy_overlap(sim.compute.busy, sim.comm.busy)
    return {"step": t, "compute": sim.compute_s, "compression": sim.compression_s,
            "tp": sim.tp_s, "cp": sim.cp_s, "ep": sim.ep_s, "exposed": t - busy - sim.bubble_s,
            "bubble": sim.bubble_s,
            "overlap": min(overlap, comm), "interference": sim.interference_s,
            "per_step": sim.per_step_s}, sim.spans


def _extended(cfg: StepConfig, topo: Topology, cache: PhaseCache, step: StepPlan
              ) -> tuple[dict[str, float], list[Span]] | None:
    """The step of `cfg.accum` micro-batches from three short ones (EXTEND_FROM above), or
    None where it does not apply or the short ones are not yet periodic."""
    repeated = any(op.every_micro_batch for op in step.ops)
    if cfg.pp > 1 or cfg.accum < (EXTEND_FROM if repeated else EXTEND_PLAIN_FROM):
        return None
    runs = [_run_kind(replace(cfg, global_batch=None, grad_accum=a), topo, cache, step)
            for a in (STEADY, STEADY + 1, STEADY + 2)]
    (a, _), (b, _), (c, spans) = runs
    scale = max(abs(c["step"]), 1e-12)
    if any(abs((c[k] - b[k]) - (b[k] - a[k])) > 1e-9 * scale for k in _KEYS):
        return None
    more = cfg.accum - (STEADY + 2)
    return {k: c[k] + more * (c[k] - b[k]) for k in _KEYS}, spans


def stage_work_ratio(cfg: StepConfig) -> float:
    """The mean pipeline stage's compute over the first stage's (the rank a step simulates):
    above 1 where the first stage holds fewer layers (Megatron's uneven split) or the last
    holds the output layer; 1 without pipelining."""
    if cfg.pp == 1:
        return 1.0
    _, _, _, fwd, bwd, _, _ = _StepCosts(cfg, build_topology(cfg.hardware, cfg.gpus)
                                         )._stage_times()
    work = [sum(f) + sum(b) for f, b in zip(fwd, bwd, strict=True)]  # s per micro-batch
    return (sum(work) / len(work)) / work[0]


def lower_bound_s(cfg: StepConfig) -> float:
    """Seconds the step cannot beat: its compute stream's own work at full speed (every
    micro-batch's forward and backward with their tensor- and context-parallel seconds), and
    with pipelining the first stage's timeline, which ends with the step's last backward. The
    simulation only adds to it (data-parallel communication left exposed, compression and
    optimizer kernels, the slowdown beside collectives), so a planner may skip a plan whose
    bound is above the plans it keeps (simulator/planning/search.py). Costs no simulation: the
    pipeline's floor is counted, not scheduled (simulator/layout/pipeline.py pipeline_bound)."""
    topo = build_topology(cfg.hardware, cfg.gpus)
    sim = _StepCosts(cfg, topo)
    if cfg.pp > 1:
        from simulator.layout.pipeline import pipeline_bound

        return pipeline_bound(*sim._stage_times()[:6])
    n_layers = sim.n_layers
    per_mb = (sim.slowdown * (sim.times.fwd_s + sim.times.bwd_s)
              + n_layers * (sim.tp_fwd_s + sim.tp_bwd_s + sim.cp_fwd_s + sim.cp_bwd_s
                            + sim.ep_fwd_s + sim.ep_bwd_s))
    return cfg.accum * per_mb


def simulate_step(
    cfg: StepConfig, cache: PhaseCache | None = None, the_plan: Plan | None = None,
    trace: bool = False, step_work: bool = True,
) -> StepResult:
    """Simulate one steady-state step of `cfg`; step kinds (dense refresh) are averaged.

    `the_plan` replaces the scheme's own plan (to study a variant); `cache` lets several
    simulations on the same topology share built collectives; `trace`: every micro-batch is
    simulated, so the spans cover the whole step (steps of many micro-batches are otherwise
    extended from their steady state, `_extended`, and their spans show a few). `step_work`:
    the stack's once-a-step kernels besides the update (simulator/step/per_step.py) are
    added; False for a plan that already holds everything its loop runs (this project's own
    runtime, reports/validate.py).
    """
    cfg.validate()
    topo = build_topology(cfg.hardware, cfg.gpus)
    cache = cache or PhaseCache(topo)
    dense = cfg._plan() if the_plan is None else the_plan
    experts = cfg._expert_plan()
    the_plan = merged_plan(dense, experts)
    if step_work:
        the_plan = with_step_work(cfg, the_plan)
    totals = dict.fromkeys(_KEYS, 0.0)
    spans: list[Span] = []
    kinds = []
    for weight, step in the_plan.steps:
        got = None if trace else _extended(cfg, topo, cache, step)
        values, kind_spans = got if got is not None else _run_kind(cfg, topo, cache, step)
        for key in _KEYS:
            totals[key] += weight * values[key]
        kinds.append((weight, values["step"]))
        if not spans:
            spans = kind_spans  # the trace shows the most frequent step kind
    # the layers of a stage, each micro-batch
    tp_bytes = ((tp_bytes_per_layer(cfg) + cp_bytes_per_layer(cfg) + ep_bytes_per_layer(cfg))
                * cfg.stage0_layers * cfg.accum)
    worlds = cfg.group_worlds
    dp_bytes = dense.wire_bytes(cfg.grad_ranks, cfg.accum, worlds) + (
        0.0 if experts is None else experts.wire_bytes(cfg.edp, cfg.accum))
    return StepResult(
        step_time_s=totals["step"], compute_s=totals["compute"],
        compression_s=totals["compression"], tp_comm_s=totals["tp"],
        exposed_comm_s=totals["exposed"], overlapped_comm_s=totals["overlap"],
        bytes_per_gpu=dp_bytes + tp_bytes, spans=spans,
        kinds=kinds,
        pipeline_bubble_s=totals["bubble"],
        interference_s=max(0.0, totals["interference"]),  # no -1e-17 from rounding
        cp_comm_s=totals["cp"],
        ep_comm_s=None if cfg.model.moe is None else totals["ep"],
        per_step_s=totals["per_step"],
    )


def merged_plan(dense: Plan, experts: Plan | None) -> Plan:
    """One plan of the dense and the expert groups' work, step kind by step kind (a scheme's
    kinds depend on its options alone, so both plans have the same): the experts' collectives
    marked to run over the expert data-parallel groups, their kernels beside the dense ones."""
    if experts is None:
        return dense
    if [w for w, _ in dense.steps] != [w for w, _ in experts.steps]:
        raise ValueError(f"{dense.scheme}: the dense and expert plans differ in step kinds")
    steps = tuple(
        (w, StepPlan((*d.ops, *(replace(op, name=f"expert {op.name}", group="expert")
                                for op in e.ops)),
                     (*d.kernels, *(replace(k, name=f"expert {k.name}") for k in e.kernels))))
        for (w, d), (_, e) in zip(dense.steps, experts.steps, strict=True))
    return Plan(dense.scheme, steps)
