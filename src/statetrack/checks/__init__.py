"""Checks: figures the library computes without training, which a spec's claim reads with
`measure: check:NAME`. `registry` holds them (`register_check` adds a user's own), `shipped` the
papers' checks, `belief` the belief recurrence in floating point that three of them read. Importing
the package registers the shipped checks; none imports torch until it computes."""

from statetrack.checks import shipped  # noqa: F401  (registers the shipped checks)
from statetrack.checks.registry import CHECKS, Check, check_value, get_check, register_check

__all__ = ["CHECKS", "Check", "check_value", "get_check", "register_check"]
