"""Experiment specs: YAML files shipped in `specs/`, scales, command-line overrides, expansion into runs.

A spec names one or more tasks, a list of models, training and evaluation settings, learning rates
and seeds. The base of the file is the `quick` scale; `scales: {paper: {...}}` holds what changes at
the papers' sizes (merged key by key). Lists of models x tasks x lrs x seeds expand to runs with
stable ids: the same configuration always has the same id, which is how a re-run skips finished work.
`selection: {lr, seeds, criterion, threshold}` says how the report reads the grid (SELECTION_CHOICES;
report.summarize applies it); it is not part of any run's id, so changing it retrains nothing.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from statetrack import zoo
from statetrack.errors import StatetrackError, unknown
from statetrack.tasks import make_task
from statetrack.train import TrainConfig

SCALES = ("quick", "paper")
TOP_LEVEL_KEYS = {
    "name": "experiment name",
    "description": "one paragraph shown in the report",
    "task": "one task: {name: ..., params...}",
    "tasks": "a list of tasks",
    "models": "list of model specs (see `statetrack models`)",
    "model_defaults": "settings applied to every model (d_model, num_layers, ...)",
    "train": "training settings (TrainConfig)",
    "eval": "evaluation: lengths, samples, batch_size, chunk_size, seed",
    "lrs": "learning rates",
    "seeds": "seeds",
    "selection": "how the report picks a learning rate and aggregates seeds: {lr, seeds, criterion, threshold}",
    "scales": "per-scale overrides",
}
EVAL_DEFAULTS = {"lengths": [], "samples": 512, "batch_size": 256, "chunk_size": 1024, "seed": 0}
# The report's selection rule (report.summarize applies it; it never changes which runs are trained,
# so it is not part of a run's id). Valid values of each setting, the default first.
SELECTION_CHOICES = {
    "lr": ("best_mean", "best_max"),  # the lr whose mean / best seed scores highest
    "seeds": ("mean", "max"),  # the headline figure: mean over seeds, or the best seed
    "criterion": ("mean_scaled", "extrapolation"),  # a run's score (see report.run_score)
}
SELECTION_DEFAULTS = {**{k: v[0] for k, v in SELECTION_CHOICES.items()}, "threshold": 0.9}


def shipped_specs() -> dict[str, str]:
    """Names of the experiments shipped with the package -> their description."""
    folder = resources.files("statetrack.experiments") / "specs"
    names = {}
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            names[entry.name[: -len(".yaml")]] = (yaml.safe_load(entry.read_text()) or {}).get("description", "")
    return names


def read_spec(name_or_path: str) -> dict:
    """The raw spec of a shipped experiment name or a path to a YAML file."""
    if name_or_path.endswith((".yaml", ".yml")) or Path(name_or_path).is_file():
        path = Path(name_or_path)
        if not path.is_file():
            raise StatetrackError(f"experiment file {name_or_path!r} does not exist")
        text, default_name = path.read_text(), path.stem
    else:
        specs = shipped_specs()
        if name_or_path not in specs:
            raise unknown("experiment", name_or_path, specs)
        text = (resources.files("statetrack.experiments") / "specs" / f"{name_or_path}.yaml").read_text()
        default_name = name_or_path
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise StatetrackError(f"experiment {name_or_path!r} is not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(spec, dict):
        raise StatetrackError(f"experiment {name_or_path!r} must be a YAML mapping with keys: {', '.join(TOP_LEVEL_KEYS)}")
    spec.setdefault("name", default_name)
    return spec


def deep_merge(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else copy.deepcopy(value)
    return out


def parse_override(text: str) -> tuple[list[str], object]:
    """`train.steps=100` -> (['train', 'steps'], 100); values are parsed as YAML (numbers, lists)."""
    if "=" not in text or text.startswith("="):
        raise StatetrackError(f"override {text!r} is not of the form key=value (e.g. train.steps=200, seeds=[0,1])")
    key, value = text.split("=", 1)
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        raise StatetrackError(f"override {text!r}: cannot parse value {value!r}") from None
    return key.split("."), parsed


def load_spec(name_or_path: str, scale: str = "quick", overrides: list[str] = ()) -> dict:
    """The spec at `scale` with `key=value` overrides applied and every section checked."""
    spec = read_spec(name_or_path)
    if scale not in SCALES:
        raise StatetrackError(f"unknown scale {scale!r}; expected one of: {', '.join(SCALES)}")
    scales = spec.pop("scales", {}) or {}
    bad = [s for s in scales if s not in SCALES]
    if bad:
        raise StatetrackError(f"experiment {spec['name']!r}: unknown scale {bad[0]!r}; expected one of: {', '.join(SCALES)}")
    spec = deep_merge(spec, scales.get(scale) or {})
    for text in overrides:
        path, value = parse_override(text)
        target = spec
        for part in path[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise StatetrackError(f"override {text!r}: {part!r} is not a section")
        target[path[-1]] = value
    spec["scale"] = scale
    check_spec(spec)
    return spec


def check_spec(spec: dict) -> None:
    bad = [k for k in spec if k not in TOP_LEVEL_KEYS and k != "scale"]
    if bad:
        raise StatetrackError(f"experiment {spec['name']!r}: unknown key {bad[0]!r}; expected one of: {', '.join(TOP_LEVEL_KEYS)}")
    for key in ("models", "lrs", "seeds"):
        if not isinstance(spec.get(key), list) or not spec[key]:
            raise StatetrackError(f"experiment {spec['name']!r}: {key!r} must be a non-empty list")
    if ("task" in spec) == ("tasks" in spec):
        raise StatetrackError(f"experiment {spec['name']!r}: give exactly one of 'task' or 'tasks'")
    eval_spec = spec.get("eval") or {}
    bad = [k for k in eval_spec if k not in EVAL_DEFAULTS]
    if bad:
        raise StatetrackError(f"experiment {spec['name']!r}: unknown eval setting {bad[0]!r}; expected one of: {', '.join(EVAL_DEFAULTS)}")
    lengths = eval_spec.get("lengths")
    if not isinstance(lengths, list) or not lengths or not all(isinstance(n, int) and n >= 1 for n in lengths):
        raise StatetrackError(f"experiment {spec['name']!r}: eval.lengths must be a non-empty list of positive integers, got {lengths!r}")
    selection_of(spec)


def selection_of(spec: dict) -> dict:
    """The spec's selection rule with defaults filled in, checked (one-line error naming valid values)."""
    given = spec.get("selection") or {}
    if not isinstance(given, dict):
        raise StatetrackError(f"experiment {spec.get('name')!r}: selection must be a mapping with keys: {', '.join(SELECTION_DEFAULTS)}")
    bad = [k for k in given if k not in SELECTION_DEFAULTS]
    if bad:
        raise StatetrackError(f"unknown selection setting {bad[0]!r}; expected one of: {', '.join(SELECTION_DEFAULTS)}")
    selection = {**SELECTION_DEFAULTS, **given}
    for key, choices in SELECTION_CHOICES.items():
        if selection[key] not in choices:
            raise StatetrackError(f"unknown selection.{key} {selection[key]!r}; expected one of: {', '.join(choices)}")
    threshold = selection["threshold"]
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise StatetrackError(f"selection.threshold must be a number in (0, 1], got {threshold!r}")
    return selection


