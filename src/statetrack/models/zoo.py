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
import math

from statetrack import limits
from statetrack.errors import StatetrackError, unknown
from statetrack.layers import MODELS, ModelEntry, register_model
from statetrack.models.model import STACKS, SequenceModel
from statetrack.plugins import imported_by

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


RECORDABLE = "a number, a string, true/false, null, or a list or mapping of these"


def mixer_parameters(name: str) -> dict:
    """Mixer parameters of model `name` (all but d_model) with their defaults; a parameter without
    one, `*args`/`**kwargs`, or a default a spec cannot record (a function, a class) is a one-line
    error naming the plugin (a user's mixer: every setting is part of a run's id and its record)."""
    sig = inspect.signature(get_entry(name).mixer.__init__)
    parameters = [p for p in sig.parameters.values() if p.name not in ("self", "d_model")]
    for p in parameters:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            stars = "*" if p.kind == p.VAR_POSITIONAL else "**"
            raise StatetrackError(
                f"{where(name)}: its constructor takes {stars}{p.name}; expected every setting as a named parameter "
                f"with a default ({RECORDABLE})"
            )
        if p.default is p.empty:
            raise StatetrackError(
                f"{where(name)}: parameter {p.name!r} has no default; expected a default ({RECORDABLE}), which a "
                "spec's model entry may change"
            )
        if not _recordable(p.default):
            raise StatetrackError(
                f"{where(name)}: parameter {p.name!r} defaults to {limits.shown(p.default)}, which a spec cannot "
                f"record; expected {RECORDABLE}"
            )
    return {p.name: p.default for p in parameters}


def _recordable(value) -> bool:
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_recordable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _recordable(v) for k, v in value.items())
    return False


def plugin_of(name: str) -> str | None:
    """The import that registered model `name` (`statetrack.plugins.imported_by`), None for a model of
    statetrack's own."""
    module = MODELS[name].mixer.__module__ or ""
    return None if module == "statetrack" or module.startswith("statetrack.") else imported_by(module)


def where(name: str) -> str:
    """The words "model 'x'", with the plugin that registered it where a user's module did, for an error."""
    plugin = plugin_of(name) if name in MODELS else None
    return f"plugin {plugin}: model {name!r}" if plugin else f"model {name!r}"


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
    if not isinstance(spec["name"], str):
        raise unknown("model", spec["name"], list(MODELS) + list(PRESETS))
    if spec["name"] in PRESETS and spec["name"] in MODELS:  # a plugin's model under a preset's name
        raise StatetrackError(
            f"{where(spec['name'])}: {spec['name']!r} is a preset of statetrack ({_preset(spec['name'])}); expected "
            "a name of its own"
        )
    if spec["name"] in PRESETS:
        spec = {**PRESETS[spec.pop("name")], **spec}
    mixer_params = mixer_parameters(spec["name"])
    bad = [k for k in spec if k != "name" and k not in MODEL_DEFAULTS and k not in mixer_params]
    if bad:
        valid = ", ".join(list(MODEL_DEFAULTS) + list(mixer_params))
        raise StatetrackError(f"model {spec['name']!r} has no parameter {bad[0]!r}; its parameters: {valid}")
    if plugin_of(spec["name"]) is not None:  # statetrack's own mixers check their settings' ranges themselves
        for key, value in spec.items():
            if key in mixer_params and not _recordable(value):
                raise StatetrackError(
                    f"{where(spec['name'])}: setting {key}={limits.shown(value)} cannot be recorded; "
                    f"expected {RECORDABLE}"
                )
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


def _preset(name: str) -> str:
    return PRESETS[name]["name"] + " with " + ", ".join(f"{k} {v}" for k, v in PRESETS[name].items() if k != "name")


