"""xLSTM mixers (Beck et al. 2024): mLSTM (matrix memory, linear in the state) and sLSTM
(scalar memory with recurrent connections, nonlinear).

Both use exponential input gates with the stabiliser m_t of Beck et al. 2024 (eqs. 15-17 for
sLSTM, 19-27 for mLSTM): the stored state is the true state times exp(-m_t), which changes no output.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.layers.common import Spectral, check_input, head_split
from statetrack.layers.registry import register_model
from statetrack.ops.nonlinear import slstm_recurrence, slstm_recurrence_fused


def _forget_bias(n: int) -> torch.Tensor:
    """Forget-gate biases spread over [3, 6] (xLSTM init): long memory at the start."""
    return torch.linspace(3.0, 6.0, n)


@register_model(
    "mlstm", display="mLSTM", summary="xLSTM matrix memory with an exponential input gate (Beck et al. 2024)"
)
class mLSTM(Spectral, nn.Module):  # noqa: N801 (the paper's name)
    """mLSTM per head: C_t = f_t C_{t-1} + i_t k_t v_t^T, n_t = f_t n_{t-1} + i_t k_t,
    h~_t = C_t^T q_t / max(|n_t^T q_t|, 1), with i_t = exp(i~_t), f_t = sigmoid(f~_t), k scaled by
    1/sqrt(d). Output: sigmoid(W_o x) * RMSNorm(h~) per head, then an out-projection.

    The forward is the stabilised parallel form with an initial state (quadratic in the length, so
    it runs on pieces of `piece` tokens, the state carried): with F_t = sum_{s<=t} log f_s, weights
    w_{t,s} = F_t - F_s + i~_s and w_{t,0} = F_t + m_0,
    m_t = max(w_{t,0}, max_s w_{t,s}) is exactly the recurrent stabiliser m_t = max(log f_t + m_{t-1}, i~_t).
    State: (C~ [B, H, D, D], n~ [B, H, D], m [B, H]).
    """

    departures = (
        "the cell alone, without the mLSTM block (Beck et al. 2024): no up-projection, causal convolution "
        "or learnable skip; no biases on q, k, v; sigmoid forget gate (one of the paper's two choices); "
        "a per-head RMSNorm on h~ before the output gate, where the block has a head-wise GroupNorm"
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "diagonal-positive"

    def __init__(self, d_model: int, num_heads: int = 2):
        super().__init__()
        self.d_model = d_model
        self.num_heads, self.head_dim = head_split(d_model, num_heads)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.gates = nn.Linear(d_model, 2 * num_heads)  # i~, f~
        with torch.no_grad():
            self.gates.bias[num_heads:] = _forget_bias(num_heads)
        self.o_gate = nn.Linear(d_model, d_model)
        self.o_norm = nn.RMSNorm(self.head_dim)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def _log_gates(self, x):
        """log input gate i~ and log forget gate log f, each [B, H, T]."""
        i_pre, f_pre = self.gates(x).transpose(1, 2).chunk(2, dim=1)
        return i_pre, F.logsigmoid(f_pre)

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        B, T, _ = x.shape
        H, D = self.num_heads, self.head_dim
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))  # [B, H, T, D]
        k = k / math.sqrt(D)
        i_pre, log_f = self._log_gates(x)  # [B, H, T]
        if state is None:
            state = x.new_zeros(B, H, D, D), x.new_zeros(B, H, D), x.new_zeros(B, H)
        pieces = []
        for start in range(0, T, self.piece) if T else [0]:
            part = slice(start, start + self.piece)
            h, state = self._parallel(
                q[:, :, part], k[:, :, part], v[:, :, part], i_pre[..., part], log_f[..., part], state
            )
            pieces.append(h)
        h = torch.cat(pieces, 2) if len(pieces) > 1 else pieces[0]  # [B, H, T, D]
        h = self.o_norm(h).transpose(1, 2).reshape(B, T, -1) * torch.sigmoid(self.o_gate(x))
        return self.o_proj(h), state

    # The parallel form costs O(T^2 D) per sequence where the recurrence costs O(T D^2): inputs longer
    # than `piece` tokens run through it in pieces, the state carried (exact); pieces of 128 instead of
    # whole chunks of 1024 make evaluation several times faster (docs/performance-layers.md, "Long inputs").
    piece = 128

    @staticmethod
    def _parallel(q, k, v, i_pre, log_f, state):
        """The stabilised parallel form (class docstring) of one piece from `state` (C~, n~, m):
        q, k, v [B, H, T, D]; i_pre, log_f [B, H, T]. Returns (h~ [B, H, T, D], the state at its end)."""
        C0, n0, m0 = state
        T = q.shape[2]
        F_cum = log_f.cumsum(-1)  # [B, H, T]
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        w = (F_cum[..., :, None] - F_cum[..., None, :] + i_pre[..., None, :]).masked_fill(
            ~causal, -math.inf
        )  # [B, H, T, T]
        w0 = F_cum + m0[..., None]  # [B, H, T]
        m = torch.maximum(w.amax(-1), w0)  # [B, H, T]
        weights = torch.exp(w - m[..., None]) * (q @ k.transpose(-1, -2))  # [B, H, T, T]
        d0 = torch.exp(w0 - m)  # [B, H, T]
        num = weights @ v + d0[..., None] * (q @ C0)  # [B, H, T, D]
        den = weights.sum(-1) + d0 * (q @ n0[..., None]).squeeze(-1)  # [B, H, T]
        h = num / torch.maximum(den.abs(), torch.exp(-m))[..., None]
        # final state: the last row of the weights
        last = torch.exp(w[..., -1, :] - m[..., -1:])  # [B, H, T]
        C = torch.einsum("bhs,bhsk,bhsv->bhkv", last, k, v) + d0[..., -1, None, None] * C0
        n = torch.einsum("bhs,bhsk->bhk", last, k) + d0[..., -1, None] * n0
        return h, (C, n, m[..., -1].clone())  # a copy: a view would keep m [B, H, T] alive

    def transition_eigenvalues(self, x):
        """The forget gates f_t [B, T, H] (transition f_t I of the matrix memory)."""
        return self._log_gates(x)[1].exp().transpose(1, 2)


@register_model(
    "slstm",
    display="sLSTM",
    summary="xLSTM scalar memory with recurrent connections; nonlinear, a loop over time (Beck et al. 2024)",
)
class sLSTM(nn.Module):  # noqa: N801
    """sLSTM per head (block-diagonal recurrent matrices R), Beck et al. 2024, eqs. 8-17:

        z = tanh(W_z x + R_z h + b_z), i~ = W_i x + R_i h + b_i, f~ = ..., o = sigmoid(...)
        m_t = max(log f_t + m_{t-1}, i~_t), i' = exp(i~ - m_t), f' = exp(log f_t + m_{t-1} - m_t)
        c_t = f' c_{t-1} + i' z_t,  n_t = f' n_{t-1} + i',  h_t = o * c_t / n_t

    with log f = logsigmoid(f~). Nonlinear in h, so it runs as a loop over time
    (`ops.slstm_recurrence`: a compiled loop at inference on the CPU; in training
    `ops.slstm_recurrence_fused`, one autograd node with a hand-written backward). Output: RMSNorm per head,
    out-projection. State: (h, c, n, m), each [B, d_model].
    """

    departures = (
        "the cell alone, without the sLSTM block (Beck et al. 2024): no causal convolution before the "
        "i, f gates and no gated MLP after; sigmoid forget gate (one of the paper's two choices); "
        "a per-head RMSNorm on h before the output projection, where the block has a head-wise GroupNorm"
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "nonlinear"

    def __init__(self, d_model: int, num_heads: int = 2):
        super().__init__()
        self.d_model = d_model
        self.num_heads, self.head_dim = head_split(d_model, num_heads)
        D = self.head_dim
        self.W = nn.Linear(d_model, 4 * d_model)  # gates ordered z, i, f, o; each [H, D]
        self.R = nn.Parameter(torch.randn(num_heads, D, 4 * D) / math.sqrt(D))
        with torch.no_grad():
            self.W.bias.view(4, num_heads, D)[2] = _forget_bias(num_heads)[:, None]
        self.o_norm = nn.RMSNorm(D)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        B, T, _ = x.shape
        H, D = self.num_heads, self.head_dim
        pre_x = self.W(x).view(B, T, 4, H, D)
        state = None if state is None else tuple(s.view(B, H, D) for s in state)
        if self.fused_training and torch.is_grad_enabled() and (pre_x.requires_grad or self.R.requires_grad):
            h, state = slstm_recurrence_fused(pre_x, self.R, state)
        else:
            h, state = slstm_recurrence(pre_x, self.R, state)
        y = self.o_norm(h).reshape(B, T, -1)
        return self.o_proj(y), tuple(s.reshape(B, -1) for s in state)

    # training runs `ops.slstm_recurrence_fused` (one autograd node for the loop); False: the per-op
    # autograd loop of `ops.slstm_recurrence_reference` (the same numbers, slower)
    fused_training = True
