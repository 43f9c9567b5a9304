"""How a task is named in tables, plans and stores, in one place: `word_problem(group=A5)` for a
task, `counting(preset=short) [offset]` for one of its evaluation variants."""

from __future__ import annotations


def task_label(task: dict) -> str:
    """A task's name in tables: `word_problem(group=A5)`."""
    params = {k: v for k, v in task.items() if k != "name"}
    return task["name"] + (f"({', '.join(f'{k}={v}' for k, v in params.items())})" if params else "")


def variant_label(task: str, variant: str | None) -> str:
    """The name of a task's evaluation variant: `counting(preset=short) [offset]`; the task's own
    name for the training task (variant '' or None)."""
    return f"{task} [{variant}]" if variant else task


def split_variant_label(label: str) -> tuple[str, str]:
    """(the training task's name, the variant; '' for the training task) of a `variant_label`."""
    if label.endswith("]") and " [" in label:
        at = label.rfind(" [")
        return label[:at], label[at + 2 : -1]
    return label, ""
