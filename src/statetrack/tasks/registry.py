"""The task registry: one dict from name to Task class, filled by `@register_task(name)`."""

from __future__ import annotations

import inspect

from statetrack.errors import StatetrackError, unknown
from statetrack.tasks.base import Task

TASKS: dict[str, type[Task]] = {}


def register_task(name: str):
    """Class decorator: register the Task subclass as task `name` (its `name` attribute is set to it).

    A name taken by another class is an error; the same class again (a module imported twice)
    replaces its entry, as with `register_model`."""
    if not isinstance(name, str) or not name:
        raise StatetrackError(f"register_task: the name must be a non-empty string, got {name!r}")

    def decorate(cls):
        if not (inspect.isclass(cls) and issubclass(cls, Task)):
            raise StatetrackError(f"register_task({name!r}) expects a statetrack.tasks.Task subclass, got {cls!r}")
        own = cls.__dict__.get("name")
        if own not in (None, name):
            raise StatetrackError(
                f"register_task({name!r}): {cls.__qualname__}.name is {own!r}; the registered name "
                "is the task's name, so drop the attribute"
            )
        old = TASKS.get(name)
        if old is not None and _qualified(old) != _qualified(cls):
            raise StatetrackError(
                f"task name {name!r} is taken by {_qualified(old)}; cannot register {_qualified(cls)} under it"
            )
        cls.name = name
        TASKS[name] = cls
        return cls

    return decorate


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


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
