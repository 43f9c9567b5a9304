"""DeltaNet token mixer (SPEC section 1.3) with the eigenvalue-range switch of papers/001."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.ops import delta_rule

EIG_RANGES = {"[0,1]": 1.0, "[-1,1]": 2.0}


def beta_scale(eig_range: str) -> float:
    """beta = scale * sigmoid(.): 1 gives eigenvalues 1 - beta in [0, 1], 2 gives (-1, 1]."""
    if eig_range not in EIG_RANGES:
        raise StatetrackError(f"unknown eig_range {eig_range!r}; expected one of: {', '.join(EIG_RANGES)}")
    return EIG_RANGES[eig_range]


class DeltaNet(nn.Module):
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
