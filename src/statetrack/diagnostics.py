"""Per-batch statistics that a layer reports about its own computation (e.g. the number of
fixed-point iterations a FixedPointRNN took), gathered by the trainer and by evaluation.

A layer mixes in `Recorder` and calls `self.record(name, values)` in a forward call, with one value
per sequence of the batch (or one value for the call). The trainer drains the model after every step
and stores, at each logging point, the median and the maximum of each statistic over the values
recorded in the window (`iterations_median`, `iterations_max`); evaluation does the same over the
sequences (and chunks) of each length. Layers that record nothing cost nothing.
"""

from __future__ import annotations

import statistics

from torch import nn


class Recorder:
    """Mixin for an nn.Module: `record(name, values)` keeps the values (a number, or one per sequence)."""

    def record(self, name: str, values: float | list[float]) -> None:
        kept = self.__dict__.setdefault("_records", {}).setdefault(name, [])
        kept.extend(map(float, values) if isinstance(values, (list, tuple)) else [float(values)])


def drain(model: nn.Module) -> dict[str, list[float]]:
    """Every value recorded by `model`'s modules since the last drain, by name (all layers pooled)."""
    pooled: dict[str, list[float]] = {}
    for module in model.modules():
        records = module.__dict__.pop("_records", None)
        for name, values in (records or {}).items():
            pooled.setdefault(name, []).extend(values)
    return pooled


def merge(into: dict[str, list[float]], records: dict[str, list[float]]) -> dict[str, list[float]]:
    for name, values in records.items():
        into.setdefault(name, []).extend(values)
    return into


def summarize(records: dict[str, list[float]]) -> dict[str, float]:
    """{name}_median and {name}_max of each recorded statistic (over the values recorded)."""
    out = {}
    for name, values in sorted(records.items()):
        if values:
            out[f"{name}_median"] = float(statistics.median(values))
            out[f"{name}_max"] = float(max(values))
    return out
