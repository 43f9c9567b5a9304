"""Classical nonlinear RNN baselines: from torch.nn the Elman RNN (tanh; Elman 1990), the LSTM
(Hochreiter & Schmidhuber 1997) and the GRU (Cho et al. 2014), one class serving all three; and the
NRU (Chandar et al. 2019), a ReLU RNN with an additive memory, a loop over time (`ops.nru_recurrence`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import check_input
from statetrack.layers.registry import register_model
from statetrack.ops.nonlinear import nru_recurrence, nru_recurrence_fused


class _TorchRNN(nn.Module):
    """A torch.nn recurrent cell over the whole sequence as a token mixer.

    `hidden` defaults to d_model; a different size is projected back to d_model. The state is the
    cell's own (h, or (h, c) for the LSTM), each [num_layers=1, B, hidden].
    """

    cell: type[nn.LSTM | nn.GRU | nn.RNN]

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "nonlinear"

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
    departures = (
        "none (torch.nn.LSTM: the forget-gate LSTM of Gers et al. 2000); "
        "a linear map back to d_model when hidden differs"
    )
    unnamed_defaults = ("forget_bias",)  # left out of the resolved spec while None (run ids unchanged)

    def __init__(self, d_model: int, hidden: int | None = None, forget_bias: float | None = None):
        """`forget_bias`: when given, the forget gate's bias b_f starts at this value (torch keeps two
        biases, b_if + b_hf: b_if is set to it and b_hf to 0), so that f_t = sigma(W_f [x_t, h_(t-1)] + b_f)
        starts near sigma(b_f) and the cell keeps its memory from the first step (Gers et al. 2000;
        Jozefowicz et al. 2015 recommend b_f = 1). None keeps torch's uniform initialisation."""
        super().__init__(d_model, hidden)
        if forget_bias is not None:
            if not isinstance(forget_bias, (int, float)) or isinstance(forget_bias, bool) or forget_bias != forget_bias:
                raise StatetrackError(f"lstm: forget_bias must be a number (e.g. 1.0), got {forget_bias!r}")
            n = self.rnn.hidden_size
            with torch.no_grad():  # torch orders the gates (i, f, g, o)
                for name, value in (("bias_ih_l0", float(forget_bias)), ("bias_hh_l0", 0.0)):
                    getattr(self.rnn, name)[n : 2 * n] = value


@register_model("rnn", display="RNN")
class ElmanRNN(_TorchRNN):
    """torch.nn.RNN with tanh, h_t = tanh(W_ih x_t + W_hh h_{t-1} + b): the Elman RNN (Elman 1990)."""

    cell = nn.RNN
    departures = "none (torch.nn.RNN, tanh); a linear map back to d_model when hidden differs"


@register_model("gru", display="GRU")
class GRU(_TorchRNN):
    """torch.nn.GRU as a token mixer (Cho et al. 2014)."""

    cell = nn.GRU
    departures = (
        "none (torch.nn.GRU; its candidate applies the reset gate after the hidden matmul, as cuDNN); "
        "a linear map back to d_model when hidden differs"
    )


