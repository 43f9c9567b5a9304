"""Selective state-space mixers: Mamba (S6; Gu & Dao 2023) and Mamba-2 (Dao & Gu 2024), both with
the eigenvalue-range switch of Grazzi et al. 2025.

Mamba runs its recurrence h_t = a_t * h_{t-1} + b_t, with its read-out, through the selective
scan op (`statetrack.ops.selective.selective_scan`): on CPU one fused compiled loop per (batch row,
channel) that never forms the [B, T, E, N] transitions, inputs or states; elsewhere those tensors
and the diagonal scan op. Mamba-2, whose decay is one scalar per head, runs the same recurrence in
its chunked matrix form (`statetrack.ops.selective.ssd_scan`, the state-space duality of Dao & Gu
2024): matrix products inside a chunk, the diagonal scan across chunks.
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
    causal_conv,
    check_eig_range,
    check_input,
    decay_to_range,
    inverse_softplus,
    log_uniform_dt,
)
from statetrack.layers.registry import register_model
from statetrack.ops.selective import native_applies, selective_scan, ssd_scan


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

    departures = (
        'eig_range "[-1,1]" makes the transition 2 exp(dt A) - 1 in (-1, 1) instead of exp(dt A) '
        '(Grazzi et al. 2025); with the default "[0,1]", none.'
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "diagonal-positive" if spec["eig_range"] == "[0,1]" else "diagonal-real"

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        expand: int = 2,
        d_conv: int = 4,
        dt_rank: int | None = None,
        eig_range: str = DEFAULT_EIG_RANGE,
    ):
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
        self.A_log = nn.Parameter(
            torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(inner, 1)
        )  # [E, N]
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
        # the fused loop where it applies (no [B, T, E, N] tensor), else (CUDA, no C compiler, other
        # dtypes) the materialised form
        impl = "native" if native_applies(u, dt, B_t, C_t, self.A_log, *(() if h0 is None else (h0,))) else "torch"
        y, h_last = selective_scan(u, dt, self.A_log.exp(), B_t, C_t, h0, scale=scale, impl=impl)
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

    departures = (
        'eig_range "[-1,1]" makes the per-head decay 2 exp(dt A) - 1 in (-1, 1) instead of exp(dt A) '
        '(Grazzi et al. 2025); with the default "[0,1]", none.'
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "diagonal-positive" if spec["eig_range"] == "[0,1]" else "diagonal-real"

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        expand: int = 2,
        head_dim: int = 16,
        d_conv: int = 4,
        eig_range: str = DEFAULT_EIG_RANGE,
    ):
        super().__init__()
        check_eig_range(eig_range)
        self.d_model, self.d_state, self.eig_range = d_model, d_state, eig_range
        inner = expand * d_model
        if not isinstance(head_dim, int) or head_dim < 1 or inner % head_dim:
            raise StatetrackError(
                f"expand * d_model = {inner} is not divisible by head_dim {head_dim!r}; choose head_dim dividing it"
            )
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
