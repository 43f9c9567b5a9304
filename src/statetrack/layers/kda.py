"""Kimi Delta Attention (KDA, Kimi Team 2025): the gated delta rule with a decay per key channel,
run by the `ops.kda` op (its module docstring has the chunkwise form)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import DEFAULT_EIG_RANGE, check_input, inverse_softplus, log_uniform_dt
from statetrack.layers.deltanet import DeltaInputs, DeltaNet, DeltaProduct, householder
from statetrack.layers.registry import register_model
from statetrack.ops.kda import kda

DECAY_BIASES = ("dt", "zero")  # the decay bias's init: Mamba's dt init, or fla's zero


@register_model(
    "kda",
    display="KDA {eig_range}",
    summary="Kimi Delta Attention: the gated delta rule with a decay per key channel (Kimi Team 2025); "
    "eig_range [-1,1] as Grazzi et al. 2025",
)
class KDA(DeltaNet):
    """Kimi Delta Attention: the gated delta rule with a decay per key channel (Kimi Team 2025);
    eig_range [-1,1] as Grazzi et al. 2025.

        S_t = (I - beta_t k_t k_t^T) diag(alpha_t) S_{t-1} + beta_t k_t v_t^T,    o_t = S_t^T q_t / sqrt(Dk)

    alpha_t = exp(g_t) per head and key channel, g_t = -exp(A_log_h) softplus(W_up W_down x_t + b) [H, Dk]:
    a low-rank projection (rank = head_dim) per channel, scaled per head, as fla's KDA gate. q, k, v,
    beta and the short convolution as DeltaNet; eig_range "[0,1]" (fla's KDA layer's default,
    allow_neg_eigval=False) or "[-1,1]" (beta in (0, 2)), which puts the transition's eigenvalue along
    k near -1 when alpha_t is near 1. The head outputs are RMS-normalised before the output
    projection. State: S [B, H, Dk, Dv], with a short convolution (conv state, S).

    `decay_bias` sets b at the start: "dt" (the default) Mamba's dt init, softplus(b) log-uniform in
    [1e-3, 1e-1] (Gu & Dao 2023), so alpha starts at exp(-A softplus(b)) in [0.2, 1); "zero" fla's
    KDA layer's, softplus(b) = log 2, so alpha starts in [1e-5, 0.5]: a memory of a few tokens. On
    the demo's parity (one answer after up to 40 bits) "zero" fitted in none of 3 seeds where "dt"
    fitted all 3 (docs/models.md).
    """

    departures = (
        DeltaProduct.departures.replace("q unscaled (L2-normalised)", "q L2-normalised and scaled by Dk^-1/2 as fla's")
        + "; no output gate (fla: a low-rank sigmoid gate on the normalised heads); v not passed through a SiLU "
        "without the short convolution; the decay's bias b starts at the Mamba dt init (log-uniform in "
        "[1e-3, 1e-1] through softplus) as Gated DeltaNet here, where fla's starts at zero (decay_bias: zero): "
        "with fla's, the demo's parity fitted 0 of 3 seeds where this init fitted 3 (docs/models.md)"
    )
    unnamed_defaults = ("short_conv", "decay_bias")  # left out of the resolved spec at their defaults (ids unchanged)

    def __init__(
        self,
        d_model: int,
        num_heads: int = 2,
        head_dim: int | None = None,
        eig_range: str = DEFAULT_EIG_RANGE,
        short_conv: int = 0,
        decay_bias: str = "dt",
    ):
        if decay_bias not in DECAY_BIASES:
            raise StatetrackError(f"unknown decay_bias {decay_bias!r}; expected one of: {', '.join(DECAY_BIASES)}")
        super().__init__(d_model, num_heads, head_dim, eig_range, short_conv)
        self.decay_bias = decay_bias
        inner = self.num_heads * self.head_dim
        up = nn.Linear(self.head_dim, inner)  # the decay's low-rank projection, rank head_dim as fla's
        with torch.no_grad():
            dt_init = inverse_softplus(log_uniform_dt(inner))  # drawn either way: the same seed, the same weights
            up.bias.copy_(dt_init if decay_bias == "dt" else torch.zeros_like(dt_init))
        self.f_proj = nn.Sequential(nn.Linear(d_model, self.head_dim, bias=False), up)
        self.A_log = nn.Parameter(torch.log(torch.empty(self.num_heads).uniform_(1, 16)))

    def log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """g_t = log alpha_t [B, T, H, Dk] (<= 0)."""
        B, T, _ = x.shape
        f = self.f_proj(x).view(B, T, self.num_heads, self.head_dim)
        return -self.A_log.exp()[:, None] * F.softplus(f)

    def _gates(
        self, x: torch.Tensor, conv_state: torch.Tensor | None = None
    ) -> tuple[DeltaInputs, torch.Tensor | None]:
        gates, conv_state = super()._gates(x, conv_state)
        gates["g"] = self.log_decay(x)  # [B, T, H, Dk]: the `kda` layout
        return gates, conv_state

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        B, T, _ = x.shape
        conv_state, S = state if self.conv is not None and state is not None else (None, state)
        gates, conv_state = self._gates(x, conv_state)
        o, S = kda(**gates, initial_state=S, output_final_state=True)
        return self.o_proj(self.o_norm(o).reshape(B, T, -1)), (S if self.conv is None else (conv_state, S))

    def householder_factors(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("KDA's transition is not a product of Householders; see transition_matrices")

    def transition_matrices(self, x: torch.Tensor) -> torch.Tensor:
        """(I - beta_t k_t k_t^T) diag(alpha_t), [B, T, H, Dk, Dk] (not symmetric: the decay acts first)."""
        g = self.gates(x)
        return householder(g["k"], g["beta"]) * g["g"].exp()[..., None, :]
