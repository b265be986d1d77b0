"""The `scape` app: typer with one line and exit code 2 for every error a user can cause, a
refusal of options given twice, signals that end a run with its cleanup, and `--version`."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import sys
import threading

import typer

try:  # recent typer vendors click
    from typer._click import exceptions as click_exc
except ImportError:  # older typer depends on click itself
    from click import exceptions as click_exc
from typer.core import TyperCommand

from cli.outputs import CREATED, remove_created
from profiles import UserError
from vocabulary.errors import Terminated, catch_terminating, restore
from vocabulary.suggest import did_you_mean


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
            if sys.stdout is None:  # started with stdout closed (>&-): every print would vanish
                _fail("standard output is closed (>&-), so the results would be written "
                      "nowhere: redirect it to a file, or to /dev/null to discard them")
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
            _fail(_with_suggestion(exc))
        finally:
            if rv not in (None, 0) or sys.exc_info()[0] is not None:
                remove_created()  # refused, failed or stopped: no empty folder left behind
            if main:
                restore(previous[0])
                signal.signal(signal.SIGINT, previous[1])
        if rv == 130:  # typer returns Ctrl-C (KeyboardInterrupt) as exit code 130
            print("scape: interrupted (SIGINT); every process it started was ended",
                  file=sys.stderr)
        sys.exit(rv if isinstance(rv, int) else 0)


# typer's refusal of a choice, through pydantic: "Value error, 'x' is not one of 'a', 'b'."
_REFUSED_CHOICE = re.compile(r"(?:Value error, )?'(?P<got>[^']*)' is not one of "
                             r"(?P<known>'[^']*'(?:, '[^']*')*)\.?$")


def _with_suggestion(exc) -> str:
    """A click error's message; a refused choice's without pydantic's 'Value error, ' and with
    the closest valid values (vocabulary/suggest.py); a missing --gpus where -g was typed
    (nccl-tests' habit) says what -g is."""
    message = exc.format_message()
    param, ctx = getattr(exc, "param", None), getattr(exc, "ctx", None)
    if (isinstance(exc, click_exc.MissingParameter) and getattr(param, "name", "") == "gpus"
            and ctx is not None and ctx.params.get("gpus_per_process") is not None):
        return (f"{message[:-1]} (-g is nccl-tests' GPUs per process, --gpus-per-process; "
                "the GPUs taking part are --gpus N)")
    if message == "No such option: -g":
        return f"{message} (the GPUs in the job are --gpus N)"
    m = _REFUSED_CHOICE.search(message)
    if m is None:
        return message
    known = re.findall(r"'([^']*)'", m["known"])
    head = message[: m.start()]
    return (f"{head}{m['got']!r} is not one of {', '.join(map(repr, known))}"
            f"{did_you_mean(m['got'], known)}")


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
