"""PD-SSM (Terzić et al. 2025): a selective SSM whose transition is a column one-hot matrix times a
complex diagonal, A(x_t) = P(x_t) D(x_t), run by the `pdssm` op's log-depth scan."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from statetrack import limits
from statetrack.layers.common import Spectral, check_input
from statetrack.layers.registry import register_model
from statetrack.ops.pdssm import column_hardmax, pdssm


@register_model("pdssm", display="PD-SSM")
class PDSSM(Spectral, nn.Module):
    """Column one-hot times complex diagonal transitions, one layer emulates any N-state automaton
    (Terzić et al. 2025).

        h_t = P(x_t) D(x_t) h_{t-1} + B x_t,    y_t = Re(C h_t) + c + e * x_t

    with a complex state h [N] (N = state_size), B complex [N, d_model], and C, c the read-out of
    [Re h, Im h]. The diagonal D(x_t) = diag(m_t exp(i phi_t)) has magnitudes m_t = sigmoid(MLP_m(x_t))
    in (0, 1) and phases phi_t = 2 pi sigmoid(MLP_phi(x_t)), each MLP Linear(d_model, 2N), GELU,
    Linear(2N, N), so |D| < 1 and the recurrence is BIBO-stable. P(x_t) is chosen from a dictionary
    of K = dictionary_size real N x N matrices A_k: selection weights s_t = softmax(S x_t) over k,
    M_t = sum_k s_t[k] A_k, and P(x_t) = the column-wise hardmax of softmax(M_t) over each column's
    rows, with the softmax's gradient passed straight through (the `pdssm` op). Column n's 1 sends
    state entry n to one row, so a one-hot state follows any automaton's transitions exactly with
    N = its number of states; as in the authors' state-tracking code, h_0 = e_1 (the first basis
    vector), the start state of that construction. State: h [B, 1, N] complex.
    """

    departures = (
        "no dropout and no post-LayerNorm inside the layer (the stack's norms and residual instead); "
        "h_0 = e_1 as in the authors' state-tracking code (their JAX layer starts at zero); the column-wise "
        "softmax and A = P D of the paper and the authors' JAX layer (their PyTorch code takes the softmax "
        "along rows); the phase MLP's output bias starts at -2.5 (small first phases; the authors' JAX layer "
        "declares such a bias but does not use it: without it no seed left chance on parity at the quick scale); "
        "state_size 16 by default (the paper's runs: the model width, 128)"
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "automaton"

    def __init__(self, d_model: int, state_size: int = 16, dictionary_size: int = 8):
        super().__init__()
        limits.check_int(state_size, "state_size", 1, limits.MAX_WIDTH)
        limits.check_int(dictionary_size, "dictionary_size", 1, limits.MAX_WIDTH)
        N, K = state_size, dictionary_size
        self.d_model, self.state_size, self.dictionary_size = d_model, N, K
        self.selector = nn.Linear(d_model, K, bias=False)  # S
        self.dictionary = nn.Parameter(torch.randn(K, N, N) / math.sqrt(N))  # A_k
        self.diagonal_hidden = nn.Linear(d_model, 4 * N)  # the first layers of MLP_m and MLP_phi side by side
        self.magnitude_out = nn.Linear(2 * N, N)
        self.phase_out = nn.Linear(2 * N, N)
        with torch.no_grad():  # small phases at first, 2 pi sigmoid(-2.5) = 0.5 rad: see `departures`
            self.phase_out.bias.sub_(2.5)
        self.B_re = nn.Parameter(torch.randn(N, d_model) / math.sqrt(2 * N))
        self.B_im = nn.Parameter(torch.randn(N, d_model) / math.sqrt(2 * N))
        self.readout = nn.Linear(2 * N, d_model)  # C, c
        self.skip = nn.Parameter(torch.randn(d_model) / math.sqrt(d_model))  # e

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """The column scores softmax(M_t) over rows, [B, T, 1, N, N]; P(x_t) is their column-wise hardmax."""
        B, T, _ = x.shape
        s = torch.softmax(self.selector(x), dim=-1)  # [B, T, K]
        M = (s @ self.dictionary.flatten(1)).view(B, T, 1, self.state_size, self.state_size)
        return torch.softmax(M, dim=-2)

    def diagonal(self, x: torch.Tensor) -> torch.Tensor:
        """The diagonal of D(x_t), m_t exp(i phi_t), [B, T, 1, N] complex."""
        hidden_m, hidden_phi = F.gelu(self.diagonal_hidden(x)).chunk(2, dim=-1)
        magnitude = torch.sigmoid(self.magnitude_out(hidden_m))
        phase = (2 * math.pi) * torch.sigmoid(self.phase_out(hidden_phi))
        return torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase)).unsqueeze(2)

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        b = torch.complex(x @ self.B_re.T, x @ self.B_im.T).unsqueeze(2)  # B x_t, [B, T, 1, N]
        if state is None:  # h_0 = e_1
            state = torch.zeros_like(b[:, 0])
            state[..., 0] = 1
        h, state = pdssm(self.scores(x), self.diagonal(x), b, initial_state=state)
        y = self.readout(torch.cat([h.real, h.imag], dim=-1).squeeze(2))
        return y + self.skip * x, state

    def transition_matrices(self, x: torch.Tensor) -> torch.Tensor:
        """A(x_t) = P(x_t) D(x_t), [B, T, 1, N, N] complex."""
        return column_hardmax(self.scores(x)) * self.diagonal(x)[..., None, :]
