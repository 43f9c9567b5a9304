"""The one exception type for bad user input (unknown names, impossible values, malformed specs).

The CLI turns it into a one-line message and exit status 2; library users can catch it.
"""


class StatetrackError(ValueError):
    """Bad input from the user; the message names the bad value and what was expected."""


def check_keys(value, allowed, where: str, expected: str | None = None) -> None:
    """Refuse a `value` that is not a mapping, or has a key outside `allowed`; `expected` words the
    allowed keys in the messages (default: their list)."""
    keys = expected or ", ".join(allowed)
    if not isinstance(value, dict):
        raise StatetrackError(f"{where} must be a mapping with keys: {keys}; got {value!r}")
    bad = [k for k in value if k not in allowed]
    if bad:
        raise StatetrackError(f"{where}: unknown key {bad[0]!r}; expected " + (expected or f"one of: {keys}"))


def unknown(kind: str, name: object, known) -> StatetrackError:
    """Error for an unknown name, listing the valid ones."""
    return StatetrackError(f"unknown {kind} {name!r}; expected one of: {', '.join(sorted(map(str, known)))}")
