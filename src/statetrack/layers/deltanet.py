"""Delta-rule token mixers (SPEC section 1.3) with the eigenvalue-range switch of papers/001:
DeltaNet, Gated DeltaNet and DeltaProduct_{n_h}, all on the `delta_rule` op."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import Spectral
from statetrack.ops import delta_product, delta_rule

EIG_RANGES = {"[0,1]": 1.0, "[-1,1]": 2.0}


def beta_scale(eig_range: str) -> float:
    """beta = scale * sigmoid(.): 1 gives eigenvalues 1 - beta in [0, 1], 2 gives (-1, 1]."""
    if eig_range not in EIG_RANGES:
        raise StatetrackError(f"unknown eig_range {eig_range!r}; expected one of: {', '.join(EIG_RANGES)}")
    return EIG_RANGES[eig_range]


class DeltaNet(Spectral, nn.Module):
    """S_t = (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = S_t^T q_t, per head.

    q, k = L2-normalised SiLU projections, v a linear projection, beta_t = s * sigmoid(w_b x_t)
    with s = 1 for eig_range "[0,1]" and s = 2 for "[-1,1]" (papers/001, as fla's
    `allow_neg_eigval`). The head outputs are RMS-normalised before the output projection, which
    makes the readout invariant to the state's overall scale. State: S [B, H, Dk, Dv].
    """

    def __init__(self, d_model: int, num_heads: int = 2, head_dim: int | None = None, eig_range: str = "[-1,1]"):
        super().__init__()
        self.eig_range = eig_range
        self.scale = beta_scale(eig_range)
        if head_dim is None:
            if d_model % num_heads:
                raise StatetrackError(f"d_model {d_model} is not divisible by num_heads {num_heads}")
            head_dim = d_model // num_heads
        self.num_heads, self.head_dim = num_heads, head_dim
        inner = num_heads * head_dim
        self.q_proj = nn.Linear(d_model, inner, bias=False)
        self.k_proj = nn.Linear(d_model, inner, bias=False)
        self.v_proj = nn.Linear(d_model, inner, bias=False)
        self.b_proj = nn.Linear(d_model, num_heads, bias=True)
        self.o_norm = nn.RMSNorm(head_dim)
        self.o_proj = nn.Linear(inner, d_model, bias=False)

    def gates(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """q, k, v [B, T, H, D] and beta [B, T, H] for input x [B, T, d_model]."""
        B, T, _ = x.shape
        heads = (B, T, self.num_heads, self.head_dim)
        q = F.normalize(F.silu(self.q_proj(x)).view(heads), dim=-1)
        k = F.normalize(F.silu(self.k_proj(x)).view(heads), dim=-1)
        v = self.v_proj(x).view(heads)
        beta = self.scale * torch.sigmoid(self.b_proj(x))
        return {"q": q, "k": k, "v": v, "beta": beta}

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        B, T, _ = x.shape
        o, state = delta_rule(**self.gates(x), initial_state=state, output_final_state=True)
        return self.o_proj(self.o_norm(o).reshape(B, T, -1)), state

    def transition_matrices(self, x: torch.Tensor) -> torch.Tensor:
        """I - beta_t k_t k_t^T, [B, T, H, Dk, Dk] (a generalized Householder; symmetric)."""
        g = self.gates(x)
        return householder(g["k"], g["beta"])


def householder(k: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """I - beta k k^T for k [..., D] and beta [...]: [..., D, D]."""
    eye = torch.eye(k.shape[-1], dtype=k.dtype, device=k.device)
    return eye - beta[..., None, None] * k[..., :, None] * k[..., None, :]


class GatedDeltaNet(DeltaNet):
    """S_t = (I - beta_t k_t k_t^T)(alpha_t S_{t-1}) + beta_t k_t v_t^T (Yang et al. 2025, SPEC 1.3),

    alpha_t = exp(g_t), g_t = -exp(A_log) softplus(w_a x_t + b) per head (Mamba-2 style decay);
    beta as in DeltaNet, so eig_range "[-1,1]" gives transition eigenvalues alpha (1 - beta) in
    (-1, 1]. State: S [B, H, Dk, Dv].
    """

    def __init__(self, d_model: int, num_heads: int = 2, head_dim: int | None = None, eig_range: str = "[-1,1]"):
        super().__init__(d_model, num_heads, head_dim, eig_range)
        self.a_proj = nn.Linear(d_model, num_heads, bias=True)
        with torch.no_grad():
            dt = torch.exp(torch.rand(num_heads) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            self.a_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        self.A_log = nn.Parameter(torch.log(torch.empty(num_heads).uniform_(1, 16)))

    def gates(self, x):
        gates = super().gates(x)
        gates["g"] = -self.A_log.exp() * F.softplus(self.a_proj(x))  # [B, T, H], log alpha
        return gates

    def transition_matrices(self, x):
        """alpha_t (I - beta_t k_t k_t^T), [B, T, H, Dk, Dk]."""
        g = self.gates(x)
        return g["g"].exp()[..., None, None] * householder(g["k"], g["beta"])


class DeltaProduct(Spectral, nn.Module):
    """DeltaProduct_{n_h} (Siems et al. 2025, papers/001; SPEC 1.3): n_h delta-rule micro-steps per token,

        A(x_t) = prod_{j=1..n_h} (I - beta_{t,j} k_{t,j} k_{t,j}^T),

    each with its own key, value and beta (beta = 2 sigmoid(.) for eig_range "[-1,1]"), through the
    `delta_product` op (the delta rule on the T * n_h interleaved micro-steps, read at each token's
    last one). n_h = 1 is DeltaNet. State: S [B, H, Dk, Dv].
    """

    def __init__(self, d_model: int, num_heads: int = 1, n_h: int = 2, head_dim: int | None = None, eig_range: str = "[-1,1]"):
        super().__init__()
        if not isinstance(n_h, int) or n_h < 1:
            raise StatetrackError(f"n_h (Householders per token) must be an integer >= 1, got {n_h!r}")
        self.eig_range, self.scale, self.n_h = eig_range, beta_scale(eig_range), n_h
        if head_dim is None:
            if d_model % num_heads:
                raise StatetrackError(f"d_model {d_model} is not divisible by num_heads {num_heads}")
            head_dim = d_model // num_heads
        self.d_model, self.num_heads, self.head_dim = d_model, num_heads, head_dim
        inner = num_heads * head_dim
        self.q_proj = nn.Linear(d_model, inner, bias=False)
        self.k_proj = nn.Linear(d_model, n_h * inner, bias=False)
        self.v_proj = nn.Linear(d_model, n_h * inner, bias=False)
        self.b_proj = nn.Linear(d_model, n_h * num_heads, bias=True)
        self.o_norm = nn.RMSNorm(head_dim)
        self.o_proj = nn.Linear(inner, d_model, bias=False)

    def gates(self, x):
        """q [B, T, H, D]; k, v [B, T, n_h, H, D]; beta [B, T, n_h, H]."""
        B, T, _ = x.shape
        micro = (B, T, self.n_h, self.num_heads, self.head_dim)
        q = F.normalize(F.silu(self.q_proj(x)).view(B, T, self.num_heads, self.head_dim), dim=-1)
        k = F.normalize(F.silu(self.k_proj(x)).view(micro), dim=-1)
        v = self.v_proj(x).view(micro)
        beta = self.scale * torch.sigmoid(self.b_proj(x)).view(B, T, self.n_h, self.num_heads)
        return {"q": q, "k": k, "v": v, "beta": beta}

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        B, T, _ = x.shape
        g = self.gates(x)
        H, D, n = self.num_heads, self.head_dim, self.n_h
        o, state = delta_product(
            g["q"], g["k"].reshape(B, T * n, H, D), g["v"].reshape(B, T * n, H, D), g["beta"].reshape(B, T * n, H),
            initial_state=state, output_final_state=True, num_householder=n,
        )
        return self.o_proj(self.o_norm(o).reshape(B, T, -1)), state

    def householder_factors(self, x):
        """The n_h factors I - beta_{t,j} k_{t,j} k_{t,j}^T, [B, T, n_h, H, D, D] (j = 1 first)."""
        g = self.gates(x)
        return householder(g["k"], g["beta"])

    def transition_matrices(self, x):
        """A(x_t) = H_{n_h} ... H_1 (the last micro-step acts last), [B, T, H, D, D]."""
        factors = self.householder_factors(x).unbind(2)
        A = factors[0]
        for factor in factors[1:]:
            A = factor @ A
        return A
