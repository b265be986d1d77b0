"""What the `scape` commands share besides the app (cli/app.py) and their output files
(cli/outputs.py): the choice types, the option declarations and help texts, progress, and a
step's layout in words. Parse, call, print: no logic."""

from __future__ import annotations

import sys
from enum import StrEnum

import typer

from reports.tables import FORMATS
from scape.train import CORPORA
from simulator.planning.options import (
    Batch,
    Overlap,
    Parallelism,
    Precision,
    Pricing,
    SchemeOptions,
    StepOptions,
)
from simulator.planning.plan_request import PRICE_TIERS, RANKS
from simulator.step.step_config import StepConfig
from vocabulary.names import (
    ALGORITHM_NAMES,
    ATTENTION,
    AUTO,
    AUTO_PROTO,
    DEFAULT_GRAD_DTYPE,
    DEFAULT_PARAM_DTYPE,
    DTYPE_BYTES,
    FP8_RECIPE_NAMES,
    FP8_SCOPES,
    LOSSES,
    MOE_DISPATCHERS,
    OPTIMIZER_DTYPES,
    PROTOCOLS,
    RECOMPUTE,
    SCHEDULES,
    SHAPES,
    STACKS,
)
from vocabulary.recompute import combine as combine_recompute
from vocabulary.units import parse_counts, parse_length

NETBED_HELP = ("shaped-network testbed, e.g. rate=200mbit (,delay=1ms needs netem): one "
               "network namespace per rank (root, ip, tc)")


def _netbed(text: str | None):
    """A NetbedSpec from --netbed, checked before any work starts (None: no testbed)."""
    if text is None:
        return None
    from scape.netbed import NetbedSpec, check_available

    spec = NetbedSpec.parse(text)
    check_available()
    return spec


SHARE_GPU_HELP = ("--backend nccl: run more ranks than GPUs, sharing them; each rank is its own "
                  "NCCL host (NCCL_HOSTID), so NCCL connects them over its TCP socket "
                  "transport, as the SCAPE authors' runs")


class _Choice(StrEnum):
    """A choice's value reads as the plain string it is (messages, repr, JSON, pickles)."""

    def __repr__(self) -> str:
        return repr(self.value)


def _choice(name: str, values) -> type[StrEnum]:
    """A choice option's type: --help lists the values, the shell completes them, and any
    other value is refused by the parser (one line, exit 2). `name` is the module attribute
    it is bound to, so that its members pickle (the planner sends them to worker processes)."""
    return _Choice(name, {v: v for v in values}, module=__name__)


Format3 = _choice("Format3", FORMATS)
Format2 = _choice("Format2", ("table", "json"))
OpChoice = _choice("OpChoice", ALGORITHM_NAMES)
AlgoChoice = _choice("AlgoChoice",
                     [AUTO, *sorted({a for algos in ALGORITHM_NAMES.values() for a in algos})])
ProtoChoice = _choice("ProtoChoice", (AUTO_PROTO, *PROTOCOLS))
OptimizerChoice = _choice("OptimizerChoice", ("adamw", "adams"))
DtypeChoice = _choice("DtypeChoice", DTYPE_BYTES)
ScopeChoice = _choice("ScopeChoice", ("masked", "all"))
ScoreChoice = _choice("ScoreChoice", ("m", "m_over_sqrt_v"))
SyncChoice = _choice("SyncChoice", ("gradient", "momentum"))
SelectChoice = _choice("SelectChoice", ("shard", "tensor"))
UnmaskedChoice = _choice("UnmaskedChoice", ("frozen", "local"))
ShapeChoice = _choice("ShapeChoice", SHAPES)
BackendChoice = _choice("BackendChoice", ("gloo", "nccl"))
CorpusChoice = _choice("CorpusChoice", CORPORA)
RankChoice = _choice("RankChoice", RANKS)
PriceTierChoice = _choice("PriceTierChoice", PRICE_TIERS)
RecomputeChoice = _choice("RecomputeChoice", RECOMPUTE)
ScheduleChoice = _choice("ScheduleChoice", SCHEDULES)
AttentionChoice = _choice("AttentionChoice", ATTENTION)
LossChoice = _choice("LossChoice", LOSSES)
OptimizerDtypeChoice = _choice("OptimizerDtypeChoice", OPTIMIZER_DTYPES)
StackChoice = _choice("StackChoice", STACKS)
DispatcherChoice = _choice("DispatcherChoice", MOE_DISPATCHERS)
Fp8RecipeChoice = _choice("Fp8RecipeChoice", FP8_RECIPE_NAMES)
Fp8ScopeChoice = _choice("Fp8ScopeChoice", FP8_SCOPES)


