"""Errors a user can cause. The CLI turns every `UserError` into one line and exit code 2."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every cleanup path (finally, except
    BaseException: ranks, namespaces, temporary files) runs as it does for Ctrl-C."""


def raise_terminated(signum, frame) -> None:
    """A SIGTERM handler."""
    raise Terminated


class UserError(Exception):
    """A problem with the user's input (a flag, a profile, a name), not a bug in the tool."""


class ProfileError(UserError):
    """A profile file that cannot be used; the message names the file and the key."""
