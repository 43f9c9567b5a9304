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
from statetrack.ops.nonlinear import _check_slstm, _slstm_state, slstm_recurrence


def _forget_bias(n: int) -> torch.Tensor:
    """Forget-gate biases spread over [3, 6] (xLSTM init): long memory at the start."""
    return torch.linspace(3.0, 6.0, n)


@register_model("mlstm", display="mLSTM", summary="xLSTM matrix memory with an exponential input gate (Beck et al. 2024)")
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

    departures = ("the cell alone, without the mLSTM block (Beck et al. 2024): no up-projection, causal convolution "
                  "or learnable skip; no biases on q, k, v; sigmoid forget gate (one of the paper's two choices); "
                  "a per-head RMSNorm on h~ before the output gate, where the block has a head-wise GroupNorm")

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
            h, state = self._parallel(q[:, :, part], k[:, :, part], v[:, :, part], i_pre[..., part], log_f[..., part], state)
            pieces.append(h)
        h = torch.cat(pieces, 2) if len(pieces) > 1 else pieces[0]  # [B, H, T, D]
        h = self.o_norm(h).transpose(1, 2).reshape(B, T, -1) * torch.sigmoid(self.o_gate(x))
        return self.o_proj(h), state

    # The parallel form costs O(T^2 D) per sequence where the recurrence costs O(T D^2): inputs longer
    # than `piece` tokens run through it in pieces, the state carried (exact); pieces of 128 instead of
    # whole chunks of 1024 made evaluation 4-5x faster (docs/performance.md, "Long inputs").
    piece = 128

    @staticmethod
    def _parallel(q, k, v, i_pre, log_f, state):
        """The stabilised parallel form (class docstring) of one piece from `state` (C~, n~, m):
        q, k, v [B, H, T, D]; i_pre, log_f [B, H, T]. Returns (h~ [B, H, T, D], the state at its end)."""
        C0, n0, m0 = state
        T = q.shape[2]
        F_cum = log_f.cumsum(-1)  # [B, H, T]
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        w = (F_cum[..., :, None] - F_cum[..., None, :] + i_pre[..., None, :]).masked_fill(~causal, -math.inf)  # [B, H, T, T]
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
    "slstm", display="sLSTM", summary="xLSTM scalar memory with recurrent connections; nonlinear, a loop over time (Beck et al. 2024)"
)
class sLSTM(nn.Module):  # noqa: N801
    """sLSTM per head (block-diagonal recurrent matrices R), Beck et al. 2024, eqs. 8-17:

        z = tanh(W_z x + R_z h + b_z), i~ = W_i x + R_i h + b_i, f~ = ..., o = sigmoid(...)
        m_t = max(log f_t + m_{t-1}, i~_t), i' = exp(i~ - m_t), f' = exp(log f_t + m_{t-1} - m_t)
        c_t = f' c_{t-1} + i' z_t,  n_t = f' n_{t-1} + i',  h_t = o * c_t / n_t

    with log f = logsigmoid(f~). Nonlinear in h, so it runs as a loop over time
    (`ops.slstm_recurrence`: a compiled loop at inference on the CPU; in training
    `slstm_recurrence_fused`, one autograd node with a hand-written backward). Output: RMSNorm per head,
    out-projection. State: (h, c, n, m), each [B, d_model].
    """

    departures = ("the cell alone, without the sLSTM block (Beck et al. 2024): no causal convolution before the "
                  "i, f gates and no gated MLP after; sigmoid forget gate (one of the paper's two choices); "
                  "a per-head RMSNorm on h before the output projection, where the block has a head-wise GroupNorm")

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

    # training runs `slstm_recurrence_fused` (one autograd node for the loop); False: the per-op
    # autograd loop of `ops.slstm_recurrence_reference` (the same numbers, slower)
    fused_training = True


def slstm_recurrence_fused(pre: torch.Tensor, R: torch.Tensor, initial_state=None):
    """`ops.nonlinear.slstm_recurrence_reference` (same arguments and results, the same function to
    float rounding) as one autograd Function: the loop over time runs without a graph on a
    head-major layout ([H, B, .]: one batched product per step gives every gate), storing the
    pre-activations and the states; the backward is the loop in reverse by hand, with every factor
    that does not depend on the incoming gradient computed for all steps at once, and the gradient
    of R one batched product over all steps. torch.maximum's gradient convention is kept (a tie
    splits the gradient in half)."""
    _check_slstm(pre, R)
    state = _slstm_state(pre, initial_state)
    y, *state = _SLSTMFused.apply(pre, R, *state)
    return y, tuple(state)


