"""Model registry: mixer names, their parameters and display names, and presets.

A model spec is a flat dict: `{"name": "deltanet", "eig_range": "[-1,1]", "d_model": 32,
"num_layers": 1}`. `d_model`, `num_layers` and `mlp` shape the SequenceModel; every other key is
passed to the mixer. `resolve` fills in every default, so a resolved spec names the model fully.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from torch import nn

from statetrack.errors import StatetrackError, unknown
from statetrack.layers import (
    GLA,
    IDS4,
    LSTM,
    S4D,
    CausalSelfAttention,
    DeltaNet,
    DeltaProduct,
    GatedDeltaNet,
    Mamba,
    Mamba2,
    mLSTM,
    sLSTM,
)
from statetrack.model import SequenceModel

MODEL_DEFAULTS = {"d_model": 64, "num_layers": 1, "mlp": True}


@dataclass(frozen=True)
class ModelEntry:
    mixer: type[nn.Module]
    summary: str
    display: Callable[[dict], str]
    recurrent: bool = True  # carries a fixed-size state: evaluates long inputs in chunks


MODELS: dict[str, ModelEntry] = {
    "transformer": ModelEntry(
        CausalSelfAttention,
        "GPT-2 style causal Transformer (pre-LN, MLP x4, GELU); positional none | sinusoidal | rope; KV cache",
        lambda s: "Transformer" + {"none": "", "sinusoidal": " (sinusoidal)", "rope": " (RoPE)"}[s["positional"]],
        recurrent=False,
    ),
    "lstm": ModelEntry(LSTM, "LSTM baseline (torch.nn.LSTM)", lambda s: "LSTM"),
    "mlstm": ModelEntry(mLSTM, "mLSTM (xLSTM matrix memory, exponential input gate)", lambda s: "mLSTM"),
    "slstm": ModelEntry(sLSTM, "sLSTM (xLSTM scalar memory with recurrent connections; nonlinear)", lambda s: "sLSTM"),
    "mamba": ModelEntry(
        Mamba,
        "Mamba (selective S6 block); eig_range [0,1] or [-1,1] (a = 2 exp(-dt A) - 1, papers/001)",
        lambda s: f"Mamba {s['eig_range']}",
    ),
    "mamba2": ModelEntry(
        Mamba2, "Mamba-2 (scalar decay per head, matrix state); eig_range [0,1] or [-1,1]", lambda s: f"Mamba-2 {s['eig_range']}"
    ),
    "s4d": ModelEntry(S4D, "S4D (time-invariant complex diagonal SSM, S4D-Lin init)", lambda s: "S4D"),
    "ids4": ModelEntry(IDS4, "IDS4 (S4D with input-dependent complex transition)", lambda s: "IDS4"),
    "gla": ModelEntry(GLA, "Gated linear attention (diagonal decay per key dimension)", lambda s: "GLA"),
    "deltanet": ModelEntry(
        DeltaNet,
        "DeltaNet (delta rule, matrix state per head); eig_range [0,1] or [-1,1] (papers/001)",
        lambda s: f"DeltaNet {s['eig_range']}",
    ),
    "gated_deltanet": ModelEntry(
        GatedDeltaNet,
        "Gated DeltaNet (delta rule with a scalar decay per head); eig_range [0,1] or [-1,1]",
        lambda s: f"Gated DeltaNet {s['eig_range']}",
    ),
    "deltaproduct": ModelEntry(
        DeltaProduct,
        "DeltaProduct_{n_h} (n_h Householder micro-steps per token); eig_range [0,1] or [-1,1] (papers/001)",
        lambda s: f"DeltaProduct_{s['n_h']} {s['eig_range']}",
    ),
}

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
    return {"name": spec["name"], **MODEL_DEFAULTS, **mixer_params, **spec}


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
    )
