"""Models by name: the registry of mixers (`statetrack.layers.registry`), their parameters and
display names, presets, and `build_model`.

Every mixer in `statetrack.layers` registers itself with `@register_model`, so adding a model never
touches this file. A model spec is a flat dict: `{"name": "deltanet", "eig_range": "[-1,1]", "d_model": 32,
"num_layers": 1}`. `d_model`, `num_layers`, `mlp` and `stack` shape the SequenceModel; every other key is
passed to the mixer. `resolve` fills in every default (the family's own stack defaults over
MODEL_DEFAULTS, e.g. no MLP for bilinear), so a resolved spec names the model fully.
"""

from __future__ import annotations

import inspect

from statetrack import limits
from statetrack.errors import StatetrackError, unknown
from statetrack.layers import MODELS, ModelEntry, register_model
from statetrack.models.model import STACKS, SequenceModel

__all__ = [
    "MODELS",
    "MODEL_DEFAULTS",
    "PRESETS",
    "ModelEntry",
    "build_model",
    "display_name",
    "get_entry",
    "mixer_parameters",
    "packaged_models",
    "register_model",
    "resolve",
]

MODEL_DEFAULTS = {"d_model": 64, "num_layers": 1, "mlp": True, "stack": "residual"}

PRESETS: dict[str, dict] = {
    "deltanet-neg": {"name": "deltanet", "eig_range": "[-1,1]"},
    "deltanet-pos": {"name": "deltanet", "eig_range": "[0,1]"},
    "mamba-neg": {"name": "mamba", "eig_range": "[-1,1]"},
    "mamba-pos": {"name": "mamba", "eig_range": "[0,1]"},
    "deltaproduct-2": {"name": "deltaproduct", "n_h": 2, "eig_range": "[-1,1]"},
    "transformer-rope": {"name": "transformer", "positional": "rope"},
}


def mixer_parameters(name: str) -> dict:
    """Mixer parameters of model `name` (all but d_model) with their defaults."""
    sig = inspect.signature(get_entry(name).mixer.__init__)
    return {p.name: p.default for p in sig.parameters.values() if p.name not in ("self", "d_model")}


def packaged_models() -> list[str]:
    """Names of the models defined in this package, sorted; user models registered from outside
    (`imports:`, `--import`) are not part of its documentation or its state table."""
    return sorted(name for name, entry in MODELS.items() if entry.mixer.__module__.startswith("statetrack.layers."))


def get_entry(name: str) -> ModelEntry:
    if name not in MODELS:
        raise unknown("model", name, list(MODELS) + list(PRESETS))
    return MODELS[name]


def resolve(spec: dict | str) -> dict:
    """The spec with presets expanded and every default filled in; errors name bad keys."""
    spec = {"name": spec} if isinstance(spec, str) else dict(spec)
    if "name" not in spec:
        raise StatetrackError(f"model spec {spec!r} has no 'name'; expected one of: {', '.join(MODELS)}")
    if spec["name"] in PRESETS:
        spec = {**PRESETS[spec.pop("name")], **spec}
    mixer_params = mixer_parameters(spec["name"])
    bad = [k for k in spec if k != "name" and k not in MODEL_DEFAULTS and k not in mixer_params]
    if bad:
        valid = ", ".join(list(MODEL_DEFAULTS) + list(mixer_params))
        raise StatetrackError(f"model {spec['name']!r} has no parameter {bad[0]!r}; its parameters: {valid}")
    spec = {"name": spec["name"], **MODEL_DEFAULTS, **get_entry(spec["name"]).stack_defaults, **mixer_params, **spec}
    for key, high in (("d_model", limits.MAX_WIDTH), ("num_layers", limits.MAX_LAYERS)):
        limits.check_int(spec[key], f"model {spec['name']!r}: {key}", 1, high)
    if not isinstance(spec["mlp"], bool):
        raise StatetrackError(f"model {spec['name']!r}: mlp must be true or false, got {spec['mlp']!r}")
    if spec["stack"] not in STACKS:
        raise StatetrackError(
            f"model {spec['name']!r}: stack must be one of {', '.join(STACKS)}, got {limits.shown(spec['stack'])}"
        )
    if spec["stack"] == MODEL_DEFAULTS["stack"]:
        del spec["stack"]  # the common stack is left unnamed, so the ids of the models that use it stay as they were
    for key in getattr(get_entry(spec["name"]).mixer, "unnamed_defaults", ()):
        if spec[key] == mixer_params[key]:  # a later option at its default leaves the ids as they were too
            del spec[key]
    return spec


def display_name(spec: dict | str) -> str:
    spec = resolve(spec)
    return get_entry(spec["name"]).display(spec)


def build_model(spec: dict | str, vocab_size: int, num_classes: int) -> SequenceModel:
    """A SequenceModel for a task with `vocab_size` tokens and `num_classes` answers."""
    spec = resolve(spec)
    entry = get_entry(spec["name"])
    mixer_kwargs = {k: v for k, v in spec.items() if k != "name" and k not in MODEL_DEFAULTS}
    d_model = spec["d_model"]
    return SequenceModel(
        vocab_size,
        num_classes,
        lambda: entry.mixer(d_model, **mixer_kwargs),
        d_model=d_model,
        num_layers=spec["num_layers"],
        mlp=spec["mlp"],
        stack=spec.get("stack", MODEL_DEFAULTS["stack"]),
    )
