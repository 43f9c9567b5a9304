"""The catalogue, generated from the registries: the models tables of docs/models.md and README.md
(their `models` blocks), the task catalogue docs/tasks.md (`statetrack.tasks.catalog`), all three
written by `statetrack docs --write`, and the JSON Schema of an experiment spec with every
registered model's and task's parameters (`statetrack schema`).
"""

from __future__ import annotations

import inspect
import itertools
import json
import types
import typing
from pathlib import Path

from statetrack import schema
from statetrack.layers.common import EIG_RANGES
from statetrack.layers.registry import Departures
from statetrack.layers.transformer import POSITIONAL
from statetrack.models import zoo
from statetrack.models.zoo import packaged_models
from statetrack.tasks import catalog as task_catalog
from statetrack.tasks.registry import TASKS

# parameters with a fixed set of values: each value can give a different display name
CHOICES = {"eig_range": tuple(EIG_RANGES), "positional": POSITIONAL}


def display_names(name: str) -> list[str]:
    """Every display name model `name` can have: one per value of its choice parameters, other
    parameters shown as `{param}` where the display names them (DeltaProduct_{n_h} [0,1])."""
    entry, params = zoo.get_entry(name), zoo.mixer_parameters(name)
    choices = {k: values for k, values in CHOICES.items() if k in params}
    placeholders = {k: "{" + k + "}" for k in params if k not in choices}
    names = []
    for values in itertools.product(*choices.values()):
        spec = zoo.resolve({"name": name, **dict(zip(choices, values))})
        try:
            shown = entry.display({**spec, **placeholders})
        except Exception:  # a display callable that computes with a parameter: show its default
            shown = entry.display(spec)
        if shown not in names:
            names.append(shown)
    return names


def departures(name: str) -> str:
    """Where the mixer departs from the published model on purpose: its class attribute `departures`
    (`layers.registry.Departures`; each one is checked by the test that compares the layer with an
    independent implementation)."""
    mixer = zoo.get_entry(name).mixer
    stated = mixer.departures if isinstance(mixer, Departures) else ""
    return " ".join(str(stated or "none stated").split())


def summary(name: str) -> str:
    """The registry's summary (what `statetrack models` prints too)."""
    return zoo.get_entry(name).summary


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _flow(spec: dict) -> str:
    """A spec in YAML flow style, as written in experiment specs."""
    return (
        "{"
        + ", ".join(f"{k}: {json.dumps(v) if isinstance(v, str) and k != 'name' else v}" for k, v in spec.items())
        + "}"
    )


def docs_table() -> str:
    """docs/models.md: every model with its display names, parameters and defaults, and presets."""
    common = ", ".join(f"`{k}={v!r}`" for k, v in zoo.MODEL_DEFAULTS.items())
    lines = [
        f"Parameters of every model: {common} (a model's own stack defaults, first in its row, replace these).",
        "",
        "| name | display names | parameters (defaults) | recurrent | what it is "
        "| departures from the published model |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in packaged_models():
        entry = zoo.get_entry(name)
        params = (
            ", ".join(f"`{k}={v!r}`" for k, v in {**entry.stack_defaults, **zoo.mixer_parameters(name)}.items()) or "-"
        )
        shown = ", ".join(f"`{n}`" for n in display_names(name))
        lines.append(
            f"| `{name}` | {_cell(shown)} | {_cell(params)} | {'yes' if entry.recurrent else 'no'} "
            f"| {_cell(summary(name))} | {_cell(departures(name))} |"
        )
    presets = ", ".join(f"`{k}` = `{_flow(v)}`" for k, v in zoo.PRESETS.items())
    lines += ["", f"Presets (usable as `name:` in a spec; other keys override them): {presets}."]
    return "\n".join(lines)


def readme_table() -> str:
    """README.md: every model with its display names and parameter names."""
    lines = ["| name | display names | parameters | what it is |", "| --- | --- | --- | --- |"]
    for name in packaged_models():
        params = ", ".join(f"`{k}`" for k in zoo.mixer_parameters(name)) or "-"
        lines.append(f"| `{name}` | {_cell(' / '.join(display_names(name)))} | {params} | {_cell(summary(name))} |")
    return "\n".join(lines)


JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _parameter_schema(parameter: inspect.Parameter, choices: tuple | None = None) -> dict:
    """A signature parameter's JSON Schema: `choices` as an enum, else the types its annotation
    names (int, float, bool, str, None), else its default's type; and its default."""
    annotation, default = parameter.annotation, parameter.default
    union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
    kinds = typing.get_args(annotation) if union else (annotation,)
    named = (
        sorted({"null" if k is type(None) else JSON_TYPES[k] for k in kinds})
        if all(k is type(None) or k in JSON_TYPES for k in kinds)
        else []
    )
    if not named and type(default) in JSON_TYPES:
        named = [JSON_TYPES[type(default)]]
    out: dict = (
        {"enum": list(choices)} if choices else {"type": named[0] if len(named) == 1 else named} if named else {}
    )
    if default is not inspect.Parameter.empty:
        out["default"] = default
    return out


def _signature(cls, skip: tuple) -> dict[str, inspect.Parameter]:
    try:
        signature = inspect.signature(cls.__init__, eval_str=True)
    except (NameError, TypeError):  # an annotation that does not evaluate: the defaults alone say the types
        signature = inspect.signature(cls.__init__)
    return {
        p.name: p
        for p in signature.parameters.values()
        if p.name not in ("self", *skip) and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def spec_json_schema() -> dict:
    """The JSON Schema of an experiment spec (statetrack.schema), with every registered model (and
    preset) and task named with its parameters, read from the signatures."""
    stack = {
        "d_model": {"type": "integer", "minimum": 1, "description": "model width"},
        "width": {"type": "integer", "minimum": 1, "description": "a synonym of d_model"},
        "params": {
            "type": "number",
            "exclusiveMinimum": 0,
            "description": "a per-layer parameter budget that chooses d_model",
        },
        "num_layers": {"type": "integer", "minimum": 1},
        "mlp": {"type": "boolean", "description": "an MLP after each mixer"},
    }
    models = {}
    for name, entry in zoo.MODELS.items():
        models[name] = {
            **stack,
            **{k: _parameter_schema(p, CHOICES.get(k)) for k, p in _signature(entry.mixer, ("d_model",)).items()},
        }
    for preset, fixed in zoo.PRESETS.items():
        models[preset] = {k: v for k, v in models[fixed["name"]].items() if k not in fixed}
    tasks = {name: {k: _parameter_schema(p) for k, p in _signature(cls, ()).items()} for name, cls in TASKS.items()}
    return schema.json_schema(models, tasks)


def catalogue_files(root: Path) -> tuple[dict[Path, str], dict[Path, dict[str, str]]]:
    """What the registries generate under the checkout `root`: ({whole page: text}, {page: {block:
    text}}): docs/tasks.md, and the `models` blocks of docs/models.md and README.md."""
    pages = {root / "docs" / "tasks.md": task_catalog.markdown()}
    blocks = {root / "docs" / "models.md": {"models": docs_table()}, root / "README.md": {"models": readme_table()}}
    return pages, blocks
