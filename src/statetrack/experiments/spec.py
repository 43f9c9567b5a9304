"""Experiment specs: YAML files shipped in `specs/`, scales, command-line overrides, expansion into runs.

A spec names one or more tasks, a list of models, training and evaluation settings, learning rates
and seeds. The base of the file is the `quick` scale; `scales: {paper: {...}}` holds what changes at
the papers' sizes (merged key by key). Lists of models x tasks x lrs x seeds (and a list of
`train.dataset_size` values, one run each) expand to runs with stable ids: the same configuration
always has the same id, which is how a re-run skips finished work.
`selection: {lr, seeds, criterion, threshold}` says how the grid is read (statetrack.results.selection applies
it) and `paper: {source, metric, figures, claims}` what the paper reports (the report sets it beside
the measured figures with a verdict per claim); neither is part of any run's id, so changing them
retrains nothing. Every section is checked by the spec's schema (statetrack.schema).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path

from statetrack import limits, yamlio
from statetrack.errors import StatetrackError, unknown
from statetrack.labels import task_label, variant_label
from statetrack.models import sizing, zoo
from statetrack.paths import NAME_MAX, check_name
from statetrack.plugins import load_imports, resolve_imports
from statetrack.schema import (
    CLAIM_TESTS,
    EVAL_DEFAULTS,
    MODEL_SETTINGS,
    SCALES,
    STOP_FIT,
    STOP_LOSS,
    TASK_SETTINGS,
    TOP_LEVEL,
    Paper,
    check_scales,
    selection_of,
    validate_spec,
)
from statetrack.store import Plan, RunClaim
from statetrack.tasks import make_task
from statetrack.training.train import TrainConfig, curriculum_tasks


def shipped_names() -> list[str]:
    """Names of the experiments shipped with the package, sorted."""
    folder = resources.files("statetrack.experiments") / "specs"
    return sorted(entry.name[: -len(".yaml")] for entry in folder.iterdir() if entry.name.endswith(".yaml"))


def shipped_specs() -> dict[str, str]:
    """Names of the experiments shipped with the package -> their description."""
    folder = resources.files("statetrack.experiments") / "specs"
    return {
        name: (yamlio.load((folder / f"{name}.yaml").read_text()) or {}).get("description", "")
        for name in shipped_names()
    }


def read_spec(name_or_path: str) -> dict:
    """The raw spec of a shipped experiment name or a path to a YAML file."""
    if name_or_path.endswith((".yaml", ".yml")) or Path(name_or_path).is_file():
        path = Path(name_or_path)
        if not path.is_file():
            raise StatetrackError(f"experiment file {name_or_path!r} does not exist")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise StatetrackError(
                f"experiment file {name_or_path!r} is not UTF-8 text: byte {error.object[error.start]:#04x} "
                f"at offset {error.start}; save it as UTF-8"
            ) from None
        except OSError as error:
            raise StatetrackError(f"cannot read experiment file {name_or_path!r}: {error.strerror or error}") from None
        default_name, folder = path.stem, path.parent
    else:
        names = shipped_names()
        if name_or_path not in names:
            raise unknown("experiment", name_or_path, names)
        text = (resources.files("statetrack.experiments") / "specs" / f"{name_or_path}.yaml").read_text()
        default_name, folder = name_or_path, None
    try:
        spec = yamlio.load(text)
    except StatetrackError as error:
        raise StatetrackError(f"experiment {name_or_path!r} is not valid YAML: {error}") from None
    if not isinstance(spec, dict):
        raise StatetrackError(f"experiment {name_or_path!r} must be a YAML mapping with keys: {', '.join(TOP_LEVEL)}")
    spec.setdefault("name", default_name)
    if "imports" in spec:  # file paths are relative to the spec's folder
        spec["imports"] = resolve_imports(spec["imports"], folder, origin=f"experiment {spec['name']!r}: imports")
    return spec


def spec_tasks(spec: dict) -> list:
    """The spec's task entries: `tasks` when given (not null), else the one `task`."""
    return spec["tasks"] if spec.get("tasks") is not None else [spec["task"]]


