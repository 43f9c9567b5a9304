"""PD-SSM's recurrence (Terzić et al. 2025), layout [B, T, H, N]:

    h_t = P_t D_t h_{t-1} + b_t,    P_t column one-hot,  D_t = diag(d_t),  b_t = B x_t

P_t has exactly one 1 in each column: state entry n moves, scaled by d_t[n], to entry p_t[n], and
entries that land on the same row add up, h_t[m] = sum_{n: p_t[n] = m} d_t[n] h_{t-1}[n] + b_t[m].
P_t is the column-wise hardmax of the scores `p` [B, T, H, N, N] (rows m, columns n); its gradient
passes to the scores straight through, as in Terzić et al. 2025: the backward treats P_t as the
dense matrix it is, so dL/dp_t[m, n] = dL/dP_t[m, n].

A product of two such matrices is again one: (P_2 D_2)(P_1 D_1) has the index map p_2[p_1] and the
diagonal d_2[p_1] d_1 (Terzić et al. 2025's parallel scan). The fast form `pdssm` is a log-depth
(Hillis-Steele) scan over (index map, diagonal, state) triples along time, each level a few
gathers and one scatter-add over [B, T, H, N]; its backward is the same scan in reverse on the
adjoint, with the transposed maps, which gather instead of scatter:

    lambda_t = dL/dh_t + (P_{t+1} D_{t+1})^H lambda_{t+1},   ((P D)^H l)[n] = conj(d[n]) l[p[n]],
    dL/db_t = lambda_t,   dL/dd_t[n] = lambda_t[p_t[n]] conj(h_{t-1}[n]),
    dL/dp_t[m, n] = Re(lambda_t[m] conj(d_t[n] h_{t-1}[n])),   dL/dh_0 = (P_1 D_1)^H lambda_1.

d, b and the state may be real or complex (|d| <= 1 keeps the state bounded: Terzić et al. 2025
generate |d| in (0, 1) and a phase in (0, 2 pi)).
"""

from __future__ import annotations

import torch


def _check(p, d, b, initial_state):
    if d.dim() != 4:
        raise ValueError(f"d must be [B, T, H, N], got {tuple(d.shape)}")
    B, T, H, N = d.shape
    if p.shape != (B, T, H, N, N):
        raise ValueError(f"p must be [B, T, H, N, N] = [{B}, {T}, {H}, {N}, {N}], got {tuple(p.shape)}")
    if p.is_complex():
        raise ValueError(f"p (the column scores) must be real, got {p.dtype}")
    if b.shape != (B, T, H, N):
        raise ValueError(f"b must be [B, T, H, N] = [{B}, {T}, {H}, {N}], got {tuple(b.shape)}")
    if initial_state is not None and initial_state.shape != (B, H, N):
        raise ValueError(f"initial_state must be [B, H, N] = [{B}, {H}, {N}], got {tuple(initial_state.shape)}")


def _state_dtype(d, b, initial_state):
    dtype = torch.promote_types(d.dtype, b.dtype)
    return dtype if initial_state is None else torch.promote_types(dtype, initial_state.dtype)


def column_index(p: torch.Tensor) -> torch.Tensor:
    """The index map of the column-wise hardmax of the scores p [..., N, N]: [..., N] (int64), entry
    n the row of column n's largest score (exact ties go to one of the tied rows)."""
    # a tournament between halves of the rows in elementwise arithmetic: on the CPU, torch's argmax
    # and amax over the rows (a short strided axis) and torch.where each took longer than the scan
    value, dtype = p, torch.promote_types(p.dtype, torch.float32)  # row numbers exact up to 2^24
    rows = torch.arange(p.shape[-2], dtype=dtype, device=p.device)[:, None]  # [n, 1]
    while value.shape[-2] > 1:
        n = value.shape[-2]
        half = n // 2
        low, high = value[..., :half, :], value[..., half : 2 * half, :]
        low_rows, high_rows = rows[..., :half, :], rows[..., half : 2 * half, :]
        best, best_rows = torch.maximum(low, high), low_rows + (high > low).to(dtype) * (high_rows - low_rows)
        if n % 2:  # the odd row out waits for the next round
            best = torch.cat([best, value[..., n - 1 :, :]], -2)
            best_rows = torch.cat([best_rows, rows[..., n - 1 :, :].expand_as(value[..., n - 1 :, :])], -2)
        value, rows = best, best_rows
    return rows.expand(p.shape[:-2] + (1, p.shape[-1]))[..., 0, :].long()


def column_hardmax(p: torch.Tensor) -> torch.Tensor:
    """The column one-hot matrices of the scores p [..., N, N]: a 1 in each column, at `column_index`."""
    return torch.zeros_like(p).scatter_(-2, column_index(p).unsqueeze(-2), 1.0)


def pdssm_reference(p, d, b, initial_state=None, output_final_state=True):
    """The definition: a loop over time with the dense transition A_t = P_t D_t.

    p [B, T, H, N, N] real column scores (P_t = their column-wise hardmax, straight-through);
    d [B, T, H, N] the diagonal of D_t; b [B, T, H, N] the input term B x_t; initial_state
    [B, H, N] or None (zeros). d, b, initial_state real or complex.
    Returns (h [B, T, H, N] = h_1..h_T, h_T or None).
    """
    _check(p, d, b, initial_state)
    B, T, H, N = d.shape
    dtype = _state_dtype(d, b, initial_state)
    hard = column_hardmax(p)
    P = hard + (p - p.detach())  # the hardmax forward, the scores' gradient backward
    A = P.to(dtype) * d.to(dtype)[..., None, :]  # P_t D_t: column n scaled by d_t[n]
    h = d.new_zeros(B, H, N, dtype=dtype) if initial_state is None else initial_state.to(dtype)
    states = []
    for A_t, b_t in zip(A.unbind(1), b.to(dtype).unbind(1)):
        h = torch.einsum("bhmn,bhn->bhm", A_t, h) + b_t
        states.append(h)
    out = torch.stack(states, 1) if states else d.new_zeros(B, 0, H, N, dtype=dtype)
    return out, (h if output_final_state else None)


