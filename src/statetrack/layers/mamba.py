"""Selective state-space mixers: Mamba (S6; Gu & Dao 2023) and Mamba-2 (Dao & Gu 2024), both with
the eigenvalue-range switch of Grazzi et al. 2025.

Mamba runs its recurrence h_t = a_t * h_{t-1} + b_t, with its read-out, through the selective
scan op (`statetrack.ops.selective`): on CPU one fused compiled loop per (batch row, channel) that
never forms the [B, T, E, N] transitions, inputs or states; elsewhere those tensors and the
diagonal scan op. Mamba-2, whose
decay is one scalar per head, runs the same recurrence in its chunked matrix form (`ssd_scan`, the
state-space duality of Dao & Gu 2024): inside a chunk of Q steps the output is a masked, decayed
product of C and B (matrix products, no [B, T, H, P, N] tensor), and the state crosses chunks
through the diagonal scan. Same function, a different order of summation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import (
    DEFAULT_EIG_RANGE,
    EIG_RANGES,
    CausalConv1d,
    Spectral,
    check_eig_range,
    check_input,
    decay_to_range,
    inverse_softplus,
    log_uniform_dt,
)
from statetrack.layers.registry import register_model
from statetrack.ops import diagonal_scan
from statetrack.ops.selective import native_applies, selective_scan

SSD_CHUNK = 16  # Mamba-2's chunk length: the in-chunk form costs O(Q) per token, the chunk states O(P N / Q)


def _chunk_decays(a: torch.Tensor):
    """For a [..., Q], the decays of the steps of a chunk: (L [..., Q, Q], cum [..., Q]) with
    L[i, j] = a_{j+1} ... a_i for j <= i (1 on the diagonal), 0 above it, and cum[i] = a_0 ... a_i.
    Running products, never quotients of them, so zero and negative decays are exact."""
    Q = a.shape[-1]
    below = torch.ones(Q, Q, dtype=torch.bool, device=a.device).tril(-1)
    L = torch.where(below, a[..., :, None], torch.ones((), dtype=a.dtype, device=a.device)).cumprod(-2)
    # L[i, j] is now the product of a_r over j < r <= i, and 1 for i <= j: keep i >= j
    return L.masked_fill(below.T, 0), a.cumprod(-1)


def ssd_scan(xdt: torch.Tensor, a: torch.Tensor, B_t: torch.Tensor, C_t: torch.Tensor, h0=None, chunk: int = SSD_CHUNK):
    """Mamba-2's scan, H_t = a_t H_{t-1} + xdt_t B_t^T and y_t = H_t C_t per head, in chunks (Dao & Gu 2024).

    xdt [B, T, H, P], a [B, T, H], B_t and C_t [B, T, N] (one group), h0 [B, H, P, N] or None.
    Returns (y [B, T, H, P], H_T [B, H, P, N]), equal to `diagonal_scan` on the materialised
    [B, T, H, P, N] recurrence up to the order of summation.
    """
    Bsz, T, H, P = xdt.shape
    N = B_t.shape[-1]
    if T == 0:
        return xdt.new_zeros(Bsz, 0, H, P), (h0.clone() if h0 is not None else xdt.new_zeros(Bsz, H, P, N))
    Q = max(1, min(T, chunk))
    K = -(-T // Q)
    pad = K * Q - T
    if pad:  # steps with a = 1 and no input leave the state as it is
        xdt, B_t, C_t = (F.pad(v, (0, 0) * (v.dim() - 2) + (0, pad)) for v in (xdt, B_t, C_t))
        a = F.pad(a, (0, 0, 0, pad), value=1.0)
    X = xdt.view(Bsz, K, Q, H, P).transpose(2, 3)  # [B, K, H, Q, P]
    Bc, Cc = B_t.view(Bsz, K, Q, N), C_t.view(Bsz, K, Q, N)
    L, cum = _chunk_decays(a.view(Bsz, K, Q, H).transpose(2, 3))  # [B, K, H, Q, Q], [B, K, H, Q]
    scores = Cc @ Bc.transpose(-1, -2)  # [B, K, Q, Q]: C_i . B_j
    y = (scores[:, :, None] * L) @ X  # [B, K, H, Q, P]: the in-chunk part
    # each chunk's own contribution to the state at its end: sum_j L[Q-1, j] xdt_j B_j^T
    ends = (X * L[..., -1, :, None]).transpose(-1, -2) @ Bc[:, :, None]  # [B, K, H, P, N]
    decay = cum[..., -1]  # [B, K, H]: the chunk's product of a
    if K > 1:
        starts, _ = diagonal_scan(decay[:, :-1, :, None, None].expand(-1, -1, -1, P, N), ends[:, :-1], h0)
        if h0 is not None:
            starts = torch.cat([h0[:, None], starts], 1)
        else:
            starts = F.pad(starts, (0, 0) * 3 + (1, 0))
    else:
        starts = h0[:, None] if h0 is not None else None
    if starts is None:
        h_last = ends[:, -1]
    else:  # the state entering each chunk, decayed to each step and read out
        y = y + (Cc[:, :, None] @ starts.transpose(-1, -2)) * cum[..., None]
        h_last = ends[:, -1] + decay[:, -1, :, None, None] * starts[:, -1]
    y = y.transpose(2, 3).reshape(Bsz, K * Q, H, P)
    return (y[:, :T] if pad else y), h_last


def causal_conv(conv: CausalConv1d, x: torch.Tensor, state=None):
    """`conv(x, state)` (a depthwise causal convolution, `CausalConv1d`) as k shifted products on
    [B, T, C]: the same weights and state, without the transposes and the convolution kernels,
    whose backward cost more than the rest of Mamba-2's step at the quick shapes."""
    B, T, C = x.shape
    k = conv.kernel_size
    if state is None:
        state = x.new_zeros(B, k - 1, C)
    padded = torch.cat([state, x], dim=1)  # [B, k - 1 + T, C]
    w = conv.conv.weight[:, 0]  # [C, k]
    y = torch.addcmul(conv.conv.bias, padded[:, :T], w[:, 0])
    for j in range(1, k):
        y = torch.addcmul(y, padded[:, j : j + T], w[:, j])
    return y, padded[:, padded.shape[1] - (k - 1) :].clone()


