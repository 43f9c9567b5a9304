"""Token mixers: nn.Modules with `forward(x [B, T, D], state=None) -> (y [B, T, D], state)`."""

from statetrack.layers.registry import (
    MODELS,
    Departures,
    FrozenInput,
    ModelEntry,
    TransitionEigenvalues,
    TransitionMatrices,
    register_model,
)


def _import_layer_modules() -> dict[str, type]:
    """Import every module of this package, which registers its mixers with `@register_model`: a new
    mixer is one file with the decorator, and no list to keep. Returns the mixer classes by class name."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return {entry.mixer.__name__: entry.mixer for entry in MODELS.values()}


_MIXERS = _import_layer_modules()
globals().update(_MIXERS)  # `from statetrack.layers import DeltaNet`

__all__ = [
    "MODELS",
    "Departures",
    "FrozenInput",
    "ModelEntry",
    "TransitionEigenvalues",
    "TransitionMatrices",
    "register_model",
    *sorted(_MIXERS),
]
