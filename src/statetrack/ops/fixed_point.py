"""One iteration of the fixed-point RNNs (Movahedi et al. 2025): a Householder-product channel mixer
per token, then a diagonal scan over time. The vector-state FP-RNN (eq. 7):

    h^l_t = lam_t * h^l_{t-1} + scale_t * (Q_t (b_t - h^{l-1}_t) + h^{l-1}_t),
    Q_t = H_1 ... H_r,   H_i = I - 2 alpha_i u_i u_i^T   (u_i unit, H_r acts first),

layout lam, scale, b, h_prev [B, T, d], u [B, T, r, d], alpha [B, T, r], initial state [B, d].
Bedouin, the fixed-point Mamba (eqs. 11-12), with a matrix state h_t [E, N]:

    x~_t = Q_t (x_t - y^{l-1}_t) + y^{l-1}_t,   h_t = lam_t * h_{t-1} + (Delta_t * x~_t) Bbar_t^T,
    y^l_t = h_t Cbar_t,

layout lam [B, T, E, N], delta, x, y_prev [B, T, E], u [B, T, r, E], alpha [B, T, r], Bbar, Cbar
[B, T, N], initial state [B, E, N] (the mixing parameters, which depend on y^{l-1}, come computed).
Initial states default to zeros.

Each `<name>_reference` is the definition (`householder_apply`, then `diagonal_scan`) and is
differentiable. `<name>_nograd` is the form the solver's no-grad iterations use: on CPU one fused
compiled pass (`native.py`, `fixed_point.c`) that also returns the stopping rule's relative change
per sequence, elsewhere the reference. `<name>` without a suffix is the differentiable fast form the solver's last
iteration uses: the compiled pass forward and a compiled backward (the reflections recomputed per
token) on CPU, the reference elsewhere. `gated_decay` forms Bedouin's decays lambda_t =
exp(rate Delta_t) [B, T, E, N] (beside `gated_decay_reference`) as one autograd node.
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


def relative_change(new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """The stopping rule's max |new - old| / max |new| per sequence [B], the maxima over every axis
    but the first (NaN for a sequence whose iterate is not finite; 0 for an empty one)."""
    new, old = new.flatten(1), old.flatten(1)
    if new.shape[1] == 0:
        return new.new_zeros(new.shape[0])
    return _per_sequence((new - old).abs().amax(1), new.abs().amax(1))


def _per_sequence(change: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """change / size per sequence; NaN stays NaN, and inf / inf (an infinite iterate) reads as NaN."""
    return change / size.clamp_min(1e-30)


def fixed_point_iteration_reference(lam, scale, b, u, alpha, h_prev, initial_state=None):
    """h^l [B, T, d] and its last state h^l_T [B, d] from h^{l-1} = h_prev (eq. 7); differentiable."""
    drive = householder_apply(b - h_prev, u, alpha) + h_prev  # Q b + (I - Q) h^{l-1}
    return diagonal_scan(lam, scale * drive, initial_state)


def _native_args(tensors, initial_state, state_shape):
    """The tensors made contiguous and the initial state (zeros for None) when the compiled loops
    take them (CPU, float32/64, a C compiler), else None."""
    args = [t.contiguous() for t in tensors]
    h0 = initial_state.contiguous() if initial_state is not None else args[0].new_zeros(state_shape)
    if args[0].dtype in (torch.float32, torch.float64) and native.supports(*args, h0):
        return args, h0
    return None


class _FixedPointIteration(torch.autograd.Function):
    """(h, h_T) of eq. 7 with the compiled forward and backward (`fixed_point.c`); contiguous CPU inputs."""

    @staticmethod
    def forward(ctx, lam, scale, b, u, alpha, h_prev, h0):
        h, _, _ = native.fixed_point_iterate(lam, scale, b, u, alpha, h_prev, h0)
        ctx.save_for_backward(lam, scale, b, u, alpha, h_prev, h0, h)
        return h, (h[:, -1].clone() if h.shape[1] else h0.clone())

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_h, grad_last):
        lam, scale, b, u, alpha, h_prev, h0, h = ctx.saved_tensors
        grad_h = torch.zeros_like(h) if grad_h is None else grad_h.contiguous()
        grad_last = torch.zeros_like(h0) if grad_last is None else grad_last
        return native.fixed_point_backward(
            lam, scale, b, u, alpha, h_prev, h0, h, grad_h, grad_last, want_prev=ctx.needs_input_grad[5]
        )


def fixed_point_iteration(lam, scale, b, u, alpha, h_prev, initial_state=None):
    """(h^l, h^l_T) as `fixed_point_iteration_reference`, differentiable: on CPU one compiled pass
    forward and one backward (the reflections recomputed per token), the reference elsewhere."""
    ready = _native_args((lam, scale, b, u, alpha, h_prev), initial_state, (b.shape[0], b.shape[2]))
    if ready is None:
        return fixed_point_iteration_reference(lam, scale, b, u, alpha, h_prev, initial_state)
    return _FixedPointIteration.apply(*ready[0], ready[1])


def fixed_point_iteration_nograd(lam, scale, b, u, alpha, h_prev, initial_state=None):
    """(h^l, h^l_T, relative change max |h^l - h^{l-1}| / max |h^l| per sequence [B]) without
    autograd: the fused compiled pass on CPU, the reference elsewhere (CUDA, no C compiler,
    STATETRACK_NATIVE=0)."""
    with torch.no_grad():
        ready = _native_args((lam, scale, b, u, alpha, h_prev), initial_state, (b.shape[0], b.shape[2]))
        if ready is not None:
            h, change, size = native.fixed_point_iterate(*ready[0], ready[1])
            return h, (h[:, -1].clone() if h.shape[1] else ready[1]), _per_sequence(change, size)
        h, last = fixed_point_iteration_reference(lam, scale, b, u, alpha, h_prev, initial_state)
        return h, last, relative_change(h, h_prev)


def bedouin_iteration_reference(lam, delta, x, y_prev, u, alpha, Bbar, Cbar, initial_state=None):
    """y^l [B, T, E] and the last state h^l_T [B, E, N] of Bedouin's iteration (eqs. 11-12); differentiable."""
    x_mixed = householder_apply(x - y_prev, u, alpha) + y_prev  # x~ = Q (x - y) + y
    h, _ = diagonal_scan(lam, (delta * x_mixed)[..., None] * Bbar[:, :, None, :], initial_state)  # [B, T, E, N]
    return torch.einsum("bten,btn->bte", h, Cbar), h[:, -1]


