"""Experiment specs (YAML in `specs/`), their resolution into an experiment and its runs, and the runner."""

from statetrack.experiments.spec import Experiment, RunSpec, expand, load_spec, resolve, shipped_specs

__all__ = ["Experiment", "RunSpec", "expand", "load_spec", "resolve", "shipped_specs"]
