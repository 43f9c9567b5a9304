"""The registry of checks: figures the library computes without training (a construction evaluated
on fixed inputs, a Monte Carlo from a fixed seed, a recurrence iterated exactly), which a claim reads
with `measure: check:NAME` (statetrack.results.claims). The shipped checks (`statetrack.checks.shipped`)
register when `statetrack.checks` is imported; `register_check` adds one of a user's own."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from statetrack.errors import StatetrackError


@dataclass(frozen=True)
class Check:
    """One check: its `name` (`measure: check:NAME`), what it `measures` in words, and `compute`,
    which returns the figure (deterministic: fixed seeds, no training)."""

    name: str
    measures: str
    compute: Callable[[], float]


CHECKS: dict[str, Check] = {}


def register_check(name: str, measures: str):
    def register(compute: Callable[[], float]) -> Callable[[], float]:
        CHECKS[name] = Check(name, " ".join(measures.split()), compute)
        return compute

    return register


def get_check(name: str) -> Check:
    if name not in CHECKS:
        raise StatetrackError(f"unknown check {name!r}; expected one of: {', '.join(sorted(CHECKS))}")
    return CHECKS[name]


@functools.cache
def check_value(name: str) -> float:
    """The figure of check `name`, computed once per process (a check is deterministic)."""
    return float(get_check(name).compute())