class _SelectiveInputs(torch.autograd.Function):
    """Mamba's (a, b) [B, T, E, N] of the selective scan: a = exp(-dt A) (or 2 exp(-dt A) - 1 for
    eig_range [-1,1]), A = exp(A_log), and b = (dt u) B_t. The backward is written out so that its
    contractions over N, E and (B, T) are products of well-shaped matrices and its [B, T, E, N]
    work happens in place in the incoming gradient: autograd's form allocated a fresh tensor of that
    size per step of the chain and ran its contractions as matrix-vector products."""

    @staticmethod
    def forward(ctx, dt, A_log, u, B_t, scale):
        A = A_log.exp()  # [E, N]
        a = (dt[..., None] * -A).exp_()  # [B, T, E, N]
        if scale != 1:
            a.mul_(scale).sub_(scale - 1)
        xdt = dt * u  # [B, T, E]
        b = xdt[..., None] * B_t[:, :, None, :]
        ctx.scale = scale
        ctx.save_for_backward(dt, A, u, B_t, xdt, a)
        return a, b

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_a, grad_b):
        dt, A, u, B_t, xdt, a = ctx.saved_tensors
        Bsz, T, E, N = a.shape
        BT = Bsz * T
        if grad_b is None:
            grad_xdt, grad_B = torch.zeros_like(xdt), torch.zeros_like(B_t)
        else:
            gb = grad_b.reshape(BT, E, N)
            grad_xdt = torch.bmm(B_t.reshape(BT, 1, N), gb.transpose(1, 2)).view(Bsz, T, E)  # sum_n grad_b B_t
            grad_B = torch.bmm(xdt.reshape(BT, 1, E), gb).view(Bsz, T, N)  # sum_e grad_b (dt u)
        grad_dt, grad_u = grad_xdt * u, grad_xdt * dt
        grad_A_log = torch.zeros_like(A)
        if grad_a is not None:
            # d a / d(-dt A) = exp(-dt A) = (a + scale - 1) / scale, times the scale: a + scale - 1.
            # grad_a is the scan's own fresh buffer (nothing else holds it): worked on in place.
            g = grad_a.contiguous()
            if ctx.scale == 1:
                g.mul_(a)
            else:
                g.addcmul_(g, a, value=1.0 / (ctx.scale - 1)).mul_(ctx.scale - 1)  # g (a + scale - 1)
            g = g.view(BT, E, N)
            # sum_bt g dt (the gradient in -A), a few hundred tokens at a time: one temporary, reused
            grad_A = A.new_zeros(E, N)
            dt3 = dt.reshape(BT, E, 1)
            for r in range(0, BT, 256):
                grad_A += (g[r : r + 256] * dt3[r : r + 256]).sum(0)
            grad_A_log = -grad_A * A
            grad_dt = grad_dt - g.mul_(A).sum(-1).view(Bsz, T, E)
        return grad_dt, grad_A_log, grad_u, grad_B, None


