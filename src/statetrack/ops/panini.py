"""The Panini recurrence (Siems et al. 2026, App. C.2) and its decoder, Sinkhorn-Knopp (Sinkhorn &
Knopp 1967): a matrix state sandwiched between two state transitions,

    H_t = A_l,t H_{t-1} A_r,t + B_t,    decoded onto the Birkhoff polytope by S <- T_c(T_r(S)),

rows then columns divided by their sums until every margin is within `tol` of 1.

`sinkhorn_reference` and `panini_recurrence_reference` are the definitions (plain loops,
differentiated by autograd op by op). `sinkhorn` and `panini_recurrence` compute the same numbers as
one autograd node each: the loops run without a graph (each Sinkhorn sweep recorded) and the backward
replays them in reverse by hand; on the CPU the renormalised recurrence is one compiled loop per
matrix (`panini.c` through `native.py`, n <= `native.PANINI_MAX_N`).
"""

from __future__ import annotations

import torch

from statetrack.ops import native


# ---- the decoder and the recurrence ---------------------------------------------------------------
def margin_error(S: torch.Tensor) -> torch.Tensor:
    """max over rows and columns of |sum - 1| for S [..., n, n]: [...] (0 on the Birkhoff polytope)."""
    rows = (S.sum(-1) - 1).abs().amax(-1)
    columns = (S.sum(-2) - 1).abs().amax(-1)
    return torch.maximum(rows, columns)


def sinkhorn_reference(H: torch.Tensor, max_iter: int = 16, tol: float = 1e-5) -> torch.Tensor:
    """Sinkhorn & Knopp 1967 on nonnegative H [..., n, n]: S <- T_c(T_r(S)), rows then columns
    divided by their sums (Siems et al. 2026, App. C.2, item 3).

    Each matrix stops on its own once every row and column sums to 1 within `tol` (`margin_error`),
    or after `max_iter` sweeps: a matrix's result does not depend on what else is in the batch, so
    feeding a sequence in chunks gives the same numbers. A matrix already within `tol` is returned
    unchanged. A zero row or column stays zero (its sum is clamped away from 0) instead of NaN.

    This is the definition, differentiated by autograd op by op; `sinkhorn` computes the same
    numbers with one autograd node and a hand-written backward.
    """
    tiny = torch.finfo(H.dtype).tiny
    S = H
    for _ in range(max_iter):
        rows, columns = S.sum(-1), S.sum(-2)  # [..., n]
        error = torch.maximum((rows - 1).abs().amax(-1), (columns - 1).abs().amax(-1))  # margin_error(S)
        done = error <= tol
        if bool(done.all()):
            break
        by_rows = S / rows.clamp_min(tiny)[..., None]
        swept = by_rows / by_rows.sum(-2, keepdim=True).clamp_min(tiny)
        S = torch.where(done[..., None, None], S, swept)
    return S


