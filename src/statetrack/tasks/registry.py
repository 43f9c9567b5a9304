"""The task registry: one dict from name to Task class."""

from __future__ import annotations

import inspect

from statetrack.errors import StatetrackError, unknown

TASKS: dict = {}


def register(cls):
    """Class decorator: add a Task subclass to the registry under `cls.name`."""
    if cls.name in TASKS:
        raise ValueError(f"task {cls.name!r} registered twice")
    TASKS[cls.name] = cls
    return cls


def task_parameters(name: str) -> dict:
    """Parameter names of task `name` with their defaults."""
    cls = get_task_class(name)
    sig = inspect.signature(cls.__init__)
    return {p.name: p.default for p in sig.parameters.values() if p.name != "self"}


def get_task_class(name: str):
    if name not in TASKS:
        raise unknown("task", name, TASKS)
    return TASKS[name]


def make_task(name: str, **params):
    """Build task `name` with `params`; unknown parameters get an error listing the valid ones."""
    valid = task_parameters(name)
    bad = [p for p in params if p not in valid]
    if bad:
        listed = ", ".join(valid) if valid else "none"
        raise StatetrackError(f"task {name!r} has no parameter {bad[0]!r}; its parameters: {listed}")
    return TASKS[name](**params)
