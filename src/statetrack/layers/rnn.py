"""Classical nonlinear RNN baselines from torch.nn (SPEC section 1.6)."""

from __future__ import annotations

import torch
from torch import nn


class LSTM(nn.Module):
    """torch.nn.LSTM as a token mixer; state = (h, c), each [num_layers=1, B, hidden]."""

    def __init__(self, d_model: int, hidden: int | None = None):
        super().__init__()
        hidden = hidden or d_model
        self.rnn = nn.LSTM(d_model, hidden, batch_first=True)
        self.proj = nn.Identity() if hidden == d_model else nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor, state=None):
        y, state = self.rnn(x, state)
        return self.proj(y), state