FP8_HELP = ("the layers' linear GEMMs in FP8, as Transformer Engine's recipe runs them (at the "
            "profile's FP8 rate; attention and the output layer stay 16-bit)")
TP_OVERLAP_HELP = ("overlap the tensor-parallel all-gathers and reduce-scatters with their "
                   "GEMMs, as Transformer Engine does (Megatron-Core --tp-comm-overlap, NeMo "
                   "ub_tp_comm_overlap); with --stack torchtitan, its async TP (PyTorch's "
                   "micro-pipeline TP)")
# expert parallelism (a model with experts): simulate, compare and plan; Megatron-Core's
# spellings and torchtitan's beside the short ones
MOE_OPTS = {
    "ep": typer.Option(1, "--ep", "--expert-model-parallel-size", "--expert-parallel-degree",
                       help="expert-parallel ranks a MoE layer's experts are spread over "
                            "(Megatron-Core --expert-model-parallel-size, torchtitan "
                            "expert_parallel_degree); must divide the experts"),
    "etp": typer.Option(None, "--etp", "--expert-tensor-parallel-size",
                        "--expert-tensor-parallel-degree",
                        help="tensor-parallel ranks of each expert [default: --tp, as "
                             "Megatron-Core's --expert-tensor-parallel-size]"),
    "moe_imbalance": typer.Option(None, "--moe-imbalance",
                                  help="the busiest expert-parallel rank's routed tokens over "
                                       "the mean (a measured max/mean expert load, or a "
                                       "capacity factor) [default: 1, even load: an "
                                       "assumption, printed]"),
    "moe_dispatcher": typer.Option(None, "--moe-dispatcher", "--moe-token-dispatcher-type",
                                   help="alltoall (tokens x top-k sent to their experts' "
                                        "ranks), allgather (every rank gathers the EP "
                                        "group's tokens) or flex (DeepEP/HybridEP: one copy "
                                        "a token per remote NVLink domain, then NVLink, one "
                                        "a GPU holding its experts) "
                                        "[default: alltoall, as NeMo's and Megatron's MoE "
                                        "recipes set; Megatron-Core's own default is "
                                        "allgather]"),
    "moe_overlap": typer.Option(None, "--moe-overlap/--no-moe-overlap",
                                help="dispatch and combine beside another micro-batch's "
                                     "compute (Megatron-Core --overlap-moe-expert-parallel-"
                                     "comm, DeepSeek-V3's DualPipe) [default: off, as "
                                     "Megatron-Core]"),
    "moe_shared_overlap": typer.Option(None, "--moe-shared-overlap/--no-moe-shared-overlap",
                                       help="the shared expert's GEMMs beside its layer's "
                                            "dispatch and combine (Megatron-Core "
                                            "--moe-shared-expert-overlap; NeMo's DeepSeek and "
                                            "Llama 4 configs set it) [default: off, as "
                                            "Megatron-Core]"),
}
# pipeline parallelism, recomputation and the compute model: simulate and compare
PARALLEL_OPTS = {
    "pp": typer.Option(1, "--pp", "--pipeline-model-parallel-size",
                       help="pipeline-parallel stages (Megatron --pipeline-model-parallel-size)"),
    "pp_schedule": typer.Option("1f1b", "--pp-schedule", help="1f1b|interleaved"),
    "virtual_stages": typer.Option(None, "--virtual-stages",
                                   "--num-virtual-stages-per-pipeline-rank",
                                   help="interleaved: model chunks per stage (default 2; "
                                        "Megatron-Core --num-virtual-stages-per-pipeline-rank)"),
    "recompute": typer.Option("none", "--recompute", "--recompute-granularity",
                              help="activation recomputation: none|selective (Megatron: the "
                                   "attention core)|selective-op (torchtitan: every second "
                                   "matmul)|full"),
    "recompute_modules": typer.Option(None, "--recompute-modules",
                                      help="Megatron-Core's selective recomputation of these "
                                           "modules: core_attn, layernorm, mla_up_proj, mlp, "
                                           "moe, moe_act, shared_experts (e.g. "
                                           "'mla_up_proj,mlp,moe'); implies --recompute "
                                           "selective"),
    "sequence_parallel": typer.Option(None, "--sequence-parallel/--no-sequence-parallel",
                                      help="Megatron's sequence parallelism with --tp "
                                           "[default: on where --tp is above 1]"),
    "mfu": typer.Option(None, "--mfu", help="price forward/backward at this MFU instead of "
                                            "the profile's shapes model"),
    "attention": typer.Option(None, "--attention",
                              help="shapes model: flash (the profile's fused attention), flash2 "
                                   "(FlashAttention-2's rates) or unfused (Megatron "
                                   "before it: batched GEMMs and softmax) [default: flash]"),
    "tp_comm_overlap": typer.Option(None, "--tp-comm-overlap/--no-tp-comm-overlap",
                                    help=TP_OVERLAP_HELP + "; needs --tp above 1 and sequence "
                                         "parallelism [default: off, as Megatron-LM]"),
    "fp8": typer.Option(False, "--fp8/--no-fp8", help=FP8_HELP),
    "optimizer_dtype": typer.Option("fp32", "--optimizer-dtype",
                                    help="the optimizer's moments and master weights: fp32, "
                                         "bf16 (NeMo's distributed_fused_adam dtype bf16, "
                                         "16-bit master remainders), or bf16-moments "
                                         "(Megatron-Core's precision-aware optimizer: bf16 "
                                         "moments, fp32 master weights)"),
    "stack": typer.Option(None, "--stack",
                          help="the training stack: megatron (Megatron-LM, NeMo: fused "
                               "kernels, cuDNN attention) or torchtitan (DTensor tensor "
                               "parallelism saves its linears' gathered inputs and runs the "
                               "loss-parallel cross-entropy; PyTorch's pipelining keeps every "
                               "micro-batch's buffers and outputs; SDPA's FlashAttention-2; "
                               "eager elementwise ops unless --compile) or deepspeed "
                               "(Megatron-DeepSpeed with bf16, as BLOOM ran: DeepSpeed's "
                               "pipeline engine and BF16_Optimizer, fp32 gradients folded in "
                               "after every micro-batch and all-reduced after the last) "
                               "[default: megatron]"),
    "loss": typer.Option(None, "--loss",
                         help="the loss as memory sees it: fp32 (Megatron-Core's "
                              "vocabulary-parallel cross-entropy on fp32 logits), eager "
                              "(PyTorch's cross_entropy on fp32 logits: torchtitan, Hugging "
                              "Face), fused (a fused cross-entropy on the bf16 logits) or "
                              "chunked (a fused linear cross-entropy, Liger-Kernel) "
                              "[default: fp32]"),
    "metric_passes": typer.Option(0, "--metric-passes",
                                  help="cross-entropy passes over each micro-batch's logits "
                                       "beside the loss, forward only: a trainer's training "
                                       "metrics (Composer with llm-foundry's MPT: 2, its "
                                       "LanguageCrossEntropy and LanguagePerplexity) "
                                       "[default: 0, as Megatron-LM, NeMo, torchtitan]"),
    "torch_compile": typer.Option(None, "--compile/--no-compile",
                                  help="--stack torchtitan: torch.compile fuses the layers' "
                                       "elementwise ops (torchtitan's --compile.enable); "
                                       "without it each runs as its own PyTorch kernel "
                                       "[default: off, torchtitan's]"),
    "cuda_graphs": typer.Option(False, "--cuda-graphs/--no-cuda-graphs",
                                help="the layers replayed as CUDA graphs (Megatron-Core "
                                     "--cuda-graph-impl, TE make_graphed_callables): no pass "
                                     "waits for the host's kernel launches"),
    "host_launch_us": typer.Option(None, "--host-launch-us",
                                   help="the host's CPU time a kernel of an eager pass, us "
                                        "(your own Kineto trace's); a layer's pass takes the "
                                        "traced blend of its launches' and its GPU's times, "
                                        "waiting most where the two are alike [default: "
                                        "Megatron-Core's, traced on an H200 host and scaled by "
                                        "the profile's [compute] host_linear_us; without it "
                                        "[nccl] launch_us, CUDA's own cost, a floor]"),
    "cp": typer.Option(1, "--cp", "--context-parallel-size",
                       help="context-parallel ranks splitting each sequence "
                                       "(Megatron-Core --context-parallel-size; Transformer "
                                       "Engine's ring exchange of keys and values)"),
    **MOE_OPTS,
    "shard_group": typer.Option(None, "--shard-group", "--data-parallel-shard-degree",
                                help="hybrid sharding: a ZeRO scheme (dense-zero1/2/3) shards "
                                     "its state over groups of this many data-parallel ranks "
                                     "and all-reduces the gradient shards across them (FSDP2 "
                                     "HSDP; torchtitan data_parallel_shard_degree) [default: "
                                     "one group of every data-parallel rank]"),
    "mtp_layers": typer.Option(None, "--mtp-layers", "--mtp-num-layers", min=0,
                               help="multi-token prediction layers (Megatron-Core "
                                    "--mtp-num-layers; DeepSeek-V3 trains one): each a layer "
                                    "and a second output layer and loss on the last pipeline "
                                    "stage [default: none]"),
    "tp_pp_dp_mapping": typer.Option(
        None, "--use-tp-pp-dp-mapping/--no-tp-pp-dp-mapping",
        help="Megatron-Core's rank order tp, cp, pp, dp: a model replica's stages on "
             "consecutive GPUs (pipeline sends inside an NVLink domain, data-parallel groups "
             "across domains), as MLPerf's GB200 Llama 3.1 405B runs set it [default: tp, "
             "cp, dp, pp, Megatron's]"),
    "pp_layout": typer.Option(None, "--pipeline-model-parallel-layout", "--pp-layout",
                              help="Megatron-Core's pipeline layout: E embedding, t decoder "
                                   "layer, m MTP layer, L loss; '|' between virtual stages, "
                                   "'*N' repeats (e.g. 'Et*4|(t*4|)*14tmL') [default: the "
                                   "even split]"),
    "pp_kept_outputs": typer.Option(None, "--pp-kept-outputs/--no-pp-kept-outputs",
                                    help="torchtitan with pipeline stages: every micro-batch's "
                                         "outputs kept until the next step, as PyTorch's "
                                         "pipelining did before 2025 [default: today's "
                                         "torchtitan, none kept]"),
    "fp8_recipe": typer.Option(None, "--fp8-recipe",
                               help="with --fp8: how tensors are scaled, as Megatron-Core's "
                                    "--fp8-recipe (tensorwise: current per-tensor scaling, an "
                                    "amax pass first; delayed; mxfp8: Blackwell only; "
                                    "blockwise: block scales, slower GEMMs on Hopper) "
                                    "[default: delayed, Megatron's]"),
    "fp8_scope": typer.Option(None, "--fp8-scope",
                              help="with --fp8: which GEMMs run in FP8 (all: every linear "
                                   "layer, as Transformer Engine under Megatron-Core; experts: "
                                   "the routed experts' grouped GEMMs alone, as torchtitan's "
                                   "--quantize.grouped_mm) [default: all]"),
    "fp8_param_gather": typer.Option(False, "--fp8-param-gather/--no-fp8-param-gather",
                                     help="with --fp8: the distributed optimizer or FSDP "
                                          "gathers FP8 parameters, a byte each, and keeps the "
                                          "weights so (Megatron-Core --fp8-param-gather)"),
}