class _BedouinIteration(torch.autograd.Function):
    """(y, h_T) of Bedouin's iteration with the compiled forward and backward (`fixed_point.c`);
    contiguous CPU inputs. The forward keeps every state [B, T, E, N] for the backward."""

    @staticmethod
    def forward(ctx, lam, delta, x, y_prev, u, alpha, Bbar, Cbar, h0):
        y, last, hs, _, _ = native.bedouin_iterate(lam, delta, x, y_prev, u, alpha, Bbar, Cbar, h0, keep_states=True)
        ctx.save_for_backward(lam, delta, x, y_prev, u, alpha, Bbar, Cbar, h0, hs)
        return y, last

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y, grad_last):
        saved = ctx.saved_tensors
        grad_y = torch.zeros_like(saved[2]) if grad_y is None else grad_y.contiguous()
        grad_last = torch.zeros_like(saved[8]) if grad_last is None else grad_last
        return native.bedouin_backward(*saved, grad_y, grad_last, want_prev=ctx.needs_input_grad[3])


def bedouin_iteration(lam, delta, x, y_prev, u, alpha, Bbar, Cbar, initial_state=None):
    """(y^l, h^l_T) as `bedouin_iteration_reference`, differentiable: on CPU one compiled pass forward
    (keeping the states) and one backward, the reference elsewhere."""
    B, T, E, N = lam.shape
    ready = _native_args((lam, delta, x, y_prev, u, alpha, Bbar, Cbar), initial_state, (B, E, N))
    if ready is None:
        return bedouin_iteration_reference(lam, delta, x, y_prev, u, alpha, Bbar, Cbar, initial_state)
    return _BedouinIteration.apply(*ready[0], ready[1])


