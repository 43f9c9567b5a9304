"""Diagonal linear recurrence h_t = a_t * h_{t-1} + b_t, elementwise (diagonal linear RNNs / SSMs).

One op serves Mamba (Gu & Dao 2023; a_t = exp(-dt A) in (0, 1), or 2 exp(.) - 1 in (-1, 1) for the
[-1, 1] range of Grazzi et al. 2025), S4D/IDS4 (Gu et al. 2022; Merrill et al. 2024; complex a_t),
GLA-style decays (Yang et al. 2024a) and the rotation / real-diagonal bilinear models (Ebrahimi &
Memisevic 2025). Layout: a, b [B, T, ...] (any trailing state shape, e.g. [B, T, D, N] or
[B, T, H, D]); h_0 [B, ...]; real or complex.

Fast forms (`diagonal_scan`). On CPU, the recurrence and its backward as one fused compiled loop
each (`native.py`, `diagonal_scan.c`): the scan is memory-bound (two flops per element), and the loop
moves each element through memory once, where every PyTorch op is a pass of its own. Elsewhere
(CUDA, or no C compiler), the exact recurrence in two levels. Time is cut into n chunks of C
(C ~ sqrt(T)); pass 1 runs the recurrence from zero inside all chunks at once (C vectorised steps,
keeping only each chunk's end value), a carry loop of n steps moves the state across chunks with
the chunk products of a, and pass 2 reruns all chunks from their true start states, writing h
once. That is O(sqrt T) Python steps and O(T) memory.
Unlike a log-space cumsum (h_t = A_t sum_j b_j / A_j), it never divides by a product of a's, so
a_t = 0, negative and complex a_t are exact. Both forms run the backward as the same scan in
reverse on the adjoint,

    lambda_t = dL/dh_t + conj(a_{t+1}) lambda_{t+1},    dL/db_t = lambda_t,
    dL/da_t = lambda_t conj(h_{t-1}),                    dL/dh_0 = conj(a_1) lambda_1,

so fwd+bwd costs about two forwards and stores only h (the output).
"""

from __future__ import annotations

import math

import torch

from statetrack.ops import native