def _schedule_name(cfg: StepConfig) -> str:
    if cfg.pp == 1:
        return ""
    return f" {cfg.pp_schedule}" + (f" x{cfg.chunks_pp}" if cfg.chunks_pp > 1 else "")


STEP_OPTS = {
    "model": typer.Option(..., "--model", "-m", help="model profile name or path"),
    "hardware": typer.Option(..., "--hardware", "-H", help="hardware profile name or path"),
    # no -g: nccl-tests' -g is GPUs per process (scape collective), not GPUs in the job
    "gpus": typer.Option(..., "--gpus", help="GPUs in the job"),
}

ALGO_HELP = ("the collective algorithm, as NCCL_ALGO forces it, or auto: NCCL's tuner's choice "
             "(from the profile's [nccl] table, or from NCCL's view of the profile where it has "
             "none: simulator/network/nccl.py tuner_view)")
# a step's batch, tensor parallelism, dtypes and overlap (simulate, compare), with Megatron-LM's
# spellings beside this tool's short ones
BATCH_OPTS = {
    "micro_batch": typer.Option(1, "--micro-batch", "--micro-batch-size",
                                help="sequences per micro-batch on each GPU (Megatron "
                                     "--micro-batch-size)"),
    "seq_len": typer.Option(None, "--seq-len", "--seq-length", parser=parse_length,
                            metavar="LENGTH",
                            help="tokens per sequence [default: the model profile's] "
                                 "(Megatron --seq-length)"),
    "grad_accum": typer.Option(None, "--grad-accum",
                               help="micro-batches per step [default: what --global-batch "
                                    "gives]"),
    "global_batch": typer.Option(None, "--global-batch", "--global-batch-size",
                                 help="sequences per step; sets --grad-accum (Megatron "
                                      "--global-batch-size) [default: the model profile's "
                                      "where it splits into whole micro-batches over the "
                                      "data-parallel ranks, else the nearest that does; 1 "
                                      "micro-batch a rank for a model without one]"),
    "tp": typer.Option(1, "--tp", "--tensor-model-parallel-size",
                       help="tensor-parallel degree inside a node (Megatron "
                            "--tensor-model-parallel-size)"),
}
DTYPE_OPTS = {
    "grad_dtype": typer.Option(DEFAULT_GRAD_DTYPE, "--grad-dtype",
                               help="dtype the gradients are reduced in: fp32 by default, as "
                                    "Megatron-LM (--bf16 forces "
                                    "accumulate_allreduce_grads_in_fp32), NeMo's bf16-mixed and "
                                    "torchtitan (mixed_precision_reduce float32) reduce them; "
                                    "bf16 as Megatron's --grad-reduce-in-bf16"),
    "param_dtype": typer.Option(DEFAULT_PARAM_DTYPE, "--param-dtype",
                                help="dtype the distributed optimizer / FSDP gathers the "
                                     "parameters in"),
}
OVERLAP_OPTS = {
    "overlap_grad": typer.Option(None, "--overlap-grad/--no-overlap-grad",
                                 "--overlap-grad-reduce/--no-overlap-grad-reduce",
                                 help="reduce gradient buckets during the backward (Megatron "
                                      "--overlap-grad-reduce) [default: the scheme's]"),
    "overlap_param": typer.Option(None, "--overlap-param/--no-overlap-param",
                                  "--overlap-param-gather/--no-overlap-param-gather",
                                  help="gather the next step's parameters during the forward "
                                       "(Megatron --overlap-param-gather, with the "
                                       "distributed optimizer) [default: the scheme's]"),
    "bucket_mb": typer.Option(None, "--bucket-mb",
                              help="gradient bucket size in MB (1e6 bytes) [default: the "
                                   "scheme's; Megatron's --ddp-bucket-size counts elements]"),
    "algo": typer.Option("auto", "--algo", help=ALGO_HELP),
}


