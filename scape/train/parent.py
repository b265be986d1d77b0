"""Processes that end with their launcher (issue 45): torchrun, and every rank under it, ask
the kernel for a signal when their parent dies (Linux prctl PR_SET_PDEATHSIG), so a kill -9 of
`scape train` or `scape validate` (which no handler can catch) still ends the run instead of
leaving it training to the end. torchrun turns its SIGTERM into ending its ranks; each rank
also holds its own request, against torchrun itself being killed."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Have `sig` sent to this process when its parent exits; end now where the parent is
    already gone (re-parented to init). False where the system has no such request."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() == 1:  # the parent died before the request was made
        os._exit(1)
    return True
