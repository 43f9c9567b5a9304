"""Causal self-attention, the mixer of the GPT-2 style Transformer baseline (Radford et al. 2019).

With `mlp: true` (the zoo's default for this model) the SequenceModel's pre-LN blocks around it
(LayerNorm, attention, residual, LayerNorm, MLP x4 with GELU, residual) make a GPT-2 decoder.
Positional encoding: "none" (NoPE, default; best for length generalization), "sinusoidal" or
"rope". Sinusoidal encodings are added to this layer's input at absolute positions (GPT-2 adds
them once to the embedding; per layer keeps the mixer interface and is the same for one layer).

The state is a key-value cache (keys, values [B, H, P, D] of the P tokens seen so far), so feeding
a sequence in chunks with the state carried equals one call on the whole sequence.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import check_input, head_split
from statetrack.layers.registry import register_model

POSITIONAL = ("none", "sinusoidal", "rope")


def sinusoidal(positions: torch.Tensor, dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[T] -> [T, dim]: sin/cos of position / 10000^(2i/dim) (Vaswani et al. 2017), computed in
    `dtype` but never below float32 (angles of far positions need the digits)."""
    dtype = torch.promote_types(dtype, torch.float32)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=dtype, device=positions.device) / dim)
    angles = positions.to(dtype)[:, None] * freq  # [T, dim/2]
    out = torch.zeros(len(positions), dim, dtype=dtype, device=positions.device)
    out[:, 0::2] = angles.sin()
    out[:, 1::2] = angles.cos()[:, : dim // 2]
    return out


def rotary(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """RoPE (Su et al. 2021) on x [B, H, T, D] (D even): rotate pairs (x_i, x_{i + D/2}) by position * freq_i."""
    D, dtype = x.shape[-1], torch.promote_types(x.dtype, torch.float32)  # angles at x's precision, at least float32
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, D // 2, dtype=dtype, device=x.device) / (D // 2))
    angles = positions.to(dtype)[:, None] * freq  # [T, D/2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


@register_model(
    "transformer",
    display=lambda spec: (
        "Transformer" + {"none": "", "sinusoidal": " (sinusoidal)", "rope": " (RoPE)"}[spec["positional"]]
    ),
    recurrent=False,
)
class CausalSelfAttention(nn.Module):
    """GPT-2 style causal decoder (Radford et al. 2019); NoPE, sinusoidal or RoPE (Su et al. 2021); a KV cache as state.

    Multi-head causal self-attention; the module docstring has the block and the encodings.
    """

    departures = (
        "no dropout (Radford et al. 2019); sinusoidal encodings (Vaswani et al. 2017) added at each "
        "attention layer's input, not once to the embedding; RoPE rotates dimension pairs (j, j + D/2), "
        "not (2j, 2j + 1) (Su et al. 2021): the same up to a fixed permutation of head dimensions"
    )

    @staticmethod
    def transition_class(spec: dict) -> str:
        return "attention"

    def __init__(self, d_model: int, num_heads: int = 2, positional: str = "none"):
        super().__init__()
        if positional not in POSITIONAL:
            raise StatetrackError(
                f"unknown positional encoding {positional!r}; expected one of: {', '.join(POSITIONAL)}"
            )
        self.d_model, self.positional = d_model, positional
        self.num_heads, self.head_dim = head_split(d_model, num_heads)
        if positional == "rope" and self.head_dim % 2:
            raise StatetrackError(f"rope needs an even head dimension, got {self.head_dim}")
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        B, T, _ = x.shape
        past = 0 if state is None else state[0].shape[2]
        positions = torch.arange(past, past + T, device=x.device)
        if self.positional == "sinusoidal":
            x = x + sinusoidal(positions, self.d_model, x.dtype).to(x.dtype)
        q, k, v = (t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        if self.positional == "rope":
            q, k = rotary(q, positions), rotary(k, positions)
        if state is not None:
            k, v = torch.cat([state[0], k], dim=2), torch.cat([state[1], v], dim=2)
        if past == 0:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # query i (absolute past + i) sees keys 0 .. past + i
            mask = torch.ones(T, past + T, dtype=torch.bool, device=x.device).tril(diagonal=past)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(B, T, self.d_model)), (k, v)