EF_HELP = ("scape-partitioned: keep what the mask did not send and add it to the next "
           "step's gradient (error feedback) [default: off]")
SYNC_HELP = "scape-partitioned: gradient|momentum (what the compact buffer carries)"
WARMUP_HELP = ("scape, scape-partitioned: density falls from 1 to the target over W steps "
               "(--density-shape)")
DENSE_STEPS_HELP = ("scape, scape-partitioned: D steps at density 1 before the warm-up (the "
                    "authors' Llama-500M runs: 2% of the run)")
SHAPE_HELP = ("scape, scape-partitioned: geometric (the authors' newest reducer, default) or "
              "linear (their Llama-500M runs) density warm-up")
# the authors' reducer (scheme scape): the launch flags of their scaling scripts
REDUCER_OPTS = {
    "distopt": typer.Option(None, "--distributed-optimizer/--no-distributed-optimizer",
                            "--use-distributed-optimizer",
                            help="scape: with Megatron's distributed optimizer"),
    "residual_offload": typer.Option(None, "--residual-offload/--no-residual-offload",
                                     help="scape: residual in pinned host memory"),
    "param_offload": typer.Option(None, "--param-offload/--no-param-offload",
                                  help="scape: parameter replica in host memory (plan only)"),
}


RUN_STEPS_HELP = ("also average the step over a run of T steps (default with a density "
                  "schedule: its dense steps and warm-up, D + W)")


