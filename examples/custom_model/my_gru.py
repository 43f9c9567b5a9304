"""A GRU token mixer for statetrack, defined outside the package in one file.

`statetrack.register_model` makes the name `my_gru` usable in experiment specs and on the command
line once this file is imported: a spec lists it under `imports:` (or the CLI gets
`--import examples/custom_model/my_gru.py`), and statetrack imports it in the driver and in every
worker before anything is built.

A mixer is an `nn.Module` whose first constructor argument is `d_model`, with
`forward(x [B, T, d_model], state=None) -> (y [B, T, d_model], state)`. Its other keyword
arguments are its parameters (settable in a spec: `{name: my_gru, hidden: 32}`). Returning the
state lets statetrack evaluate long inputs in chunks with constant memory (`recurrent=True`).
"""

from __future__ import annotations

import torch
from torch import nn

import statetrack


@statetrack.register_model("my_gru", display="MyGRU", recurrent=True)
class MyGRU(nn.Module):
    """GRU (torch.nn.GRU, Cho et al. 2014) as a token mixer, projected back to d_model."""

    @staticmethod
    def transition_class(spec: dict) -> str:
        """What one layer's state transition is, as a function of the model's resolved spec, for
        theory's column of `statetrack table` (one of statetrack.theory.TRANSITION_CLASSES)."""
        return "nonlinear"

    def __init__(self, d_model: int, hidden: int | None = None):
        super().__init__()
        self.d_model, self.hidden = d_model, hidden or d_model
        self.gru = nn.GRU(d_model, self.hidden, batch_first=True)
        self.out = nn.Linear(self.hidden, d_model)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise statetrack.StatetrackError(f"MyGRU expects x of shape [B, T, {self.d_model}], got {tuple(x.shape)}")
        y, state = self.gru(x, state)  # state: [1, B, hidden]
        return self.out(y), state
