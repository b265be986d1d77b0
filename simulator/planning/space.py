"""The planner's search space: the GPU counts, layouts (tensor, pipeline, expert degrees,
schedules, micro-batches) and shard groups a request can take, and the plans among them that fit
in memory with the least recomputation (simulator/memory/peak.py first_fit). What a plan is
(`Candidate`) and the step it runs."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from profiles import HardwareProfile
from scape.plan import SchemeConfig
from simulator.layout.shapes import Routing
from simulator.memory.peak import first_fit, nccl_communicators, usable_bytes
from simulator.network.topology import domain_used
from simulator.planning.compare import parse_scheme
from simulator.planning.plan_request import PlanRequest
from simulator.step.step_config import (
    StepConfig,
    placeable,
    refuse_mapping_with,
    stack_attention,
)
from vocabulary.recompute import RECIPE_MODULES, for_model

MICRO_BATCHES = (1, 2, 4, 8)
TENSOR_DEGREES = (1, 2, 4, 8)  # searched where they divide the NVLink domain
MAX_PIPELINE = 64  # stages searched at most
# pipeline schedules searched for pp > 1: 1F1B, and Megatron's interleaved schedule over 2
# model chunks per stage and over the most of INTERLEAVED_MORE that leave each chunk a layer.
# More chunks shorten the bubble and (the warm-up's 2 (p - 1) + (v - 1) p chunk forwards of
# L / (p v) layers each) the activations held; they cost v times the stage-to-stage sends, so
# the fewest (2) stays searched beside the most. Published runs interleave far more than 2
# chunks (NeMo's GPT-3 175B: 12 per stage; Llama 3 405B on 16 stages)
PIPELINE_SCHEDULES = (("1f1b", 1), ("interleaved", 2))
INTERLEAVED_MORE = (8, 4)
# the first that fits, cheapest first: none; the norms recomputed (Megatron-Core's
# --recompute-modules layernorm; with fused attention Megatron's core-attention recompute
# saves nothing more); torchtitan's op-level policy; the whole layer
RECOMPUTE_ORDER = ("none", "selective-norm", "selective-op", "full")


@lru_cache(maxsize=256)
def recompute_order(model) -> tuple[str, ...]:
    """RECOMPUTE_ORDER, and for a model with experts or latent attention Megatron-Core's
    module recomputation after the norms: the cheap modules (latent attention's up-projections,
    the experts' activation), then the recipes' (vocabulary/recompute.py RECIPE_MODULES).
    Remembered per model: the planner asks it of every layout and scheme."""
    if model.moe is None and model.mla is None:
        return RECOMPUTE_ORDER
    base = ("core_attn", "layernorm")
    modules = (for_model(model, (*base, "mla_up_proj", "moe_act")),
               for_model(model, (*base, *RECIPE_MODULES)))
    return ("none", "selective-norm", *dict.fromkeys(modules), "selective-op", "full")
# the words every reason for a GPU count a measured profile did not measure carries: the
# planner tells those reasons apart from the others by them
UNMEASURED = "its measurements cover"



@lru_cache(maxsize=256)
def scheme_of(spec: str) -> SchemeConfig:
    """A plan's scheme, parsed once: a planner builds a step for thousands of candidates of a
    handful of schemes (the config is frozen, so they share it)."""
    return parse_scheme(spec)


@dataclass(frozen=True)
class Candidate:
    hardware: HardwareProfile
    gpus: int
    scheme: str
    tp: int
    micro_batch: int
    recompute: str
    memory_GB: float
    pp: int = 1
    schedule: str = "1f1b"
    chunks: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    shard_group: int | None = None  # hybrid sharding's group; None: every data-parallel rank
    # Megatron-Core's tp, cp, pp, dp rank order (a model replica on consecutive GPUs), searched
    # only where the default order cannot place a pipeline stage (layouts)
    mapping: bool = False

    def step_config(self, req: PlanRequest) -> StepConfig:
        """The step this plan runs."""
        moe = {} if req.model.moe is None else {
            "ep": self.ep, "etp": self.etp, "moe_imbalance": req.moe_imbalance,
            "moe_dispatcher": req.moe_dispatcher, "moe_overlap": req.moe_overlap,
            "moe_shared_overlap": req.moe_shared_overlap}
        return StepConfig(
            req.model, self.hardware, self.gpus, scheme_of(self.scheme),
            micro_batch=self.micro_batch, seq_len=req.seq, global_batch=req.batch, tp=self.tp,
            dtypes=req.dtypes, recompute=self.recompute, pp=self.pp, pp_schedule=self.schedule,
            virtual_stages=self.chunks if self.schedule == "interleaved" else None,
            tp_comm_overlap=req.tp_comm_overlap and self.tp > 1, cp=self.cp, fp8=req.fp8,
            fp8_recipe=req.precision.fp8_recipe, fp8_scope=req.precision.fp8_scope,
            shard_group=self.shard_group, tp_pp_dp_mapping=True if self.mapping else None,
            cuda_graphs=req.cuda_graphs,
            host_launch_us=req.host_launch_us, stack=req.stack, loss=req.loss,
            torch_compile=req.torch_compile, attention=stack_attention(req.stack, self.hardware),
            **moe)

    @property
    def communicators(self) -> int:
        """NCCL communicators its step uses (StepConfig's, peak.py step_communicators)."""
        return layout_communicators(self.gpus, self.tp, self.pp, self.cp, self.ep, self.etp,
                                    self.shard_group)


def layout_communicators(gpus: int, tp: int, pp: int, cp: int, ep: int, etp: int,
                         shard: int | None) -> int:
    """peak.py nccl_communicators of a planned layout."""
    return nccl_communicators(gpus // (tp * pp), tp, pp, cp, ep, etp, gpus // (pp * ep * etp),
                              shard)


def pipeline_degrees(n_layers: int) -> list[int]:
    """Pipeline stages searched, up to MAX_PIPELINE and the layer count: the divisors of the
    layer count (even stages) and the products of twos and threes (uneven splits,
    simulator/layout/pipeline.py stage_layers), so that node counts like 3, 6, 12 or 24 times a
    power of two have layouts."""
    top = min(n_layers, MAX_PIPELINE)
    smooth = {2**a * 3**b for a in range(7) for b in range(4)}
    return sorted(d for d in range(1, top + 1) if n_layers % d == 0 or d in smooth)


def gpu_counts(hw: HardwareProfile, req: PlanRequest) -> list[int]:
    """Every GPU count up to the request's max_gpus, in whole nodes, that a layout of the
    request fills: tensor x pipeline x data x context parallel, the data-parallel degree
    dividing the global batch (so its micro-batches split evenly)."""
    g, domain = hw.node.gpus_per_node, hw.node.domain_gpus
    tps = [t for t in TENSOR_DEGREES if domain % t == 0 or g % t == 0]
    dps = [d for d in range(1, req.batch + 1) if req.batch % d == 0]
    counts = {t * p * d * req.cp for t in tps for p in pipeline_degrees(req.model.arch.n_layers)
              for d in dps}
    return sorted(n for n in counts if n <= req.max_gpus and n % g == 0)


def expert_degrees(req: PlanRequest, domain: int, stage_gpus: int) -> list[int]:
    """Expert-parallel degrees searched for a pipeline stage of `stage_gpus` GPUs (at ETP
    `req.etp`, else 1): the one asked, else the powers of two that divide the experts and the
    stage and sit in one NVLink domain or fill whole ones, from half the largest that stays in
    one domain to 8 times it (more experts per rank cost memory, more ranks across the network
    cost dispatch time: the search keeps both sides of the domain; `domain`: the job's GPUs
    in one NVLink domain). [1] without experts."""
    moe = req.model.moe
    if moe is None:
        return [1]
    etp = req.etp or 1
    valid = [e for e in (2**i for i in range(17)) if e <= moe.n_experts
             and moe.n_experts % e == 0 and stage_gpus % (e * etp) == 0
             and (domain % (e * etp) == 0 or (e * etp) % domain == 0)
             and e >= req.moe_imbalance]  # a rank's load is at most all of them
    if req.ep is not None:
        return [req.ep] if req.ep in valid else []
    inside = max((e for e in valid if e * etp <= domain), default=1)
    return [e for e in valid if inside // 2 <= e <= inside * 8]


def shard_groups(scheme: str, ranks: int, tp: int, domain: int) -> list[int | None]:
    """Shard groups searched for a scheme over `ranks` data-parallel ranks: every rank (None),
    and for FSDP (dense-zero3) also hybrid sharding over one NVLink domain's data-parallel
    ranks (FSDP2 HSDP's usual group: gathers on NVLink, all-reduces across), where that is a
    proper divisor of the ranks."""
    inside = domain // tp
    if scheme != "dense-zero3" or inside < 2 or inside >= ranks or ranks % inside:
        return [None]
    return [None, inside]


def replica_order(req: PlanRequest, domain: int, tp: int, pp: int) -> bool:
    """Whether a layout whose pipeline stage the default rank order cannot place (part of an
    NVLink domain, or domains and a part) runs in Megatron-Core's tp-pp-dp order instead: a
    model replica of tp x cp x pp consecutive GPUs that divides a domain or fills whole ones
    (an NVL72 rack holds 64 of 72: MLPerf's Llama 3.1 405B runs, TP 4 x CP 2 x PP 8), on a
    step the order is modelled for (refuse_mapping_with, without hybrid sharding: try_fits
    searches no shard group in this order)."""
    return (refuse_mapping_with(req.model, None, req.stack) is None
            and placeable(tp * req.cp * pp, domain))


def layouts(req: PlanRequest, hw: HardwareProfile, gpus: int):
    """(tp, pp, schedule, chunks, ep, mapping) a job of `gpus` GPUs can take: tensor
    parallelism inside an NVLink domain dividing the heads and the sequence (sequence
    parallelism, on with tensor parallelism, splits it; context parallelism first, `req.cp`),
    pipeline stages that leave whole tensor- and context-parallel groups and at least a layer
    per model chunk, each stage in one NVLink domain or over whole ones (or else, `mapping`,
    a model replica so: replica_order), and for a model with experts the expert-parallel
    degrees `expert_degrees` searches."""
    n_layers, cp = req.model.arch.n_layers, req.cp
    domain = domain_used(hw, gpus)
    for tp in (t for t in TENSOR_DEGREES if domain % t == 0
               and req.model.arch.splits_over(t) and (req.seq // cp) % t == 0
               and t * cp <= gpus):
        for pp in pipeline_degrees(n_layers):
            stage = gpus // pp
            if gpus % (tp * pp * cp):
                continue
            # a stage in part of a node, or in whole nodes; else, pipelined, the replica order
            # if it can place the replica (pp 1: the same order as the default)
            mapping = not placeable(stage, domain)
            if mapping and (pp == 1 or not replica_order(req, domain, tp, pp)):
                continue
            for ep in expert_degrees(req, domain, gpus // pp):
                if pp == 1:
                    yield tp, pp, "1f1b", 1, ep, mapping
                    continue
                more = next((v for v in INTERLEAVED_MORE if pp * v <= n_layers), None)
                for schedule, chunks in (*PIPELINE_SCHEDULES, *(() if more is None else
                                                               (("interleaved", more),))):
                    if pp * chunks <= n_layers:
                        yield tp, pp, schedule, chunks, ep, mapping


def measured_counts(hw: HardwareProfile) -> set[int] | None:
    """The rank counts a measured profile can price (compute shared on one host up to its
    measured count; collectives at the counts whose per-call overhead was measured); None:
    any count (a profile of GPUs, priced from its hardware)."""
    counts = None
    if hw.slowdown:
        counts = set(range(1, len(hw.slowdown) + 1))
    for measured in hw.collectives.values():
        overheads = measured.get("overhead_s") or {}
        if overheads:  # one rank calls no collective
            counts = ({1, *overheads} if counts is None else counts & {1, *overheads})
    return counts


@dataclass(frozen=True)
class Try:
    """A layout and micro-batch a GPU count can take, before memory decides the schemes and
    the recomputation that fit."""

    tp: int
    pp: int
    schedule: str
    chunks: int
    ep: int
    micro_batch: int
    mapping: bool = False  # the tp-pp-dp rank order (Candidate.mapping)

    @property
    def layout(self) -> tuple:  # what the schemes that fit no smaller micro-batch share
        return self.tp, self.pp, self.schedule, self.chunks, self.ep, self.mapping


def count_reasons(req: PlanRequest, hw: HardwareProfile, counts: list[int], gpus_only,
                  why: Counter) -> None:
    """Why a profile has no GPU count to lay out at all (whole nodes, none filled)."""
    if req.max_gpus < hw.node.gpus_per_node:  # the planner rents whole nodes
        why[f"{hw.name}: --max-gpus {req.max_gpus} is below one node "
            f"({hw.node.gpus_per_node} GPUs), and plans rent whole nodes"] += 1
    elif not counts and gpus_only is None:  # whole nodes, but no layout fills them
        why[f"{hw.name}: no layout (tp x pp x dp x cp, dp dividing the global batch "
            f"{req.batch}) fills whole nodes of {hw.node.gpus_per_node} GPUs up to "
            f"--max-gpus {req.max_gpus}"] += 1


def count_tries(req: PlanRequest, hw: HardwareProfile, gpus: int, why: Counter) -> list[Try]:
    """Every layout and micro-batch of `gpus` GPUs that splits the global batch (memory not
    yet asked); why the others fail, counted in `why`."""
    priced = measured_counts(hw)
    if priced is not None and gpus not in priced:  # skipped, with the reason, not fatal
        why[f"{hw.name}: {gpus} GPU{'s' if gpus > 1 else ''}: {UNMEASURED} "
            f"{', '.join(map(str, sorted(priced))) or 'no'} ranks (scape calibrate "
            f"collectives --nprocs, compute --max-ranks)"] += 1
        return []
    if req.cp > 1 and gpus % req.cp:
        why[f"{gpus} GPUs do not split into --cp {req.cp} context-parallel ranks"] += 1
        return []
    shapes = list(layouts(req, hw, gpus))
    if not shapes and req.ep is not None:
        why[f"{hw.name}: {gpus} GPUs: --ep {req.ep} x --etp {req.etp or 1} divides no "
            "pipeline stage's GPUs in whole NVLink domains"] += 1
    elif not shapes:
        why[f"{hw.name}: {gpus} GPUs: no tensor-parallel degree divides the heads and "
            f"the sequence{' over --cp ' + str(req.cp) if req.cp > 1 else ''}"] += 1
    out = []
    for tp, pp, schedule, chunks, ep, mapping in shapes:
        dp = gpus // (tp * pp * req.cp)
        for mb in MICRO_BATCHES:
            if req.batch % (mb * dp):
                why["global batch does not split over the data-parallel ranks"] += 1
            elif chunks > 1 and (req.batch // (mb * dp)) % pp:
                why["interleaved: micro-batches not a multiple of the stages"] += 1
            else:
                out.append(Try(tp, pp, schedule, chunks, ep, mb, mapping))
    return out


def try_fits(req: PlanRequest, hw: HardwareProfile, gpus: int, t: Try, why: Counter,
             states: dict, too_big: dict) -> list[Candidate]:
    """The plans of one layout and micro-batch that fit in memory: every scheme (and shard
    group) with the least recomputation that fits; why the others do not, in `why`.
    `states`: each scheme's state per stage, shared by the micro-batches of a profile;
    `too_big`: per layout, the smallest micro-batch at which a scheme fitted with no policy
    (a larger one holds more activations and the same state, so it does not fit either:
    counted, not priced)."""
    etp, domain = req.etp or 1, domain_used(hw, gpus)
    tp, pp, chunks, ep, mb = t.tp, t.pp, t.chunks, t.ep, t.micro_batch

    def usable_room(shard: int | None) -> tuple[float, str]:
        # a plan must leave --min-spare-gb free: it fits in what remains of what the
        # allocator may hand out once the layout's NCCL communicators are held
        comms = layout_communicators(gpus, tp, pp, req.cp, ep, etp, shard)
        usable = usable_bytes(hw, comms) - 1e9 * (req.min_spare_GB or 0.0)
        room = f"{usable / 1e9:.0f} GB usable per GPU with {comms} NCCL communicators"
        if req.min_spare_GB is not None:
            room += f" once --min-spare-gb {req.min_spare_GB:g} is left free"
        return usable, room

    dp = gpus // (tp * pp * req.cp)
    routing = None if req.model.moe is None else Routing(ep, etp, req.moe_imbalance)
    failed = too_big.setdefault((hw.name, gpus, t.layout), {})
    kept = []
    for spec in req.schemes:
        scheme = scheme_of(spec)
        if pp > 1 and scheme.scheme == "dense-zero3":
            why["dense-zero3 (FSDP) with pipeline stages: not modelled"] += 1
            continue
        if failed.get(spec, math.inf) <= mb:
            why[f"does not fit in {hw.name} memory ({usable_room(None)[1]})"] += 1
            continue
        # hybrid sharding is laid out in the default order only (refuse_mapping_with)
        for shard in ([None] if t.mapping else
                      shard_groups(scheme.scheme, dp * req.cp, tp, domain)):
            usable, room = usable_room(shard)
            # what step_memory gives the plan's StepConfig (a test checks), without building
            # one for every try
            fit = first_fit(req.model, scheme, shard or dp * req.cp, tp, mb,
                            req.seq // req.cp, req.dtypes, recompute_order(req.model), usable,
                            pp, chunks,
                            req.batch // (mb * dp), states,
                            (spec, shard or dp, tp, pp, chunks, routing), routing,
                            gpus // (pp * ep * etp), req.fp8, req.loss, req.stack)
            if fit is None:
                if shard is None:  # a smaller shard group holds more
                    failed[spec] = min(failed.get(spec, math.inf), mb)
                why[f"does not fit in {hw.name} memory ({room})"] += 1
                break
            kept.append(Candidate(hw, gpus, spec, tp, mb, fit[0], fit[1] / 1e9, pp,
                                  t.schedule, chunks, req.cp, ep, etp, shard, t.mapping))
    return kept


def candidates(req: PlanRequest, gpus_only: int | None = None
               ) -> tuple[list[Candidate], Counter]:
    """Every configuration that fits in memory and splits the global batch; why others fail.
    `gpus_only`: only that GPU count's (report scaling prices one count at a time)."""
    kept, why = [], Counter()
    for hw in req.hardware:
        counts = [n for n in gpu_counts(hw, req) if gpus_only in (None, n)]
        count_reasons(req, hw, counts, gpus_only, why)
        states: dict = {}
        too_big: dict = {}
        for gpus in counts:
            for t in count_tries(req, hw, gpus, why):
                kept += try_fits(req, hw, gpus, t, why, states, too_big)
    return kept, why