@dataclass(frozen=True)
class RunSpec:
    """One training run: everything needed to reproduce it, and its stable id."""

    experiment: str
    model: dict  # resolved model spec
    task: dict  # {"name": ..., **params}
    train: dict  # TrainConfig fields (lr and seed included)
    eval: dict
    seed: int
    lr: float

    @property
    def config(self) -> dict:
        return {"experiment": self.experiment, "model": self.model, "task": self.task, "train": self.train, "eval": self.eval}

    @property
    def id(self) -> str:
        return hashlib.sha1(json.dumps(self.config, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def model_name(self) -> str:
        return zoo.display_name(self.model)

    @property
    def task_name(self) -> str:
        params = {k: v for k, v in self.task.items() if k != "name"}
        return self.task["name"] + (f"({', '.join(f'{k}={v}' for k, v in params.items())})" if params else "")


def _task_spec(entry) -> dict:
    entry = {"name": entry} if isinstance(entry, str) else dict(entry)
    if "name" not in entry:
        raise StatetrackError(f"task spec {entry!r} has no 'name'")
    make_task(**entry)  # validates name and parameters now, not mid-sweep
    return entry


def expand(spec: dict) -> list[RunSpec]:
    """Every (task, model, lr, seed) of the spec as a RunSpec, validated."""
    tasks = [_task_spec(t) for t in (spec["tasks"] if "tasks" in spec else [spec["task"]])]
    defaults = spec.get("model_defaults") or {}
    models = [zoo.resolve({**defaults, **({"name": m} if isinstance(m, str) else m)}) for m in spec["models"]]
    eval_spec = {**EVAL_DEFAULTS, **(spec.get("eval") or {})}
    runs = {}  # by id: a value listed twice is one run
    for task in tasks:
        for model in models:
            for lr in spec["lrs"]:
                for seed in spec["seeds"]:
                    train = {**(spec.get("train") or {}), "lr": float(lr), "seed": int(seed)}
                    TrainConfig.from_dict(train)  # validate early
                    run = RunSpec(spec["name"], model, task, train, eval_spec, int(seed), float(lr))
                    runs.setdefault(run.id, run)
    return list(runs.values())
