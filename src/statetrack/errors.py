"""The one exception type for bad user input (unknown names, impossible values, malformed specs),
and SIGTERM raised as an interrupt.

The CLI turns a StatetrackError into a one-line message and exit status 2, and an interrupt (Ctrl-C,
SIGTERM) into one line and 130 or 143; library users can catch either.
"""

import signal
import threading
from contextlib import contextmanager


class StatetrackError(ValueError):
    """Bad input from the user; the message names the bad value and what was expected."""


def unknown(kind: str, name: object, known) -> StatetrackError:
    """Error for an unknown name, listing the valid ones."""
    return StatetrackError(f"unknown {kind} {name!r}; expected one of: {', '.join(sorted(map(str, known)))}")


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled as Ctrl-C: a run's pool workers are stopped and the driver's leases released."""


@contextmanager
def terminate_as_interrupt():
    """Within the block, SIGTERM raises `Terminated` (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
