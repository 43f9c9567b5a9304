"""Pieces shared by the zoo's mixers: the eigenvalue-range switch, the causal short convolution,
and the interface a layer offers to spectrum analysis."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from statetrack.errors import StatetrackError

EIG_RANGES = ("[0,1]", "[-1,1]")


def check_eig_range(eig_range: str) -> str:
    if eig_range not in EIG_RANGES:
        raise StatetrackError(f"unknown eig_range {eig_range!r}; expected one of: {', '.join(EIG_RANGES)}")
    return eig_range


def decay_to_range(decay: torch.Tensor, eig_range: str) -> torch.Tensor:
    """Map a decay in (0, 1) to the transition value: itself for [0,1], 2 decay - 1 in (-1, 1) for
    [-1,1] (papers/001, the Mamba extension: a_t = 2 exp(-dt A) - 1)."""
    return decay if eig_range == "[0,1]" else 2 * decay - 1


def inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    return x + torch.log(-torch.expm1(-x))


def log_uniform_dt(n: int, dt_min: float = 1e-3, dt_max: float = 1e-1, generator=None) -> torch.Tensor:
    """dt log-uniform in [dt_min, dt_max] (Mamba / S4D init, SPEC 1.2)."""
    u = torch.rand(n, generator=generator)
    return torch.exp(u * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))


class CausalConv1d(nn.Module):
    """Depthwise causal convolution over time on [B, T, C]; state = the last k - 1 inputs [B, k-1, C]."""

    def __init__(self, channels: int, kernel_size: int = 4):
        super().__init__()
        self.kernel_size = kernel_size
        self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, bias=True)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        B, T, C = x.shape
        k = self.kernel_size
        if state is None:
            state = x.new_zeros(B, k - 1, C)
        padded = torch.cat([state, x], dim=1)  # [B, k - 1 + T, C]
        y = self.conv(padded.transpose(1, 2)).transpose(1, 2)  # [B, T, C]
        return y, padded[:, padded.shape[1] - (k - 1) :]


def check_input(x: torch.Tensor, d_model: int, layer: str) -> None:
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"{layer} expects x of shape [B, T, {d_model}], got {tuple(x.shape)}")


class Spectral:
    """Mixin: `transition_eigenvalues(x)` = eigenvalues of the materialised state transitions.

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

