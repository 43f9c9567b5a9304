"""The one exception type for bad user input (unknown names, impossible values, malformed specs).

The CLI turns it into a one-line message and exit status 2; library users can catch it.
"""


class StatetrackError(ValueError):
    """Bad input from the user; the message names the bad value and what was expected."""


def unknown(kind: str, name: object, known) -> StatetrackError:
    """Error for an unknown name, listing the valid ones."""
    return StatetrackError(f"unknown {kind} {name!r}; expected one of: {', '.join(sorted(map(str, known)))}")