def display_name(spec: dict | str) -> str:
    """The name results show for a model (its registration's `display`); one that raises or is no
    non-empty one-line string is a one-line error naming the plugin."""
    spec = resolve(spec)
    try:
        shown = get_entry(spec["name"]).display(spec)
    except Exception as error:  # noqa: BLE001 - a user's function
        raise StatetrackError(
            f"{where(spec['name'])}: its display raised {type(error).__name__}: {error}; expected a function "
            "spec -> a name"
        ) from None
    if not isinstance(shown, str) or not shown.strip() or not shown.isprintable():  # a line break splits tables
        raise StatetrackError(
            f"{where(spec['name'])}: its display gave {limits.shown(shown)}; expected a non-empty one-line string "
            "(the name results show)"
        )
    return shown


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


# ---- a user's mixer, on a tiny batch -------------------------------------------------------------------
PROTOCOL = "forward(x [B, T, d_model], state=None) -> (y [B, T, d_model], state)"


def check_user_mixer(spec: dict) -> None:
    """A user's mixer (one a plugin registered; statetrack's own are tested) at the resolved setting
    `spec`: the transition class it declares there, and one pass on the CPU on a tiny batch
    [2, 3, d_model], forward and backward, then the same batch in two chunks with the state carried
    between them (as evaluation feeds a long input). A raise, an output of another shape or arity, a
    non-finite output or an unknown class is one line naming the plugin, the model and what was
    expected. Call it once the setting's size is checked (`statetrack.experiments.spec.expand`)."""
    import torch

    from statetrack.layers.registry import declared_transition

    entry = get_entry(spec["name"])
    if plugin_of(spec["name"]) is None:
        return
    settings = {k: v for k, v in spec.items() if k != "name" and k not in MODEL_DEFAULTS}
    shown = ", ".join(f"{k}={v!r}" for k, v in settings.items())
    at = f"{where(spec['name'])}" + (f" ({shown})" if shown else "")
    try:
        declared_transition(entry.mixer, spec)
    except Exception as error:  # noqa: BLE001 - the user's declaration
        text = str(error) if isinstance(error, StatetrackError) else f"{type(error).__name__}: {error}"
        raise StatetrackError(f"{at}: its transition_class fails: {text}") from None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            layer = entry.mixer(spec["d_model"], **settings)
        except Exception as error:  # noqa: BLE001 - the user's constructor
            text = str(error) if isinstance(error, StatetrackError) else f"{type(error).__name__}: {error}"
            raise StatetrackError(f"{at}: building it raised {text}") from None
        x = torch.randn(2, 3, spec["d_model"], generator=torch.Generator().manual_seed(0), requires_grad=True)
        y = _step(at, layer, x, None, f"forward on a batch {list(x.shape)}")[0]
        try:
            if y.requires_grad:  # an output no gradient reaches (a null mixer) trains: the residual carries x
                y.float().sum().backward()
        except Exception as error:  # noqa: BLE001
            raise StatetrackError(
                f"{at}: the backward pass through its output raised {type(error).__name__}: {error}; "
                "expected an output that gradients flow back through"
            ) from None
        if entry.recurrent:
            with torch.no_grad():
                state = _step(at, layer, x[:, :2], None, "forward on the first 2 tokens")[1]
                _step(at, layer, x[:, 2:], state, "forward on the third token with the state of the first 2")


def _step(at: str, layer, x, state, what: str) -> tuple:
    """`layer(x, state)` checked against the mixer protocol: (y, its state)."""
    import torch

    try:
        out = layer(x) if state is None else layer(x, state)
    except Exception as error:  # noqa: BLE001 - the user's forward
        raise StatetrackError(f"{at}: {what} raised {type(error).__name__}: {error}; expected {PROTOCOL}") from None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        got = f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list)) else type(out).__name__
        raise StatetrackError(f"{at}: {what} returned {got}; expected {PROTOCOL}")
    y = out[0]
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != tuple(x.shape):
        shape = list(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise StatetrackError(f"{at}: {what} returned y of shape {shape}; expected {list(x.shape)} ({PROTOCOL})")
    if y.dtype != x.dtype:  # an integer y trains nothing through it; another float breaks the next layer
        raise StatetrackError(f"{at}: {what} returned y of dtype {y.dtype}; expected {x.dtype}, the dtype of x")
    if not bool(torch.isfinite(y).all()):
        raise StatetrackError(f"{at}: {what} returned non-finite values (inf or nan) at its initial weights")
    return y, out[1]
