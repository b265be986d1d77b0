"""Errors a user can cause. The CLI turns every `UserError` into one line and exit code 2."""


class UserError(Exception):
    """A problem with the user's input (a flag, a profile, a name), not a bug in the tool."""


class ProfileError(UserError):
    """A profile file that cannot be used; the message names the file and the key."""
