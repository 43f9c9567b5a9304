"""DeltaFormer (Zhong et al. 2025): softmax attention over values written by a delta rule in a
kernel's feature space; the recurrence is in `statetrack.ops.deltaformer`.

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
from statetrack.ops.deltaformer import WRITE_KERNELS, deltaformer

POSITIONAL = ("rope", "none")


@register_model(
    "deltaformer",
    display=lambda spec: (
        f"DeltaFormer {spec['eig_range']}"
        + (" (NoPE)" if spec["positional"] == "none" else "")
        + (" (softmax write)" if spec.get("write_kernel") == "softmax" else "")
    ),
    summary="Softmax attention over values written by a delta rule in the kernel's feature space "
    "(Zhong et al. 2025); a key and u cache as state",
    recurrent=False,
)
class DeltaFormer(nn.Module):
    """Softmax attention over values written by a delta rule in the kernel's feature space (Zhong et al. 2025).

    Per head, with s = 1/sqrt(D) (`ops.deltaformer`):

        u_t = v_t - beta_t sum_{j<t} kappa_1(k_t, k_j) u_j,    o_t = sum_{j<=t} softmax_j(s q_t.k_j) u_j

    the DeltaFormer recurrence of Zhong et al. 2025, its read kernel kappa_2 the softmax. The write
    kernel kappa_1 is `write_kernel`: "gaussian" (the default) exp(-s |k_t - k_j|^2 / 2), the
    exponential kernel with its feature vectors scaled to unit norm, a bounded form of the paper's
    kernel; "softmax" the exponential kernel normalised over the earlier keys, softmax_j(s k_t.k_j),
    fla's layer. The paper prefers an unnormalised kernel on unit-norm keys to the softmax-normalised
    one for tracking swaps: on unit-norm keys "gaussian" is that kernel, exp(s k_t.k_j), times the
    constant exp(-s); here the keys keep their norm, which sets the kernel's width. In the feature
    space the write is the delta rule with transition I - beta_t f_t f_t^T, f_t of unit norm:
    eigenvalue 1 - beta_t along f_t, so eig_range bounds every eigenvalue as in Grazzi et al. 2025
    and the u's stay finite at any length. With "softmax" the eigenvalue along f_t is
    1 - beta_t exp(s |k_t|^2) / Z_t (Z_t the normaliser), which beta's range does not bound: parity
    learnt with it grew the u's about 1.6x a token, past float32's range after ~190 tokens.

    q, k, v are linear projections (no bias, as fla's layer), q and k rotated by RoPE (Su et al.
    2021; fla's layer; `positional` "none" leaves them as they are), beta_t = c sigmoid(w_b x_t + b) per
    head with c = 1 for eig_range "[0,1]" and c = 2 for "[-1,1]" (`common.EIG_RANGES`), and the
    heads' outputs go through a linear output projection. State: the cache (k [B, P, H, D],
    u [B, P, H, D]).
    """

    departures = (
        'write kernel "gaussian" (unit-norm features, a bounded transition) by default, where fla\'s layer '
        "normalises it by a softmax (write_kernel: softmax); beta = sigmoid (x2 for eig_range [-1,1]) of a "
        "linear map, where fla's layer uses the linear map unbounded; RoPE rotates dimension pairs (j, j + D/2) "
        "as the Transformer's (fla: the same up to a fixed permutation of head dimensions); no q/k norm (fla's "
        "default)"
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "attention-delta-rule"

    def __init__(
        self,
        d_model: int,
        num_heads: int = 2,
        eig_range: str = DEFAULT_EIG_RANGE,
        positional: str = "rope",
        write_kernel: str = "gaussian",
    ):
        super().__init__()
        if positional not in POSITIONAL:
            raise StatetrackError(
                f"unknown positional encoding {positional!r}; expected one of: {', '.join(POSITIONAL)}"
            )
        if write_kernel not in WRITE_KERNELS:
            raise StatetrackError(f"unknown write_kernel {write_kernel!r}; expected one of: {', '.join(WRITE_KERNELS)}")
        self.d_model, self.eig_range, self.scale = d_model, eig_range, check_eig_range(eig_range)
        self.num_heads, self.head_dim = head_split(d_model, num_heads)
        if positional == "rope" and self.head_dim % 2:
            raise StatetrackError(f"rope needs an even head dimension, got {self.head_dim}")
        self.positional, self.write_kernel = positional, write_kernel
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
        o, cache = deltaformer(
            gates["q"], gates["k"], gates["v"], gates["beta"], initial_state=state, write_kernel=self.write_kernel
        )
        return self.o_proj(o.reshape(B, T, self.d_model)), cache
