"""Tasks: seeded generators of (inputs, targets, mask) batches, and their registry."""

from statetrack.tasks.base import Batch, FinalAnswerTask, Task
from statetrack.tasks.registry import TASKS, get_task_class, make_task, register_task, task_parameters


def _import_task_modules() -> None:
    """Import every module of this package, which registers its tasks: a new task is one module with
    `@register_task(name)`, and no list to keep. `catalog` is left out: it is the script that renders docs/tasks.md."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        if module.name != "catalog":
            importlib.import_module(f"{__name__}.{module.name}")


_import_task_modules()

__all__ = [
    "Batch",
    "FinalAnswerTask",
    "Task",
    "TASKS",
    "get_task_class",
    "make_task",
    "register_task",
    "task_parameters",
]