def panini_recurrence_reference(
    A_l: torch.Tensor,
    A_r: torch.Tensor,
    B: torch.Tensor,
    initial_state: torch.Tensor,
    renormalize: bool = True,
    max_iter: int = 16,
    tol: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """H_t = A_l,t H_{t-1} A_r,t + B_t one step at a time (Siems et al. 2026, App. C.2).

    A_l, A_r, B: [B, T, ..., n, n]; initial_state H_0: [B, ..., n, n]. Returns (decoded
    [B, T, ..., n, n], the state after the last step [B, ..., n, n]). `renormalize`: project the
    state with `sinkhorn` after every step (then decoded = state); without it the recurrence is the
    paper's linear one and only the outputs are projected, so the state's mass can decay (a reveal
    removes the mass in its row and column) until it underflows.

    This is the definition (autograd op by op); `panini_recurrence` computes the same numbers with
    one autograd node for the whole loop.
    """
    H, steps = initial_state, []
    for t in range(A_l.shape[1]):
        H = A_l[:, t] @ H @ A_r[:, t] + B[:, t]
        if renormalize:
            H = sinkhorn_reference(H, max_iter, tol)
        steps.append(H)
    states = torch.stack(steps, dim=1)
    decoded = states if renormalize else sinkhorn_reference(states, max_iter, tol)
    return decoded, H


# ---- the same, fused: no graph in the loops, the backward written out ------------------------------
# A Panini step is a few dozen operations on tensors of a few thousand numbers, so its time is the
# per-operation overhead, autograd's included. The fused forms below run the loops without a graph
# (each Sinkhorn sweep recorded), and their backward replays them in reverse by hand; the
# gradients of A_l, A_r and B are then matrix products over all steps at once.
def _sum_matrix(n: int, dtype: torch.dtype, device) -> torch.Tensor:
    """[n * n, 2n] of zeros and ones: a flattened n x n matrix times it gives its row sums, then its
    column sums, in one product (each sum adds the same n numbers as S.sum does, exactly rounded
    products of ones)."""
    eye = torch.eye(n, dtype=dtype, device=device)
    return torch.cat((eye.repeat_interleave(n, 0), eye.repeat(n, 1)), 1)


def _sinkhorn_forward(S: torch.Tensor, max_iter: int, tol: float, record: list | None) -> torch.Tensor:
    """`sinkhorn_reference` on [M, n, n] without autograd: the same sweeps and stopping rule in fewer
    operations (the row and column sums of the check from one product, which the row normalisation
    reuses; masks kept at [M, 1, 1]). `record` (a list, or None) receives each sweep's
    (stopped [M, 1, 1] or None, rows, clamped rows [M, n, 1], R, column sums, clamped column sums
    [M, 1, n], result)."""
    M, n = S.shape[0], S.shape[-1]
    tiny = torch.finfo(S.dtype).tiny
    ones = _sum_matrix(n, S.dtype, S.device)
    for _ in range(max_iter):
        sums = torch.mm(S.view(M, n * n), ones)  # [M, 2n]: row sums, then column sums
        error = (sums - 1).abs_().amax(-1, keepdim=True)  # margin_error(S)
        done = error <= tol
        stopped = int(torch.count_nonzero(done))
        if stopped == M:
            break
        rows = sums[:, :n].view(M, n, 1)
        rows_c = rows.clamp_min(tiny)
        R = S / rows_c
        column_sums = R.sum(-2, keepdim=True)
        columns_c = column_sums.clamp_min(tiny)
        swept = R / columns_c
        kept = done.view(M, 1, 1) if stopped else None
        S = swept if kept is None else torch.where(kept, S, swept)
        if record is not None:
            record.append((kept, rows, rows_c, R, column_sums, columns_c, swept))
    return S


def _sinkhorn_backward(grad: torch.Tensor, record: list, masks: bool) -> torch.Tensor:
    """The gradient with respect to the input of `_sinkhorn_forward` from that of its result, the
    sweeps of `record` in reverse. `masks`: some sum was clamped (the clamp passes no gradient there)."""
    tiny = torch.finfo(grad.dtype).tiny
    for done, rows, rows_c, R, column_sums, columns_c, swept in reversed(record):
        # swept = R / c with c the column sums of R; R = S / r with r the row sums of S
        inner = (grad * swept).sum(-2, keepdim=True)
        if masks:
            inner = inner * (column_sums >= tiny)
        grad_R = (grad - inner) / columns_c
        inner = (grad_R * R).sum(-1, keepdim=True)
        if masks:
            inner = inner * (rows >= tiny)
        grad_S = (grad_R - inner) / rows_c
        grad = grad_S if done is None else torch.where(done, grad, grad_S)
    return grad


def _clamped(record: list) -> bool:
    """Whether a row or column sum of some sweep was below the clamp (or not a number)."""
    if not record:
        return False
    tiny = torch.finfo(record[0][1].dtype).tiny
    sums = torch.cat([torch.cat((r[1].flatten(1), r[4].flatten(1)), -1) for r in record], 0)
    return not bool((sums >= tiny).all())


class _Sinkhorn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, H, max_iter, tol):
        n = H.shape[-1]
        record, flat = [], H.reshape(-1, n, n)
        S = _sinkhorn_forward(flat, max_iter, tol, record)
        ctx.record = record
        return H.clone() if S is flat else S.view(H.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        n = grad.shape[-1]
        record, ctx.record = ctx.record, None
        return _sinkhorn_backward(grad.reshape(-1, n, n), record, _clamped(record)).view(grad.shape), None, None


def sinkhorn(H: torch.Tensor, max_iter: int = 16, tol: float = 1e-5) -> torch.Tensor:
    """`sinkhorn_reference` (Sinkhorn & Knopp 1967, per-matrix stopping; its docstring), the same
    numbers, computed without a graph per operation: one autograd node whose backward replays the
    sweeps in reverse."""
    if H.shape[-1] == 0 or H.numel() == 0:
        return sinkhorn_reference(H, max_iter, tol)
    if torch.is_grad_enabled() and H.requires_grad:
        return _Sinkhorn.apply(H, max_iter, tol)
    n = H.shape[-1]
    flat = H.reshape(-1, n, n)
    S = _sinkhorn_forward(flat, max_iter, tol, None)
    return H if S is flat else S.view(H.shape)


class _PaniniRecurrence(torch.autograd.Function):
    """The renormalised recurrence H_t = Sinkhorn(A_l,t H_{t-1} A_r,t + B_t) on time-major
    A_l, A_r, B [T, M, n, n] and H_0 [M, n, n]: (states [T, M, n, n], H_T). On CPU one compiled
    loop per matrix (`panini.c`, n <= 32); elsewhere PyTorch operations on all matrices at once,
    each Sinkhorn sweep recorded for the backward."""

    @staticmethod
    def forward(ctx, A_l, A_r, B, H0, max_iter, tol):
        T = A_l.shape[0]
        ctx.max_iter = max_iter
        ctx.compiled = native_applies(A_l, A_r, B, H0)
        if ctx.compiled:
            A_l, A_r, B, H0 = (v.contiguous() for v in (A_l, A_r, B, H0))
            keep = any(ctx.needs_input_grad[:4])  # X and the sweeps are for the backward alone
            states, X, sweeps, ctx.masks = native.panini_forward(A_l, A_r, B, H0, max_iter, tol, keep_inputs=keep)
            ctx.save_for_backward(A_l, A_r, H0, states, X, sweeps)
            return states, (states[-1].clone() if T else H0.clone())
        states = torch.empty_like(B)
        records, H = [], H0
        for t in range(T):
            X = torch.baddbmm(B[t], torch.bmm(A_l[t], H), A_r[t])
            record = []
            H = _sinkhorn_forward(X, max_iter, tol, record)
            states[t] = H
            records.append(record)
        ctx.records = records
        ctx.save_for_backward(A_l, A_r, H0, states)
        return states, (states[-1].clone() if T else H0.clone())

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states, grad_last):
        A_l, A_r, H0, states, *kept = ctx.saved_tensors
        if ctx.compiled:
            X, sweeps = kept
            grad_X, grad_A_l, grad_A_r, carry = native.panini_backward(
                A_l,
                A_r,
                H0,
                states,
                X,
                sweeps,
                grad_states.contiguous(),
                grad_last,
                ctx.masks,
                ctx.max_iter,
                *ctx.needs_input_grad[:2],
            )
            return grad_A_l, grad_A_r, grad_X, carry, None, None
        records, ctx.records = ctx.records, None
        masks = any(_clamped(r) for r in records)
        grad_X = torch.empty_like(grad_states)
        carry = grad_last
        for t in reversed(range(A_l.shape[0])):
            g = _sinkhorn_backward(grad_states[t] + carry, records[t], masks)
            grad_X[t] = g
            carry = torch.bmm(torch.bmm(A_l[t].mT, g), A_r[t].mT)  # dL/dH_{t-1}
        previous = torch.cat((H0[None], states[:-1]), 0)  # H_{t-1} for every t
        grad_A_l = grad_A_r = None
        if ctx.needs_input_grad[0]:
            grad_A_l = grad_X @ (previous @ A_r).mT
        if ctx.needs_input_grad[1]:
            grad_A_r = (A_l @ previous).mT @ grad_X
        return grad_A_l, grad_A_r, grad_X, carry, None, None


