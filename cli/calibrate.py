"""`scape calibrate collectives|compute`: measure this machine."""

from __future__ import annotations

import statistics
import sys

import typer

from cli.app import StrictTyper, app
from cli.common import (
    NETBED_HELP,
    SHARE_GPU_HELP,
    AttentionChoice,
    BackendChoice,
    Format3,
    _netbed,
    _phase_meter,
    _rank_counts,
)
from cli.outputs import CREATED, missing_folders
from profiles import UserError, load_model
from reports.tables import check_format, render
from vocabulary.suggest import did_you_mean
from vocabulary.units import format_bytes, parse_length, parse_size, parse_sizes

calibrate_app = StrictTyper(help="Measure this machine and write measured/NAME.toml in the user's "
                                 "profile folder ($SCAPE_PROFILE_DIR, else "
                                 "~/.local/share/scape-costmodel/profiles).",
                            no_args_is_help=True, rich_markup_mode=None)
app.add_typer(calibrate_app, name="calibrate")


def _destination(name: str):
    """Where `--out NAME` goes (profiles.measured.path_of, which makes its folder now); a
    folder made here is removed again if the run is refused before it writes."""
    from profiles.measured import folder, path_of

    missing = missing_folders(folder())
    path = path_of(name)
    CREATED.extend(q for q in missing if q.is_dir())
    return path