def deep_merge(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        out[key] = (
            deep_merge(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else copy.deepcopy(value)
        )
    return out


def parse_override(text: str) -> tuple[list[str], object]:
    """`train.steps=100` -> (['train', 'steps'], 100); values are parsed as YAML (numbers, lists)."""
    if "=" not in text or text.startswith("="):
        raise StatetrackError(f"override {text!r} is not of the form key=value (e.g. train.steps=200, seeds=[0,1])")
    key, value = text.split("=", 1)
    try:
        parsed = yamlio.load(value)
    except StatetrackError as error:
        raise StatetrackError(f"override {_shown(text)}: cannot parse value {_shown(value)}: {error}") from None
    return key.split("."), parsed


def _shown(text: str, limit: int = 60) -> str:
    """`text` quoted, its middle left out past `limit` characters (an override may be thousands long)."""
    return (
        repr(text)
        if len(text) <= limit
        else repr(f"{text[: limit // 2]}...{text[-10:]}") + f" ({len(text)} characters)"
    )


def overrides_name(base: str, overrides: list[str]) -> str:
    """The experiment name of a spec run with `overrides`: its own name and each override's key and
    value, every run of characters a name cannot hold written as one '-' (`demo` with `seeds=[0]
    train.steps=50` -> `demo_seeds-0_train.steps-50`). A name longer than NAME_MAX keeps its start
    and ends with a hash of the whole, so that two long names differ where their overrides do."""
    parts = [base] + [
        "-".join(filter(None, (re.sub(r"[^A-Za-z0-9._-]+", "-", side).strip("-") for side in text.split("=", 1))))
        for text in overrides
    ]
    name = "_".join(parts)
    if len(name) > NAME_MAX:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: NAME_MAX - len(digest) - 1]}-{digest}"
    return name


