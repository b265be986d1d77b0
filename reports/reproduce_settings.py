"""The SCAPE paper's setting as `scape reproduce` prices it: the three models' launch settings
from the authors' public scripts, the schemes, the paper's figures and the authors' own table
behind them, and the step each (model, scheme, sparsity) runs (`setting_config`)."""

from __future__ import annotations

from dataclasses import dataclass

from profiles import HardwareProfile, load_model
from scape.plan import Dtypes, make_config
from simulator.step.step_config import StepConfig

SCRIPTS = "mz687/SCAPE_SC26 (the SCAPE authors' code), slurm_scripts/vista/"


@dataclass(frozen=True)
class Setting:
    model: str
    micro_batch: int
    global_batch: int
    seq_len: int
    dense_scheme: str  # dense-ddp (all-reduce) or dense-zero1 (distributed optimizer)
    source: str


SETTINGS = (
    Setting("gpt-345m", 8, 512, 1024, "dense-ddp",
            SCRIPTS + "baseline/AdamS/gpt-345M/pretrain_gpt_345M.sh: --micro-batch-size 8 "
            "--global-batch-size 512 --seq-length 1024, no --use-distributed-optimizer"),
    Setting("llama-500m", 16, 1024, 4096, "dense-ddp",
            SCRIPTS + "baseline/AdamS/llama2-H2O-500M/pretrain_llama2_500M_baseline.sh: "
            "--micro-batch-size 16 --global-batch-size 1024 --seq-length 4096, no "
            "--use-distributed-optimizer (run log: use_distributed_optimizer False)"),
    Setting("llama-1.8b", 8, 1024, 2048, "dense-ddp",
            SCRIPTS + "scaling_efficiency/ (AdamS/1.8B/comp_comm_breakdown and "
            "SCAPE/d_0.01/use_distributed_optimizer/1.8B): --micro-batch-size 8 "
            "--global-batch-size 1024 --seq-length 2048; the table the paper's 3.26x matches "
            "(tools/plot_step_time_histogram_1.8B_micro_bs_8.py) sets dense AdamS without, "
            "SCAPE with --use-distributed-optimizer"),
)


GPUS = 32


SCHEMES = (("dense-adamw", 0.0), ("dense-adams", 0.0), ("scape", 0.9), ("scape", 0.99))


# SCAPE with the distributed optimizer where the authors' table behind the paper's figure ran
# it so (profiles/external/scape-sc26.toml, series scape-d0.01-distopt)
DISTOPT_SCAPE = {"llama-1.8b"}


# The authors' own measurement of each paper figure: (model, series) of the dense and the
# SCAPE step times in profiles/external/scape-sc26.toml, at GPUS GPUs.
TABLE = {("llama-1.8b", "scape", 0.99): ("adams", "scape-d0.01-distopt")}


DEFAULT_HARDWARE = "vista-gh200-socket"  # NCCL over TCP sockets, as the authors ran


WHAT_IF_HARDWARE = "vista-gh200"  # the same cluster over InfiniBand verbs


# The paper's figures (abstract): metric name and value, per (model, scheme, sparsity).
PAPER = {
    ("llama-1.8b", "scape", 0.99): ("per-step speedup over dense AdamS", 3.26),
    ("llama-500m", "scape", 0.9): ("end-to-end time reduction vs dense AdamS", 0.433),
}


# The density schedule of the authors' logged Llama-500M SCAPE run, (step, density) with
# straight lines between and the last density held to RUN_STEPS: dense (the reducer at d = 1) to
# step 2000, then linear to 0.1 at 10000 (--topk-adams-start-iter 2000 --topk-adams-density-start
# 1 --topk-adams-density-warmup-steps 8000 --topk-adams-density 0.1 --train-iters 100000; the
# log's density lines match 1 - 0.9 (S - 2000) / 8000: profiles/external/scape-sc26.logs-500m.md)
LOGGED_SCHEDULE = {("llama-500m", "scape", 0.9): ((0, 1.0), (2000, 1.0), (10000, 0.1))}


RUN_STEPS = 100_000


# Megatron-LM as the authors ran it: bf16 parameters, fp32 gradient reduction
# (--accumulate-allreduce-grads-in-fp32), no overlap flags, hence one bucket.
DTYPES = Dtypes(grad_bytes=4, param_bytes=2)


NO_OVERLAP = {"overlap_grad_reduce": False, "overlap_param_gather": False,
              "bucket_bytes": float("inf"),
              # every script passes --clip-grad 1.0 (profiles/external/scape-sc26.toml); with
              # the distributed optimizer its norm is a one-element all-reduce
              "clip_grad": 1.0}


NIC_SWEEP_GBPS = (25, 50, 100, 200, 400, 800)


MICRO_BATCH_SWEEP = (1, 2, 4, 8, 16, 32)


def setting_config(s: Setting, hw: HardwareProfile, scheme: str, sparsity: float,
            micro_batch: int | None = None) -> StepConfig:
    """The setting's step; another micro-batch keeps the setting's gradient accumulation, so
    the global batch (and the compute per step) scales with it."""
    if scheme == "scape":
        extra = {"distributed_optimizer": True} if s.model in DISTOPT_SCAPE else {}
        cfg = make_config("scape", sparsity=sparsity, extra=extra, **NO_OVERLAP)
    else:
        optimizer = scheme.removeprefix("dense-")
        cfg = make_config(s.dense_scheme, optimizer=optimizer, **NO_OVERLAP)
    mb = s.micro_batch if micro_batch is None else micro_batch
    accum = s.global_batch // (s.micro_batch * GPUS)
    return StepConfig(load_model(s.model), hw, GPUS, cfg, micro_batch=mb, seq_len=s.seq_len,
                      global_batch=mb * GPUS * accum, dtypes=DTYPES)
