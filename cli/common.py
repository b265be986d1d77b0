"""What the `scape` commands share: the app and its error handling, the choice types, output
checks, and the helpers that turn options into library calls. Parse, call, print: no logic."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
from enum import StrEnum
from pathlib import Path

import typer

try:  # recent typer vendors click
    from typer._click import exceptions as click_exc
except ImportError:  # older typer depends on click itself
    from click import exceptions as click_exc
from typer.core import TyperCommand

from profiles import UserError
from reports.tables import FORMATS
from scape.train import CORPORA
from simulator.collectives import ALGORITHMS, AUTO
from simulator.step import StepConfig
from vocabulary.errors import Terminated, catch_terminating, restore
from vocabulary.names import (
    ATTENTION,
    AUTO_PROTO,
    DTYPE_BYTES,
    PROTOCOLS,
    RECOMPUTE,
    SCHEDULES,
    SHAPES,
)

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
    """An empty name would write into the current folder (or nowhere): refused; so is a
    place inside the shipped profiles, which every later run reads."""
    if not path.strip():
        raise UserError(f"{flag}: give a {what} name, got {path!r}")
    from profiles.files import ROOT, inside_shipped

    if inside_shipped(path):
        raise UserError(f"{flag} {path}: inside the shipped profiles ({ROOT}), which every run "
                        f"reads; write elsewhere, or set SCAPE_PROFILE_DIR={ROOT} to rewrite "
                        "them in this checkout")


def output_file(path: str, flag: str) -> Path:
    """A file the command will write: refused before any work if it is a folder or its folder
    cannot be written."""
    _named(path, flag, "file")
    if path.endswith(("/", os.sep)):  # Path() would drop the slash and write a file there
        raise UserError(f"{flag} {path}: a trailing / names a folder, give a file name")
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{flag} {path}: is a folder, give a file name")
    if p.exists() and not p.is_file():  # a FIFO would block, a device swallow or refuse it
        raise UserError(f"{flag} {path}: not a regular file, give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise UserError(f"{flag} {path}: {parent} is a file, not a folder")
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


def script_outputs(parser, outputs: dict[str, str | None]) -> None:
    """A bench script's output files ({flag: path}, None: not given), refused before its work
    in one line, as the CLI's outputs are: two flags naming one file, or a file `output_file`
    refuses."""
    given = {flag: path for flag, path in outputs.items() if path is not None}
    seen: dict[str, str] = {}
    for flag, path in given.items():
        real = os.path.realpath(path)
        if real in seen:
            parser.exit(2, f"{parser.prog}: error: {seen[real]} and {flag} name the same file "
                           f"({path}); give two\n")
        seen[real] = flag
    for flag, path in given.items():
        try:
            output_file(path, flag)
        except UserError as exc:
            parser.exit(2, f"{parser.prog}: error: {exc}\n")


def out_folder(out: str | None, default: str) -> Path:
    """--out, or `default` when it was not given (and an error about that folder says so)."""
    if out is None:
        return output_dir(default, "the default folder (no --out given)")
    return output_dir(out, "--out")


# folders this run created for its outputs, leaf first: removed again, if still empty, when
# the run is refused or fails (a refusal leaves nothing behind)
CREATED: list[Path] = []

SHARE_GPU_HELP = ("--backend nccl: run more ranks than GPUs, sharing them; each rank is its own "
                  "NCCL host (NCCL_HOSTID), so NCCL connects them over its TCP socket "
                  "transport, as the SCAPE authors' runs")


def missing_folders(folder: Path) -> list[Path]:
    """`folder` and its parents that do not exist yet, leaf first: what creating it makes,
    for `CREATED` once it is made."""
    return [q for q in (folder, *folder.parents) if not q.exists()]


def _remove_created() -> None:
    for folder in CREATED:
        with contextlib.suppress(OSError):  # only an empty folder goes; one written into stays
            folder.rmdir()
    CREATED.clear()


def output_dir(path: str, flag: str) -> Path:
    """A folder the command will write into, created now: refused before any work if it is a
    file or cannot be created or written."""
    _named(path, flag, "folder")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UserError(f"{flag} {path}: is a file, give a folder")
    new = missing_folders(p)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot create the folder ({exc.strerror})") from None
    CREATED.extend(new)
    if not os.access(p, os.W_OK):
        raise UserError(f"{flag} {path}: not writable")
    return p


class StrictCommand(TyperCommand):
    """A command that refuses an option given twice (click keeps the last value silently), and
    both halves of a --flag/--no-flag pair."""

    def parse_args(self, ctx, args):
        _, _, order = self.make_parser(ctx).parse_args(args=list(args))
        seen: dict[str, int] = {}
        for param in order:
            if (param.param_type_name == "option" and not param.multiple
                    and not getattr(param, "count", False)):
                seen[param.name] = seen.get(param.name, 0) + 1
        for name, times in seen.items():
            if times > 1:
                param = next(p for p in order if p.name == name)
                flags = "/".join(param.opts + param.secondary_opts)
                raise click_exc.UsageError(f"{flags} given {times} times: give it once",
                                           ctx=ctx)
        return super().parse_args(ctx, args)


class StrictTyper(typer.Typer):
    """A Typer (sub-)app whose commands refuse repeated options (`StrictCommand`)."""

    def command(self, *args, **kwargs):
        kwargs.setdefault("cls", StrictCommand)
        return super().command(*args, **kwargs)


class App(StrictTyper):
    """A Typer app whose errors a user can cause end in one line on stderr and exit code 2."""

    def __call__(self, *args, **kwargs):
        main = threading.current_thread() is threading.main_thread()  # signals: main only
        if main:  # Ctrl-C / SIGINT ends the run even where a parent shell ignored it
            previous = (catch_terminating(),
                        signal.signal(signal.SIGINT, signal.default_int_handler))
        for stream in (sys.stdout, sys.stderr):  # an ASCII terminal gets escapes, not a crash
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors="backslashreplace")
        CREATED.clear()
        rv = None
        try:
            rv = super().__call__(*args, standalone_mode=False, **kwargs)
        except UserError as exc:
            _fail(str(exc))
        except ModuleNotFoundError as exc:  # the runtime's torch, left out of a planning install
            if (exc.name or "").split(".")[0] != "torch":
                raise
            _fail(NEEDS_TORCH)
        except OSError as exc:  # a path the user gave: too long, a loop, no permission, ...
            if exc.filename is None and exc.errno in OUTPUT_ERRNOS:
                _output_failed(exc)
            if exc.filename is None or exc.errno is None:
                raise
            name = str(exc.filename)
            shown = name if len(name) <= 120 else f"{name[:60]}...{name[-40:]} ({len(name)} chars)"
            _fail(f"{shown}: {exc.strerror}")
        except Terminated as exc:
            with contextlib.suppress(OSError):  # a closed terminal may refuse the line
                print(f"scape: terminated ({signal.Signals(exc.signum).name}); every process "
                      "it started was ended", file=sys.stderr)
            sys.exit(128 + exc.signum)
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
            if rv not in (None, 0) or sys.exc_info()[0] is not None:
                _remove_created()  # refused, failed or stopped: no empty folder left behind
            if main:
                restore(previous[0])
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
RankChoice = _choice("RankChoice", ("time", "quality"))
RecomputeChoice = _choice("RecomputeChoice", RECOMPUTE)
ScheduleChoice = _choice("ScheduleChoice", SCHEDULES)
AttentionChoice = _choice("AttentionChoice", ATTENTION)


# what a command that runs the real optimizer says where torch is not installed
NEEDS_TORCH = ("this command runs the real optimizer and needs PyTorch, which the planning "
               "install leaves out: pip install 'scape-costmodel[train]' (in a checkout: make "
               "test installs it)")


def _fail(message: str) -> None:
    with contextlib.suppress(OSError):  # stderr itself may be the full disk or closed pipe
        print(f"scape: error: {message}", file=sys.stderr)
    sys.exit(2)


# errors of a write that names no file (the command's output on a full disk or over quota,
# a closed pipe): one line, not a traceback
OUTPUT_ERRNOS = (errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _output_failed(exc: OSError) -> None:
    """A write failed: one line, not a traceback. stdout goes to /dev/null first, so that
    Python's flush at exit does not fail again. (A reader that closed the pipe mostly never
    gets here: click ends the command itself, with status 1.)"""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    if exc.errno == errno.EPIPE:
        sys.exit(1)
    _fail(f"cannot write: {exc.strerror}")


app = App(
    help="Communication cost modeler for LLM training: SCAPE, its baselines, real and simulated.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help texts name TOML tables ([nccl], [price]): printed as written
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("scape-costmodel")
        except PackageNotFoundError:  # run from a checkout without installing
            v = "not installed"
        try:
            from importlib.metadata import version as installed

            torch = f"torch {installed('torch')}"
        except PackageNotFoundError:  # a planning install: no runtime
            torch = "no torch: planning only, pip install 'scape-costmodel[train]' to train"
        print(f"scape {v} ({torch}, python {sys.version.split()[0]})")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(None, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """Communication cost modeler for LLM training: SCAPE, its baselines, real and simulated."""


FP8_HELP = ("the layers' linear GEMMs in FP8, as Transformer Engine's recipe runs them (at the "
            "profile's FP8 rate; attention and the output layer stay 16-bit)")
TP_OVERLAP_HELP = ("overlap the tensor-parallel all-gathers and reduce-scatters with their "
                   "GEMMs, as Transformer Engine does (Megatron-Core --tp-comm-overlap, NeMo "
                   "ub_tp_comm_overlap)")
# pipeline parallelism, recomputation and the compute model: simulate and compare
PARALLEL_OPTS = {
    "pp": typer.Option(1, "--pp", help="pipeline-parallel stages"),
    "pp_schedule": typer.Option("1f1b", "--pp-schedule", help="1f1b|interleaved"),
    "virtual_stages": typer.Option(None, "--virtual-stages",
                                   help="interleaved: model chunks per stage (default 2)"),
    "recompute": typer.Option("none", "--recompute",
                              help="activation recomputation: none|selective|full"),
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
    "cp": typer.Option(1, "--cp", help="context-parallel ranks splitting each sequence "
                                       "(Megatron-Core --context-parallel-size; Transformer "
                                       "Engine's ring exchange of keys and values)"),
}


def _schedule_name(cfg: StepConfig) -> str:
    if cfg.pp == 1:
        return ""
    return f" {cfg.pp_schedule}" + (f" x{cfg.chunks_pp}" if cfg.chunks_pp > 1 else "")


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


def _progress(description: str):
    """A rich progress bar on stderr (quiet when stderr is not a terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(f"[bold]{description}", BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True,
                    disable=not sys.stderr.isatty())


def _rank_counts(text: str) -> list[int]:
    """--nprocs 3 or 2,3: rank counts of at least 2."""
    if any(not x.strip() for x in text.split(",")):
        raise UserError(f"--nprocs {text!r} has an empty item: give rank counts like 2,3")
    try:
        worlds = [int(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"--nprocs wants integers like 2,3, got {text!r}") from None
    if not worlds or min(worlds) < 2:
        raise UserError(f"--nprocs must list rank counts of at least 2, got {text!r}")
    twice = sorted({w for w in worlds if worlds.count(w) > 1})
    if twice:
        raise UserError(f"--nprocs lists {', '.join(map(str, twice))} twice ({text!r}): give "
                        "each rank count once")
    return worlds