def load_spec(name_or_path: str, scale: str = "quick", overrides: Sequence[str] = (), name: str | None = None) -> dict:
    """The spec at `scale` with `key=value` overrides applied and every section checked. Its name is
    `name` when given; else, with overrides, `overrides_name` (a run with overrides is an experiment
    of its own and leaves the one it started from as it was); else the spec's own."""
    spec, written = spec_at(name_or_path, scale)
    if scale == "quick":
        spec["train"] = stop_when_fit(spec)
    for text in overrides:
        path, value = parse_override(text)
        if path == ["name"]:
            raise StatetrackError(f"override {text!r}: the experiment's name is no override; give it with --name NAME")
        target = spec
        for part in path[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise StatetrackError(f"override {text!r}: {part!r} is not a section")
        target[path[-1]] = value
    if name is not None:
        spec["name"] = check_name(name)
    else:
        check_name(spec["name"], hint=" (set `name:` in the spec, or give --name NAME)")
        if overrides:
            spec["name"] = overrides_name(spec["name"], list(overrides))
    spec["scale"] = scale
    validate_spec(spec)  # everything that needs none of the user's modules, before their code runs
    if "imports" in spec:  # before anything looks up a model or task name they may register
        spec["imports"] = load_imports(spec["imports"], origin=f"experiment {spec['name']!r}: imports")
    if spec.get("paper") is not None:  # its names may be of any scale (or left out by an override): not measured then
        check_paper_names(spec, *spec_names(written + [spec]), written + [spec])
        if overrides:  # what the spec runs at this scale and the overrides took out: its claims read "not in this run"
            before, after = spec_names([written[SCALES.index(scale)]]), spec_names([spec])
            left_out = sorted((before[0] - after[0]) | (before[1] - after[1]))
            if left_out:
                spec["left_out"] = left_out
    return spec


def spec_at(name_or_path: str, scale: str) -> tuple[dict, list[dict]]:
    """(the spec as written with its `scale` section merged over it, the same at every scale of
    SCALES): how a spec's scales resolve, for a run (`load_spec`, which then checks it) and for the
    sections a report reads (`spec_now`)."""
    spec = read_spec(name_or_path)
    if scale not in SCALES:
        raise StatetrackError(f"unknown scale {scale!r}; expected one of: {', '.join(SCALES)}")
    scales = check_scales(spec.pop("scales", None), f"experiment {spec['name']!r}: ")
    written = [deep_merge(spec, scales.get(s) or {}) for s in SCALES]
    return deep_merge(spec, scales.get(scale) or {}), written


def spec_now(experiment: str, scale: str | None = None) -> dict | None:
    """The experiment's spec as it is now (a shipped experiment, or a spec file of that name) at
    `scale` (quick when None), its scales resolved as a run's are (`spec_at`); None when there is no
    spec of that name that reads (an experiment named after its overrides): its runs' plan holds the
    spec they ran. Its `paper` and `selection` are part of no run's id, so `statetrack report` and
    the book read them from here: figures, claims and selection rules edited since the runs reach
    their reports (checked as they are scored)."""
    try:
        return spec_at(experiment, scale or "quick")[0]
    except StatetrackError:
        return None


def stop_when_fit(spec: dict) -> dict:
    """The spec's `train:` with the quick scale's rule to stop a run once it has fit, and converged
    on, its training lengths (`early_stop_fit: STOP_FIT` with `early_stop_fit_loss: STOP_LOSS`,
    unless the spec sets early_stop_fit itself; null turns it off), the figure read on the measure
    the spec's fit gate reads (sequence accuracy where its claims measure it, else scaled accuracy).
    A fitted run then leaves its budget to the runs still learning. A spec that stops on its paper's
    own validation loss at or below STOP_LOSS (`early_stop_loss`) keeps that rule alone: stopping at
    STOP_LOSS would cut short the convergence its paper trains to."""
    train = spec.get("train")
    train = dict(train) if isinstance(train, dict) else {}
    own_loss = train.get("early_stop_loss")
    if "early_stop_fit" in train or (isinstance(own_loss, (int, float)) and own_loss <= STOP_LOSS):
        return train
    paper = spec["paper"] if isinstance(spec.get("paper"), dict) else {}
    selection = spec["selection"] if isinstance(spec.get("selection"), dict) else {}
    measure = paper.get("measure", "scaled")
    sequence = measure == "sequence" or (measure == "extrapolation" and selection.get("metric") == "sequence_accuracy")
    return {
        **train,
        "early_stop_fit": STOP_FIT,
        "early_stop_fit_loss": STOP_LOSS,
        **({"early_stop_measure": "sequence"} if sequence else {}),
    }


def spec_names(specs: list[dict]) -> tuple[set[str], set[str]]:
    """The model display names and the task names (evaluation variants included) of `specs`: what a
    `paper:` section may name. A scale whose models do not build is left out (it fails when run)."""
    models, tasks = set(), set()
    for spec in specs:
        try:
            entries = spec_tasks(spec)
            for entry in entries:
                entry = {"name": entry} if isinstance(entry, str) else entry
                name = task_label({k: v for k, v in entry.items() if k not in TASK_SETTINGS})
                variants = {
                    **((spec.get("eval") or {}).get("variants") or {}),
                    **((entry.get("eval") or {}).get("variants") or {}),
                }
                tasks.update([name] + [variant_label(name, v) for v in variants])
            models.update(model_labels([model_entry(m, spec)[0] for m in spec.get("models") or []]))
        except (StatetrackError, AttributeError, KeyError, TypeError):
            pass
    return models, tasks


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
    label: str = field(default="", compare=False)  # the model's name in this experiment (not part of the id)
    # `train` validated, built once with the run (`expand` derives it from its model's settings on
    # its task); the worker trains with it, the plan reads its stages
    settings: TrainConfig | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.settings is None:
            object.__setattr__(self, "settings", TrainConfig.from_dict(self.train))

    @property
    def config(self) -> dict:
        return {
            "experiment": self.experiment,
            "model": self.model,
            "task": self.task,
            "train": self.train,
            "eval": self.eval,
        }

    @property
    def id(self) -> str:
        return hashlib.sha1(json.dumps(self.config, sort_keys=True).encode()).hexdigest()[:16]

    def claim(self, git_rev: str) -> RunClaim:
        """The run as a driver claims it in the store, trained by the code at `git_rev`."""
        return RunClaim(
            self.id, self.experiment, self.model_name, self.task_name, self.seed, self.lr, self.config, git_rev
        )

    @property
    def model_name(self) -> str:
        return self.label or zoo.display_name(self.model)

    @property
    def dataset_size(self) -> int | None:
        """N of a run on a fixed training set, None for fresh batches every step."""
        return self.train.get("dataset_size")

    @property
    def task_name(self) -> str:
        return task_label(self.task)

    @property
    def stages(self) -> list[dict]:
        """The training stages (one without a curriculum): {start, end, min_length, max_length, task}."""
        assert self.settings is not None  # set by __post_init__
        return self.settings.stages()

    @property
    def train_length(self) -> int:
        return max(stage["max_length"] for stage in self.stages)

    def plan_entry(self) -> dict:
        """The run as the plan records it: what the report and the claims need before the run finishes
        (its evaluation lengths, its longest training length, its budget of steps, so that a run
        that used all of it can be told from one that stopped early, and its learning-rate schedule,
        by which `still_learning` weighs its curve)."""
        schedule = self._schedule()
        return {
            "id": self.id,
            "model": self.model_name,
            "task": self.task_name,
            "lr": self.lr,
            "seed": self.seed,
            "dataset_size": self.dataset_size,
            "lengths": list(self.eval["lengths"]),
            "train_length": self.train_length,
            "steps": self.stages[-1]["end"],
            **({"schedule": schedule} if schedule else {}),
        }

    def _schedule(self) -> dict | None:
        """The learning-rate schedule the run trains under (`statetrack.schema.lr_factor`'s
        settings), None for a constant rate without warm-up (the plan then leaves it out)."""
        settings = self.settings
        assert settings is not None  # set by __post_init__
        if settings.schedule == "constant" and not settings.warmup:
            return None
        return {"warmup": settings.warmup, "schedule": settings.schedule, "min_lr_ratio": settings.min_lr_ratio}


@dataclass(frozen=True)
class Experiment:
    """A spec resolved once (`resolve`): the spec at its scale with the overrides applied and every
    default filled in (what the plan stores), its runs, the user's modules it imports (given on the
    command line and named by the spec, imported by the driver and by every worker), and its
    selection rule and paper with their defaults. The runner, the workers' configurations, the CLI
    and the scoring take it; nothing downstream reads the spec file again."""

    spec: dict
    runs: tuple[RunSpec, ...]
    imports: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def scale(self) -> str:
        return self.spec["scale"]

    @property
    def description(self) -> str:
        return self.spec.get("description", "")

    @cached_property
    def selection(self) -> dict:
        return selection_of(self.spec)

    @cached_property
    def paper(self) -> dict | None:
        return paper_of(self.spec)

    def plan(self) -> Plan:
        """The experiment's plan: its spec and every run as the plan records it (`RunSpec.plan_entry`),
        as JSON values, so the plan in memory is the one the store gives back."""
        spec = json.loads(json.dumps(self.spec, sort_keys=True))
        return Plan(self.name, spec, json.loads(json.dumps([run.plan_entry() for run in self.runs])))


def resolve(
    name_or_path: str,
    scale: str = "quick",
    overrides: Sequence[str] = (),
    name: str | None = None,
    imports: Sequence[str] = (),
) -> Experiment:
    """The experiment `statetrack run` would train, checked and resolved, with nothing written: the
    user's modules of `imports` first (the spec may name what they register), then the spec
    (`load_spec`) and its runs (`expand`)."""
    imported = load_imports(imports, origin="--import")
    spec = load_spec(name_or_path, scale, overrides, name)
    return Experiment(spec, tuple(expand(spec)), tuple(dict.fromkeys([*imported, *spec.get("imports", [])])))


def train_config(train: dict) -> TrainConfig:
    """Training settings `train` (a run's, or a spec's `train:`) validated, built once per distinct
    setting in this process: an experiment's runs share their model's settings on a task. Read it;
    a change would reach every caller of the same settings (`model_copy` makes one's own)."""
    return _train_config(json.dumps(train, sort_keys=True))


@lru_cache(maxsize=1024)
def _train_config(train: str) -> TrainConfig:
    return TrainConfig.from_dict(json.loads(train))


def train_range(train: dict) -> tuple[int, int]:
    """(shortest, longest) length that training settings `train` (a run's, or a spec's `train:`)
    train on, over every curriculum stage, defaults filled in. The plan records the longest; the fit
    gate and the reports' in-distribution markers read it there. A run's lr and seed change no
    length: the settings without them are its model's, shared by its runs."""
    stages = train_config({k: v for k, v in train.items() if k not in ("lr", "seed")}).stages()
    return min(stage["min_length"] for stage in stages), max(stage["max_length"] for stage in stages)


def train_lengths_text(train: dict) -> str:
    """The training lengths of `train` for a reader: "10..50", or "10, 20, .., 50" where a
    `length_step` trains on a mixture of them."""
    (low, high), step = train_range(train), train.get("length_step", 1)
    return f"{low}..{high}" if step == 1 or low == high else f"{low}, {low + step}, .., {high}"


def _task_spec(entry, spec: dict):
    """(the task's spec dict, its own `train` settings per dataset size and `eval` settings merged
    over the spec's). A task entry's `train:` and `eval:` override the spec's for that task's runs
    only (e.g. counting's medium signals train and test at length 600 where the short ones use 200);
    the schema has checked them (validate_spec). Every run is evaluated at its longest training
    length, so that the fit gate of the claims (statetrack.results.claims.gate_length) can read
    whether it learned what it was trained on."""
    entry = {"name": entry} if isinstance(entry, str) else dict(entry)
    own = {key: entry.pop(key) for key in TASK_SETTINGS if key in entry}
    eval_spec = {**EVAL_DEFAULTS, **deep_merge(spec.get("eval") or {}, own.get("eval", {}))}
    trains = _dataset_sizes({**spec, "train": deep_merge(spec.get("train") or {}, own.get("train", {}))})
    longest = max(train_range(train)[1] for train in trains)
    if longest not in eval_spec["lengths"]:
        eval_spec["lengths"] = sorted([*eval_spec["lengths"], longest])
    return entry, trains, eval_spec


def check_buildable(model: dict, task) -> int:
    """Build `model` for `task` without training it, so that a bad setting is one line before any run
    starts; returns its parameter count. On the meta device (no memory, no arithmetic); a mixer whose
    construction needs real numbers is built on the CPU instead."""
    import torch

    for device in ("meta", "cpu"):
        try:
            with torch.device(device):
                built = zoo.build_model(model, task.vocab_size, task.num_classes)
            return sum(p.numel() for p in built.parameters())
        except StatetrackError as error:
            raise StatetrackError(f"model {model['name']!r}: {error}") from None
        except Exception as error:
            if device == "cpu":
                settings = ", ".join(f"{k}={v!r}" for k, v in model.items() if k != "name")
                raise StatetrackError(
                    f"model {model['name']!r} cannot be built with {settings}: {type(error).__name__}: {error}"
                ) from None
    raise AssertionError("unreachable: the CPU attempt returns or raises")


def _dataset_sizes(spec: dict) -> list[dict]:
    """The `train` settings for each value of `train.dataset_size`: one for a single value or none
    (the key is left out when not given, so the ids of specs without it do not change)."""
    train = dict(spec.get("train") or {})
    if not isinstance(train.get("dataset_size"), list):
        return [train]
    return [{**train, "dataset_size": n} for n in dict.fromkeys(train["dataset_size"])]


def model_entry(entry, spec: dict) -> tuple[dict, list, dict]:
    """(the resolved model spec of a `models:` entry, the learning rates of its runs: the entry's
    own `lrs`, else the spec's, and its own `train:` settings, merged over the spec's and its task's
    for its runs only: {} when it gives none). Run settings are not model parameters: they are taken
    out before the model is built and are no part of its name."""
    entry = {"name": entry} if isinstance(entry, str) else dict(entry)
    own = {key: entry.pop(key) for key in MODEL_SETTINGS if key in entry}
    return (
        sizing.apply_sizing(entry, spec.get("model_defaults") or {}),
        own.get("lrs") or spec["lrs"],
        own.get("train") or {},
    )


def model_trains(trains: list[dict], own: dict, where: str) -> list[dict]:
    """A model's `train` settings for one task: its own (`own`, a model entry's `train:`) merged over
    each of the task's (`trains`, one per dataset size). A model changes its budget, schedule,
    batches or early stopping, never the longest training length, which the fit gate and the
    evaluation lengths read per task. Without `own`, the task's settings as they are, so that the
    ids of runs whose model sets nothing of its own stay the same."""
    if not own:
        return trains
    out = []
    for base in trains:
        for train in _dataset_sizes({"train": {**base, **own}}):
            longest, task_longest = train_range(train)[1], train_range(base)[1]
            if longest != task_longest:
                raise StatetrackError(
                    f"{where}: train: trains up to length {longest}, but the task's longest training length is "
                    f"{task_longest}; a model sets its own budget, not its lengths (set them in the task's train:)"
                )
            out.append(train)
    return out


def model_labels(models: list[dict]) -> list[str]:
    """Each resolved model's display name, told apart where two different models of one experiment
    share it: "Transformer (num_layers=1)" and "Transformer (num_layers=2)" (the settings that differ)."""
    names = [zoo.display_name(m) for m in models]
    labels = []
    for name, model in zip(names, models):
        twins = [m for n, m in zip(names, models) if n == name and m != model]
        differ = [k for k in model if any(t.get(k) != model[k] for t in twins)]
        labels.append(f"{name} ({', '.join(f'{k}={model[k]}' for k in differ)})" if differ else name)
    return labels


def _own_settings(model: dict) -> str:
    """The mixer settings of a resolved model that differ from its defaults, for an error: "state_size 2048"."""
    defaults = zoo.mixer_parameters(model["name"])
    return ", ".join(f"{k} {v}" for k, v in model.items() if k in defaults and v != defaults[k])


def _check_runs(spec: dict, tasks: list[tuple], models: list[dict], per_model: list[list[list[dict]]]) -> None:
    """Build each task and check its lengths, curriculum and evaluation variants; build each distinct
    model for each task; bound each run's memory and arithmetic under its model's train settings
    (`per_model[model][task]`, see `model_trains`). A bad setting is one line here, before anything
    trains or is written."""
    params = {}  # parameter count by (model, task's vocabulary and classes)
    tried: set[str] = set()  # the models run on a tiny batch (`check_user_mixer`)
    for t, (entry, trains, eval_spec) in enumerate(tasks):
        try:
            task = make_task(**entry)
            curriculum_tasks(task, train_config(trains[0]))  # each stage's task and lengths
        except StatetrackError as error:
            raise StatetrackError(f"experiment {spec['name']!r}: task {task_label(entry)}: {error}") from None
        for length in eval_spec["lengths"]:
            task.check_length(length)
        evaluated = [task]  # the task and its variants: the tokens of the longest evaluation input
        for name, overrides in (eval_spec.get("variants") or {}).items():
            try:
                variant = make_task(**{**entry, **overrides})
                for length in eval_spec["lengths"]:
                    variant.check_length(length)
                if (variant.vocab, variant.answers) != (task.vocab, task.answers):
                    raise StatetrackError(
                        f"{overrides} changes the task's tokens or answers, so the trained model cannot read it"
                    )
            except StatetrackError as error:
                raise StatetrackError(f"experiment {spec['name']!r}: eval variant {name!r}: {error}") from None
            evaluated.append(variant)
        eval_tokens = max(each.tokens(max(eval_spec["lengths"])) for each in evaluated)
        for m, model in enumerate(models):
            key = (json.dumps(model, sort_keys=True), task.vocab_size, task.num_classes)
            if key not in params:
                params[key] = check_buildable(model, task)
            widest, settings = sizing.token_bytes(model) or 0, _own_settings(model)
            for train in per_model[m][t]:
                config = train_config(train)
                try:  # each stage's task (the model's own stages where it sets them) and lengths
                    staged = curriculum_tasks(task, config)
                except StatetrackError as error:
                    raise StatetrackError(f"experiment {spec['name']!r}: models[{m}]: {error}") from None
                limits.check_run_sizes(
                    spec["name"],
                    params[key],
                    model,
                    config,
                    eval_spec,
                    len(eval_spec.get("variants") or {}),
                    token_bytes=widest,
                    settings=settings,
                    train_tokens=max(each.tokens(st["max_length"]) for each, st in zip(staged, config.stages())),
                    eval_tokens=eval_tokens,
                )
            if key[0] not in tried:  # a user's mixer on a tiny batch, once its size is known to fit
                tried.add(key[0])
                zoo.check_user_mixer(model)


def expand(spec: dict, check: bool = True) -> list[RunSpec]:
    """Every (task, model, dataset size, lr, seed) of the spec as a RunSpec; a value listed twice is
    one run. `check` (what a run needs; `statetrack experiments` only counts): each task is built
    and every training and evaluation length checked against it, each distinct model is built for
    each task, and each run's estimated memory and arithmetic are bounded (statetrack.limits)."""
    tasks = [_task_spec(t, spec) for t in spec_tasks(spec)]
    # `width` is d_model; `params` chooses d_model for a per-layer budget (statetrack.models.sizing):
    # each run's model is concrete
    models, model_lrs, model_train = zip(*[model_entry(m, spec) for m in spec["models"]])
    labels = model_labels(list(models))
    per_model = [
        [model_trains(trains, own, f"experiment {spec['name']!r}: model {label}") for _, trains, _ in tasks]
        for own, label in zip(model_train, labels)
    ]  # [model][task] -> that model's train settings on that task, one per dataset size
    if check:
        _check_runs(spec, tasks, list(models), per_model)
    runs: dict[str, RunSpec] = {}  # by id: a value listed twice is one run
    for t, (task, _, eval_spec) in enumerate(tasks):
        for m, (model, label, lrs) in enumerate(zip(models, labels, model_lrs)):
            for base in per_model[m][t]:
                settings = train_config(base)  # the schema has checked lrs and seeds: each run sets its own
                for lr in lrs:
                    for seed in spec["seeds"]:
                        train = {**base, "lr": float(lr), "seed": int(seed)}
                        own = settings.model_copy(update={"lr": float(lr), "seed": int(seed)})
                        run = RunSpec(spec["name"], model, task, train, eval_spec, int(seed), float(lr), label, own)
                        runs.setdefault(run.id, run)
    return list(runs.values())


def paper_of(spec: dict) -> dict | None:
    """The spec's `paper` with defaults filled in (checked by statetrack.schema.Paper); None when the
    spec has none. Figures become {task or None: {model: figure}} (None: every task); each claim gets
    `models`, `tasks` (None: every task of the experiment), `test` and `bound`."""
    if spec.get("paper") is None:
        return None
    paper = Paper.check(spec["paper"], f"experiment {spec.get('name')!r}: ")
    per_task = any(isinstance(v, dict) for v in paper.figures.values())
    claims = []
    for claim in paper.claims:
        test = next(t for t in CLAIM_TESTS if getattr(claim, t) is not None)
        claims.append(
            {
                "text": claim.text,
                "models": claim.model,
                "tasks": claim.task,
                "dataset_size": claim.dataset_size,
                "measure": claim.measure or paper.measure,
                "lengths": paper.lengths if claim.lengths is None else claim.lengths,
                "test": test,
                "bound": getattr(claim, test),
                "seeds": claim.seeds,
                "scales": claim.scale,
                "note": claim.note or "",
                "reason": claim.reason or "",
                "fit": paper.fit if claim.fit is None else claim.fit,
                "fit_variant": paper.fit_variant,
            }
        )
    return {
        "source": paper.source,
        "metric": " ".join(paper.metric.split()),
        "measure": paper.measure,
        "lengths": paper.lengths,
        "figures": paper.figures if per_task else {None: paper.figures},
        "claims": claims,
        "notes": paper.notes or "",
        "fit": paper.fit,
        "protocol": None if paper.protocol is None else paper.protocol.model_dump(),
        "probes": [probe.model_dump() for probe in paper.probes],
        "headline": None if paper.headline is None else paper.headline.model_dump(),
    }


def check_paper_names(spec: dict, models, tasks, scales: Sequence[dict] = ()) -> None:
    """Every model and task the spec's `paper` names is one of `models` (display names) and `tasks`
    (task names as in the tables, evaluation variants included), or a model one of `scales` (specs
    at a scale) has with the settings the name gives (`settings_label`): a typo is a one-line error."""
    paper = paper_of(spec)
    if paper is None:
        return
    where = f"experiment {spec.get('name')!r}: paper"
    resolved = [_scale_models(s) for s in scales]

    def check(kind, name, known, at):
        if kind == "model" and any(settings_label(name, scale) != name for scale in resolved):
            return
        if not any(covers(name, k) if kind == "model" else name == k for k in known):
            raise StatetrackError(
                f"{at}: unknown {kind} {name!r}; expected one of: {', '.join(sorted(map(str, known)))}"
            )

    for task, by_model in paper["figures"].items():
        if task is not None:
            check("task", task, tasks, f"{where}.figures")
        for model in by_model:
            check("model", model, models, f"{where}.figures" + (f"[{task!r}]" if task else ""))
    for i, claim in enumerate(paper["claims"]):
        for model in claim["models"] + (claim["bound"] if claim["test"] == "beats" else []):
            check("model", model, models, f"{where}.claims[{i}]")
        for task in claim["tasks"] or []:
            check("task", task, tasks, f"{where}.claims[{i}]")
    if paper["headline"] is not None:
        check("model", paper["headline"]["model"], models, f"{where}.headline")
        if paper["headline"]["task"] is not None:
            check("task", paper["headline"]["task"], tasks, f"{where}.headline")


def _scale_models(spec: dict) -> list[tuple[str, str, dict]]:
    """(label, display name, resolved model) of each model of one scale's spec; none when they do not resolve."""
    try:
        models = [model_entry(m, spec)[0] for m in spec.get("models") or []]
    except (StatetrackError, AttributeError, KeyError, TypeError):
        return []
    return list(zip(model_labels(models), [zoo.display_name(m) for m in models], models))


def settings_label(name: str, scale: list[tuple[str, str, dict]]) -> str:
    """The label in `scale` (`_scale_models`) of the model that `name`, "Name (key=value, ...)", names by
    its settings where it is no label there: the one model named Name with those settings. Labels tell
    twins apart only where a scale has them, so "Mamba [0,1] (num_layers=2)" is the one Mamba of a
    scale where it has two layers, labelled "Mamba [0,1]" there. `name` itself otherwise."""
    found = re.fullmatch(r"(.+) \((.+)\)", name)
    if found is None or any(label == name for label, _, _ in scale):
        return name
    base, keys = found[1], re.findall(r"(?:^|, )(\w+)=", found[2])
    matches = {
        label
        for label, shown, model in scale
        if shown == base
        and all(k in model for k in keys)
        and name == f"{base} ({', '.join(f'{k}={model[k]}' for k in keys)})"
    }
    return matches.pop() if len(matches) == 1 else name


def by_settings(paper: dict, spec: dict) -> dict:
    """`paper` (as `paper_of` gives it) with each model name renamed to its `settings_label` in `spec`
    (one scale's spec): what its claims and figures read at that scale."""
    scale = _scale_models(spec)

    def rename(name: str) -> str:
        return settings_label(name, scale)

    claims = [
        {**c, "models": [rename(m) for m in c["models"]]}
        | ({"bound": [rename(m) for m in c["bound"]]} if c["test"] == "beats" else {})
        for c in paper["claims"]
    ]
    figures = {
        task: {(m if rename(m) in by_model else rename(m)): v for m, v in by_model.items()}
        for task, by_model in paper["figures"].items()
    }
    return {**paper, "claims": claims, "figures": figures}


def covers(name: str, label: str) -> bool:
    """Whether a model name of `paper:` covers a model label of the tables: the same, or the label is
    the name with settings that tell twins apart ("Transformer" covers "Transformer (num_layers=2)")."""
    return label == name or label.startswith(name + " (")
