"""PaTH attention (Yang et al. 2025b): causal softmax attention with a data-dependent position
encoding, the product of the generalised Householders of the tokens between query and key.

The state is a key-value cache as in `layers.transformer`, with every cached key already carried
through the Householders seen since it (each new token's H_t updates every cached key), so feeding
a sequence in chunks with the state carried equals one call on the whole sequence.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import CausalConv1d, Spectral, causal_conv, check_eig_range, check_input, head_split
from statetrack.layers.registry import register_model
from statetrack.ops.path_attention import path_attention

PATH_EIG_RANGE = "[-1,1]"  # PaTH's beta = 2 sigmoid(.) (Yang et al. 2025b; fla's PaTHAttention layer)


def householder(w: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """I - beta w w^T for w [..., D] and beta [...]: [..., D, D]."""
    eye = torch.eye(w.shape[-1], dtype=w.dtype, device=w.device)
    return eye - beta[..., None, None] * w[..., :, None] * w[..., None, :]


@register_model(
    "path_attention",
    display="PaTH {eig_range}",
    summary="Softmax attention with accumulated data-dependent Householders as position encoding "
    "(Yang et al. 2025b); a transformed-key cache as state",
    recurrent=False,
)
class PaTHAttention(Spectral, nn.Module):
    """Softmax attention with accumulated data-dependent Householders as position encoding (Yang et
    al. 2025b); a transformed-key cache as state.

    Per head, with H_t = I - beta_t w_t w_t^T (Yang et al. 2025b; `ops.path_attention`):

        o_i = sum_{j <= i} softmax_j( (q_i^T H_i H_{i-1} ... H_{j+1} k_j + sum_{s=j+1..i} g_s) / sqrt(D) ) v_j

    q, k, v are linear projections (no bias); w_t = normalize(SiLU(causal_conv(W_w x)_t)) (a
    depthwise convolution over the last `short_conv` tokens, PaTH's default 3; short_conv = 0: w_t =
    normalize(W_w x_t)); beta_t = s sigmoid(w_b x_t + b) with s = 2 for eig_range "[-1,1]" (PaTH's,
    the default: H_t reflects, eigenvalue 1 - beta_t in (-1, 1) along w_t) and s = 1 for "[0,1]".
    `forget_gate` adds PaTH-FoX's g_t = log sigmoid(w_g x_t + b_g) per head (as fla, inside the
    scaled logit); without it g = 0. State: (the convolution's last short_conv - 1 inputs or None,
    (k [B, P, H, D] transformed through H_P .. H_{j+1}, v [B, P, H, D], accumulated gates [B, P, H])).
    """

    departures = (
        "w from a full-rank projection (PaTH: rank-32 factors when heads share no keys); no query-key "
        "RMSNorm option; eig_range [0,1] halves beta (PaTH's is [-1,1])"
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        # beta = s sigmoid(.): s = 2 approaches beta = 2, the reflections Thm. 2.1 of Yang et al. 2025b builds on
        return "attention-householder-positive" if spec["eig_range"] == "[0,1]" else "attention-householder-real"

    def __init__(
        self,
        d_model: int,
        num_heads: int = 2,
        eig_range: str = PATH_EIG_RANGE,
        forget_gate: bool = False,
        short_conv: int = 3,
    ):
        super().__init__()
        if not isinstance(forget_gate, bool):
            raise StatetrackError(f"forget_gate must be true or false, got {forget_gate!r}")
        if not isinstance(short_conv, int) or isinstance(short_conv, bool) or short_conv < 0:
            raise StatetrackError(
                f"short_conv (the width in tokens of w's short convolution; 0: none) must be an integer >= 0, "
                f"got {short_conv!r}"
            )
        self.d_model, self.eig_range, self.scale = d_model, eig_range, check_eig_range(eig_range)
        self.num_heads, self.head_dim = head_split(d_model, num_heads)
        self.forget_gate, self.short_conv = forget_gate, short_conv
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.w_proj = nn.Linear(d_model, d_model, bias=False)
        self.b_proj = nn.Linear(d_model, self.num_heads, bias=True)
        self.g_proj = nn.Linear(d_model, self.num_heads, bias=True) if forget_gate else None
        self.conv = CausalConv1d(d_model, short_conv, bias=False) if short_conv else None
        self.o_proj = nn.Linear(d_model, d_model, bias=False)

    def _householders(self, x: torch.Tensor, conv_state: torch.Tensor | None = None):
        """(w [B, T, H, D] unit vectors, beta [B, T, H]) for x [B, T, d_model], and the next convolution state."""
        B, T, _ = x.shape
        w = self.w_proj(x)
        if self.conv is not None:
            w, conv_state = causal_conv(self.conv, w, conv_state)
            w = F.silu(w)
        w = F.normalize(w.view(B, T, self.num_heads, self.head_dim), dim=-1)
        return w, self.scale * torch.sigmoid(self.b_proj(x)), conv_state

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        B, T, _ = x.shape
        conv_state, cache = (None, None) if state is None else state
        q, k, v = (t.view(B, T, self.num_heads, self.head_dim) for t in self.qkv(x).chunk(3, dim=-1))
        w, beta, conv_state = self._householders(x, conv_state)
        g = F.logsigmoid(self.g_proj(x)) if self.g_proj is not None else None
        o, cache = path_attention(q, k, v, w, beta, g, initial_state=cache, output_final_state=True)
        return self.o_proj(o.reshape(B, T, self.d_model)), (conv_state, cache)

    def transition_matrices(self, x: torch.Tensor) -> torch.Tensor:
        """The Householders H_t = I - beta_t w_t w_t^T that carry every earlier key, [B, T, H, D, D]."""
        w, beta, _ = self._householders(x)
        return householder(w, beta)
