"""Experiment specs (YAML in `specs/`), their expansion into runs, and the runner."""

from statetrack.experiments.spec import RunSpec, expand, load_spec, shipped_specs

__all__ = ["RunSpec", "expand", "load_spec", "shipped_specs"]
