"""One iteration of the fixed-point RNN (Movahedi et al. 2025, eq. 7): a Householder-product channel
mixer per token, then a diagonal scan over time,

    h^l_t = lam_t * h^l_{t-1} + scale_t * (Q_t (b_t - h^{l-1}_t) + h^{l-1}_t),
    Q_t = H_1 ... H_r,   H_i = I - 2 alpha_i u_i u_i^T   (u_i unit, H_r acts first).

`fixed_point_iteration_reference` is the definition (`householder_apply` then `diagonal_scan`) and
is differentiable; `fixed_point_iteration` is the form the solver's no-grad iterations use: on CPU
one fused compiled pass (`native.py`, `fixed_point.c`) that also returns the stopping rule's
relative change, elsewhere the reference. Layout: lam, scale, b, h_prev [B, T, d], u [B, T, r, d],
alpha [B, T, r], initial state [B, d] or None (zeros).
"""

from __future__ import annotations

import torch

from statetrack.ops import native
from statetrack.ops.diagonal import diagonal_scan


def householder_apply(v: torch.Tensor, u: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Q v with Q = prod_{i=1..r} (I - 2 alpha_i u_i u_i^T) = H_1 H_2 ... H_r (so H_r acts first).

    v [..., d], u [..., r, d] unit vectors, alpha [..., r]."""
    for i in reversed(range(u.shape[-2])):
        ui = u[..., i, :]
        v = v - (2 * alpha[..., i] * (ui * v).sum(-1))[..., None] * ui
    return v


def householder_matrix(u: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Q [..., d, d] materialised (the reference for `householder_apply`)."""
    d = u.shape[-1]
    Q = torch.eye(d, dtype=u.dtype, device=u.device).expand(*u.shape[:-2], d, d)
    for i in range(u.shape[-2]):
        ui = u[..., i, :]
        Q = Q - 2 * alpha[..., i, None, None] * (Q @ ui[..., :, None]) * ui[..., None, :]  # Q H_i
    return Q


def relative_change(new: torch.Tensor, old: torch.Tensor) -> float:
    """The stopping rule's max |new - old| / max |new| (NaN when new is not finite)."""
    return ((new - old).abs().max() / new.abs().max().clamp_min(1e-30)).item()


def fixed_point_iteration_reference(lam, scale, b, u, alpha, h_prev, initial_state=None):
    """h^l [B, T, d] and its last state h^l_T [B, d] from h^{l-1} = h_prev (eq. 7); differentiable."""
    drive = householder_apply(b - h_prev, u, alpha) + h_prev  # Q b + (I - Q) h^{l-1}
    return diagonal_scan(lam, scale * drive, initial_state)


def fixed_point_iteration(lam, scale, b, u, alpha, h_prev, initial_state=None):
    """(h^l, h^l_T, relative change max |h^l - h^{l-1}| / max |h^l|) without autograd: the fused
    compiled pass on CPU, the reference elsewhere (CUDA, no C compiler, STATETRACK_NATIVE=0)."""
    with torch.no_grad():
        args = [t.contiguous() for t in (lam, scale, b, u, alpha, h_prev)]
        h0 = initial_state.contiguous() if initial_state is not None else b.new_zeros(b.shape[0], b.shape[2])
        if b.dtype in (torch.float32, torch.float64) and native.supports(*args, h0):
            h, change, size = native.fixed_point_iterate(*args, h0)
            return h, (h[:, -1].clone() if h.shape[1] else h0), change / max(size, 1e-30)
        h, last = fixed_point_iteration_reference(lam, scale, b, u, alpha, h_prev, initial_state)
        return h, last, relative_change(h, h_prev)
