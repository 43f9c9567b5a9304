"""Dense input-dependent linear recurrence h_t = A_t h_{t-1} + b_t (Ebrahimi & Memisevic 2025), layout [B, T, H, D].

The full bilinear model has A_t = sum_k x_t[k] W[:, :, k]; the CP-factored one A_t = U diag(C^T x_t) V^T
(Ebrahimi & Memisevic 2025, eqs. 1-3); both hand `dense_transition` the materialised A_t. The state may be a vector
h [B, H, D] or a matrix h [B, H, D, E] (E columns carried by the same A_t; the delta rule's chunk
recurrence uses that form).

Fastest correct CPU form found: a plain sequential scan with a custom reverse-scan backward (the
adjoint lambda_t = dL/dh_t + A_{t+1}^T lambda_{t+1}), dA_t = lambda_t h_{t-1}^T computed afterwards
as one batched product. Vector states step through the strided A[:, t] with a broadcast product
and a row sum (no copy of the large A, which costs more than the arithmetic); matrix states use
one fused `baddbmm` per step in time-major layout. A chunked/parallel form needs products
A_t ... A_s, i.e. O(D^3) per step instead of O(D^2); on CPU that loses for every D worth a dense model.
"""

from __future__ import annotations

import torch


class _DenseScan(torch.autograd.Function):
    """All states of h_{n+1} = M_n h_n + X_n for M [N, Z, D, D], X [N, Z, D, E], h0 [Z, D, E].

    Returns hs [N + 1, Z, D, E] with hs[0] = h0. Backward is the reverse scan; memory is that of the
    forward (the states are its output).
    """

    @staticmethod
    def forward(ctx, M, X, h0):
        N = M.shape[0]
        hs = X.new_empty((N + 1,) + tuple(h0.shape))
        hs[0] = h0
        for n in range(N):
            torch.baddbmm(X[n], M[n], hs[n], out=hs[n + 1])
        ctx.save_for_backward(M, hs)
        return hs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_hs):
        M, hs = ctx.saved_tensors
        N = M.shape[0]
        lam = torch.empty_like(grad_hs)  # lam[n] = dL/dh_n, total
        lam[N] = grad_hs[N]
        Mt = M.transpose(-1, -2).conj()
        for n in range(N - 1, -1, -1):
            torch.baddbmm(grad_hs[n], Mt[n], lam[n + 1], out=lam[n])
        grad_M = grad_X = None
        if ctx.needs_input_grad[0]:
            # dM_n = lambda_{n+1} h_n^H, all n in one batched product
            grad_M = torch.matmul(lam[1:], hs[:-1].transpose(-1, -2).conj())
        if ctx.needs_input_grad[1]:
            grad_X = lam[1:]
        return grad_M, grad_X, lam[0]


class _DenseVectorScan(torch.autograd.Function):
    """All states of h_{t+1} = A_t h_t + X_t in the user layout: A [B, T, H, D, D], X and h0 [B, (T,) H, D].

    Returns hs [B, T + 1, H, D] (hs[:, 0] = h0). Each step is one broadcast product and a row sum over
    the strided A[:, t] (no copy of the large A); the backward is the reverse scan, and
    dA_t = lambda_{t+1} h_t^H is one broadcast product written straight into A's layout.
    """

    @staticmethod
    def forward(ctx, A, X, h0):
        B, T, H, D, _ = A.shape
        hs = X.new_empty(B, T + 1, H, D)
        hs[:, 0] = h0
        for t in range(T):
            torch.sum(A[:, t] * hs[:, t, :, None, :], dim=-1, out=hs[:, t + 1])
            hs[:, t + 1] += X[:, t]
        ctx.save_for_backward(A, hs)
        return hs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_hs):
        A, hs = ctx.saved_tensors
        T = A.shape[1]
        Ac = A.conj()
        lam = torch.empty_like(hs)
        lam[:, T] = grad_hs[:, T]
        for t in range(T - 1, -1, -1):
            torch.sum(Ac[:, t] * lam[:, t + 1, :, :, None], dim=-2, out=lam[:, t])  # A_t^H lambda_{t+1}
            lam[:, t] += grad_hs[:, t]
        grad_A = lam[:, 1:, :, :, None] * hs[:, :-1, :, None, :].conj() if ctx.needs_input_grad[0] else None
        return grad_A, lam[:, 1:], lam[:, 0]


