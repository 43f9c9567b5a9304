"""Tasks: seeded generators of (inputs, targets, mask) batches, and their registry."""

from statetrack.tasks.base import Batch, FinalAnswerTask, Task
from statetrack.tasks.registry import TASKS, get_task_class, make_task, register, task_parameters

# Importing the task modules registers them.
from statetrack.tasks import arithmetic, automata, chomsky, counting, memory, pfsa, repl, word_problems  # noqa: E402,F401

__all__ = ["Batch", "FinalAnswerTask", "Task", "TASKS", "get_task_class", "make_task", "register", "task_parameters"]