@calibrate_app.command("collectives")
def calibrate_collectives(
    out: str = typer.Option(..., "--out", help="profile name: measured/NAME.toml in the user's "
                                               "profile folder; use it as -H measured/NAME"),
    nprocs: str = typer.Option("2,3", "--nprocs", help="ranks, e.g. 3 or 2,3 (one fit)"),
    backend: BackendChoice = typer.Option("gloo", "--backend", help="gloo|nccl"),
    share_gpu: bool = typer.Option(False, "--share-gpu", help=SHARE_GPU_HELP),
    netbed: str = typer.Option(None, "--netbed", help=NETBED_HELP),
    sizes: str = typer.Option(None, "--sizes", help="e.g. 16KiB..4MiB [default; with "
                                                    "--share-gpu 256KiB..64MiB]"),
    repeats: int = typer.Option(7, "--repeats", help="timed calls per size (median)"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Sweep every collective over message sizes (nccl-tests terms) and fit the link."""
    check_format(fmt)
    from calibration.collectives import DEFAULT_SIZES, SHARED_GPU_SIZES, calibrate
    from scape.train.launch import check_backend

    _destination(out)
    if repeats < 1:
        raise UserError(f"--repeats must be at least 1, got {repeats}")
    spec = _netbed(netbed)
    worlds = _rank_counts(nprocs)
    check_backend(backend, max(worlds), spec, share_gpu)
    from scape.train.launch import RANK_BASE_BYTES, refuse_beyond_host

    refuse_beyond_host(f"{max(worlds)} ranks", max(worlds) * RANK_BASE_BYTES,
                       "fewer ranks (--nprocs)")
    chosen = (parse_sizes(sizes) if sizes is not None
              else list(SHARED_GPU_SIZES if share_gpu else DEFAULT_SIZES))
    if len(set(chosen)) < 2:  # the fit needs two sizes: refused now, not after the sweep
        raise UserError(f"--sizes {sizes}: the fit separates a latency from a bandwidth, which "
                        "takes two sizes or more")
    if backend != "nccl":  # gloo's buffers are host memory: each rank's send, receive, copy
        refuse_beyond_host(f"{max(worlds)} ranks with {format_bytes(max(chosen))} buffers",
                           max(worlds) * (RANK_BASE_BYTES + 3 * max(chosen)),
                           "smaller --sizes or fewer ranks")
    print(f"calibrate collectives: {nprocs} ranks, {len(chosen)} sizes x 5 collectives ...",
          file=sys.stderr)
    path, fit, df = calibrate(out, worlds, backend, spec, chosen, repeats,
                              progress=sys.stderr.isatty(), share_gpu=share_gpu)
    _print_sweep(df, fit, path, fmt)


@calibrate_app.command("refit")
def calibrate_refit(
    profile: str = typer.Option(..., "--profile", help="NAME of measured/NAME.toml in the "
                                                       "user's profile folder"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Fit the link again from the sweep saved beside a profile (NAME.collectives.csv), with the
    fit as it is now; nothing is measured."""
    check_format(fmt)
    from calibration.collectives import refit

    name = profile.removeprefix("measured/")
    path, fit, df = refit(name)
    _print_sweep(df, fit, path, fmt)


@calibrate_app.command("nccl-tests")
def calibrate_nccl_tests(
    logs: list[str] = typer.Argument(..., help="nccl-tests output files (all_reduce_perf, "
                                               "all_gather_perf, ...), as published"),
    out: str = typer.Option(..., "--out", help="profile name: measured/NAME.toml in the user's "
                                               "profile folder"),
    op: str = typer.Option(None, "--op", help="the collective of logs that do not say it "
                                              "(all_reduce, all_gather, reduce_scatter, "
                                              "all_to_all, broadcast)"),
    holdout: str = typer.Option(None, "--holdout",
                                help="fit without this op's rows and print their predictions"),
    min_size: str = typer.Option(None, "--min-size", help="fit rows from this size up, e.g. "
                                                          "64KiB [default: every size]"),
    gpu_from: str = typer.Option(None, "--gpu-from",
                                 help="hardware profile of the GPU the logs ran on: with "
                                      "--model nccl the profile written is it, its NVLink "
                                      "efficiency and NCCL launch cost fitted; with --model "
                                      "link its [gpu], [compute], [roofline] and [memory] are "
                                      "copied (the logs measure the network only) [default: "
                                      "the shipped profile of the GPU the logs' device lines "
                                      "name]"),
    nics_per_node: int = typer.Option(None, "--nics-per-node",
                                      help="NICs a node has, where the logs' nodes hold another "
                                           "GPU count than the --gpu-from profile's and NCCL's "
                                           "own lines (NCCL_DEBUG=INFO) do not list them"),
    force: bool = typer.Option(False, "--force", help="replace an existing measured/NAME "
                                                      "profile"),
    with_intervals: bool = typer.Option(True, "--intervals/--no-intervals",
                                        help="the fitted constants' 95% bootstrap intervals "
                                             "over the rows (a few seconds more)"),
    model: str = typer.Option(None, "--model",
                              help="nccl (the --gpu-from profile's NCCL path: tuner, protocols, "
                                   "launch; logs filling whole nodes of the profile) or link (a "
                                   "latency per hop and a bandwidth per op) [default: nccl where "
                                   "it applies]"),
    algo: str = typer.Option(None, "--algo",
                             help="--model nccl: the NCCL_ALGO the logs ran with (ring, tree, "
                                  "nvls, ...) [default: the logs' own 'NCCL_ALGO set by "
                                  "environment' line, else auto: NCCL's own choice]"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Fit a cluster's collectives on nccl-tests logs (no measuring here) and write them as a
    measured profile."""
    check_format(fmt)
    from calibration.nccl_tests import calibrate_from_logs

    try:
        minimum = 0 if min_size is None else parse_size(min_size)
    except UserError as exc:
        raise UserError(f"--min-size: {exc}") from None
    # the NCCL path prices every row through the simulator, tens of times per constant: a
    # few seconds on one node, 10-20 s on several
    print(f"calibrate nccl-tests: reading {len(logs)} log(s) and fitting their rows ...",
          file=sys.stderr)
    path, fit, df, held, notes = calibrate_from_logs(out.removeprefix("measured/"), logs, op,
                                                     holdout, minimum, gpu_from, model, algo,
                                                     nics_per_node, force, with_intervals)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if fmt != "table":  # one table: the fitted rows and the held-out ones, a role each
        import pandas as pd

        both = pd.concat([df.assign(role="fitted"),
                          *([] if held is None else [held.assign(role="held-out")])],
                         ignore_index=True)
        print(render(both, fmt))
        if hasattr(fit, "text"):  # the NCCL path's constants and intervals, beside the rows
            print(fit.text(), file=sys.stderr)
        print(f"wrote {path}", file=sys.stderr)
        return
    if hasattr(fit, "text"):  # the NCCL path: its two constants, then the rows against it
        print(render(df[["op", "size_bytes", "world", "seconds", "predicted_s", "error_pct"]],
                     fmt, header=f"{fit.text()}\nwrote {path}",
                     floatfmt={"seconds": "{:.6f}", "predicted_s": "{:.6f}",
                               "error_pct": "{:+.1f}"}))
    else:
        _print_sweep(df, fit, path, fmt)
    how = ("this profile's NCCL path, fitted without them" if hasattr(fit, "text") else
           "the link fitted without them (ring, the fit's latency and bandwidth)")
    if held is not None:
        err = held["error_pct"].abs()
        header = (f"held out: {holdout}, {len(held)} rows predicted from {how}: median |error| "
                  f"{err.median():.1f}%, max {err.max():.1f}%, median "
                  f"{held['error_pct'].median():+.1f}% (against the out-of-place times)")
        rep = held["repeat_pct"].abs().dropna()
        if len(rep):  # the in-place column: the same call measured again
            out = held["outside_pct"].abs().dropna()
            header += (f"\nthe logs repeat themselves (in place vs out of place) within a median "
                       f"{rep.median():.1f}%, max {rep.max():.1f}%; outside both measurements: "
                       f"median {out.median():.1f}%, max {out.max():.1f}% (0 where the "
                       "prediction lies between them)")
        print(render(held[["op", "size_bytes", "world", "seconds", "predicted_s",
                           "error_pct", "repeat_pct", "outside_pct", "source"]], fmt,
                     header=header,
                     floatfmt={"seconds": "{:.6f}", "predicted_s": "{:.6f}",
                               "error_pct": "{:+.1f}", "repeat_pct": "{:+.1f}",
                               "outside_pct": "{:+.1f}"}))


def _print_sweep(df, fit, path, fmt: str) -> None:
    """A sweep's rows against its fit, the fit's link and collectives first."""
    # a refitted sweep may lack busbw_GBps (refit needs op, size, world and seconds only)
    shown = df[[c for c in ("op", "size_bytes", "world", "seconds", "busbw_GBps",
                            "predicted_s", "error_pct") if c in df.columns]]
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
# [measured] keys only a GPU measurement writes (calibration.compute.versions)
GPU_ONLY_KEYS = ("compute_cuda", "compute_nccl", "compute_driver", "gpu_profile",
                 "compute_gpu_sharing")


def _calibrate_kinds(out: str, kinds: str, threads: int, on_gpu: bool) -> None:
    """Measure some kernel kinds on this machine and add them to profile `out`, saying where
    and when in its [measured] table (the other kernels may come from another host)."""
    import time

    import torch

    from calibration.compute import measure_kernels
    from calibration.device_info import device_name
    from calibration.kernel_benches import KERNEL_BENCH
    from profiles.measured import merge, read_toml

    chosen = [k.strip() for k in kinds.split(",") if k.strip()]
    unknown = [k for k in chosen if k not in KERNEL_BENCH]
    if not chosen or unknown:
        hint = "".join(did_you_mean(u, KERNEL_BENCH) for u in unknown)
        raise UserError(f"--kinds: unknown {', '.join(unknown) or '(none given)'}{hint}; "
                        f"choose from {', '.join(KERNEL_BENCH)}")
    path = _destination(out)
    if not path.exists():
        raise UserError(f"{path} does not exist: run scape calibrate compute --out {out} first")
    print(f"calibrate compute: kernels {', '.join(chosen)} ...", file=sys.stderr)
    device = torch.device("cuda" if on_gpu else "cpu")
    measured = measure_kernels(device=device, repeats=9, threads=threads, kinds=chosen)
    kernels = {**read_toml(path).get("kernels", {}), **measured}
    note = {f"kernel_{k}": f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
            f"{device_name(device, threads)} (torch {torch.__version__})" for k in chosen}
    merge(out, {"kernels": kernels, "measured": note}, CALIBRATE_HEADER)
    for kind, k in measured.items():
        _print_kernel(kind, k)
    print(f"wrote {path}")


def _print_kernel(kind: str, k: dict) -> None:
    per_tensor = (f", {k['per_tensor_us']:.1f} us per tensor beyond {k['tensors']}"
                  if "per_tensor_us" in k else "")
    print(f"  {kind:<16} {k['fixed_us']:9.1f} us + {k['ns_per_element']:7.3f} ns/element "
          f"(fit residual {k['residual_pct']:.1f}%){per_tensor}")


@calibrate_app.command("compute")
def calibrate_compute_cmd(
    out: str = typer.Option(..., "--out", help="profile name: measured/NAME.toml in the user's "
                                               "profile folder; use it as -H measured/NAME"),
    model: str = typer.Option(None, "--model", "-m", help="[default: tiny-gpt]"),
    micro_batch: int = typer.Option(None, "--micro-batch", help="[default: 16]"),
    max_ranks: int = typer.Option(None, "--max-ranks",
                                  help="measure the slowdown of 1..N ranks sharing this host "
                                       "[default: 3]"),
    threads: int = typer.Option(1, "--threads", help="torch threads per rank"),
    kinds: str = typer.Option(None, "--kinds",
                              help="only these kernel kinds (comma-separated), added to an "
                                   "existing profile; forward/backward is not timed again"),
    backend: BackendChoice = typer.Option(None, "--backend",
                                          help="nccl: this machine's GPU; gloo: its CPU "
                                               "[default: the GPU where there is one]"),
):
    """Time forward/backward of a model and the scheme kernels; fit MFU and kernel constants."""
    import os

    from calibration.compute import calibrate_compute
    from profiles.measured import merge

    if threads < 1:
        raise UserError(f"--threads must be at least 1, got {threads}")
    cores = os.cpu_count() or 1
    if threads > cores:  # more threads than cores time contention, not the kernels
        raise UserError(f"--threads {threads}: this host has {cores} core(s); give at most "
                        f"{cores}")
    if kinds is not None:  # kernels only: the model's options would be ignored
        given = [flag for flag, v in (("--model", model), ("--micro-batch", micro_batch),
                                      ("--max-ranks", max_ranks)) if v is not None]
        if given:
            raise UserError(f"{', '.join(given)}: --kinds times kernels only (forward and "
                            "backward are not timed again); leave them out")
    model = "tiny-gpt" if model is None else model
    micro_batch = 16 if micro_batch is None else micro_batch
    max_ranks = 3 if max_ranks is None else max_ranks
    load_model(model)
    _destination(out)
    import torch

    if backend is not None and str(backend) == "nccl" and not torch.cuda.is_available():
        raise UserError("--backend nccl times this machine's GPU: none found (torch "
                        f"{torch.__version__}); use --backend gloo for its CPU")
    on_gpu = torch.cuda.is_available() if backend is None else str(backend) == "nccl"
    if kinds is not None:
        _calibrate_kinds(out, kinds, threads, on_gpu)
        return
    for name, value in (("--micro-batch", micro_batch), ("--max-ranks", max_ranks)):
        if value < 1:
            raise UserError(f"{name} must be at least 1, got {value}")
    from scape.train.launch import model_host_bytes, refuse_beyond_host

    most = 4 * cores  # ranks sharing a host: beyond this it measures nothing
    if max_ranks > most:
        raise UserError(f"--max-ranks {max_ranks}: at most {most} (4 per core of this host) "
                        "ranks sharing it")

    # on a CPU the measurement runs the model alone, then in 1..max_ranks processes at once
    if not on_gpu:
        refuse_beyond_host(f"{max_ranks} process(es) of {model} at micro-batch "
                           f"{micro_batch}",
                           max_ranks * model_host_bytes(model, micro_batch),
                           "a smaller --max-ranks or --micro-batch, or a smaller model")
    print(f"calibrate compute: {model} at micro-batch {micro_batch}, kernels, 1..{max_ranks} "
          "ranks sharing the host ...", file=sys.stderr)
    from calibration.kernel_benches import KERNEL_BENCH

    phases = 3 + len(KERNEL_BENCH) + (max_ranks > 1)  # peak, copy, kernels, fwd/bwd, sharing
    tables = calibrate_compute(model, micro_batch, max_ranks=max_ranks, threads=threads,
                               progress=_phase_meter("calibrate compute", phases),
                               device="cuda" if on_gpu else "cpu")
    device = tables["gpu"]["model"]
    tables["measured"] = {"device": device, "compute_model": model,
                          "compute_micro_batch": micro_batch,
                          **{f"compute_{k}" if k != "gpu_profile" else k: v
                             for k, v in tables.pop("versions").items()}}
    # a CPU measurement over a GPU's: no CUDA, NCCL, driver or GPU profile of the last one
    path = merge(out, tables, CALIBRATE_HEADER, drop=GPU_ONLY_KEYS)
    fb = tables["fwd_bwd"]
    print(f"# {device}")
    print(f"forward+backward {model} mb {micro_batch}: {fb['total_s'] * 1e3:.2f} ms "
          f"-> MFU {tables['compute']['mfu']:.3f} of {tables['gpu']['peak_bf16_tflops']:.4f} "
          "TFLOP/s (measured matmul peak)")
    for kind, k in tables["kernels"].items():
        _print_kernel(kind, k)
    slow = tables["concurrency"]["slowdown"]
    print("ranks sharing the host: " + ", ".join(f"{r + 1}: x{v:.2f}"
                                                for r, v in enumerate(slow)))
    print(f"wrote {path}")


@calibrate_app.command("trace")
def calibrate_trace(
    trace: str = typer.Argument(..., help="a PyTorch profiler (Kineto) Chrome trace of one "
                                          "rank's training steps, .json or .json.gz"),
    hardware: str = typer.Option(..., "--hardware", "-H",
                                 help="the profile of the machine traced: its peak, HBM "
                                      "bandwidth and launch costs are what the fit scales"),
    model: str = typer.Option(..., "--model", "-m", help="the model profile traced"),
    micro_batch: int = typer.Option(..., "--micro-batch", "--micro-batch-size",
                                    help="sequences per micro-batch in the traced steps"),
    seq_len: int = typer.Option(None, "--seq-len", "--seq-length", parser=parse_length,
                                metavar="LENGTH",
                                help="tokens per sequence [default: the model profile's]"),
    grad_accum: int = typer.Option(1, "--grad-accum",
                                   help="micro-batches in each traced step"),
    attention: AttentionChoice = typer.Option("flash", "--attention",
                                              help="the attention kernel the traced step ran: "
                                                   "flash, flash2 or unfused"),
    eager: bool = typer.Option(False, "--eager/--fused",
                               help="the traced layers ran op by op, one PyTorch kernel an "
                                    "elementwise op (scape train, torchtitan without "
                                    "torch.compile); simulate the fitted profile with --stack "
                                    "torchtitan [default: fused, Megatron-Core's kernels]"),
    out: str = typer.Option(..., "--out", help="NAME: writes measured/NAME.toml in the user's "
                                               "profile folder"),
    megatron_log: str = typer.Option(None, "--megatron-log",
                                     help="the same run's Megatron-LM log: its iteration times "
                                          "(untraced, over many more steps) beside the traced "
                                          "steps' wall time"),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Fit a hardware profile's compute (GEMM, attention, memory-bound kernels, optimizer) to a
    traced step, then price that step on it."""
    import pandas as pd

    from calibration.megatron_log import read_megatron_log
    from calibration.trace import read_trace
    from calibration.trace_fit import FITTED, fit_trace, profile_tables
    from profiles import load_hardware
    from profiles.files import read_toml
    from profiles.loader import write_checked
    from profiles.measured import dumps
    from scape.plan import make_config
    from simulator.step.simulate import _fwd_bwd, simulate_step
    from simulator.step.step_config import StepConfig

    check_format(fmt)
    for flag, value in (("--micro-batch", micro_batch), ("--grad-accum", grad_accum),
                        *((("--seq-len", seq_len),) if seq_len is not None else ())):
        if value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
    m, base = load_model(model), load_hardware(hardware)
    seq = m.arch.seq_len if seq_len is None else seq_len
    traced = read_trace(trace)
    log = None if megatron_log is None else read_megatron_log(megatron_log)  # before writing
    fit = fit_trace(traced, m, base, micro_batch, seq, grad_accum, str(attention), eager)
    path = _destination(out)
    command = (f"scape calibrate trace {traced.path.name} -H {hardware} -m {model} "
               f"--micro-batch {micro_batch} --seq-len {seq} --grad-accum {grad_accum}"
               + (" --eager" if eager else ""))
    doc = profile_tables(fit, read_toml(base.path), m, traced, path.stem, command)
    _, hw = write_checked(path, f"# Written by {command}\n" + dumps(doc), "--out")
    # --eager: the torchtitan stack is the one whose layers the simulator runs op by op
    cfg = StepConfig(m, hw, 1, make_config("dense-adamw"), micro_batch=micro_batch, seq_len=seq,
                     grad_accum=grad_accum, attention=str(attention),
                     **({"stack": "torchtitan"} if eager else {})).validate()
    step = simulate_step(cfg)
    # the GPU's busy time is what the trace's kernels give; the step's compute also waits for
    # the host (simulator/step/host.py), which the trace's wall time holds beside it
    waited = cfg.accum * _fwd_bwd(cfg).parts.get("host_wait", 0.0)
    compute = statistics.median(s.compute_s for s in traced.steps)
    rows = [{"class": c, "traced_s": fit.traced_s[c], "base_s": fit.base_s.get(c),
             "fitted_s": fit.fitted_s.get(c)} for c in (*FITTED, "optimizer")]
    rows.append({"class": "step compute, GPU busy (simulate, in sample)", "traced_s": compute,
                 "base_s": None, "fitted_s": step.compute_s - waited})
    wall = statistics.median(s.wall_s for s in traced.steps)
    rows.append({"class": "step wall (trace) / compute with the host's wait (simulate)",
                 "traced_s": wall, "base_s": None, "fitted_s": step.compute_s})
    if log is not None:  # the run's own steps, untraced, beside the traced steps' wall time
        rows.append({"class": "iteration (Megatron log)", "traced_s": log.median_ms() * 1e-3,
                     "base_s": None, "fitted_s": None})
        for note in log.notes:
            print(f"note: {note}", file=sys.stderr)
    df = pd.DataFrame(rows).assign(trace=str(traced.path), source=traced.source,
                                   steps=fit.steps, hardware=hardware, model=model,
                                   micro_batch=micro_batch, seq_len=seq, grad_accum=grad_accum,
                                   megatron_log=megatron_log, profile=str(path))
    header = (f"{traced.path.name}: {fit.steps} steps of {traced.source}"
              f"{' on ' + traced.device if traced.device else ''}, median per class (the "
              f"steps' compute spread {fit.spread_pct:.0f}%); base: {hardware}'s shapes model; "
              "fitted: " + ", ".join(f"{k} {v:.4g}" for k, v in fit.constants.items())
              + f"\nwrote {path} (scape simulate -H measured/{path.stem} -m {model} ...); the "
              "step compute row is in sample: the fit reproduces the classes it was solved on")
    if log is not None:
        header += (f"\nMegatron log {log.path.name}: {len(log.ms)} interval(s) to iteration "
                   f"{log.iterations[-1]}, median {log.median_ms():.1f} ms per iteration "
                   f"(spread {log.spread_pct():.0f}%); the traced steps' wall "
                   f"{wall * 1e3:.1f} ms is {100 * (wall * 1e3 / log.median_ms() - 1):+.1f}% "
                   "against it (the profiler's own cost, or steps unlike the run's)")
    print(render(df[["class", "traced_s", "base_s", "fitted_s"]], fmt, header=header,
                 schema=list(df.columns),
                 floatfmt={"traced_s": "{:.6f}", "base_s": "{:.6f}", "fitted_s": "{:.6f}"})
          if fmt == "table" else render(df, fmt))