def _schedule_text(scheme) -> str:
    """SCAPE's density schedule in words."""
    return (f"{scheme.density_dense_steps} dense steps, then a {scheme.density_shape} density "
            f"warm-up over {scheme.density_warmup_steps} steps")


def _phase_meter(what: str, total: int):
    """A progress callback for work in `total` phases of unknown length: each phase's start
    on stderr with the time so far and the time the rest should take at the pace so far."""
    import time

    from vocabulary.units import format_duration

    t0, seen = time.monotonic(), [0]

    def say(phase: str) -> None:
        done, elapsed = seen[0], time.monotonic() - t0
        seen[0] += 1
        eta = (f", about {format_duration(elapsed / done * (total - done))} left" if done
               else "")
        print(f"{what}: [{done + 1}/{total}] {phase} ({format_duration(elapsed)} so far{eta})",
              file=sys.stderr, flush=True)

    return say


class _NoBar:
    """The little of rich's Progress the commands call, doing nothing: where stderr is not a
    terminal no bar is drawn, so rich (70 ms of imports on a 2-core host) is not loaded."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def add_task(self, *args, **kwargs) -> int:
        return 0

    def update(self, *args, **kwargs) -> None:
        pass

    def advance(self, *args, **kwargs) -> None:
        pass


def _progress(description: str):
    """A rich progress bar on stderr; none when stderr is not a terminal (a script, a pipe,
    CI)."""
    if not sys.stderr.isatty():
        return _NoBar()
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(f"[bold]{description}", BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True)


def _rank_counts(text: str) -> list[int]:
    """--nprocs 3 or 2,3: rank counts of at least 2."""
    return parse_counts(text, "--nprocs", least=2, what="ranks", example="2,3")


def step_options(flags: dict, spec: str) -> StepOptions:
    """The option objects of a step (simulator/planning/options.py) from a command's flags, by their
    parameter names (simulate and compare declare them alike; the scheme options compare
    lacks are None: not given). `spec` is the scheme, simulate's --scheme or compare's
    --baseline."""
    f = {**dict.fromkeys(SchemeOptions.__dataclass_fields__), **flags}
    return StepOptions(
        f["model"], f["hardware"], f["gpus"],
        scheme=SchemeOptions(spec, f["sparsity"], f["bits"], f["optimizer"],
                             f["update_scope"], f["refresh_every"], f["error_feedback"],
                             f["score"], f["sync"], f["distopt"], f["residual_offload"],
                             f["param_offload"], f["density_warmup"],
                             f["density_dense_steps"], f["density_shape"], f["run_steps"]),
        batch=Batch(f["micro_batch"], f["seq_len"], f["grad_accum"], f["global_batch"]),
        parallelism=Parallelism(f["tp"], f["pp"], f["pp_schedule"], f["virtual_stages"],
                                combine_recompute(str(f["recompute"]),
                                                  f.get("recompute_modules")),
                                f["sequence_parallel"], f["cp"],
                                *(f.get(k) for k in ("ep", "etp", "moe_imbalance")),
                                None if f.get("moe_dispatcher") is None
                                else str(f["moe_dispatcher"]), f.get("moe_overlap"),
                                f.get("moe_shared_overlap"),
                                f.get("shard_group"), f.get("mtp_layers"),
                                f.get("pp_layout"), f.get("tp_pp_dp_mapping")),
        precision=Precision(f["grad_dtype"], f["param_dtype"], f["fp8"],
                            str(f["optimizer_dtype"]), bool(f.get("fp8_param_gather")),
                            None if f.get("fp8_recipe") is None else str(f["fp8_recipe"]),
                            None if f.get("fp8_scope") is None else str(f["fp8_scope"])),
        overlap=Overlap(f["overlap_grad"], f["overlap_param"], f["bucket_mb"],
                        f["tp_comm_overlap"]),
        pricing=Pricing(f["algo"], f["mfu"], f["attention"],
                        None if f["loss"] is None else str(f["loss"]),
                        None if f["stack"] is None else str(f["stack"]),
                        0 if f["metric_passes"] is None else f["metric_passes"],
                        bool(f.get("cuda_graphs")), f.get("host_launch_us"),
                        f.get("torch_compile"), f.get("pp_kept_outputs")))


def model_label(typed: str, cfg) -> str:
    """The model as the user typed it, and the shipped profile it named where that is another
    name (an alias: profiles/model_aliases.py)."""
    name = cfg.model.name
    return typed if typed in (name, cfg.model.path) or "/" in typed or typed.endswith(
        ".toml") else f"{typed} (profile {name})"


def batch_text(cfg, grad_accum: int | None, global_batch: int | None) -> str:
    """The step's batch, and where its global batch came from when none was given."""
    text = (f"micro-batch {cfg.micro_batch} x seq {cfg.seq}, grad-accum {cfg.accum} "
            f"(global batch {cfg.sequences:,}")
    if grad_accum is None and global_batch is None and cfg.model.global_batch:
        text += (": the model profile's" if cfg.sequences == cfg.model.global_batch else
                 f": the model profile's {cfg.model.global_batch:,} rounded to whole "
                 f"micro-batches over {cfg.dp} data-parallel ranks")
    return text + ")"


def moe_text(cfg) -> str:
    """A MoE step's expert layout and routing, as it ran (said, defaults included)."""
    moe = cfg.model.moe
    load = ("1 (even: an assumption; --moe-imbalance gives a measured max/mean load)"
            if cfg.moe_imbalance == 1.0 else f"{cfg.moe_imbalance:g} (given)")
    return (f"{moe.n_experts} experts, top-{moe.top_k}, {cfg.model.moe_layers} MoE layers of "
            f"{cfg.model.arch.n_layers}; ep {cfg.ep}, etp {cfg.expert_tp}, expert data-parallel "
            f"{cfg.edp}; dispatcher {cfg.moe_dispatcher}, overlap "
            f"{'on' if cfg.moe_overlap else 'off'}, shared-expert overlap "
            f"{'on' if cfg.moe_shared_overlap else 'off'}; load imbalance {load}")