class _ReadOut(torch.autograd.Function):
    """y [B, T, E] = sum_n h [B, T, E, N] C_t [B, T, N], as products of [1, N] x [N, E] per token."""

    @staticmethod
    def forward(ctx, h, C_t):
        Bsz, T, E, N = h.shape
        ctx.save_for_backward(h, C_t)
        return torch.bmm(C_t.reshape(Bsz * T, 1, N), h.reshape(Bsz * T, E, N).transpose(1, 2)).view(Bsz, T, E)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        h, C_t = ctx.saved_tensors
        Bsz, T, E, N = h.shape
        grad_h = g[..., None] * C_t[:, :, None, :]
        grad_C = torch.bmm(g.reshape(Bsz * T, 1, E), h.reshape(Bsz * T, E, N)).view(Bsz, T, N)
        return grad_h, grad_C


@register_model("mamba", display="Mamba {eig_range}")
class Mamba(Spectral, nn.Module):
    """The selective state-space block with the S6 scan (Gu & Dao 2023); eig_range [-1,1] as Grazzi et al. 2025.

    The selective scan, per channel c and state n:

        h_t[c, n] = a_t[c, n] h_{t-1}[c, n] + dt_t[c] B_t[n] u_t[c],   y_t[c] = sum_n C_t[n] h_t[c, n] + D[c] u_t[c]
        a_t = exp(-dt_t[c] exp(A_log[c, n]))          eig_range "[0,1]"
        a_t = 2 exp(-dt_t[c] exp(A_log[c, n])) - 1    eig_range "[-1,1]"  (Grazzi et al. 2025)

    dt = softplus(W_dt x + b_dt) through a rank-`dt_rank` bottleneck. Block: in-projection to
    2 * expand * d_model (u, z), causal depthwise conv (d_conv), SiLU, the scan, y * silu(z),
    out-projection. Init: A_log = log(1..N), dt log-uniform in [1e-3, 1e-1] via b_dt.
    State: (conv state [B, d_conv - 1, E], h [B, E, N]), E = expand * d_model.
    """

    departures = ('eig_range "[-1,1]" makes the transition 2 exp(dt A) - 1 in (-1, 1) instead of exp(dt A) '
                  '(Grazzi et al. 2025); with the default "[0,1]", none.')

    def __init__(self, d_model: int, d_state: int = 16, expand: int = 2, d_conv: int = 4, dt_rank: int | None = None, eig_range: str = DEFAULT_EIG_RANGE):
        super().__init__()
        check_eig_range(eig_range)
        self.d_model, self.d_state, self.eig_range = d_model, d_state, eig_range
        inner = expand * d_model
        self.dt_rank = dt_rank or math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, 2 * inner, bias=False)
        self.conv = CausalConv1d(inner, d_conv)
        self.x_proj = nn.Linear(inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, inner, bias=True)
        with torch.no_grad():
            self.dt_proj.bias.copy_(inverse_softplus(log_uniform_dt(inner)))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(inner, 1))  # [E, N]
        self.D = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, d_model, bias=False)

    def _projections(self, x, conv_state=None):
        """u [B, T, E] after conv + SiLU, gate z, dt [B, T, E], B_t, C_t [B, T, N], conv state."""
        u, z = self.in_proj(x).chunk(2, dim=-1)
        u, conv_state = causal_conv(self.conv, u, conv_state)
        u = F.silu(u)
        dt_low, B_t, C_t = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(self.dt_proj(dt_low))  # [B, T, E]
        return u, z, dt, B_t, C_t, conv_state

    def _inputs(self, x, conv_state=None):
        """u [B, T, E] after conv + SiLU, gate z, transition a [B, T, E, N], dt [B, T, E], B_t, C_t [B, T, N]."""
        u, z, dt, B_t, C_t, conv_state = self._projections(x, conv_state)
        a = decay_to_range(torch.exp(-dt[..., None] * self.A_log.exp()), self.eig_range)  # [B, T, E, N]
        return u, z, a, dt, B_t, C_t, conv_state

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        conv_state, h0 = state if state is not None else (None, None)
        u, z, dt, B_t, C_t, conv_state = self._projections(x, conv_state)
        scale = EIG_RANGES[self.eig_range]
        if native_applies(u, dt, B_t, C_t, self.A_log, *(() if h0 is None else (h0,))):
            # the fused loop (statetrack.ops.selective): no [B, T, E, N] tensor either way
            y, h_last = selective_scan(u, dt, self.A_log.exp(), B_t, C_t, h0, scale=scale, impl="native")
        else:  # CUDA, no C compiler, other dtypes: the materialised form
            a, b = _SelectiveInputs.apply(dt, self.A_log, u, B_t, scale)  # [B, T, E, N]
            h, h_last = diagonal_scan(a, b, h0)
            y = _ReadOut.apply(h, C_t)
        y = y + self.D * u
        return self.out_proj(y * F.silu(z)), (conv_state, h_last)

    def transition_eigenvalues(self, x):
        """The diagonal transitions a_t [B, T, E, N] (their own eigenvalues)."""
        return self._inputs(x)[2]