def dense_scan(M: torch.Tensor, X: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """h_{n+1} = M_n h_n + X_n over the leading axis; returns [N + 1, Z, D, E] states (hs[0] = h0).

    M [N, Z, D, D], X [N, Z, D, E], h0 [Z, D, E]; differentiable in all three.
    """
    return _DenseScan.apply(M.contiguous(), X.contiguous(), h0.contiguous())


def _check(A, b, initial_state):
    if A.dim() != 5 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"A must be [B, T, H, D, D], got {tuple(A.shape)}")
    B, T, H, D, _ = A.shape
    if b is not None and (b.dim() not in (4, 5) or b.shape[:4] != (B, T, H, D)):
        raise ValueError(f"b must be [B, T, H, D] = [{B}, {T}, {H}, {D}] or [B, T, H, D, E], got {tuple(b.shape)}")
    if initial_state is not None and initial_state.shape[:3] != (B, H, D):
        raise ValueError(f"initial_state must be [B, H, D] = [{B}, {H}, {D}] (or [B, H, D, E]), got {tuple(initial_state.shape)}")
    if b is not None and initial_state is not None and b.dim() - 1 != initial_state.dim():
        raise ValueError(f"b {tuple(b.shape)} and initial_state {tuple(initial_state.shape)} disagree on a vector or matrix state")


def dense_transition_reference(
    A: torch.Tensor,
    b: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = True,
):
    """The definition, h_t = A_t h_{t-1} + b_t (Ebrahimi & Memisevic 2025; b = None for the pure model), a plain loop.

    A [B, T, H, D, D]; b [B, T, H, D] (or [B, T, H, D, E]) or None; initial_state [B, H, D] (or
    [B, H, D, E]) or None (zeros). Returns (h [B, T, H, D(, E)] = h_1..h_T, h_T or None).
    """
    _check(A, b, initial_state)
    B, T, H, D, _ = A.shape
    matrix = (b is not None and b.dim() == 5) or (initial_state is not None and initial_state.dim() == 4)
    if initial_state is not None:
        h = initial_state
    else:
        h = A.new_zeros((B, H, D, b.shape[-1]) if matrix else (B, H, D))
    states = []
    b_steps = b.unbind(1) if b is not None else [None] * T
    for A_t, b_t in zip(A.unbind(1), b_steps):
        h = A_t @ h if matrix else (A_t @ h.unsqueeze(-1)).squeeze(-1)
        if b_t is not None:
            h = h + b_t
        states.append(h)
    out = torch.stack(states, 1) if states else A.new_zeros((B, 0, H, D) + tuple(h.shape[3:]))
    return out, (h if output_final_state else None)


def dense_transition(
    A: torch.Tensor,
    b: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = True,
):
    """h_t = A_t h_{t-1} + b_t (Ebrahimi & Memisevic 2025) through the fused scan with the reverse-scan backward.

    Same arguments and results as `dense_transition_reference`.
    """
    _check(A, b, initial_state)
    B, T, H, D, _ = A.shape
    matrix = (b is not None and b.dim() == 5) or (initial_state is not None and initial_state.dim() == 4)
    E = (b.shape[-1] if b is not None else initial_state.shape[-1]) if matrix else 1
    h0 = initial_state if initial_state is not None else A.new_zeros((B, H, D, E) if matrix else (B, H, D))
    if T == 0:
        return A.new_zeros((B, 0) + tuple(h0.shape[1:])), (h0 if output_final_state else None)
    if not matrix:
        X = b if b is not None else A.new_zeros(B, T, H, D)
        out = _DenseVectorScan.apply(A, X, h0)[:, 1:]
        return out, (out[:, -1] if output_final_state else None)
    h0 = h0.reshape(B * H, D, E)
    M = A.transpose(0, 1).reshape(T, B * H, D, D)
    if b is None:
        X = A.new_zeros(T, B * H, D, E)
    else:
        X = b.transpose(0, 1).reshape(T, B * H, D, E)
    hs = dense_scan(M, X, h0)[1:]  # [T, B*H, D, E]
    out = hs.reshape(T, B, H, D, E).transpose(0, 1)
    return out, (out[:, -1] if output_final_state else None)