def native_applies(*tensors: torch.Tensor) -> bool:
    """Whether the compiled Panini loop takes these tensors: real float32 or float64 on the CPU,
    n <= `native.PANINI_MAX_N`, library built (else the PyTorch form runs)."""
    return tensors[0].shape[-1] <= native.PANINI_MAX_N and native.supports_real(*tensors)


def panini_recurrence(
    A_l: torch.Tensor,
    A_r: torch.Tensor,
    B: torch.Tensor,
    initial_state: torch.Tensor,
    renormalize: bool = True,
    max_iter: int = 16,
    tol: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`panini_recurrence_reference` (same arguments and results, the same numbers to float
    rounding): with `renormalize` the whole loop is one autograd node (`_PaniniRecurrence`), without
    it the linear loop runs op by op and the decoder is the fused `sinkhorn`."""
    n = A_l.shape[-1]
    if not renormalize:  # linear: op by op (three per step), then the fused decoder on all states at once
        H, steps = initial_state, []
        for t in range(A_l.shape[1]):
            H = A_l[:, t] @ H @ A_r[:, t] + B[:, t]
            steps.append(H)
        return sinkhorn(torch.stack(steps, dim=1), max_iter, tol), H
    same = A_l.shape == A_r.shape == B.shape and A_l.shape[:1] + A_l.shape[2:] == initial_state.shape
    if not same or A_l.shape[1] == 0 or initial_state.numel() == 0:  # broadcast shapes or nothing to do
        return panini_recurrence_reference(A_l, A_r, B, initial_state, renormalize, max_iter, tol)
    Bsz, T = A_l.shape[:2]
    dtype = torch.promote_types(
        torch.promote_types(A_l.dtype, A_r.dtype), torch.promote_types(B.dtype, initial_state.dtype)
    )

    def time_major(x):
        return x.to(dtype).transpose(0, 1).reshape(T, -1, n, n)

    states, last = _PaniniRecurrence.apply(
        time_major(A_l), time_major(A_r), time_major(B), initial_state.to(dtype).reshape(-1, n, n), max_iter, tol
    )
    states = states.view((T, Bsz) + tuple(A_l.shape[2:])).transpose(0, 1)
    return states, last.view(initial_state.shape)
