"""Inverse of a batch of unit lower-triangular matrices, (I + A)^-1 for strictly lower A.

The chunkwise delta rule needs it for every chunk (the UT transform, Yang et al. 2024b). On CPU,
`torch.linalg.solve_triangular` loops over the batch (one LAPACK call and one copy per matrix),
which dominated the chunk form. Here the CPU inverse is the compiled forward substitution of
`triangular.c` (see `native.py`); on CUDA, or without a C compiler, it is built by block doubling,
where every step is one batched product over all chunks:

    inv([[L11, 0], [L21, L22]]) = [[L11^-1, 0], [-L22^-1 L21 L11^-1, L22^-1]].

Backward: d(T)/dA with T = (I + A)^-1 gives dA = -T^T dT T^T, kept strictly lower.
"""

from __future__ import annotations

import torch

from statetrack.ops import native


def _diagonal_blocks(x: torch.Tensor, size: int) -> torch.Tensor:
    """[..., C, C] -> view [..., C / size, size, size] of the diagonal blocks."""
    m = x.shape[-1] // size
    blocks = x.unflatten(-1, (m, size)).unflatten(-3, (m, size))  # [..., m, s, m, s]
    return torch.diagonal(blocks, dim1=-4, dim2=-2).movedim(-1, -3)


def unit_lower_inverse_nograd(A: torch.Tensor) -> torch.Tensor:
    """(I + strictly-lower(A))^-1 for A [..., C, C] (no autograd): compiled on CPU, else block doubling."""
    C = A.shape[-1]
    if C <= native.INVERSE_MAX_SIZE and not A.is_complex() and native.supports(A):
        return native.unit_lower_inverse(A.reshape(-1, C, C).contiguous()).view(A.shape)
    return unit_lower_inverse_doubling(A)


def unit_lower_inverse_doubling(A: torch.Tensor) -> torch.Tensor:
    """(I + strictly-lower(A))^-1 for A [..., C, C], by block doubling (no autograd; any device).

    The result is built in place: at block size 2s the diagonal blocks (inverses of size s) are
    already in `inv`, and only the lower-left s x s block of each 2s block is written.
    """
    C = A.shape[-1]
    P = 1 << max(C - 1, 0).bit_length()  # next power of two; padding is an identity block
    L = torch.zeros(A.shape[:-2] + (P, P), dtype=A.dtype, device=A.device)
    L[..., :C, :C] = A.tril(-1)
    inv = torch.zeros_like(L)
    inv.diagonal(dim1=-2, dim2=-1).fill_(1)  # inverses of the 1 x 1 blocks
    s = 1
    while s < P:
        L21 = _diagonal_blocks(L, 2 * s)[..., s:, :s]  # [..., P/2s, s, s]
        blocks = _diagonal_blocks(inv, 2 * s)
        D11, D22 = blocks[..., :s, :s], blocks[..., s:, s:]
        blocks[..., s:, :s] = (D22 @ L21 @ D11).neg_()
        s *= 2
    return inv[..., :C, :C]


class _UnitLowerInverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A):
        T = unit_lower_inverse_nograd(A)
        ctx.save_for_backward(T)
        return T

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_T):
        (T,) = ctx.saved_tensors
        Tt = T.transpose(-1, -2)
        return (Tt @ grad_T @ Tt).neg_().tril_(-1)


def unit_lower_inverse(A: torch.Tensor) -> torch.Tensor:
    """(I + strictly-lower(A))^-1 for a batch A [..., C, C]; differentiable (gradient strictly lower)."""
    return _UnitLowerInverse.apply(A)
