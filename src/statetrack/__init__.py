"""statetrack: state tracking and length generalization in sequence models.

`statetrack.register_model` registers a token mixer under a name usable in specs and on the
command line; `statetrack.register_task` does the same for a task. `statetrack.load_run(run_id)`
and `statetrack.load_runs(experiment, model=..., seed=...)` give back trained runs: model (weights
loaded, eval mode), task and configuration (statetrack.results.trained). All load lazily, so
`import statetrack` stays light.
"""

from statetrack.errors import StatetrackError
from statetrack.version import __version__

__all__ = ["StatetrackError", "__version__", "load_run", "load_runs", "register_model", "register_task"]


def __getattr__(name: str):
    if name == "register_model":
        from statetrack.models.zoo import register_model

        return register_model
    if name == "register_task":
        from statetrack.tasks.registry import register_task

        return register_task
    if name in ("load_run", "load_runs"):
        import statetrack.results.trained

        return getattr(statetrack.results.trained, name)
    if name == "tasks":
        import statetrack.tasks

        return statetrack.tasks
    raise AttributeError(f"module 'statetrack' has no attribute {name!r}")
