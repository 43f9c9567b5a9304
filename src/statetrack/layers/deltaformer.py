"""DeltaFormer (Zhong et al. 2025): softmax attention over values written by a delta rule in the
softmax kernel's feature space; the recurrence is in `statetrack.ops.deltaformer`.

The state is a cache, as for the Transformer (layers/transformer.py): the keys and the written
values u of the P tokens seen so far ([B, P, H, D] each), so feeding a sequence in chunks with the
state carried equals one call on the whole sequence.
"""

from __future__ import annotations

import torch
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import DEFAULT_EIG_RANGE, check_eig_range, check_input, head_split
from statetrack.layers.registry import register_model
from statetrack.layers.transformer import rotary
from statetrack.ops.deltaformer import deltaformer

POSITIONAL = ("rope", "none")


@register_model(
    "deltaformer",
    display=lambda spec: f"DeltaFormer {spec['eig_range']}" + (" (NoPE)" if spec["positional"] == "none" else ""),
    summary="Softmax attention over values written by a delta rule in the kernel's feature space "
    "(Zhong et al. 2025); a key and u cache as state",
    recurrent=False,
)
class DeltaFormer(nn.Module):
    """Softmax attention over values written by a delta rule in the kernel's feature space (Zhong et al. 2025).

    Per head, with s = 1/sqrt(D) and the softmax kernel over keys (`ops.deltaformer`):

        u_t = v_t - beta_t sum_{j<t} softmax_j(s k_t.k_j) u_j,    o_t = sum_{j<=t} softmax_j(s q_t.k_j) u_j

    q, k, v are linear projections (no bias, as fla's layer), q and k rotated by RoPE (Su et al.
    2021; fla's layer; `positional` "none" leaves them as they are), beta_t = c sigmoid(w_b x_t + b) per
    head with c = 1 for eig_range "[0,1]" and c = 2 for "[-1,1]" (`common.EIG_RANGES`), and the
    heads' outputs go through a linear output projection. In the kernel's feature space phi the
    u-update is the delta rule with transition I - beta_t phi_t phi_t^T / Z_t (Z_t the softmax
    normaliser), whose eigenvalue along phi_t is 1 - beta_t exp(s |k_t|^2) / Z_t: that ratio is not
    bounded by 1, so eig_range sets beta's range, (0, 1) or (0, 2) as in Grazzi et al. 2025, not a
    bound on the eigenvalues. Where beta_t r_t > 1 the u's grow geometrically: parity, learnt with
    eig_range "[-1,1]", grows them about 1.6x a token, past float32's range after ~190 tokens.
    State: the cache (k [B, P, H, D], u [B, P, H, D]).
    """

    departures = (
        "beta = sigmoid (x2 for eig_range [-1,1]) of a linear map, where fla's layer uses the linear map "
        "unbounded; RoPE rotates dimension pairs (j, j + D/2) as the Transformer's (fla: the same up to a "
        "fixed permutation of head dimensions); no q/k norm (fla's default)"
    )

    def __init__(self, d_model: int, num_heads: int = 2, eig_range: str = DEFAULT_EIG_RANGE, positional: str = "rope"):
        super().__init__()
        if positional not in POSITIONAL:
            raise StatetrackError(
                f"unknown positional encoding {positional!r}; expected one of: {', '.join(POSITIONAL)}"
            )
        self.d_model, self.eig_range, self.scale = d_model, eig_range, check_eig_range(eig_range)
        self.num_heads, self.head_dim = head_split(d_model, num_heads)
        if positional == "rope" and self.head_dim % 2:
            raise StatetrackError(f"rope needs an even head dimension, got {self.head_dim}")
        self.positional = positional
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.b_proj = nn.Linear(d_model, self.num_heads, bias=True)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def gates(self, x: torch.Tensor, past: int = 0) -> dict[str, torch.Tensor]:
        """The op's inputs for x [B, T, d_model] at positions past, past + 1, ...: q, k, v [B, T, H, D]
        and beta [B, T, H]."""
        B, T, _ = x.shape
        heads = (B, T, self.num_heads, self.head_dim)
        q, k = self.q_proj(x).view(heads), self.k_proj(x).view(heads)
        if self.positional == "rope":
            positions = torch.arange(past, past + T, device=x.device)
            qk = rotary(torch.cat([q, k], dim=2).transpose(1, 2), positions).transpose(1, 2)  # one rotation for both
            q, k = qk.split(self.num_heads, dim=2)
        return {
            "q": q,
            "k": k,
            "v": self.v_proj(x).view(heads),
            "beta": self.scale * torch.sigmoid(self.b_proj(x)),
        }

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        B, T, _ = x.shape
        past = 0 if state is None else state[0].shape[1]
        gates = self.gates(x, past)
        o, cache = deltaformer(gates["q"], gates["k"], gates["v"], gates["beta"], initial_state=state)
        return self.o_proj(o.reshape(B, T, self.d_model)), cache
