"""Classical nonlinear RNN baseline from torch.nn: the LSTM (Hochreiter & Schmidhuber 1997)."""

from __future__ import annotations

import torch
from torch import nn

from statetrack.layers.common import check_input
from statetrack.layers.registry import register_model


@register_model("lstm", display="LSTM")
class LSTM(nn.Module):
    """torch.nn.LSTM as a token mixer (Hochreiter & Schmidhuber 1997).

    `hidden` defaults to d_model; a different size is projected back to d_model.
    State: (h, c), each [num_layers=1, B, hidden].
    """

    departures = "none (torch.nn.LSTM: the forget-gate LSTM of Gers et al. 2000); a linear map back to d_model when hidden differs"

    def __init__(self, d_model: int, hidden: int | None = None):
        super().__init__()
        self.d_model = d_model
        hidden = hidden or d_model
        self.rnn = nn.LSTM(d_model, hidden, batch_first=True)
        self.proj = nn.Identity() if hidden == d_model else nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        y, state = self.rnn(x, state)
        return self.proj(y), state
