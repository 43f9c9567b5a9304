"""Pieces shared by the zoo's mixers: the eigenvalue-range table, head splits, the input check,
the causal short convolution, and the interface a layer offers to spectrum analysis."""

from __future__ import annotations

import math

import torch
from torch import nn

from statetrack.errors import StatetrackError

# The eigenvalue-range switch, one table for every family: eig_range -> the scale s of the gate.
# A gate g in (0, 1) becomes beta = s g for the delta rule (transition eigenvalue 1 - beta along k)
# and s g - (s - 1) for a diagonal decay: s = 1 keeps the eigenvalues in [0, 1], s = 2 extends them
# to [-1, 1] (Grazzi et al. 2025, for Mamba and DeltaNet; as fla's `allow_neg_eigval`).
EIG_RANGES = {"[0,1]": 1.0, "[-1,1]": 2.0}

# Every family defaults to the range of its published model (Gu & Dao 2023; Dao & Gu 2024;
# Schlag et al. 2021; Yang et al. 2025a; Siems et al. 2025); "[-1,1]" is Grazzi et al. 2025's extension.
DEFAULT_EIG_RANGE = "[0,1]"


def check_eig_range(eig_range: str) -> float:
    """The gate scale of `eig_range` (EIG_RANGES); an unknown range is a StatetrackError."""
    if not isinstance(eig_range, str) or eig_range not in EIG_RANGES:
        raise StatetrackError(f"unknown eig_range {eig_range!r}; expected one of: {', '.join(EIG_RANGES)}")
    return EIG_RANGES[eig_range]


def decay_to_range(decay: torch.Tensor, eig_range: str) -> torch.Tensor:
    """Map a decay in (0, 1) to the transition value: itself for [0,1], 2 decay - 1 in (-1, 1) for
    [-1,1] (Grazzi et al. 2025, the Mamba extension a_t = 2 exp(-dt A) - 1)."""
    scale = EIG_RANGES[eig_range]
    return decay if scale == 1 else scale * decay - (scale - 1)


def head_split(
    d_model: int, num_heads: int, head_dim: int | None = None, *, takes_head_dim: bool = False
) -> tuple[int, int]:
    """(num_heads, head_dim): head_dim = d_model // num_heads unless given. `takes_head_dim`: the
    layer has a head_dim parameter, so the error can suggest setting it."""
    if not isinstance(num_heads, int) or num_heads < 1:
        raise StatetrackError(f"num_heads must be an integer >= 1, got {num_heads!r}")
    if head_dim is not None:
        if not isinstance(head_dim, int) or head_dim < 1:
            raise StatetrackError(f"head_dim must be an integer >= 1 or None, got {head_dim!r}")
        return num_heads, head_dim
    if d_model % num_heads:
        remedy = "choose num_heads dividing d_model" + (" or set head_dim" if takes_head_dim else "")
        raise StatetrackError(f"d_model {d_model} is not divisible by num_heads {num_heads}; {remedy}")
    return num_heads, d_model // num_heads


def check_input(x: torch.Tensor, d_model: int, layer: str) -> None:
    """Every mixer's forward starts here: x must be [B, T, d_model]."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != d_model:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise StatetrackError(f"{layer} expects x of shape [B, T, d_model] = [B, T, {d_model}], got {got}")


def inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    return x + torch.log(-torch.expm1(-x))


def log_uniform_dt(n: int, dt_min: float = 1e-3, dt_max: float = 1e-1, generator=None) -> torch.Tensor:
    """dt log-uniform in [dt_min, dt_max] (the Mamba and S4D init: Gu & Dao 2023; Gu et al. 2022)."""
    u = torch.rand(n, generator=generator)
    return torch.exp(u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))


class CausalConv1d(nn.Module):
    """Depthwise causal convolution over time on [B, T, C]; state = the last k - 1 inputs [B, k-1, C]."""

    def __init__(self, channels: int, kernel_size: int = 4, bias: bool = True):
        super().__init__()
        self.kernel_size = kernel_size
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, bias=bias)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        B, T, C = x.shape
        k = self.kernel_size
        if state is None:
            state = x.new_zeros(B, k - 1, C)
        padded = torch.cat([state, x], dim=1)  # [B, k - 1 + T, C]
        y = self.conv(padded.transpose(1, 2)).transpose(1, 2)  # [B, T, C]
        return y, padded[:, padded.shape[1] - (k - 1) :].clone()  # a copy: a view would keep the whole input alive


def causal_conv(conv: CausalConv1d, x: torch.Tensor, state=None):
    """`conv(x, state)` (a depthwise causal convolution, `CausalConv1d`) as k shifted products on
    [B, T, C]: the same weights and state, without the transposes and the convolution kernels,
    whose backward cost more than the rest of Mamba-2's step at the quick shapes."""
    B, T, C = x.shape
    k = conv.kernel_size
    if state is None:
        state = x.new_zeros(B, k - 1, C)
    padded = torch.cat([state, x], dim=1)  # [B, k - 1 + T, C]
    w, bias = conv.conv.weight[:, 0], conv.conv.bias  # [C, k], [C] or None
    y = padded[:, :T] * w[:, 0] if bias is None else torch.addcmul(bias, padded[:, :T], w[:, 0])
    for j in range(1, k):
        y = torch.addcmul(y, padded[:, j : j + T], w[:, j])
    return y, padded[:, padded.shape[1] - (k - 1) :].clone()


class Spectral:
    """Mixin giving the `TransitionEigenvalues` and `TransitionMatrices` features (`layers.registry`):
    `transition_eigenvalues(x)` = eigenvalues of the materialised state transitions.

    Matrix-state layers implement `transition_matrices(x) -> [B, T, H, n, n]` (one per token and
    head); the default computes their eigenvalues. Diagonal layers override
    `transition_eigenvalues` directly, since a diagonal matrix's eigenvalues are its entries.
    """

    def transition_matrices(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no materialised transition")

    def transition_eigenvalues(self, x: torch.Tensor) -> torch.Tensor:
        """Eigenvalues [B, T, ..., n] (real or complex) of the transitions for input x [B, T, D]."""
        A = self.transition_matrices(x)
        if torch.allclose(A, A.transpose(-1, -2)):
            return torch.linalg.eigvalsh(A)
        return torch.linalg.eigvals(A)
