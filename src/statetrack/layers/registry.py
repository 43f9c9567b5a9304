"""The model registry: `@register_model(name, display=...)` on a token mixer adds it to `MODELS`.

A mixer is an `nn.Module` whose first constructor argument is `d_model`, with
`forward(x [B, T, d_model], state=None) -> (y [B, T, d_model], state)`; its other keyword arguments
are the model's parameters. `statetrack.models.zoo` wraps a registered mixer in the SequenceModel stack.

A mixer may also have the optional features declared below as protocols; callers ask for one with
`isinstance(mixer, Feature)` (a mixer class, for the class attributes `departures` and
`transition_class`), never by probing attribute names.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import EIG_RANGES

# The transition classes a mixer declares (`DeclaresTransition`): what kind of matrix A(x_t) one layer
# applies to its state. `statetrack.theory` knows what each can represent; this is its vocabulary.
TRANSITION_CLASSES = {
    "nonlinear": "a nonlinear recurrence (h_t = f(h_{t-1}, x_t))",
    "dense": "a dense input-dependent matrix, linear in the input (full bilinear)",
    "diagonal-positive": "diagonal, eigenvalues in [0, 1]",
    "diagonal-real": "diagonal, eigenvalues in [-1, 1]",
    "diagonal-complex": "diagonal complex (rotations) in one eigenbasis, no input term (the pure bilinear rotation)",
    "diagonal-complex-affine": "diagonal complex, input-dependent, plus an input term (h_t = a_t * h_{t-1} + b_t)",
    "time-invariant": "one diagonal complex matrix for every input",
    "householder-positive": "generalized Householders with eigenvalues in [0, 1], real spectrum",
    "householder-real": "one generalized Householder with eigenvalues in [-1, 1] (real spectrum)",
    "householder-products": "products of n_h >= 2 generalized Householders, eigenvalues in [-1, 1]",
    "real-spectrum": "similar to a symmetric matrix: real eigenvalues, some possibly negative",
    "real-spectrum-signed": "similar to a symmetric matrix: real eigenvalues, -1 among them",
    "generalized-delta": "the generalized delta rule diag(w) - kappa (a * kappa)^T: real eigenvalues, above -1",
    "generalized-delta-signed": "the generalized delta rule diag(w) - kappa (a * kappa)^T: real eigenvalues, "
    "-1 among them",
    "automaton": "a column one-hot matrix times a diagonal (any automaton of `state_size` states)",
    "attention": "no recurrence: causal softmax attention",
    "attention-householder-positive": "causal softmax attention, logits through the product of the generalized "
    "Householders I - beta w w^T between key and query, beta in (0, 1)",
    "attention-householder-real": "causal softmax attention, logits through the product of the generalized "
    "Householders I - beta w w^T between key and query, beta in (0, 2): reflections",
    "attention-delta-rule": "causal softmax attention over values written by a delta rule in a kernel's feature space",
}


# ---- optional features of a mixer ----------------------------------------------------------------
@runtime_checkable
class Departures(Protocol):
    """`departures: str` (a class attribute): where the layer departs on purpose from its published
    model (the catalogue's column)."""

    departures: str


@runtime_checkable
class DeclaresTransition(Protocol):
    """`transition_class(spec: dict) -> str | None` (a static method): the class of the state
    transition one layer applies (a key of `TRANSITION_CLASSES`), given the model's resolved spec
    with every parameter present; None where no work states what the transition represents.
    `statetrack.theory` predicts from it; a mixer without it gets no prediction."""

    @staticmethod
    def transition_class(spec: dict) -> str | None: ...


@runtime_checkable
class FrozenInput(Protocol):
    """`frozen_input: bool`: true when the recurrence is frozen, so SequenceModel freezes the
    embedding and first norm feeding it."""

    frozen_input: bool


@runtime_checkable
class TransitionEigenvalues(Protocol):
    """`transition_eigenvalues(x [B, T, D]) -> [B, T, ..., n]`: the eigenvalues of every token's
    state transition (spectrum analysis)."""

    def transition_eigenvalues(self, x: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class TransitionMatrices(Protocol):
    """`transition_matrices(x [B, T, D]) -> [B, T, H, n, n]`: every token's dense state transitions
    (NotImplementedError where there are none)."""

    def transition_matrices(self, x: torch.Tensor) -> torch.Tensor: ...


STACK_KEYS = ("name", "d_model", "num_layers", "mlp", "stack")  # spec keys every model has besides its mixer's


@dataclass(frozen=True)
class ModelEntry:
    name: str
    mixer: type[nn.Module]
    summary: str
    display: Callable[[dict], str]  # resolved spec -> the name shown in results, e.g. "DeltaNet [-1,1]"
    recurrent: bool = True  # carries a fixed-size state: evaluation runs long inputs in chunks
    stack_defaults: dict = field(default_factory=dict)  # the family's own d_model / num_layers / mlp defaults


MODELS: dict[str, ModelEntry] = {}


def register_model(
    name: str,
    *,
    display: str | Callable[[dict], str],
    summary: str | None = None,
    recurrent: bool = True,
    stack_defaults: dict | None = None,
):
    """Class decorator: register the mixer as model `name`.

    `display` is a template filled from the resolved spec (`"DeltaProduct_{n_h} {eig_range}"`) or a
    callable spec -> str. `summary` defaults to the first line of the class docstring. `recurrent`:
    the mixer carries a fixed-size state, so evaluation feeds long inputs in chunks.
    `stack_defaults`: where the family's published form differs from the common stack defaults
    (`zoo.MODEL_DEFAULTS`), its own (e.g. `{"mlp": False}`: one cell and a linear readout); a spec's
    settings, `model_defaults` included, still win.
    """
    if not isinstance(name, str) or not name:
        raise StatetrackError(f"register_model: the name must be a non-empty string, got {name!r}")
    if stack_defaults is not None and not isinstance(stack_defaults, dict):
        raise StatetrackError(
            f"register_model({name!r}): stack_defaults must be a mapping, e.g. {{'mlp': False}}, got {stack_defaults!r}"
        )
    stack_defaults = dict(stack_defaults or {})
    bad = [k for k in stack_defaults if k not in STACK_KEYS or k == "name"]
    if bad:
        raise StatetrackError(
            f"register_model({name!r}): stack_defaults has {bad[0]!r}, which is no stack setting; "
            f"expected some of: {', '.join(STACK_KEYS[1:])}"
        )

    def decorate(mixer):
        parameters = _check_mixer(name, mixer)
        _check_transition(name, mixer)
        entry = ModelEntry(
            name,
            mixer,
            _summary(name, mixer, summary),
            _display(name, display, parameters),
            bool(recurrent),
            stack_defaults,
        )
        old = MODELS.get(name)
        if old is not None and _qualified(old.mixer) != _qualified(mixer):
            raise StatetrackError(
                f"model name {name!r} is taken by {_qualified(old.mixer)}; cannot register {_qualified(mixer)} under it"
            )
        MODELS[name] = entry  # the same class again (a module imported twice) replaces its entry
        return mixer

    return decorate


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_mixer(name: str, mixer) -> list[str]:
    """The mixer's constructor parameters (d_model first); anything else is a one-line error."""
    expected = "an nn.Module subclass whose __init__ takes d_model as its first parameter"
    if not (inspect.isclass(mixer) and issubclass(mixer, nn.Module)):
        raise StatetrackError(f"register_model({name!r}) expects {expected}, got {mixer!r}")
    parameters = [p for p in inspect.signature(mixer.__init__).parameters.values() if p.name != "self"]
    if not parameters or parameters[0].name != "d_model":
        first = parameters[0].name if parameters else "nothing"
        raise StatetrackError(
            f"register_model({name!r}) expects {expected}; {mixer.__qualname__}.__init__ takes {first} first"
        )
    return [p.name for p in parameters]


def declared_transition(mixer: type, spec: dict) -> str | None:
    """The transition class `mixer` declares for `spec` (a resolved spec; the constructor's defaults
    fill in any parameter it leaves out), None where it declares none; a class outside
    `TRANSITION_CLASSES` is a one-line error naming them."""
    if not isinstance(mixer, DeclaresTransition):
        return None
    defaults = {
        p.name: p.default
        for p in inspect.signature(mixer).parameters.values()
        if p.default is not inspect.Parameter.empty
    }
    kind = mixer.transition_class({**defaults, **spec})
    if kind is not None and kind not in TRANSITION_CLASSES:
        raise StatetrackError(
            f"{_qualified(mixer)}.transition_class gives {kind!r} for {spec.get('name', spec)!r}; "
            f"expected None or one of: {', '.join(TRANSITION_CLASSES)}"
        )
    return kind


def _check_transition(name: str, mixer: type) -> None:
    """A declared transition class is a static method of the spec whose value at the defaults (at
    each eig_range where the mixer has one) is None or one of `TRANSITION_CLASSES`."""
    if not isinstance(mixer, DeclaresTransition):
        return
    declared = inspect.getattr_static(mixer, "transition_class")
    if not isinstance(declared, staticmethod):
        raise StatetrackError(
            f"register_model({name!r}): {mixer.__qualname__}.transition_class must be a static method "
            f"spec -> one of {', '.join(TRANSITION_CLASSES)} (or None), got {declared!r}"
        )
    has_range = "eig_range" in inspect.signature(mixer).parameters
    for eig_range in EIG_RANGES if has_range else (None,):
        spec = {"name": name} if eig_range is None else {"name": name, "eig_range": eig_range}
        try:
            declared_transition(mixer, spec)
        except StatetrackError as error:
            raise StatetrackError(f"register_model({name!r}): {error}") from None
        except Exception as error:  # the user's function, at its own defaults
            raise StatetrackError(
                f"register_model({name!r}): {mixer.__qualname__}.transition_class fails for {spec}: "
                f"{type(error).__name__}: {error}"
            ) from None


def _summary(name: str, mixer: type, summary: str | None) -> str:
    if summary is not None:
        return summary
    doc = mixer.__dict__.get("__doc__")  # the class's own docstring, not an inherited one
    return inspect.cleandoc(doc).splitlines()[0].rstrip(".") if doc and doc.strip() else name


def _display(name: str, display, parameters: list[str]) -> Callable[[dict], str]:
    if callable(display):
        return display
    if not isinstance(display, str):
        raise StatetrackError(
            f"register_model({name!r}): display must be a template string or a callable spec -> str, got {display!r}"
        )
    fields = {field for _, field, _, _ in string.Formatter().parse(display) if field is not None}
    bad = sorted(fields - set(parameters) - set(STACK_KEYS))
    if bad:
        raise StatetrackError(
            f"register_model({name!r}): display {display!r} names {bad[0]!r}, which is not a parameter; "
            f"its parameters: {', '.join(list(STACK_KEYS) + parameters[1:])}"
        )
    return lambda spec: display.format(**spec)