def bedouin_iteration_nograd(lam, delta, x, y_prev, u, alpha, Bbar, Cbar, initial_state=None):
    """(y^l, h^l_T, relative change max |y^l - y^{l-1}| / max |y^l| per sequence [B]) without
    autograd: the fused compiled pass on CPU (which never writes the [B, T, E, N] states), the
    reference elsewhere."""
    with torch.no_grad():
        B, T, E, N = lam.shape
        ready = _native_args((lam, delta, x, y_prev, u, alpha, Bbar, Cbar), initial_state, (B, E, N))
        if ready is not None:
            y, last, _, change, size = native.bedouin_iterate(*ready[0], ready[1])
            return y, last, _per_sequence(change, size)
        y, last = bedouin_iteration_reference(lam, delta, x, y_prev, u, alpha, Bbar, Cbar, initial_state)
        return y, last, relative_change(y, y_prev)


# ---- Bedouin's decays --------------------------------------------------------------------------
def gated_decay_reference(rate: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """lambda = exp(rate * Delta) [..., E, N] for rate [E, N] and Delta [..., E]: Bedouin's decays,
    lambda_t = exp(-c softplus(omega) Delta_t) with rate = -c softplus(omega) (Movahedi et al. 2025,
    Sec. 5); two broadcast operations, differentiated by autograd."""
    return torch.exp(rate * delta[..., None])


class _GatedDecay(torch.autograd.Function):
    """`gated_decay` as one autograd node. lambda is the largest tensor of a step ([B, T, E, N]), and
    autograd's backward of the two broadcast operations makes three more of its size (dL/dlambda *
    lambda, then each times a factor, then summed), each a first touch of fresh memory. Here the
    backward runs over slices of about `SLICE` numbers (1 MiB in float32), in buffers reused from
    slice to slice, multiplying in place where autograd allocates."""

    SLICE = 1 << 18

    @staticmethod
    def forward(ctx, rate, delta):
        lam = torch.mul(rate, delta[..., None]).exp_()
        ctx.save_for_backward(rate, delta, lam)
        return lam

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        rate, delta, lam = ctx.saved_tensors
        E, N = rate.shape
        grad = grad.reshape(-1, E, N)
        lam, delta = lam.view(-1, E, N), delta.reshape(-1, E)
        rows = lam.shape[0]
        step = max(1, _GatedDecay.SLICE // (E * N))
        grad_delta = delta.new_empty(rows, E)
        grad_rate = rate.new_zeros(E, N)
        g = lam.new_empty(min(step, rows), E, N)
        for start in range(0, rows, step):
            part = slice(start, start + step)
            g_part = torch.mul(grad[part], lam[part], out=g[: min(step, rows - start)])  # dL/d(rate * Delta)
            torch.linalg.vecdot(g_part, rate, out=grad_delta[part])
            grad_rate += g_part.mul_(delta[part, :, None]).sum(0)
        return grad_rate, grad_delta.view(ctx.saved_tensors[1].shape)


def gated_decay(rate: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """`gated_decay_reference` (the same numbers, the same gradients to float rounding) as one
    autograd node whose backward works in reused slices."""
    if rate.dim() != 2 or delta.shape[-1:] != rate.shape[:1]:
        raise ValueError(
            f"rate must be [E, N] and delta [..., E] with the same E, got {tuple(rate.shape)} and {tuple(delta.shape)}"
        )
    return _GatedDecay.apply(rate, delta)