@register_model("mamba2", display="Mamba-2 {eig_range}")
class Mamba2(Spectral, nn.Module):
    """One scalar decay and a matrix state per head (Dao & Gu 2024); eig_range [-1,1] as Grazzi et al. 2025.

        H_t = a_t H_{t-1} + dt_t x_t B_t^T  (H_t in R^{P x N} per head),   y_t = H_t C_t + D x_t,
        a_t = exp(-dt_t exp(A_log)) in (0, 1), or 2 exp(.) - 1 in (-1, 1) for eig_range "[-1,1]".

    Block: in-projection to (z, x, B, C, dt), causal conv over (x, B, C), SiLU, the scan,
    RMSNorm(y * silu(z)) (eps 1e-5, as Dao & Gu 2024's code), out-projection. One group: B and C
    are shared by all heads. State: (conv state, H [B, heads, P, N]).
    """

    departures = ('eig_range "[-1,1]" makes the per-head decay 2 exp(dt A) - 1 in (-1, 1) instead of exp(dt A) '
                  '(Grazzi et al. 2025); with the default "[0,1]", none.')

    def __init__(self, d_model: int, d_state: int = 16, expand: int = 2, head_dim: int = 16, d_conv: int = 4, eig_range: str = DEFAULT_EIG_RANGE):
        super().__init__()
        check_eig_range(eig_range)
        self.d_model, self.d_state, self.eig_range = d_model, d_state, eig_range
        inner = expand * d_model
        if not isinstance(head_dim, int) or head_dim < 1 or inner % head_dim:
            raise StatetrackError(f"expand * d_model = {inner} is not divisible by head_dim {head_dim!r}; "
                                  "choose head_dim dividing it")
        self.inner, self.head_dim, self.num_heads = inner, head_dim, inner // head_dim
        self.in_proj = nn.Linear(d_model, 2 * inner + 2 * d_state + self.num_heads, bias=False)
        self.conv = CausalConv1d(inner + 2 * d_state, d_conv)
        self.dt_bias = nn.Parameter(inverse_softplus(log_uniform_dt(self.num_heads)))
        self.A_log = nn.Parameter(torch.log(torch.linspace(1, 16, self.num_heads)))
        self.D = nn.Parameter(torch.ones(self.num_heads))
        self.norm = nn.RMSNorm(inner, eps=1e-5)  # torch's default eps is the dtype's machine epsilon
        self.out_proj = nn.Linear(inner, d_model, bias=False)

    def _inputs(self, x, conv_state=None):
        z, xbc, dt = self.in_proj(x).split([self.inner, self.inner + 2 * self.d_state, self.num_heads], dim=-1)
        xbc, conv_state = causal_conv(self.conv, xbc, conv_state)
        u, B_t, C_t = F.silu(xbc).split([self.inner, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(dt + self.dt_bias)  # [B, T, H]
        a = decay_to_range(torch.exp(-dt * self.A_log.exp()), self.eig_range)  # [B, T, H]
        return z, u, B_t, C_t, dt, a, conv_state

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        conv_state, h0 = state if state is not None else (None, None)
        z, u, B_t, C_t, dt, a, conv_state = self._inputs(x, conv_state)
        B, T, _ = x.shape
        u = u.view(B, T, self.num_heads, self.head_dim)  # [B, T, H, P]
        y, h_last = ssd_scan(dt[..., None] * u, a, B_t, C_t, h0)
        y = y + self.D[:, None] * u
        y = self.norm(y.reshape(B, T, self.inner) * F.silu(z))
        return self.out_proj(y), (conv_state, h_last)

    def transition_eigenvalues(self, x):
        """The scalar decay of each head, a_t [B, T, H] (transition a_t I)."""
        return self._inputs(x)[5]