def _check(a, b, initial_state):
    if a.dim() < 2 or a.shape != b.shape:
        raise ValueError(f"a and b must be [B, T, ...] of equal shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    want = (a.shape[0],) + tuple(a.shape[2:])
    if initial_state is not None and tuple(initial_state.shape) != want:
        raise ValueError(f"initial_state must be [B, ...] = {list(want)}, got {tuple(initial_state.shape)}")


def _common_dtype(a, b, initial_state):
    dtype = torch.promote_types(a.dtype, b.dtype)
    if initial_state is not None:
        dtype = torch.promote_types(dtype, initial_state.dtype)
    return dtype


def diagonal_scan_reference(a, b, initial_state=None, output_final_state=True):
    """The definition, h_t = a_t * h_{t-1} + b_t, as a plain loop over time.

    a, b: [B, T, ...] (real or complex); initial_state: [B, ...] or None (zeros).
    Returns (h [B, T, ...] = h_1..h_T, h_T or None).
    """
    _check(a, b, initial_state)
    dtype = _common_dtype(a, b, initial_state)
    h = initial_state.to(dtype) if initial_state is not None else b.new_zeros(b.shape[:1] + b.shape[2:], dtype=dtype)
    states = []
    for a_t, b_t in zip(a.unbind(1), b.unbind(1)):  # unbind: one gradient buffer, not one per step
        h = a_t * h + b_t
        states.append(h)
    out = torch.stack(states, 1) if states else b.new_zeros(b.shape, dtype=dtype)
    return out, (h if output_final_state else None)


def _scan_nograd(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor, reverse: bool = False, chunk_size=None):
    """h_t = a_t h_{t-1} + b_t over axis 1 of [B, T, F] (module docstring), no autograd.

    reverse: h_t = a_t h_{t+1} + b_t, from h_T = h0 down to t = 0.
    """
    B, T, F = b.shape
    h = torch.empty_like(b)
    if T == 0:
        return h
    C = min(T, chunk_size or max(1, math.isqrt(T)))
    n = T // C
    lo, hi = (T - n * C, T) if reverse else (0, n * C)  # the chunked part; the loose rest runs one by one
    a4, b4, h4 = (x[:, lo:hi].unflatten(1, (n, C)) for x in (a, b, h))  # views, any strides
    steps = list(range(C - 1, -1, -1) if reverse else range(C))
    first = steps[0]
    # pass 1: each chunk's end value from a zero start, for all chunks at once (small buffers only)
    end = b4[:, :, first].clone()  # [B, n, F]
    for c in steps[1:]:
        end = torch.addcmul(b4[:, :, c], a4[:, :, c], end)
    # carry: the state entering each chunk, moved across chunks by the chunk's product of a
    prod = a4.prod(dim=2)  # [B, n, F]
    starts = torch.empty_like(prod)
    carry = h0
    for i in range(n - 1, -1, -1) if reverse else range(n):
        starts[:, i] = carry
        carry = torch.addcmul(end[:, i], prod[:, i], carry)
    # pass 2: the recurrence inside every chunk from its true start, written once into h
    previous = starts
    for c in steps:
        torch.addcmul(b4[:, :, c], a4[:, :, c], previous, out=h4[:, :, c])
        previous = h4[:, :, c]
    state = carry
    for t in range(lo - 1, -1, -1) if reverse else range(hi, T):
        torch.addcmul(b[:, t], a[:, t], state, out=h[:, t])
        state = h[:, t]
    return h


class _DiagonalScan(torch.autograd.Function):
    """(h [B, T, F], h_T [B, F]) for contiguous a, b [B, T, F] and h0 [B, F]; reverse-scan backward."""

    @staticmethod
    def forward(ctx, a, b, h0, chunk_size, use_native):
        h = native.scan_forward(a, b, h0) if use_native else _scan_nograd(a, b, h0, chunk_size=chunk_size)
        ctx.chunk_size, ctx.use_native = chunk_size, use_native
        ctx.save_for_backward(a, h, h0)
        return h, (h[:, -1].clone() if h.shape[1] else h0.clone())

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_h, grad_final):
        a, h, h0 = ctx.saved_tensors
        B, T, F = h.shape
        grad_h = torch.zeros_like(h) if grad_h is None else grad_h
        grad_final = torch.zeros_like(h0) if grad_final is None else grad_final
        if T == 0:
            return torch.zeros_like(a), torch.zeros_like(h), grad_final, None, None
        if ctx.use_native:
            grad_a, grad_b, grad_h0 = native.scan_backward(
                a, h, h0, grad_h.resolve_conj().contiguous(), grad_final.resolve_conj().contiguous()
            )
            return grad_a, grad_b, grad_h0, None, None
        # lambda_t = dL/dh_t + conj(a_{t+1}) lambda_{t+1}, lambda_T = dL/dh_T (final-state gradient)
        a_next = torch.empty_like(a)
        a_next[:, :-1] = a[:, 1:].conj()
        a_next[:, -1] = 1
        lam = _scan_nograd(a_next, grad_h, grad_final, reverse=True, chunk_size=ctx.chunk_size)
        grad_a = a_next  # reuse the buffer: a fresh large tensor costs page faults, not just bandwidth
        torch.mul(lam[:, 1:], h[:, :-1].conj(), out=grad_a[:, 1:])
        torch.mul(lam[:, 0], h0.conj(), out=grad_a[:, 0])
        grad_h0 = a[:, 0].conj() * lam[:, 0]
        return grad_a, lam, grad_h0, None, None


IMPLS = ("auto", "native", "chunked")


def diagonal_scan(a, b, initial_state=None, output_final_state=True, chunk_size=None, impl="auto"):
    """h_t = a_t * h_{t-1} + b_t, exact, with a reverse-scan backward.

    Same arguments and results as `diagonal_scan_reference`. impl: "native" is the fused compiled
    loop (CPU; `statetrack.ops.native`), "chunked" the two-level PyTorch scan of the module
    docstring (any device; chunk_size defaults to about sqrt(T)), "auto" the native loop where it
    applies (CPU tensors, a C compiler present) and the chunked scan elsewhere.
    Differentiable in a, b and initial_state.
    """
    _check(a, b, initial_state)
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
    dtype = _common_dtype(a, b, initial_state)
    B, T = b.shape[:2]
    state_shape = tuple(b.shape[2:])
    F = math.prod(state_shape)
    # resolve_conj: a lazily conjugated complex view shares memory with its source, and the native
    # loop reads memory, so the conjugation is materialised first
    a3 = a.to(dtype).reshape(B, T, F).resolve_conj().contiguous()
    b3 = b.to(dtype).reshape(B, T, F).resolve_conj().contiguous()
    if initial_state is None:
        h0 = b3.new_zeros(B, F)
    else:
        h0 = initial_state.to(dtype).reshape(B, F).resolve_conj().contiguous()
    use_native = impl != "chunked" and native.supports(a3, b3, h0)
    if impl == "native" and not use_native:
        raise RuntimeError(
            "impl='native' needs CPU tensors of float32/64 or complex64/128 and a C compiler "
            f"(got {a3.device.type}, {dtype}; compiler: {native.compiler() or 'none'}, "
            f"STATETRACK_NATIVE={'on' if native.enabled() else 'off'})"
        )
    h, final = _DiagonalScan.apply(a3, b3, h0, chunk_size, use_native)
    h = h.view((B, T) + state_shape)
    return h, (final.view((B,) + state_shape) if output_final_state else None)