@register_model("nru", display="NRU")
class NRU(nn.Module):
    """The non-saturating recurrent unit (Chandar et al. 2019): a ReLU RNN with an additive memory.

    With f = ReLU and z_t = [x_t, h_{t-1}, m_{t-1}], one head as Anonymous 2025 (App. A.1.4, eq. 5)
    writes it, summed over `heads` write and erase heads i:

        h_t = f(W_h z_t + b_h)                       [hidden]
        alpha_{t,i} = f(W_alpha,i z_t + b_alpha,i)    scalar write gate of head i
        beta_{t,i}  = f(W_beta,i z_t + b_beta,i)      scalar erase gate of head i
        v^w_{t,i}   = f(W_w,i z_t + b_w,i)            write vector [memory]
        v^e_{t,i}   = f(W_e,i z_t + b_e,i)            erase vector [memory]
        m_t = m_{t-1} + sum_i (alpha_{t,i} v^w_{t,i} - beta_{t,i} v^e_{t,i})

    With `normalize` (the default) each v^w_{t,i} and v^e_{t,i} is divided by its 5-norm first, as
    in the release of Chandar et al. 2019: a write then moves m by at most alpha. Eq. 5 as printed
    (`normalize: false`) lets m feed the gates and the vectors both, so m can grow quadratically
    per step; at lr 3e-3 on Z60 that overflowed within 30 training steps.

    Every pre-activation comes from one fused linear map of z_t; its x_t part is computed for the
    whole sequence at once, the rest in a loop over time (`ops.nru_recurrence`: a compiled loop at
    inference on the CPU; in training `ops.nru_recurrence_fused`, one autograd node with a hand-written
    backward). The output is h_t, mapped back to d_model
    by a linear map when `hidden` differs. State: (h [B, hidden], m [B, memory]), zeros at the start.

    The authors' released implementation of Chandar et al. 2019 differs from eq. 5 (`departures`):
    there the gates and the write and erase vectors are computed from [h_t, m_{t-1}]; each head's
    vectors come from the outer product of two sqrt(heads * memory)-vectors (normalised to unit 5-norm,
    as `normalize` does here); a ReLU on the gates and vectors is an option (off by default); the heads' updates are
    averaged; and a layer norm on h is an option. In both, the memory feeds the hidden state.

    Initialisation: PyTorch's Linear default, except that the weights reading m_{t-1} start at zero:
    the memory is written but not yet read, so it cannot feed back on itself at the start (training
    moves those weights from the first step).
    """

    departures = (
        "the one-head form of Anonymous 2025 (App. A.1.4, eq. 5) with `heads` summed heads, not the "
        "implementation of Chandar et al. 2019: gates and write/erase vectors computed from "
        "[x_t, h_{t-1}, m_{t-1}], not [h_t, m_{t-1}]; full-rank write/erase maps through a ReLU (normalised to "
        "unit 5-norm as in the release unless normalize is false), not outer products of two "
        "sqrt(heads * memory)-vectors; a ReLU on gates and "
        "vectors always (an option, off by default, in the release); "
        "heads summed, not averaged; no layer norm option; the weights reading m_{t-1} start at zero; "
        "a linear map back to d_model when hidden differs"
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "nonlinear"

    def __init__(
        self, d_model: int, hidden: int | None = None, memory: int = 256, heads: int = 1, normalize: bool = True
    ):
        super().__init__()
        for name, value in (("hidden", d_model if hidden is None else hidden), ("memory", memory), ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise StatetrackError(
                    f"NRU {name} must be an integer >= 1{' or None' if name == 'hidden' else ''}, got {value!r}"
                )
        if not isinstance(normalize, bool):
            raise StatetrackError(f"NRU normalize must be true or false, got {normalize!r}")
        self.d_model, self.hidden, self.memory, self.heads, self.normalize = (
            d_model,
            hidden or d_model,
            memory,
            heads,
            normalize,
        )
        # rows: h [hidden], alpha [heads], beta [heads], v^w [heads * memory], v^e [heads * memory]
        # columns: x_t [d_model], h_{t-1} [hidden], m_{t-1} [memory]
        self.gates = nn.Linear(d_model + self.hidden + memory, self.hidden + 2 * heads * (1 + memory))
        with torch.no_grad():
            self.gates.weight[:, d_model + self.hidden :].zero_()
        self.proj = nn.Identity() if self.hidden == d_model else nn.Linear(self.hidden, d_model)

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        D = self.d_model
        weight = self.gates.weight
        pre_x = F.linear(x, weight[:, :D], self.gates.bias)  # the x_t part for every t at once
        recurrent = weight[:, D:].t()  # [hidden + memory, outputs]
        if self.fused_training and torch.is_grad_enabled() and (pre_x.requires_grad or recurrent.requires_grad):
            y, state = nru_recurrence_fused(pre_x, recurrent, self.hidden, self.heads, self.normalize, state)
        else:
            y, state = nru_recurrence(pre_x, recurrent, self.hidden, self.heads, self.normalize, state)
        return self.proj(y), state

    # training runs `ops.nru_recurrence_fused` (one autograd node for the whole loop); False: the
    # per-op autograd loop of `ops.nru_recurrence_reference` (the same numbers, slower)
    fused_training = True
