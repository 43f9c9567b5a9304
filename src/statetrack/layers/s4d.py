"""Complex diagonal state-space mixers: S4D (time-invariant) and IDS4 (input-dependent).

Per channel c and complex mode n (d_state // 2 modes, the conjugate half implied by taking 2 Re):

    h_t[c, n] = a_t[c, n] h_{t-1}[c, n] + Bbar_t[c, n] u_t[c],     y_t[c] = 2 Re(sum_n C[c, n] h_t[c, n]) + D[c] u_t[c]
    a_t = exp(dt lambda),  Bbar_t = (a_t - 1) / lambda * B    (zero-order hold)

S4D (Gu et al. 2022): lambda = -exp(A_re_log) + i A_im, S4D-Lin init -1/2 + i pi n; dt per channel,
log-uniform in [1e-3, 1e-1]; a, B, C do not depend on the input. IDS4 (Merrill et al. 2024, "The
illusion of state"): the transition depends on the input, here through dt_t[c] = softplus(W x_t + b)
and a rotation offset phi_t[n] = W_phi x_t added to the imaginary part, lambda_t = -exp(A_re_log) +
i (A_im + phi_t): complex, input-dependent a_t. Output: GELU, then a GLU out-projection (S4D block).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import Spectral, check_input, inverse_softplus, log_uniform_dt
from statetrack.layers.registry import register_model
from statetrack.ops import diagonal_scan
from statetrack.ops.ids4 import ids4_scan

S4D_CHUNK = 64  # S4D's chunk length: the in-chunk convolution costs O(Q) per token and channel


@register_model("s4d", display="S4D")
class S4D(Spectral, nn.Module):
    """Time-invariant complex diagonal SSM: S4D-Lin init, zero-order hold (Gu et al. 2022).

    input_dependent=True is IDS4; the module docstring has the equations.

    State: h [B, d_model, d_state // 2] complex.
    """

    departures = (
        "C is initialised with std 0.5 / sqrt(d_state / 2) per real and imaginary part, smaller than the "
        "unit complex normal of Gu et al. 2022's reference S4D; the equations are as published."
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "diagonal-complex-affine" if spec["input_dependent"] else "time-invariant"

    def __init__(self, d_model: int, d_state: int = 32, input_dependent: bool = False):
        super().__init__()
        if d_state < 2 or d_state % 2:
            raise StatetrackError(
                f"d_state must be an even number >= 2 (complex modes come in conjugate pairs), got {d_state}"
            )
        self.d_model, self.modes, self.input_dependent = d_model, d_state // 2, input_dependent
        n = self.modes
        self.A_re_log = nn.Parameter(torch.full((d_model, n), math.log(0.5)))
        self.A_im = nn.Parameter(math.pi * torch.arange(n, dtype=torch.float32).repeat(d_model, 1))
        self.B = nn.Parameter(
            torch.stack([torch.ones(d_model, n), torch.zeros(d_model, n)], -1)
        )  # real view of complex
        self.C = nn.Parameter(torch.randn(d_model, n, 2) * (0.5 / math.sqrt(n)))
        self.D = nn.Parameter(torch.ones(d_model))
        if input_dependent:
            self.dt_proj = nn.Linear(d_model, d_model)
            with torch.no_grad():
                self.dt_proj.weight.mul_(0.1)
                self.dt_proj.bias.copy_(inverse_softplus(log_uniform_dt(d_model)))
            self.phi_proj = nn.Linear(d_model, n, bias=False)
        else:
            self.log_dt = nn.Parameter(log_uniform_dt(d_model).log())
        self.out_proj = nn.Linear(d_model, 2 * d_model)

    def _parts(self, x):
        """dt ([B, T, d, 1] or [d, 1]) and Re, Im of lambda ([B, T, d, modes] or [d, modes]), real."""
        lam_re = -self.A_re_log.exp()
        if self.input_dependent:
            dt = F.softplus(self.dt_proj(x))[..., None]  # [B, T, d, 1]
            return dt, lam_re, self.A_im + self.phi_proj(x)[:, :, None, :]
        return self.log_dt.exp()[:, None], lam_re, self.A_im

    def _discretize_real(self, x):
        """Re and Im of a and Bbar (module docstring), in real arithmetic: ([..., d, modes] x 4)."""
        dt, lam_re, lam_im = self._parts(x)
        # a = exp(dt lambda) = exp(dt Re lambda) (cos(dt Im lambda) + i sin(dt Im lambda)): torch's complex
        # exp is not vectorised, and on IDS4's [B, T, d, modes] it took 3x longer, forward and backward
        mag, angle = torch.exp(dt * lam_re), dt * lam_im
        a_re, a_im = mag * torch.cos(angle), mag * torch.sin(angle)
        # Bbar = (a - 1) / lambda * B with 1 / lambda = conj(lambda) / |lambda|^2 (complex division is
        # slow in torch, 30x a complex product on IDS4's [B, T, d, modes])
        B_re, B_im = self.B.unbind(-1)
        den = lam_re * lam_re + lam_im * lam_im
        q_re, q_im = (B_re * lam_re + B_im * lam_im) / den, (B_im * lam_re - B_re * lam_im) / den  # B / lambda
        am1 = a_re - 1
        return a_re, a_im, am1 * q_re - a_im * q_im, am1 * q_im + a_im * q_re

    def _discretize(self, x):
        """a, Bbar [B or 1, T or 1, d_model, modes] (complex) for input x [B, T, d_model]."""
        a_re, a_im, Bb_re, Bb_im = self._discretize_real(x)
        if not self.input_dependent:
            a_re, a_im, Bb_re, Bb_im = (v[None, None] for v in (a_re, a_im, Bb_re, Bb_im))
        return torch.complex(a_re, a_im), torch.complex(Bb_re, Bb_im)

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        if self.input_dependent:  # the op: a compiled pass on the CPU, the materialised form elsewhere
            dt = F.softplus(self.dt_proj(x))  # [B, T, d]
            y, h_last = ids4_scan(dt, self.phi_proj(x), -self.A_re_log.exp(), self.A_im, self.B, self.C, x, state)
        else:
            y, h_last = self._convolve(x, state)
        y = y + self.D * x
        return F.glu(self.out_proj(F.gelu(y)), dim=-1), h_last

    def _convolve(self, x, state):
        """S4D's output 2 Re(C h_t) and final state, with h never materialised over time.

        The transition does not depend on the input, so inside a chunk of Q steps the output is a
        causal convolution of u with the kernel K_k = 2 Re(sum_n C a^k Bbar) (one [Q, Q] Toeplitz
        product per channel), each chunk's state at its end is sum_j a^(Q-1-j) Bbar u_j (a product with
        [Q, modes]), the state crosses chunks through the diagonal scan with a^Q, and the state entering
        a chunk reaches step i as a^(i+1). Powers a^k = exp(k dt lambda), evaluated directly.
        Returns (y [B, T, d] without the D skip, h_T [B, d, modes] complex).
        """
        Bsz, T, d = x.shape
        n = self.modes
        if T == 0:
            zeros = x.new_zeros(Bsz, d, n)
            return x.new_zeros(Bsz, 0, d), (state.clone() if state is not None else torch.complex(zeros, zeros))
        Q = max(1, min(T, S4D_CHUNK))
        K = -(-T // Q)
        r = T - (K - 1) * Q  # steps in the last chunk
        dt, lam_re, lam_im = self._parts(x)  # [d, 1], [d, n], [d, n]
        a_re, a_im, Bb_re, Bb_im = self._discretize_real(x)  # [d, n]
        k = torch.arange(Q + 1, dtype=x.dtype, device=x.device)
        mag = torch.exp((dt * lam_re)[..., None] * k)  # [d, n, Q + 1]: |a|^k
        angle = (dt * lam_im)[..., None] * k
        p_re, p_im = mag * torch.cos(angle), mag * torch.sin(angle)  # a^k
        C_re, C_im = self.C.unbind(-1)
        W_re, W_im = C_re * Bb_re - C_im * Bb_im, C_re * Bb_im + C_im * Bb_re  # C Bbar [d, n]
        kernel = 2 * (W_re[..., None] * p_re[..., :Q] - W_im[..., None] * p_im[..., :Q]).sum(1)  # [d, Q]
        i = torch.arange(Q, device=x.device)
        lag = i[:, None] - i[None, :]
        toeplitz = kernel[:, lag.clamp(min=0)] * (lag >= 0).to(x.dtype)  # [d, Q(i), Q(j)] = K_{i-j}
        u = F.pad(x, (0, 0, 0, K * Q - T)) if K * Q != T else x
        u = u.view(Bsz, K, Q, d).permute(3, 0, 1, 2).reshape(d, Bsz * K, Q)  # [d, B K, Q]
        y = u @ toeplitz.transpose(1, 2)  # [d, B K, Q]: the in-chunk convolution

        def ends(steps):  # the state that `steps` inputs of a chunk leave at its end, [d, B K, 2n] (re, im)
            e = (steps - 1 - i).clamp(min=0)  # a^(steps-1-j), zero for j >= steps
            keep = (i < steps).to(x.dtype)[None, :, None]
            w_re = (
                Bb_re[:, None] * p_re[..., e].transpose(1, 2) - Bb_im[:, None] * p_im[..., e].transpose(1, 2)
            ) * keep
            w_im = (
                Bb_re[:, None] * p_im[..., e].transpose(1, 2) + Bb_im[:, None] * p_re[..., e].transpose(1, 2)
            ) * keep
            return w_re, w_im  # [d, Q, n]

        def as_complex(re_im):  # [d, B, K', 2n] -> complex [B, K', d, n]
            return torch.view_as_complex(re_im.unflatten(-1, (2, n)).permute(1, 2, 0, 4, 3).contiguous())

        h0 = state
        starts = None
        if K > 1:  # states at chunk ends, then the state entering each chunk
            w_re, w_im = ends(Q)
            full = _shared_product(u.view(d, Bsz, K, Q)[:, :, :-1], torch.cat([w_re, w_im], -1))  # [d, B, K-1, 2n]
            aQ = torch.complex(p_re[..., Q], p_im[..., Q])  # [d, n]
            starts, _ = diagonal_scan(aQ.expand(Bsz, K - 1, d, n), as_complex(full), h0)  # S_1 .. S_{K-1}
            starts = torch.cat([h0[:, None] if h0 is not None else torch.zeros_like(starts[:, :1]), starts], 1)
        elif h0 is not None:
            starts = h0[:, None]
        w_re, w_im = ends(r)
        last = _shared_product(u.view(d, Bsz, K, Q)[:, :, -1:], torch.cat([w_re, w_im], -1))  # [d, B, 1, 2n]
        h_last = as_complex(last)[:, 0]
        if starts is not None:
            s = torch.view_as_real(starts).permute(2, 0, 1, 4, 3).reshape(d, Bsz * K, 2 * n)  # [d, B K, (re, im) n]
            Ca_re = C_re[..., None] * p_re[..., 1:] - C_im[..., None] * p_im[..., 1:]  # C a^(i+1), [d, n, Q]
            Ca_im = C_re[..., None] * p_im[..., 1:] + C_im[..., None] * p_re[..., 1:]
            y = y + s @ torch.cat([2 * Ca_re, -2 * Ca_im], 1)  # 2 Re(C a^(i+1) S)
            last_start = starts[:, -1]
            h_last = h_last + torch.complex(p_re[..., r], p_im[..., r]) * last_start
        y = y.view(d, Bsz, K * Q).permute(1, 2, 0)
        return (y[:, :T] if K * Q != T else y), h_last

    def transition_eigenvalues(self, x):
        """The complex diagonal transitions a_t [B, T, d_model, modes]."""
        a, _ = self._discretize(x)
        return a.expand(x.shape[:2] + a.shape[2:])


def _shared_product(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """v [d, B, K, Q] @ w [d, Q, m] -> [d, B, K, m], w shared over B and K: one [B K, Q] @ [Q, m]
    product per channel. Broadcasting w over B (`v @ w[:, None]`) would make autograd expand it to
    [d, B, Q, m] and reduce an outer product per row for its gradient."""
    d, B, K, Q = v.shape
    return (v.reshape(d, B * K, Q) @ w).view(d, B, K, w.shape[-1])


@register_model("ids4", display="IDS4")
class IDS4(S4D):
    """S4D with an input-dependent complex transition: dt and rotation from the input (Merrill et al. 2024)."""

    departures = (
        "How the transition depends on the input (Merrill et al. 2024) is this project's choice: dt_t = "
        "softplus(W x_t + b) per channel (as Mamba, Gu & Dao 2023) and a rotation W_phi x_t added to "
        "Im(lambda) per mode, discretised by zero-order hold at every step; C initialised as in S4D."
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "diagonal-complex-affine"

    def __init__(self, d_model: int, d_state: int = 32):
        super().__init__(d_model, d_state, input_dependent=True)
