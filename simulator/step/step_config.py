"""What one training step is (`StepConfig`: model, hardware, GPUs, scheme, batch, layout,
pricing, checked by `validate`) and what its simulation reports (`StepResult`); the
simulation itself is simulator/step/simulate.py (DESIGN section 6)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from profiles import HardwareProfile, ModelProfile, UserError
from scape.plan import CommOp, Dtypes, Plan, SchemeConfig, StepPlan, plan
from simulator.layout.pipeline import fills
from simulator.layout.shapes import Routing
from simulator.network.collective import MAX_GPUS
from simulator.network.collectives import ALGORITHMS, AUTO
from simulator.network.engine import Span
from simulator.network.topology import build_topology, domain_used
from simulator.step.compute import (
    BF16_OPTIMIZER_ACCUM_BYTES,
    check_fp8,
    check_fp8_recipe,
    check_fp8_scope,
    fp8_recipe_or_default,
    fp8_scope_or_default,
)
from vocabulary.names import (
    LOSSES,
    MOE_DISPATCHERS,
    OPTIMIZER_DTYPES,
    SCHEDULES,
    STACKS,
)
from vocabulary.recompute import check as check_recompute

DEFAULT_ALGO = "auto"  # per collective and size, the fastest registered algorithm


# bounds far below or above any training run: a typo is refused, not priced
MIN_MFU = 1e-3


MAX_ACCUM = 10**9  # micro-batches in one step


# the scheme whose traffic and memory FSDP has under pipeline parallelism: a stage's
# parameters gathered once and kept through every micro-batch, its gradients accumulated
# whole and reduce-scattered once after the last (torchtitan's parallelize.py:
# 'reshard_after_forward = not pp_enabled', 'For PP, do not reshard after forward to avoid
# per-microbatch all-gathers'; PyTorch's pipeline schedules sync FSDP gradients on the last
# micro-batch only), the sharded state updated: Megatron's distributed optimizer, ZeRO-1
FSDP_UNDER_PP = "dense-zero1"


# the token dispatchers Megatron-Core runs the shared-expert overlap with
# (megatron/core/transformer/transformer_config.py: "moe_shared_expert_overlap only works with
# alltoall or flex token dispatcher")
SHARED_OVERLAP_DISPATCHERS = ("alltoall", "flex")


@dataclass(frozen=True)
class StepConfig:
    model: ModelProfile
    hardware: HardwareProfile
    gpus: int
    scheme: SchemeConfig
    micro_batch: int = 1
    seq_len: int | None = None  # default: the model profile's
    grad_accum: int = 1  # ignored when global_batch is given
    global_batch: int | None = None  # sequences per step over all data-parallel ranks
    tp: int = 1
    dtypes: Dtypes = field(default_factory=Dtypes)
    algo: str = DEFAULT_ALGO
    chunks: int | None = None  # layer chunks for gradient release; default: one per layer
    recompute: str = "none"  # none | selective (attention core) | full (the whole layer)
    sequence_parallel: bool = True  # Megatron's sequence parallelism with tensor parallelism
    mfu: float | None = None  # the user's MFU; None: from the profile (shapes or its MFU)
    attention: str = "flash"  # flash | unfused (Megatron-LM before FlashAttention)
    pp: int = 1  # pipeline-parallel stages (simulator/layout/pipeline.py)
    pp_schedule: str = "1f1b"  # 1f1b | interleaved
    virtual_stages: int | None = None  # model chunks per stage, interleaved; None: 2
    # tensor-parallel collectives overlapped with their GEMMs (simulator/step/tp_overlap.py)
    tp_comm_overlap: bool = False
    # context-parallel ranks splitting each sequence (simulator/step/cp_comm.py); they share the
    # micro-batch, so the data-parallel degree (and the batch) is gpus / (tp pp cp)
    cp: int = 1
    # the layers' linear GEMMs in FP8 (Transformer Engine) and their sequence-parallel
    # all-gathers (simulator/step/roofline.py, simulator/step/tp_overlap.py)
    fp8: bool = False
    # the loss on the last stage: cross-entropy on fp32 logits, fused, or chunked
    # (simulator/memory/activations.py LOSS_BYTES); it moves memory, not time
    loss: str = "fp32"
    # the optimizer's moments and master copy: fp32, or bf16 (NeMo's distributed_fused_adam
    # dtype bf16 with 16-bit master remainders; Megatron-Core's precision-aware optimizer)
    optimizer_dtype: str = "fp32"
    # what the training stack keeps beside the layers' activations (vocabulary STACKS,
    # simulator/memory/activations.py): megatron, or torchtitan; and how it runs the layers'
    # elementwise ops: Megatron-Core's fused kernels, torchtitan's eager PyTorch ops unless
    # `torch_compile` (its --compile.enable) fuses them (simulator/layout/shapes.py
    # eager_extra)
    stack: str = "megatron"
    torch_compile: bool = False
    # cross-entropy passes over the logits beside the loss, forward only, every micro-batch: a
    # trainer's training metrics (Composer computes llm-foundry's LanguageCrossEntropy and
    # LanguagePerplexity on each micro-batch's logits: simulator/step/roofline.py METRIC_CE_BYTES)
    metric_passes: int = 0
    # expert parallelism (simulator/step/moe.py): ranks a MoE layer's experts are spread over,
    # and the tensor-parallel split of each expert (None: --tp, Megatron-Core's default for
    # --expert-tensor-parallel-size)
    ep: int = 1
    etp: int | None = None
    # the busiest expert-parallel rank's tokens over the mean (max/mean expert load; 1: even)
    moe_imbalance: float = 1.0
    moe_dispatcher: str = "alltoall"  # alltoall | allgather | flex (Megatron-Core's dispatchers)
    moe_overlap: bool = False  # dispatch and combine beside another micro-batch's compute
    # the shared expert's GEMMs beside its own layer's dispatch and combine (Megatron-Core
    # --moe-shared-expert-overlap; simulator/step/moe.py shared_beside)
    moe_shared_overlap: bool = False
    # hybrid sharding (FSDP2 HSDP, torchtitan's data_parallel_shard_degree; Megatron's
    # --num-distributed-optimizer-instances): a ZeRO scheme shards over groups of this many
    # data-parallel ranks and all-reduces the gradient shards across the groups; None: one
    # group of every data-parallel rank
    shard_group: int | None = None
    # the distributed optimizer gathers FP8 parameters, 1 byte each (Megatron-Core
    # --fp8-param-gather; torchtitan's float8 all-gather); needs fp8
    fp8_param_gather: bool = False
    # how an FP8 run scales its casts (Megatron-LM --fp8-recipe: tensorwise, delayed, mxfp8,
    # blockwise; simulator/layout/shapes.py FP8_RECIPES); None: not given, Megatron's default
    # (delayed); needs fp8
    fp8_recipe: str | None = None
    # which GEMMs an FP8 run quantizes (names.py FP8_SCOPES: all, or the routed experts'
    # alone, torchtitan's --quantize.grouped_mm); None: not given, all; needs fp8
    fp8_scope: str | None = None
    # torchtitan before 2025: PyTorch's pipelining kept every micro-batch's outputs until the
    # next step (simulator/memory/activations.py pipeline_buffers_per_token); None: not given,
    # today's torchtitan (none kept)
    pp_kept_outputs: bool | None = None
    # the layers captured as CUDA graphs (Megatron-Core --cuda-graph-impl, TE
    # make_graphed_callables): no host launch per kernel, so no pass waits for the host
    # (simulator/step/roofline.py host_launch_s)
    cuda_graphs: bool = False
    # the host's time to launch one kernel, microseconds (None: the profile's [nccl]
    # launch_us, CUDA's own launch cost: a floor under any framework's per-op overhead)
    host_launch_us: float | None = None
    # multi-token prediction layers (Megatron-Core --mtp-num-layers; DeepSeek-V3 report
    # section 2.2: one): each a decoder layer and a second pass of the output layer and loss,
    # on the last pipeline stage's last model chunk (simulator/step/simulate.py _stage_times);
    # its 2h -> h projection's time is not priced (DeepSeek-V3: 4h^2 FLOPs a token, a sixth
    # of its layer's GEMMs), its parameters are (simulator/memory/peak.py)
    mtp_layers: int = 0
    # Megatron-Core's --pipeline-model-parallel-layout (simulator/layout/pp_layout.py): the
    # decoder layers of each model chunk; None: the even split (pipeline.py stage_layers)
    pp_layout: str | None = None
    # Megatron-Core --use-tp-pp-dp-mapping (parallel_state.RankGenerator order "tp-cp-ep-pp-dp"
    # against the default "tp-cp-ep-dp-pp"): a model replica's tp x cp x pp GPUs consecutive,
    # so a stage's neighbour is tp x cp ranks away and its data-parallel peers a replica apart
    tp_pp_dp_mapping: bool = False

    @property
    def keeps_pp_outputs(self) -> bool:
        """Pipeline stages keep every micro-batch's outputs until the next step (asked, on
        the torchtitan stack)."""
        return bool(self.pp_kept_outputs)

    @property
    def quantized_gemms(self) -> str:
        """Which GEMMs run in FP8 under --fp8 (compute.fp8_scope_or_default)."""
        return fp8_scope_or_default(self.fp8_scope)

    @property
    def cast_recipe(self) -> str:
        """The FP8 recipe the casts are priced with (compute.fp8_recipe_or_default)."""
        return fp8_recipe_or_default(self.fp8_recipe)

    @property
    def accum_pass_bytes(self) -> float:
        """Bytes a parameter moves after each micro-batch's backward beside the layers' own
        work: DeepSpeed's BF16_Optimizer folds the bf16 gradient into an fp32 one
        (simulator/step/compute.py BF16_OPTIMIZER_ACCUM_BYTES); Megatron's and torchtitan's
        backward writes or accumulates its gradient in place (none)."""
        return BF16_OPTIMIZER_ACCUM_BYTES if self.stack == "deepspeed" else 0.0

    @property
    def eager_kernels(self) -> bool:
        """The layers' elementwise ops run one PyTorch kernel each: torchtitan without
        torch.compile."""
        return self.stack == "torchtitan" and not self.torch_compile

    @property
    def domain(self) -> int:
        """GPUs of this job in one NVLink domain (simulator/network/topology.py domain_used)."""
        return domain_used(self.hardware, self.gpus)

    @property
    def expert_tp(self) -> int:
        """Tensor-parallel ranks of each expert: --etp, else --tp."""
        return self.tp if self.etp is None else self.etp

    @property
    def routing(self):
        """How a MoE layer's tokens reach its experts (None for a dense model)."""
        if self.model.moe is None:
            return None
        return Routing(self.ep, self.expert_tp, self.moe_imbalance)

    @property
    def edp(self) -> int:
        """Ranks an expert's gradients are reduced over: what is left of a pipeline stage's
        GPUs after expert parallelism and expert tensor parallelism (Megatron-Core's expert
        data-parallel group)."""
        return self.gpus // (self.pp * self.ep * self.expert_tp)

    @property
    def chunks_pp(self) -> int:
        """Model chunks per pipeline stage: 1 for 1F1B."""
        if self.pp_schedule != "interleaved":
            return 1
        return 2 if self.virtual_stages is None else self.virtual_stages

    @property
    def seq(self) -> int:
        return self.model.arch.seq_len if self.seq_len is None else self.seq_len

    @property
    def stage0_layers(self) -> int:
        """Layers on the first pipeline stage (all of them without pipelining)."""
        if self.pp == 1:
            return self.model.arch.n_layers
        return sum(self.layer_split()[0])

    def layer_split(self) -> list[list[int]]:
        """Decoder layers of each model chunk, [stage][chunk]: the --pipeline-model-parallel-
        layout's, else the even split."""
        from simulator.layout.pipeline import stage_layers
        from simulator.layout.pp_layout import parse_layout

        if self.pp_layout is not None:
            return [list(row) for row in parse_layout(
                self.pp_layout, self.model.arch.n_layers, self.pp, self.chunks_pp,
                self.mtp_layers)]
        return stage_layers(self.model.arch.n_layers, self.pp, self.chunks_pp)

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def activation_values(self) -> float:
        """One layer's activations on one GPU before the tensor-parallel split: b s h of this
        context-parallel rank's tokens (what tensor-parallel collectives and pipeline sends
        carry)."""
        return self.micro_batch * self.seq / self.cp * self.model.arch.d_model

    @property
    def grad_ranks(self) -> int:
        """Ranks of a gradient reduction (and of the distributed optimizer's shards): the data-
        parallel ranks with the context-parallel ones, which hold other tokens of the same
        micro-batch (Megatron-Core's data-parallel group with context parallelism)."""
        return self.dp * self.cp

    @property
    def accum(self) -> int:
        """Micro-batches per step: from the global batch when given."""
        if self.global_batch is None:
            return self.grad_accum
        return self.global_batch // (self.micro_batch * self.dp)

    @property
    def sequences(self) -> int:
        """Sequences per step over every data-parallel rank (the global batch, resolved)."""
        return self.micro_batch * self.accum * self.dp

    @property
    def plan_dtypes(self) -> Dtypes:
        """The dtypes the scheme's collectives and the weights use: parameters at 1 byte where
        the distributed optimizer gathers them in FP8 (and keeps them so)."""
        return replace(self.dtypes, param_bytes=1) if self.fp8_param_gather else self.dtypes

    @property
    def shard_ranks(self) -> int:
        """Ranks one copy of the sharded state is spread over: the shard group, else every
        gradient-reducing rank."""
        return self.grad_ranks if self.shard_group is None else self.shard_group

    @property
    def group_worlds(self) -> dict[str, int]:
        """Ranks of each group kind a plan's ops run over (scape/plan/types.py CommOp.group)."""
        return {"dp": self.grad_ranks, "expert": self.edp, "shard": self.shard_ranks,
                "replica": self.grad_ranks // self.shard_ranks, "tied": 2}

    def _plan(self) -> Plan:
        """The scheme's plan for this step's data-parallel group (of the first pipeline
        stage, which ends the backward last); with a shard group, the scheme's plan over it
        and the all-reduce of each gradient shard across the groups (`hybrid`)."""
        tensors = self.dense_tensors
        n = sum(size for size, _ in tensors)
        if self.shard_group is not None and self.shard_group < self.grad_ranks:
            return hybrid(plan(self.scheme, n, self.shard_group, self.plan_dtypes),
                          n / self.shard_group * self.plan_dtypes.grad_bytes)
        return self._tied(plan(self.scheme, n, self.grad_ranks, self.plan_dtypes,
                               tensors=[size for size, _ in tensors],
                               dense=[d for _, d in tensors]))

    @property
    def dense_tensors(self) -> list[tuple[int, bool]]:
        """The first stage's dense tensors as one rank holds them, (elements, is a vector), in
        buffer order: a tensor-parallel rank holds 1/t of every weight matrix (and of the
        vocabulary) and the whole of every norm and bias vector, replicated over the group
        (Megatron)."""
        stage = self.model.stage_tensors(self.pp, self.stage0_layers)
        return [(size if vector else math.ceil(size / self.tp), vector)
                for size, vector in stage]

    @property
    def expert_tensors(self) -> list[int]:
        """The first stage's routed-expert tensors one rank holds (elements): 1/EP of the
        experts, each cut over the expert tensor-parallel ranks; [] without experts."""
        experts = self.model.stage_expert_tensors(self.stage0_layers)
        local = experts[: len(experts) // self.ep]
        return [math.ceil(size / self.expert_tp) for size, _ in local]

    def _tied(self, p: Plan) -> Plan:
        """`p` with DeepSpeed's tied-embedding reduction where the deepspeed stack pipelines a
        model whose output layer is its word embedding: the first and the last stage each hold
        the embedding (TiedLayerSpec), and after the last micro-batch each pair of them (one
        rank of the first stage, its counterpart on the last) all-reduces its fp32 gradient
        (BF16_Optimizer's hp_grad) before the data-parallel reduction
        (deepspeed/runtime/pipe/engine.py _exec_reduce_tied_grads, as of DeepSpeed 6719b46;
        module.py _index_tied_modules makes one group per data- and tensor-parallel rank).
        The first stage waits for it: it ends the backward last."""
        a = self.model.arch
        if self.stack != "deepspeed" or self.pp == 1 or not a.tied_embeddings:
            return p
        size = math.ceil(a.vocab_size * a.d_model / self.tp) * 4  # bytes: fp32, a TP shard
        tied = CommOp("tied embedding all-reduce", "all_reduce", size, "after_backward",
                      group="tied")
        return replace(p, steps=tuple((w, replace(s, ops=(tied, *s.ops)))
                                      for w, s in p.steps))

    def _expert_plan(self) -> Plan | None:
        """The scheme's plan for the routed experts of the first stage's layers, over the
        expert data-parallel group: an expert-parallel rank holds 1/EP of the experts, each cut
        over the expert tensor-parallel ranks (Megatron-Core reduces expert gradients over
        their own group, apart from the dense ones: distributed/distributed_data_parallel.py,
        expert_data_parallel_group). None for a model without experts."""
        tensors = self.expert_tensors
        if not tensors:
            return None
        return plan(self.scheme, sum(tensors), self.edp, self.plan_dtypes, tensors=tensors,
                    dense=[False] * len(tensors))

    def validate(self) -> StepConfig:
        self.scheme.validate()
        if self.mtp_layers < 0:
            raise UserError(f"--mtp-layers must be 0 or more, got {self.mtp_layers}")
        if self.pp_layout is not None:
            if self.pp == 1:
                raise UserError("--pipeline-model-parallel-layout places layers on pipeline "
                                "stages: give --pp above 1, or leave it out")
            self.layer_split()  # refused here, with its rule, if it does not fit
        g = self.domain
        if not 1 <= self.gpus <= MAX_GPUS:
            raise UserError(f"gpus must be between 1 and {MAX_GPUS:,}, got {self.gpus}")
        if self.algo != AUTO:
            # a forced algorithm must exist for every collective the step issues
            known = sorted({a for algos in ALGORITHMS.values() for a in algos})
            if self.algo not in known:
                raise UserError(f"unknown --algo {self.algo!r}; choose auto or one of: "
                                f"{', '.join(known)}")
            plans = [self._plan(), self._expert_plan()]
            used = {op.collective for p in plans if p is not None for _, s in p.steps
                    for op in s.ops}
            if self.model.moe is not None and self.expert_tp > 1 and self.expert_tp != self.tp:
                used |= {"all_gather", "reduce_scatter"}  # the ETP gather (step/moe.py)
            if self.tp > 1:  # the tensor-parallel group's, as tp_overlap.layer_tp_s runs them
                used |= ({"all_gather", "reduce_scatter"} if self.sequence_parallel
                         else {"all_reduce"})
            unsupported = sorted(op for op in used if self.algo not in ALGORITHMS[op])
            if unsupported:
                raise UserError(
                    f"--algo {self.algo} does not run {', '.join(unsupported)}"
                    f" (this step's collectives); use auto or one of: "
                    f"{', '.join(sorted(set.intersection(*(set(ALGORITHMS[o]) for o in used))))}")
        if self.tp < 1 or not placeable(self.tp, g) or self.tp > self.gpus:
            raise UserError(f"tensor-parallel degree must divide the {g} GPUs of a "
                            f"{self.hardware.name} NVLink domain, or fill whole domains (over "
                            f"the network), got --tp {self.tp}{self._valid_tp()}")
        if self.model.arch.n_heads % self.tp:
            raise UserError(f"tensor-parallel degree {self.tp} must divide the "
                            f"{self.model.arch.n_heads} attention heads of {self.model.name}"
                            f"{self._valid_tp()}")
        if not self.model.arch.splits_over(self.tp):  # whole key/value groups per rank
            raise UserError(f"tensor-parallel degree {self.tp} must divide the "
                            f"{self.model.arch.n_kv_heads} key/value heads of {self.model.name}"
                            f"{self._valid_tp()}")
        if self.tp_comm_overlap and not (self.tp > 1 and self.sequence_parallel):
            raise UserError("--tp-comm-overlap overlaps the all-gathers and reduce-scatters of "
                            "sequence parallelism: it needs --tp above 1 and sequence "
                            "parallelism on")
        check_cp(self.cp, self.seq, self.attention)
        if self.fp8:
            check_fp8(self.model, self.hardware, self.mfu)
        if self.sequence_parallel and self.tp > 1 and (self.seq // self.cp) % self.tp:
            raise UserError(f"sequence parallelism (on by default with --tp; "
                            f"--no-sequence-parallel turns it off) splits the sequence over "
                            f"--tp {self.tp} ranks: --seq-len {self.seq}"
                            + (f" / --cp {self.cp}" if self.cp > 1 else "") + " does not divide")
        if self.gpus % self.tp:
            raise UserError(f"gpus ({self.gpus}) must be a multiple of --tp {self.tp}")
        self._validate_pipeline()
        stage = self.gpus // self.pp
        if self.tp_pp_dp_mapping and self.pp > 1:  # pp 1: the same order as the default
            self._validate_mapping()
        elif self.pp > 1 and not placeable(stage, self.domain):  # pp 1: the node-size rule
            valid = [p for p in range(1, self.gpus + 1) if self.gpus % p == 0
                     and placeable(self.gpus // p, self.domain)
                     and fills(self.model.arch.n_layers, p, self.chunks_pp)]
            raise UserError(f"--pp {self.pp} leaves {stage} GPUs a stage, which neither divide "
                            f"the {self.domain} GPUs of a node nor fill whole nodes (a stage's "
                            f"collectives need the same GPUs on every node they span): --pp "
                            f"valid here {_nearest(valid, self.pp)}")
        self._validate_experts()
        self._validate_sharding()
        if self.pp > 1 and self.scheme.scheme == "dense-zero3":
            raise UserError(f"dense-zero3 (FSDP) with pipeline parallelism is not modelled: "
                            f"under pipelining FSDP keeps a stage's parameters gathered "
                            f"through the step and reduces its gradients once (torchtitan: "
                            f"reshard_after_forward off with PP), {FSDP_UNDER_PP}'s traffic and "
                            f"memory: give -s {FSDP_UNDER_PP} with --pp, or --pp 1")
        if self.optimizer_dtype not in OPTIMIZER_DTYPES:
            raise UserError(f"--optimizer-dtype must be one of {', '.join(OPTIMIZER_DTYPES)}, "
                            f"got {self.optimizer_dtype!r}")
        check_host_launch(self.cuda_graphs, self.host_launch_us)
        check_compile(self.stack, self.torch_compile)  # the stack named, and --compile on it
        if self.stack == "deepspeed":
            self._validate_deepspeed()
        if (not isinstance(self.metric_passes, int) or isinstance(self.metric_passes, bool)
                or self.metric_passes < 0):
            raise UserError(f"--metric-passes must be a whole number of passes, 0 or more, got "
                            f"{self.metric_passes!r}")
        if self.loss not in LOSSES:
            raise UserError(f"--loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        check_recompute(self.recompute)
        if self.mfu is not None and not 0 < self.mfu <= 1:
            raise UserError(f"--mfu must be in (0, 1], got {self.mfu!r}")
        if self.mfu is not None and self.mfu < MIN_MFU:
            raise UserError(f"--mfu {self.mfu!r}: below {MIN_MFU:g} ({MIN_MFU:.1%} of peak) "
                            "is no training run; give the share of peak the GPU reaches")
        for name, value in (("micro-batch", self.micro_batch), ("grad-accum", self.grad_accum),
                            ("seq-len", self.seq)):
            if value < 1:
                raise UserError(f"{name} must be at least 1, got {value}")
        if self.accum > MAX_ACCUM:
            raise UserError(f"a step of {self.accum:,} micro-batches (--grad-accum or "
                            f"--global-batch): at most {MAX_ACCUM:,}")
        a = self.model.arch
        if self.model.family == "gpt" and self.seq > a.seq_len:
            # a GPT's learned position table has one row per position (its parameters count
            # them); rotary models (llama) run longer sequences than their profile's
            raise UserError(f"--seq-len {self.seq}: {self.model.name} has learned positions for "
                            f"{a.seq_len} tokens; give at most {a.seq_len}, or a model profile "
                            "with a longer context")
        build_topology(self.hardware, self.gpus)  # the GPU count must fill whole nodes
        if self.global_batch is not None:
            if self.global_batch < 1:
                raise UserError(f"--global-batch must be at least 1, got {self.global_batch}")
            per_step = self.micro_batch * self.dp
            if self.global_batch < per_step or self.global_batch % per_step:
                below = self.global_batch // per_step * per_step
                near = ", ".join(str(b) for b in (below, below + per_step) if b > 0)
                raise UserError(
                    f"global batch {self.global_batch} does not split into micro-batches of "
                    f"{self.micro_batch} over {self.dp} data-parallel ranks: the nearest that "
                    f"do are {near} (multiples of {per_step})")
        return self


    def notes(self) -> list[str]:
        """What the step does that a reader should know: groups spanning NVLink domains,
        priced over the network."""
        g, out = self.domain, []
        if self.tp > g:
            out.append(f"tensor parallelism {self.tp} spans {self.tp // g} NVLink domains of "
                       f"{g} GPUs: its per-layer collectives are priced over the network")
        if self.shard_group is not None:
            out.append(f"hybrid sharding: {self.scheme.scheme}'s state sharded over groups of "
                       f"{self.shard_group} data-parallel ranks, gradient shards all-reduced "
                       f"across {self.grad_ranks // self.shard_group} groups")
        block = self.ep * self.expert_tp
        if self.model.moe is not None and block > g:
            out.append(f"expert parallelism {self.ep} x {self.expert_tp} spans {block // g} "
                       f"NVLink domains of {g} GPUs: dispatch and combine cross the network")
        return out

    def _valid_tp(self) -> str:
        """The tensor-parallel degrees this step could take, for a refusal (only then)."""
        g = self.domain
        valid = [t for t in range(1, self.gpus + 1)
                 if placeable(t, g) and self.model.arch.splits_over(t)
                 and self.gpus % t == 0]
        return f": valid here {_nearest(valid, self.tp)}"

    def _validate_deepspeed(self) -> None:
        """The deepspeed stack prices Megatron-DeepSpeed with bf16 as BLOOM ran it: DeepSpeed's
        pipeline engine (1F1B, no interleaving) and its BF16_Optimizer, a ZeRO-1 of its own
        that all-reduces fp32 gradients after the last micro-batch (deepspeed_scheme). What
        it does not run is refused with the rule."""
        s = self.scheme
        if s.scheme not in DEEPSPEED_SCHEMES:
            raise UserError(f"--stack deepspeed prices DeepSpeed's BF16_Optimizer (bf16 with "
                            f"ZeRO stage 0, its own ZeRO-1): give -s dense-adamw, dense-adams or "
                            f"dense-zero1 (compare: --schemes dense-adamw,dense-adams), not "
                            f"{s.scheme}")
        if s.overlap_grad_reduce or s.overlap_param_gather or not s.grad_all_reduce:
            raise UserError(DEEPSPEED_OVERLAP)
        if self.dtypes.grad_bytes != 4:
            raise UserError("--stack deepspeed: DeepSpeed's BF16_Optimizer accumulates and "
                            "all-reduces fp32 gradients (bf16_optimizer.py "
                            "get_grads_for_reduction); leave --grad-dtype out or give fp32")
        if self.pp > 1 and self.pp_schedule != "1f1b":
            raise UserError("--stack deepspeed: DeepSpeed's pipeline engine runs 1F1B "
                            "(deepspeed/runtime/pipe/schedule.py TrainSchedule), no "
                            "interleaving: give --pp-schedule 1f1b")
        if self.model.moe is not None or self.fp8 or self.shard_group is not None:
            raise UserError("--stack deepspeed prices a dense bf16 Megatron-DeepSpeed run: "
                            "experts, --fp8 and --shard-group are not modelled on it")

    def _validate_sharding(self) -> None:
        """A shard group divides the data-parallel ranks and belongs to a ZeRO scheme; FP8
        parameter gathers need FP8 and a scheme that gathers parameters."""
        s = self.shard_group
        if s is not None:
            if self.scheme.scheme not in ZERO_SCHEMES:
                raise UserError(f"--shard-group {s}: hybrid sharding shards a ZeRO scheme's "
                                f"state ({', '.join(sorted(ZERO_SCHEMES))}), not "
                                f"{self.scheme.scheme}'s")
            if s < 1 or self.grad_ranks % s:
                valid = [d for d in range(1, self.grad_ranks + 1) if self.grad_ranks % d == 0]
                raise UserError(f"--shard-group {s} must divide the {self.grad_ranks} "
                                f"data-parallel ranks: valid {_nearest(valid, s)}")
        if self.pp_kept_outputs and self.stack != "torchtitan":
            raise UserError("--pp-kept-outputs is how PyTorch's pipelining held outputs before "
                            "2025 (torchtitan); Megatron frees a sent output "
                            "(deallocate_output_tensor): give --stack torchtitan or leave it "
                            "out")
        if self.pp_kept_outputs is not None and self.pp == 1:
            raise UserError("--pp-kept-outputs/--no-pp-kept-outputs says what pipeline stages "
                            "keep, and --pp 1 has none: give --pp above 1 or leave it out")
        check_fp8_recipe(self.hardware, self.fp8_recipe, self.fp8)
        check_fp8_scope(self.model, self.fp8_scope, self.fp8)
        if self.fp8_param_gather:
            if not self.fp8:
                raise UserError("--fp8-param-gather gathers the FP8 weights of an FP8 run: "
                                "give --fp8 too")
            if self.scheme.scheme not in ZERO_SCHEMES:
                raise UserError(f"--fp8-param-gather: {self.scheme.scheme} gathers no "
                                f"parameters (the distributed optimizer and FSDP do: "
                                f"{', '.join(sorted(ZERO_SCHEMES))})")
            if self.quantized_gemms != "all":
                # the gathers price every parameter at a byte; with the experts alone in FP8
                # the other weights would travel 16-bit (not modelled)
                raise UserError("--fp8-param-gather gathers every weight at a byte, and "
                                f"--fp8-scope {self.fp8_scope} keeps the weights outside the "
                                "routed experts 16-bit: leave one of them out")

    def _validate_experts(self) -> None:
        """Expert parallelism as Megatron-Core takes it: EP divides the experts, EP x ETP
        divides a pipeline stage's GPUs (what is left is the expert data-parallel group), and
        the EP x ETP block sits in one NVLink domain or fills whole ones."""
        moe = self.model.moe
        if moe is None:
            refuse_expert_options(self.model, [
                f for f, on in (("--ep", self.ep != 1), ("--etp", self.etp is not None),
                                ("--moe-imbalance", self.moe_imbalance != 1.0),
                                ("--moe-overlap", self.moe_overlap),
                                ("--moe-shared-overlap", self.moe_shared_overlap)) if on])
            return
        if self.ep < 1 or moe.n_experts % self.ep:
            valid = [e for e in range(1, moe.n_experts + 1) if moe.n_experts % e == 0]
            raise UserError(f"--ep {self.ep} must divide the {moe.n_experts} experts of "
                            f"{self.model.name}: valid {_nearest(valid, self.ep)}")
        if self.expert_tp < 1:
            raise UserError(f"--etp must be at least 1, got {self.expert_tp}")
        stage = self.gpus // self.pp
        block = self.ep * self.expert_tp
        if block > stage or stage % block:
            valid = [e for e in range(1, moe.n_experts + 1)
                     if moe.n_experts % e == 0 and stage % (e * self.expert_tp) == 0]
            etps = [t for t in range(1, stage // self.ep + 1) if stage % (self.ep * t) == 0]
            # --etp not given is --tp (Megatron-Core's default): say so, and which ETP fits
            implied = " (not given: --tp, Megatron-Core's default)" if self.etp is None else ""
            raise UserError(f"--ep {self.ep} x --etp {self.expert_tp}{implied} = {block} must "
                            f"divide the {stage} GPUs of a pipeline stage (gpus / --pp): --ep "
                            f"valid here {_nearest(valid, self.ep)}"
                            + (f"; or keep --ep {self.ep} with --etp "
                               f"{_nearest(etps, self.expert_tp)}"
                               if etps and moe.n_experts % self.ep == 0 else ""))
        g = self.domain
        if not placeable(block, g):
            raise UserError(f"--ep {self.ep} x --etp {self.expert_tp} = {block} GPUs must "
                            f"divide the {g} GPUs of a {self.hardware.name} NVLink domain or "
                            f"fill whole domains")
        if not (math.isfinite(self.moe_imbalance) and 1.0 <= self.moe_imbalance <= self.ep):
            raise UserError(f"--moe-imbalance is the busiest expert-parallel rank's tokens over "
                            f"the mean: between 1 (even) and --ep ({self.ep}: one rank takes "
                            f"them all), got {self.moe_imbalance!r}")
        if self.moe_dispatcher not in MOE_DISPATCHERS:
            raise UserError(f"--moe-dispatcher must be one of {', '.join(MOE_DISPATCHERS)}, got "
                            f"{self.moe_dispatcher!r}")
        if self.moe_shared_overlap:
            if not moe.shared_width:
                raise UserError(f"--moe-shared-overlap overlaps the shared expert with the "
                                f"dispatch; {self.model.name} has no shared expert: leave it "
                                "out")
            if self.moe_dispatcher not in SHARED_OVERLAP_DISPATCHERS:
                raise UserError("--moe-shared-overlap runs with the alltoall or flex dispatcher "
                                "(Megatron-Core: 'moe_shared_expert_overlap only works with "
                                f"alltoall or flex token dispatcher'), got "
                                f"--moe-dispatcher {self.moe_dispatcher}")

    def _validate_mapping(self) -> None:
        """--use-tp-pp-dp-mapping: a model replica (tp x cp x pp consecutive GPUs) inside an
        NVLink domain or over whole domains, so every data-parallel group has the same GPUs
        on each domain it spans; and nothing laid out only in the default order."""
        other = refuse_mapping_with(self.model, self.shard_group, self.stack)
        if other is not None:
            raise UserError(f"--use-tp-pp-dp-mapping is not modelled with {other}: leave it "
                            "out (Megatron's default rank order)")
        replica = self.tp * self.cp * self.pp
        if not placeable(replica, self.domain):
            raise UserError(f"--use-tp-pp-dp-mapping puts a model replica's tp x cp x pp = "
                            f"{replica} GPUs on consecutive GPUs, which neither divide the "
                            f"{self.domain} GPUs of a node nor fill whole nodes (its data-"
                            "parallel groups need the same GPUs on every node they span): "
                            "change --tp, --cp or --pp, or leave the mapping out")

    def _validate_pipeline(self) -> None:
        if self.pp < 1:
            raise UserError(f"--pp must be at least 1, got {self.pp}")
        if self.gpus % (self.tp * self.pp * self.cp):
            rest = self.gpus // (self.tp * self.cp) if self.gpus % (self.tp * self.cp) == 0 else 0
            valid = [p for p in range(1, min(rest, self.model.arch.n_layers) + 1)
                     if rest % p == 0]
            raise UserError(f"gpus ({self.gpus}) must be a multiple of --tp x --pp "
                            + (f"x --cp ({self.tp} x {self.pp} x {self.cp})" if self.cp > 1
                               else f"({self.tp} x {self.pp})")
                            + (f": --pp that divide here: {_nearest(valid, self.pp)}" if valid
                               else ""))
        if self.pp_schedule not in SCHEDULES:
            raise UserError(f"--pp-schedule must be one of {', '.join(SCHEDULES)}, got "
                            f"{self.pp_schedule!r}")
        if self.virtual_stages is not None and self.pp_schedule != "interleaved":
            raise UserError("--virtual-stages needs --pp-schedule interleaved")
        v = self.chunks_pp
        if v < 1 or (self.pp_schedule == "interleaved" and (v < 2 or self.pp < 2)):
            raise UserError(f"the interleaved schedule needs --pp >= 2 and --virtual-stages "
                            f">= 2, got --pp {self.pp}, {v} chunks")
        if not fills(self.model.arch.n_layers, self.pp, v):
            raise UserError(f"{self.model.name}'s {self.model.arch.n_layers} layers cannot "
                            f"fill {self.pp} stages x {v} chunks (a layer a chunk, or none "
                            f"in the first and last, which hold the embedding and the loss)")


@dataclass
class StepResult:
    step_time_s: float
    compute_s: float
    compression_s: float
    tp_comm_s: float
    exposed_comm_s: float  # compute stream idle, waiting on data-parallel communication
    overlapped_comm_s: float
    bytes_per_gpu: float  # data-parallel bytes one GPU sends per step, plus tensor-parallel
    spans: list[Span]
    kinds: list[tuple[float, float]] = field(default_factory=list)  # (weight, step time)
    pipeline_bubble_s: float = 0.0  # first stage idle, waiting for the other stages
    # of compute_s, compression_s and tp_comm_s: the slowdown while collectives ran beside
    # them (the SMs their CTAs hold, the profile's `interference`)
    interference_s: float = 0.0
    # context-parallel ring exchanges the compute stream waited for (simulator/step/cp_comm.py)
    cp_comm_s: float = 0.0
    # expert-parallel dispatch and combine the compute stream waited for (simulator/step/moe.py);
    # None: a model without experts (its rows carry no such column)
    ep_comm_s: float | None = None
    # of compute_s: the work once a step after the backward (the optimizer update, the
    # gradient norm, the buffer zeroing: simulator/step/per_step.py; a fitted host cost)
    per_step_s: float = 0.0

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("spans", "kinds")
                and not (k == "ep_comm_s" and v is None)}


# the dense schemes whose state is sharded and whose parameters are gathered
ZERO_SCHEMES = frozenset({"dense-zero1", "dense-zero2", "dense-zero3"})


def hybrid(sharded: Plan, shard_bytes: float) -> Plan:
    """A ZeRO plan over a shard group, run in every group at once, and the all-reduce of each
    rank's gradient shard across the groups (FSDP2's HSDP: reduce-scatter inside, all-reduce
    across, per unit as the backward produces it; torch/distributed/fsdp/_fully_shard
    _fsdp_collectives.py foreach_reduce). The all-reduce follows the reduce-scatter's phase and
    buckets."""
    steps = []
    for w, s in sharded.steps:
        ops = [replace(op, group="shard") for op in s.ops]
        rs = next((op for op in s.ops if op.collective == "reduce_scatter"), None)
        if rs is not None:
            ops.append(replace(rs, name="grad-shard all-reduce (across shard groups)",
                               collective="all_reduce", size_bytes=shard_bytes,
                               group="replica"))
        steps.append((w, StepPlan(tuple(ops), s.kernels)))
    return Plan(sharded.scheme, tuple(steps))


def refuse_expert_options(model: ModelProfile, given: list[str]) -> None:
    """Expert options typed for a model without experts are refused, not dropped (StepConfig,
    the step's options, the planner's request: each knows what was typed)."""
    if model.moe is None and given:
        raise UserError(f"{', '.join(given)}: {model.name} has no experts (no [moe] table); "
                        "leave them out, or take a MoE model")


def refuse_mapping_with(model, shard_group: int | None, stack: str | None) -> str | None:
    """What --use-tp-pp-dp-mapping is not modelled with on a step of `model`, `shard_group`
    and `stack` (None: nothing): the expert, hybrid-sharding and DeepSpeed tied-embedding
    groups are laid out in Megatron's default order only. The planner asks it too
    (simulator/planning/space.py replica_order)."""
    if model.moe is not None:
        return f"a model with experts ({model.name})"
    if shard_group is not None:
        return "--shard-group (hybrid sharding)"
    if stack == "deepspeed":
        return "--stack deepspeed"
    return None


def placeable(ranks: int, domain: int) -> bool:
    """A group of `ranks` consecutive GPUs sits inside one NVLink domain of `domain` GPUs
    (dividing it) or spans whole domains."""
    return ranks >= 1 and (domain % ranks == 0 or ranks % domain == 0)


def _nearest(valid: list[int], asked: int) -> str:
    """The valid values, the nearest below and above `asked` first: '2 or 4 (of 1, 2, 4, 8)'."""
    if not valid:
        return "none"
    below = [v for v in valid if v <= asked]
    above = [v for v in valid if v >= asked]
    close = sorted({*(below[-1:]), *(above[:1])})
    return f"{' or '.join(map(str, close))} (of {', '.join(map(str, valid))})"


def check_cp(cp: int, seq: int, attention: str = "flash") -> None:
    """A context-parallel degree a sequence can take (StepConfig, the planner's request)."""
    if cp < 1:
        raise UserError(f"--cp must be at least 1, got {cp}")
    if cp == 1:
        return
    if seq % (2 * cp):
        raise UserError(f"--cp {cp} cuts the sequence into 2 x {cp} chunks (two per rank, for "
                        f"causal balance): sequence length {seq} does not divide")
    if attention == "unfused":
        raise UserError(f"--cp {cp} runs attention as Transformer Engine's fused kernels ring "
                        "it; --attention unfused has no context-parallel form")


def stack_attention(stack: str, hw) -> str:
    """The fused attention kernel a stack runs where none is given: Megatron-Core's
    Transformer Engine picks cuDNN's (the profile's `flash` rates); torchtitan calls PyTorch's
    scaled_dot_product_attention, whose fixed backend order puts FlashAttention-2 first, cuDNN
    opt-in since PyTorch 2.5.1 (pytorch/pytorch #138649, drisspg 2024-10-22: 'we are going to
    make the CuDNN backend Opt-in by default'; #142132: a 2.6 nightly's SDPA at 329 TFLOP/s
    against cuDNN's 631 on H100, 'This is expected'), so `flash2` where the profile gives
    FlashAttention-2 rates apart (Hopper), else `flash`."""
    r = hw.roofline
    if stack == "torchtitan" and r is not None and r.attn_flash2_fwd_fraction is not None:
        return "flash2"
    return "flash"


def stack_loss(stack: str) -> str:
    """The cross-entropy a stack runs where no --loss is given: Megatron's on fp32 logits,
    torchtitan's eager PyTorch one (simulator/memory/activations.py LOSS_BYTES)."""
    return "eager" if stack == "torchtitan" else "fp32"


# the schemes DeepSpeed's BF16_Optimizer runs (Megatron-DeepSpeed with bf16 and ZeRO stage 0)
DEEPSPEED_SCHEMES = ("dense-zero1",)
DEEPSPEED_OVERLAP = ("--stack deepspeed: DeepSpeed's pipeline engine reduces the gradients "
                     "after the step's last micro-batch and its BF16_Optimizer gathers the "
                     "parameters after the update (deepspeed/runtime/pipe/engine.py "
                     "_exec_reduce_grads; bf16_optimizer.py step): leave --overlap-grad and "
                     "--overlap-param out")


def deepspeed_scheme(scheme: SchemeConfig) -> SchemeConfig:
    """The scheme as DeepSpeed's BF16_Optimizer runs it: the fp32 gradient all-reduced whole
    after the last micro-batch (deepspeed/runtime/pipe/engine.py _bf16_reduce_grads, as of
    DeepSpeed 6719b46, May 2022), the update on this rank's shard, then the bf16 parameters
    all-gathered (bf16_optimizer.py step, all_gather_dp_groups)."""
    return replace(scheme, overlap_grad_reduce=False, overlap_param_gather=False,
                   grad_all_reduce=True)


def check_compile(stack: str, torch_compile) -> None:
    """--compile is torchtitan's: the Megatron stack's kernels are fused already."""
    if stack not in STACKS:
        raise UserError(f"--stack must be one of {', '.join(STACKS)}, got {stack!r}")
    if not isinstance(torch_compile, bool):
        raise UserError(f"torch_compile must be true or false, got {torch_compile!r}")
    if torch_compile and stack != "torchtitan":
        raise UserError("--compile fuses the elementwise ops torchtitan runs one by one; "
                        f"the {stack} stack's kernels are fused already: give "
                        "--stack torchtitan, or leave --compile out")


def check_host_launch(cuda_graphs, host_launch_us) -> None:
    """Refuse a CUDA-graphs flag that is not a bool, or a host launch time that is not a
    positive, finite number of microseconds up to 10 ms."""
    if not isinstance(cuda_graphs, bool):
        raise UserError(f"cuda_graphs must be true or false, got {cuda_graphs!r}")
    if host_launch_us is not None and not (
            isinstance(host_launch_us, (int, float)) and not isinstance(host_launch_us, bool)
            and math.isfinite(host_launch_us) and 0 < host_launch_us <= 1e4):
        raise UserError(f"--host-launch-us must be a time in microseconds in (0, 10000] "
                        f"(PyTorch's per-op CPU time is 5-20 us; a Kineto trace shows yours), "
                        f"got {host_launch_us!r}")
