"""Classical nonlinear RNN baselines from torch.nn: the Elman RNN (tanh; Elman 1990), the LSTM
(Hochreiter & Schmidhuber 1997) and the GRU (Cho et al. 2014). One class serves all three."""

from __future__ import annotations

import torch
from torch import nn

from statetrack.layers.common import check_input
from statetrack.layers.registry import register_model


class _TorchRNN(nn.Module):
    """A torch.nn recurrent cell over the whole sequence as a token mixer.

    `hidden` defaults to d_model; a different size is projected back to d_model. The state is the
    cell's own (h, or (h, c) for the LSTM), each [num_layers=1, B, hidden].
    """

    cell: type[nn.RNNBase]

    def __init__(self, d_model: int, hidden: int | None = None):
        super().__init__()
        self.d_model = d_model
        hidden = hidden or d_model
        self.rnn = self.cell(d_model, hidden, batch_first=True)
        self.proj = nn.Identity() if hidden == d_model else nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        y, state = self.rnn(x, state)
        return self.proj(y), state


@register_model("lstm", display="LSTM")
class LSTM(_TorchRNN):
    """torch.nn.LSTM as a token mixer (Hochreiter & Schmidhuber 1997)."""

    cell = nn.LSTM
    departures = "none (torch.nn.LSTM: the forget-gate LSTM of Gers et al. 2000); a linear map back to d_model when hidden differs"


@register_model("rnn", display="RNN")
class ElmanRNN(_TorchRNN):
    """torch.nn.RNN with tanh, h_t = tanh(W_ih x_t + W_hh h_{t-1} + b): the Elman RNN (Elman 1990)."""

    cell = nn.RNN
    departures = "none (torch.nn.RNN, tanh); a linear map back to d_model when hidden differs"


@register_model("gru", display="GRU")
class GRU(_TorchRNN):
    """torch.nn.GRU as a token mixer (Cho et al. 2014)."""

    cell = nn.GRU
    departures = "none (torch.nn.GRU; its candidate applies the reset gate after the hidden matmul, as cuDNN); a linear map back to d_model when hidden differs"
