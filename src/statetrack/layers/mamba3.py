"""Mamba-3's SISO mixer (Lahoti et al. 2026): Mamba-2's scalar-decay matrix state per head, with
the exponential-trapezoidal discretisation and a complex state realised as data-dependent
rotations of B and C; the recurrence runs through `statetrack.ops.mamba3.mamba3`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from statetrack import limits
from statetrack.errors import StatetrackError
from statetrack.layers.common import (
    DEFAULT_EIG_RANGE,
    Spectral,
    check_eig_range,
    check_input,
    decay_to_range,
    inverse_softplus,
    log_uniform_dt,
)
from statetrack.layers.registry import register_model
from statetrack.ops.mamba3 import mamba3

A_FLOOR = 1e-4  # the least decay rate |A| (Lahoti et al. 2026's code): a_t = exp(dt A) stays below 1


def _display(spec: dict) -> str:
    variant = ("" if spec.get("rope", True) else " (no RoPE)") + ("" if spec.get("trapezoid", True) else " (Euler)")
    return f"Mamba-3{variant} {spec.get('eig_range', DEFAULT_EIG_RANGE)}"


@register_model(
    "mamba3",
    display=_display,
    summary="Mamba-2's per-head scalar decay with a trapezoidal rule and a complex (rotating) state "
    "(Lahoti et al. 2026); eig_range [-1,1] as Grazzi et al. 2025",
)
class Mamba3(Spectral, nn.Module):
    """Mamba-2's per-head scalar decay with a trapezoidal rule and a complex (rotating) state (Lahoti et al. 2026).

    Per head, with S_t = h_t^T [N, P] (`statetrack.ops.mamba3`; Lahoti et al. 2026, section 3):

        S_t = a_t R_t S_{t-1} + (1 - lam_t) dt_t a_t R_t B_{t-1} x_{t-1}^T + lam_t dt_t B_t x_t^T,
        y_t = S_t^T C_t + D x_t,    out = W_o (y * silu(z))

    with R_t block-diagonal: the rotation by -theta_t[r] of the pair of entries (2r, 2r + 1), r < R,
    the identity on the other N - 2R entries, and, from the in-projection of the token (no short convolution):
    dt_t = softplus(w_dt x + b_dt) [H]; A_t = -max(softplus(w_A x), 1e-4) [H], a_t = exp(dt_t A_t)
    (2 a_t - 1 for eig_range "[-1,1]", Grazzi et al. 2025); lam_t = sigmoid(w_lam x) [H];
    theta_t = dt_t pi tanh(w_theta x) [R], R = d_state // 4 angles shared by the heads, each
    scaled by its head's dt; B_t = RMSNorm(W_B x) + b_B and C_t = RMSNorm(W_C x) + b_C, with
    per-head biases (init 1); x the value channels, z the gate; heads of head_dim channels
    (None: one head of all expand * d_model). Init: dt log-uniform in
    [1e-3, 1e-1] via b_dt, D = 1.

    The state-tracking mechanism is the rotation: a pair's transition a_t e^{-i theta_t} has
    eigenvalues a_t e^{+-i theta_t}, so a token can turn the state by up to pi dt_t (parity: a turn
    by pi on each 1), where a real decay in (0, 1) can only shrink it. rope=False drops the
    rotation (a real, Mamba-2-like recurrence), trapezoid=False the trapezoid (lam = 1, the Euler
    rule of Mamba-2). State: (h [B, H, P, N], B_{T-1} [B, H, N], x_{T-1} [B, H, P]).
    """

    departures = (
        "single-input single-output form only (no MIMO), one group of B and C; d_state 16 and head_dim 16 "
        "by default (the paper's 128 and 64); rotations on the first half of the state (the code's default "
        "rope_fraction 0.5); no normalisation before the output projection (the code's default); "
        'eig_range "[-1,1]" makes the decay 2 exp(dt A) - 1 (Grazzi et al. 2025), which Mamba-3 does not have'
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "diagonal-complex-affine"

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        expand: int = 2,
        head_dim: int | None = 16,
        rope: bool = True,
        trapezoid: bool = True,
        eig_range: str = DEFAULT_EIG_RANGE,
    ):
        super().__init__()
        check_eig_range(eig_range)
        limits.check_int(d_state, "d_state", 1, limits.MAX_WIDTH)
        limits.check_int(expand, "expand", 1, limits.MAX_WIDTH)
        if head_dim is not None:
            limits.check_int(head_dim, "head_dim", 1, limits.MAX_WIDTH)
        for name, value in (("rope", rope), ("trapezoid", trapezoid)):
            if not isinstance(value, bool):
                raise StatetrackError(f"{name} must be true or false, got {limits.shown(value)}")
        if rope and d_state < 4:
            raise StatetrackError(f"rope needs d_state >= 4 (d_state // 4 rotation angles), got {d_state}")
        inner = expand * d_model
        head_dim = inner if head_dim is None else head_dim  # None: one head
        if inner % head_dim:
            raise StatetrackError(
                f"expand * d_model = {inner} is not divisible by head_dim {head_dim}; choose head_dim dividing it"
            )
        self.d_model, self.d_state, self.eig_range = d_model, d_state, eig_range
        self.rope, self.trapezoid = rope, trapezoid
        self.inner, self.head_dim, self.num_heads = inner, head_dim, inner // head_dim
        self.num_angles = d_state // 4 if rope else 0
        H = self.num_heads
        # [z, x, (B, C), dt, A, lam, theta]
        self.sizes = [inner, inner, 2 * d_state, H, H, H if trapezoid else 0, self.num_angles]
        self.in_proj = nn.Linear(d_model, sum(self.sizes), bias=False)
        self.dt_bias = nn.Parameter(inverse_softplus(log_uniform_dt(H)))
        # RMSNorm weights and per-head biases of B (row 0) and C (row 1), normalised in one pass
        self.BC_norm = nn.Parameter(torch.ones(2, 1, d_state))
        self.BC_bias = nn.Parameter(torch.ones(2, H, d_state))
        self.D = nn.Parameter(torch.ones(H))
        self.out_proj = nn.Linear(inner, d_model, bias=False)

    def _inputs(self, x):
        """The recurrence's inputs: z [B, T, E]; q, k [B, T, H, N]; v [B, T, H, P]; a, dt, lam
        [B, T, H] (lam None: Euler); theta [B, T, H, R] or None."""
        B, T, _ = x.shape
        z, u, BC, dt, A, lam, theta = self.in_proj(x).split(self.sizes, dim=-1)
        dt = F.softplus(dt + self.dt_bias)  # [B, T, H]
        a = decay_to_range(torch.exp(-dt * F.softplus(A).clamp(min=A_FLOOR)), self.eig_range)
        BC = F.rms_norm(BC.view(B, T, 2, 1, self.d_state), (self.d_state,), eps=1e-5)
        k, q = torch.addcmul(self.BC_bias, BC, self.BC_norm).unbind(2)  # [B, T, H, N] each
        v = u.view(B, T, self.num_heads, self.head_dim)
        lam = torch.sigmoid(lam) if self.trapezoid else None
        theta = (math.pi * torch.tanh(theta))[:, :, None] * dt[..., None] if self.rope else None
        return z, q, k, v, a, dt, lam, theta

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        B, T, _ = x.shape
        z, q, k, v, a, dt, lam, theta = self._inputs(x)
        y, state = mamba3(q, k, v, a, dt, lam, theta, initial_state=state)
        y = y + self.D[:, None] * v
        return self.out_proj(y.reshape(B, T, self.inner) * F.silu(z)), state

    def transition_eigenvalues(self, x):
        """Each head's transition a_t R(theta_t) [B, T, H, N]: a_t e^{-+i theta_r} for the R rotated
        pairs (complex), a_t for the other entries; real a_t [B, T, H, N] when rope is off."""
        _, _, _, _, a, _, _, theta = self._inputs(x)
        real = a[..., None].expand(*a.shape, self.d_state - 2 * self.num_angles)
        if theta is None:
            return real
        turns = a[..., None] * torch.polar(torch.ones_like(theta), -theta)  # [B, T, H, R]
        return torch.cat([turns, turns.conj(), real.to(turns.dtype)], -1)
