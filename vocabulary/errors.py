"""Errors a user can cause. The CLI turns every `UserError` into one line and exit code 2."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP (the terminal closed), raised in the main thread so that every cleanup
    path (finally, except BaseException: ranks, namespaces, temporary files) runs as it does
    for Ctrl-C. `signum`: the signal."""

    def __init__(self, signum: int = 15):
        super().__init__(signum)
        self.signum = signum


# the signals that end a run with its cleanup (SIGINT is Python's KeyboardInterrupt)
TERMINATING = ("SIGTERM", "SIGHUP")


def raise_terminated(signum, frame) -> None:
    """A SIGTERM / SIGHUP handler."""
    raise Terminated(signum)


def catch_terminating() -> list[tuple[int, object]]:
    """Make SIGTERM and SIGHUP raise `Terminated`; returns (signal, previous handler) pairs
    for `restore`."""
    import signal

    wanted = [getattr(signal, name) for name in TERMINATING if hasattr(signal, name)]
    # a signal already ignored stays ignored: `nohup scape ...` must outlive its terminal
    return [(sig, signal.signal(sig, raise_terminated)) for sig in wanted
            if signal.getsignal(sig) is not signal.SIG_IGN]


def restore(previous: list[tuple[int, object]]) -> None:
    import signal

    for sig, handler in previous:
        signal.signal(sig, handler)


class UserError(Exception):
    """A problem with the user's input (a flag, a profile, a name), not a bug in the tool."""


class ProfileError(UserError):
    """A profile file that cannot be used; the message names the file and the key."""