def _scatter_scan(index: torch.Tensor, d: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """h_t = P_t D_t h_{t-1} + b_t from h_0 = 0 along axis 1 of [B, T, H, N] (P_t by its index map).

    After level k, position t holds the map and the state of steps (t - 2^k, t]; a level composes
    each position with the one s = 2^k before it, later after earlier.
    """
    T = b.shape[1]
    s = 1
    while s < T:
        p_i, d_i, b_i = index[:, :-s], d[:, :-s], b[:, :-s]  # earlier: steps (t - 2s, t - s]
        p_j, d_j, b_j = index[:, s:], d[:, s:], b[:, s:]  # later: steps (t - s, t]
        b = torch.cat([b[:, :s], torch.scatter_add(b_j, -1, p_j, d_j * b_i)], 1)
        if 2 * s < T:  # the maps are needed by a next level only
            d = torch.cat([d[:, :s], d_j.gather(-1, p_i) * d_i], 1)
            index = torch.cat([index[:, :s], p_j.gather(-1, p_i)], 1)
        s *= 2
    return b


def _gather_scan(index: torch.Tensor, d: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """u_s = G_s u_{s-1} + b_s from u_{-1} = 0 along axis 1, G_s u = d_s * u[index_s] (a transposed map)."""
    T = b.shape[1]
    s = 1
    while s < T:
        p_i, d_i, b_i = index[:, :-s], d[:, :-s], b[:, :-s]
        p_j, d_j, b_j = index[:, s:], d[:, s:], b[:, s:]
        b = torch.cat([b[:, :s], torch.addcmul(b_j, d_j, b_i.gather(-1, p_j))], 1)
        if 2 * s < T:
            d = torch.cat([d[:, :s], d_j * d_i.gather(-1, p_j)], 1)
            index = torch.cat([index[:, :s], p_i.gather(-1, p_j)], 1)
        s *= 2
    return b


class _PDScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, p, d, b, h0):
        index = column_index(p)  # [B, T, H, N]
        b0 = b.clone()
        b0[:, 0] += torch.zeros_like(h0).scatter_add_(-1, index[:, 0], d[:, 0] * h0)  # h_0 folded into b_1
        h = _scatter_scan(index, d, b0)
        ctx.save_for_backward(index, d, h, h0)
        ctx.p_dtype = p.dtype
        return h

    @staticmethod
    def backward(ctx, grad_h):
        index, d, h, h0 = ctx.saved_tensors
        T = h.shape[1]
        d_conj = d.conj()
        # lambda_t = g_t + (P_{t+1} D_{t+1})^H lambda_{t+1}: the gather scan on reversed time, the
        # map at reversed position s being step T - s's (none at s = 0)
        rev_index = torch.cat([index[:, :1], index[:, 1:].flip(1)], 1)
        rev_d = torch.cat([torch.zeros_like(d[:, :1]), d_conj[:, 1:].flip(1)], 1)
        lam = _gather_scan(rev_index, rev_d, grad_h.flip(1).to(h.dtype)).flip(1)
        h_prev = torch.cat([h0[:, None], h[:, : T - 1]], 1)  # h_{t-1}
        lam_at = lam.gather(-1, index)  # lambda_t[p_t[n]]
        grad_d = lam_at * h_prev.conj() if ctx.needs_input_grad[1] else None
        grad_p = None
        if ctx.needs_input_grad[0]:
            z = d * h_prev  # what column n carries: d_t[n] h_{t-1}[n]
            if z.is_complex():  # Re(l z*) = l_re z_re + l_im z_im, two outer products in one buffer
                grad_p = (lam.real[..., :, None] * z.real[..., None, :]).addcmul_(
                    lam.imag[..., :, None], z.imag[..., None, :]
                )
            else:
                grad_p = lam[..., :, None] * z[..., None, :]
            grad_p = grad_p.to(ctx.p_dtype)
        grad_h0 = d_conj[:, 0] * lam_at[:, 0] if ctx.needs_input_grad[3] else None
        return grad_p, grad_d, lam, grad_h0


def pdssm(p, d, b, initial_state=None, output_final_state=True):
    """PD-SSM's recurrence through the log-depth scan; the same arguments and results as
    `pdssm_reference` (module docstring for the scan and its backward)."""
    _check(p, d, b, initial_state)
    B, T, H, N = d.shape
    dtype = _state_dtype(d, b, initial_state)
    h0 = d.new_zeros(B, H, N, dtype=dtype) if initial_state is None else initial_state.to(dtype)
    if T == 0:
        return d.new_zeros(B, 0, H, N, dtype=dtype), (h0.clone() if output_final_state else None)
    h = _PDScan.apply(p, d.to(dtype), b.to(dtype), h0)
    return h, (h[:, -1].clone() if output_final_state else None)