class _SLSTMFused(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pre, R, h0, c0, n0, m0):
        B, T, _, H, D = pre.shape
        P = pre.permute(1, 3, 0, 2, 4).reshape(T, H, B, 4 * D)  # [T, H, B, 4D], gate-major as R's columns
        G = torch.empty_like(P)  # the pre-activations z~, i~, f~, o~
        hs, cs, ns, ms = (P.new_empty(T + 1, H, B, D) for _ in range(4))  # states 0..T
        for buf, s0 in zip((hs, cs, ns, ms), (h0, c0, n0, m0)):
            buf[0] = s0.transpose(0, 1)
        for t in range(T):
            g = torch.baddbmm(P[t], hs[t], R, out=G[t])
            z_pre, i_pre, f_pre, o_pre = g.split(D, -1)
            a = F.logsigmoid(f_pre).add_(ms[t])  # log f_t + m_{t-1}
            m = torch.maximum(a, i_pre, out=ms[t + 1])
            i_gate, f_gate = torch.exp(i_pre - m), torch.exp(a.sub_(m))
            c = torch.addcmul(f_gate * cs[t], i_gate, torch.tanh(z_pre), out=cs[t + 1])
            n = torch.addcmul(i_gate, f_gate, ns[t], out=ns[t + 1])
            torch.mul(torch.sigmoid(o_pre), c, out=hs[t + 1]).div_(n)
        ctx.save_for_backward(R, G, hs, cs, ns, ms)
        y = hs[1:].permute(2, 0, 1, 3).contiguous()  # [B, T, H, D]
        return (y,) + tuple(buf[T].transpose(0, 1).clone() for buf in (hs, cs, ns, ms))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y, grad_h, grad_c, grad_n, grad_m):
        R, G, hs, cs, ns, ms = ctx.saved_tensors
        T, H, B, D4 = G.shape
        D = D4 // 4
        # every factor that does not depend on the gradient, for all steps at once: [T, H, B, D]
        z_pre, i_pre, f_pre, o_pre = G.split(D, -1)
        a = F.logsigmoid(f_pre) + ms[:-1]
        m = ms[1:]
        i_gate, f_gate = torch.exp(i_pre - m), torch.exp(a - m)
        z, o = torch.tanh(z_pre), torch.sigmoid(o_pre)
        h, c, n = hs[1:], cs[1:], ns[1:]
        k_o = c / n * o * (1 - o)  # dL/do~ = dL/dh k_o
        o_n = o / n  # dh/dc
        h_n = h / n  # -dh/dn
        k_z = i_gate * (1 - z * z)  # dL/dz~ = dL/dc k_z
        sig_neg_f = torch.sigmoid(-f_pre)  # d logsigmoid(f~) / df~
        half = 0.5 * (a == i_pre)
        w_a, w_i = (a > i_pre) + half, (i_pre > a) + half  # torch.maximum's gradient split
        gy = grad_y.permute(1, 2, 0, 3)  # [T, H, B, D]
        dh, dc, dn, dm = (x.transpose(0, 1) for x in (grad_h, grad_c, grad_n, grad_m))
        dG = torch.empty_like(G)
        dz_pre, di_pre, df_pre, do_pre = dG.split(D, -1)
        Rt = R.mT
        for t in reversed(range(T)):
            dh = dh + gy[t]
            torch.mul(dh, k_o[t], out=do_pre[t])
            dc = torch.addcmul(dc, dh, o_n[t])
            dn = torch.addcmul(dn, dh, h_n[t], value=-1)
            torch.mul(dc, k_z[t], out=dz_pre[t])
            d_f = torch.addcmul(dc * cs[t], dn, ns[t]) * f_gate[t]  # dL/d(a - m) through f' = exp(a - m)
            d_i = torch.addcmul(dn, dc, z[t]) * i_gate[t]  # dL/d(i~ - m) through i' = exp(i~ - m)
            dm = dm - d_f - d_i
            da = torch.addcmul(d_f, dm, w_a[t])
            torch.addcmul(d_i, dm, w_i[t], out=di_pre[t])
            torch.mul(da, sig_neg_f[t], out=df_pre[t])
            dm = da
            dc = dc * f_gate[t]
            dn = dn * f_gate[t]
            dh = torch.bmm(dG[t], Rt)
        grad_R = None
        if ctx.needs_input_grad[1]:  # sum over t and b of h_{t-1} dG_t: [H, D, 4D]
            grad_R = torch.bmm(hs[:-1].permute(1, 3, 0, 2).reshape(H, D, T * B), dG.transpose(0, 1).reshape(H, T * B, D4))
        grad_pre = dG.view(T, H, B, 4, D).permute(2, 0, 3, 1, 4)  # [B, T, 4, H, D]
        return (grad_pre, grad_R) + tuple(x.transpose(0, 1) for x in (dh, dc, dn, dm))
