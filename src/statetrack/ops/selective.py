"""Mamba's selective scan (S6; Gu & Dao 2023): discretisation, diagonal recurrence and read-out;
and Mamba-2's scan in its chunked state-space dual form (Dao & Gu 2024).

Per batch row, channel e and state n, with inputs u, dt [B, T, E], B_t, C_t [B, T, N] and rates A [E, N]:

    a_t[e, n] = scale exp(-dt_t[e] A[e, n]) - (scale - 1)      (scale 1: eig_range [0,1]; 2: [-1,1],
                                                                 Grazzi et al. 2025)
    h_t[e, n] = a_t[e, n] h_{t-1}[e, n] + dt_t[e] u_t[e] B_t[n],   y_t[e] = sum_n C_t[n] h_t[e, n].

`selective_scan_reference` is the definition, materialised: a and b as [B, T, E, N] tensors,
`diagonal_scan_reference`, the read-out as a product and a sum. The PyTorch form ("torch") is the
same with the fast diagonal scan, and the discretisation and read-out as autograd nodes with
hand-written backwards (`_SelectiveInputs`, `_ReadOut`). The fused form ("native", CPU; `selective_scan.c` through
`native.py`) does it all per (batch row, channel) in one compiled loop and forms no a, b or h
tensor: the forward keeps exp(-dt A) (the costly part of a step; one [B, E, T, N] buffer) and the
state every 64 steps, and the backward reruns each 64-step chunk's recurrence from its checkpoint
in cache and walks it backwards (G_t = dy_t C_t + a_{t+1} G_{t+1}), recomputing a_t rather than
dividing by it, so a_t = 0 and negative a_t are exact. Its float32 exp is a polynomial (about
1 ulp); float64 uses libm.

Mamba-2 has one scalar decay per head and a matrix state per head, H_t = a_t H_{t-1} + xdt_t B_t^T,
y_t = H_t C_t (xdt = dt x). `ssd_scan_reference` materialises it as a diagonal scan over
[B, T, H, P, N]; `ssd_scan` computes it in chunks, as matrix products inside a chunk and a diagonal
scan across chunks: the same function, a different order of summation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from statetrack.ops import native
from statetrack.ops.diagonal import diagonal_scan, diagonal_scan_reference

IMPLS = ("auto", "native", "torch")
CHUNK = 64  # CHUNK in selective_scan.c: steps between the forward's checkpoints


def _check(u, dt, A, B_t, C_t, initial_state):
    if u.dim() != 3 or dt.shape != u.shape:
        raise ValueError(f"u and dt must be [B, T, E] of equal shape, got {tuple(u.shape)} and {tuple(dt.shape)}")
    Bsz, T, E = u.shape
    if A.dim() != 2 or A.shape[0] != E:
        raise ValueError(f"A must be [E, N] with E = {E}, got {tuple(A.shape)}")
    N = A.shape[1]
    for name, v in (("B_t", B_t), ("C_t", C_t)):
        if tuple(v.shape) != (Bsz, T, N):
            raise ValueError(f"{name} must be [B, T, N] = {[Bsz, T, N]}, got {tuple(v.shape)}")
    if initial_state is not None and tuple(initial_state.shape) != (Bsz, E, N):
        raise ValueError(f"initial_state must be [B, E, N] = {[Bsz, E, N]}, got {tuple(initial_state.shape)}")


def _transitions(dt, A, scale):
    a = torch.exp(dt[..., None] * -A)  # [B, T, E, N]
    return a if scale == 1 else scale * a - (scale - 1)


def selective_scan_reference(u, dt, A, B_t, C_t, initial_state=None, scale=1.0, output_final_state=True):
    """The definition (module docstring), materialised: returns (y [B, T, E], h_T [B, E, N] or None).

    u, dt [B, T, E]; A [E, N]; B_t, C_t [B, T, N]; initial_state [B, E, N] or None (zeros)."""
    _check(u, dt, A, B_t, C_t, initial_state)
    a = _transitions(dt, A, scale)
    b = (dt * u)[..., None] * B_t[:, :, None, :]
    h, h_last = diagonal_scan_reference(a, b, initial_state)
    y = (h * C_t[:, :, None, :]).sum(-1)
    return y, (h_last if output_final_state else None)


class _SelectiveInputs(torch.autograd.Function):
    """Mamba's (a, b) [B, T, E, N] of the selective scan: a = exp(-dt A) (or 2 exp(-dt A) - 1 for
    eig_range [-1,1]) and b = (dt u) B_t, for rates A [E, N]. The backward is written out so that its
    contractions over N, E and (B, T) are products of well-shaped matrices and its [B, T, E, N]
    work happens in place in the incoming gradient: autograd's form allocated a fresh tensor of that
    size per step of the chain and ran its contractions as matrix-vector products."""

    @staticmethod
    def forward(ctx, dt, A, u, B_t, scale):
        a = (dt[..., None] * -A).exp_()  # [B, T, E, N]
        if scale != 1:
            a.mul_(scale).sub_(scale - 1)
        xdt = dt * u  # [B, T, E]
        b = xdt[..., None] * B_t[:, :, None, :]
        ctx.scale = scale
        ctx.save_for_backward(dt, A, u, B_t, xdt, a)
        return a, b

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_a, grad_b):
        dt, A, u, B_t, xdt, a = ctx.saved_tensors
        Bsz, T, E, N = a.shape
        BT = Bsz * T
        if grad_b is None:
            grad_xdt, grad_B = torch.zeros_like(xdt), torch.zeros_like(B_t)
        else:
            gb = grad_b.reshape(BT, E, N)
            grad_xdt = torch.bmm(B_t.reshape(BT, 1, N), gb.transpose(1, 2)).view(Bsz, T, E)  # sum_n grad_b B_t
            grad_B = torch.bmm(xdt.reshape(BT, 1, E), gb).view(Bsz, T, N)  # sum_e grad_b (dt u)
        grad_dt, grad_u = grad_xdt * u, grad_xdt * dt
        grad_A = torch.zeros_like(A)
        if grad_a is not None:
            # d a / d(-dt A) = exp(-dt A) = (a + scale - 1) / scale, times the scale: a + scale - 1.
            # grad_a is the scan's own fresh buffer (nothing else holds it): worked on in place.
            g = grad_a.contiguous()
            if ctx.scale == 1:
                g.mul_(a)
            else:
                g.addcmul_(g, a, value=1.0 / (ctx.scale - 1)).mul_(ctx.scale - 1)  # g (a + scale - 1)
            g = g.view(BT, E, N)
            # sum_bt g dt (the gradient in -A), a few hundred tokens at a time: one temporary, reused
            grad_minus_A = A.new_zeros(E, N)
            dt3 = dt.reshape(BT, E, 1)
            for r in range(0, BT, 256):
                grad_minus_A += (g[r : r + 256] * dt3[r : r + 256]).sum(0)
            grad_A = -grad_minus_A
            grad_dt = grad_dt - g.mul_(A).sum(-1).view(Bsz, T, E)
        return grad_dt, grad_A, grad_u, grad_B, None


class _ReadOut(torch.autograd.Function):
    """y [B, T, E] = sum_n h [B, T, E, N] C_t [B, T, N], as products of [1, N] x [N, E] per token."""

    @staticmethod
    def forward(ctx, h, C_t):
        Bsz, T, E, N = h.shape
        ctx.save_for_backward(h, C_t)
        return torch.bmm(C_t.reshape(Bsz * T, 1, N), h.reshape(Bsz * T, E, N).transpose(1, 2)).view(Bsz, T, E)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        h, C_t = ctx.saved_tensors
        Bsz, T, E, N = h.shape
        grad_h = g[..., None] * C_t[:, :, None, :]
        grad_C = torch.bmm(g.reshape(Bsz * T, 1, E), h.reshape(Bsz * T, E, N)).view(Bsz, T, N)
        return grad_h, grad_C


def _torch_form(u, dt, A, B_t, C_t, h0, scale):
    a, b = _SelectiveInputs.apply(dt, A, u, B_t, scale)  # [B, T, E, N]
    h, h_last = diagonal_scan(a, b, h0)
    return _ReadOut.apply(h, C_t), h_last


def _kernel(direction, dtype):
    return getattr(native.load(), f"selective_scan_{native.DTYPES[dtype]}_{direction}")


class _SelectiveScan(torch.autograd.Function):
    """(y [B, T, E], h_T [B, E, N]) by the fused loop, for contiguous CPU tensors of one dtype."""

    @staticmethod
    def forward(ctx, u, dt, A, B_t, C_t, h0, scale, keep):
        Bsz, T, E = u.shape
        N = A.shape[1]
        state = h0.clone()
        y = u.new_zeros(Bsz, T, E) if N == 0 else torch.empty_like(u)
        ckpt = u.new_empty(Bsz, E, -(-T // CHUNK), N) if keep else None
        exps = u.new_empty(Bsz, E, T, N) if keep else None
        threads = native.threads(u.numel() * N)
        if y.numel() and N:
            _kernel("forward", u.dtype)(
                *map(native._ptr, (dt, A, u, B_t, C_t, state, y)),
                *(None if v is None else native._ptr(v) for v in (ckpt, exps)),
                scale,
                Bsz,
                T,
                E,
                N,
                threads,
            )
        ctx.scale, ctx.threads = scale, threads
        ctx.save_for_backward(u, dt, A, B_t, C_t, ckpt, exps)
        return y, state

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y, grad_final):
        u, dt, A, B_t, C_t, ckpt, exps = ctx.saved_tensors
        Bsz, T, E = u.shape
        N = A.shape[1]
        carry = (
            u.new_zeros(Bsz, E, N) if grad_final is None else grad_final.clone(memory_format=torch.contiguous_format)
        )
        if u.numel() == 0 or N == 0:
            return (
                torch.zeros_like(u),
                torch.zeros_like(dt),
                torch.zeros_like(A),
                torch.zeros_like(B_t),
                torch.zeros_like(C_t),
                carry,
                None,
                None,
            )
        grad_y = torch.zeros_like(u) if grad_y is None else grad_y.contiguous()
        threads = ctx.threads
        parts = 1 if Bsz >= threads else threads
        grad_dt, grad_u = torch.empty_like(dt), torch.empty_like(u)
        grad_B, grad_C = u.new_empty(parts, Bsz, T, N), u.new_empty(parts, Bsz, T, N)
        grad_A = A.new_empty(threads, E, N)
        _kernel("backward", u.dtype)(
            *map(native._ptr, (dt, A, u, B_t, C_t, ckpt, exps, grad_y, carry, grad_dt, grad_u, grad_B, grad_C, grad_A)),
            ctx.scale,
            Bsz,
            T,
            E,
            N,
            threads,
        )
        grad_B, grad_C = (g[0] if parts == 1 else g.sum(0) for g in (grad_B, grad_C))
        return grad_u, grad_dt, grad_A.sum(0), grad_B, grad_C, carry, None, None


def native_applies(*tensors: torch.Tensor) -> bool:
    """True when the fused loop can take these tensors (CPU, float32 or float64, one dtype, a C
    compiler, STATETRACK_NATIVE not off)."""
    return native.supports_real(*tensors)


def selective_scan(u, dt, A, B_t, C_t, initial_state=None, scale=1.0, output_final_state=True, impl="auto"):
    """The selective scan of the module docstring: (y [B, T, E], h_T [B, E, N] or None).

    Same arguments and results as `selective_scan_reference`. impl: "native" is the fused compiled
    loop (CPU, float32/64), "torch" the materialised PyTorch form with the fast `diagonal_scan`
    (any device), "auto" the native loop where it applies and the PyTorch form elsewhere.
    Differentiable in u, dt, A, B_t, C_t and initial_state.
    """
    _check(u, dt, A, B_t, C_t, initial_state)
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    args = [u, dt, A, B_t, C_t] + ([] if initial_state is None else [initial_state])
    dtype = args[0].dtype
    for v in args[1:]:
        dtype = torch.promote_types(dtype, v.dtype)
    use_native = (
        impl != "torch"
        and dtype in (torch.float32, torch.float64)
        and all(v.device.type == "cpu" for v in args)
        and native.available()
    )
    if impl == "native" and not use_native:
        raise RuntimeError(
            "impl='native' needs CPU tensors of float32/64 and a C compiler "
            f"(got {u.device.type}, {dtype}; compiler: {native.compiler() or 'none'}, "
            f"STATETRACK_NATIVE={'on' if native.enabled() else 'off'})"
        )
    if not use_native:
        y, h_last = _torch_form(u, dt, A, B_t, C_t, initial_state, scale)
        return y, (h_last if output_final_state else None)
    Bsz, _, E = u.shape
    u, dt, A, B_t, C_t = (v.to(dtype).contiguous() for v in (u, dt, A, B_t, C_t))
    h0 = u.new_zeros(Bsz, E, A.shape[1]) if initial_state is None else initial_state.to(dtype).contiguous()
    keep = torch.is_grad_enabled() and any(v.requires_grad for v in args)
    y, h_last = _SelectiveScan.apply(u, dt, A, B_t, C_t, h0, float(scale), keep)
    return y, (h_last if output_final_state else None)


# ---- Mamba-2: one scalar decay per head, the chunked (state-space dual) form ----------------------
SSD_CHUNK = 16  # Mamba-2's chunk length: the in-chunk form costs O(Q) per token, the chunk states O(P N / Q)


def _check_ssd(xdt, a, B_t, C_t, initial_state):
    if xdt.dim() != 4:
        raise ValueError(f"xdt must be [B, T, H, P], got {tuple(xdt.shape)}")
    Bsz, T, H, P = xdt.shape
    if tuple(a.shape) != (Bsz, T, H):
        raise ValueError(f"a must be [B, T, H] = {[Bsz, T, H]}, got {tuple(a.shape)}")
    if B_t.dim() != 3 or tuple(B_t.shape[:2]) != (Bsz, T) or C_t.shape != B_t.shape:
        raise ValueError(
            f"B_t and C_t must be [B, T, N] of equal shape with B, T = {Bsz}, {T}, "
            f"got {tuple(B_t.shape)} and {tuple(C_t.shape)}"
        )
    N = B_t.shape[-1]
    if initial_state is not None and tuple(initial_state.shape) != (Bsz, H, P, N):
        raise ValueError(f"initial_state must be [B, H, P, N] = {[Bsz, H, P, N]}, got {tuple(initial_state.shape)}")


def ssd_scan_reference(xdt, a, B_t, C_t, initial_state=None):
    """Mamba-2's recurrence (Dao & Gu 2024), H_t = a_t H_{t-1} + xdt_t B_t^T and y_t = H_t C_t per
    head, materialised: b [B, T, H, P, N], `diagonal_scan_reference`, the read-out as a sum.

    xdt [B, T, H, P], a [B, T, H], B_t and C_t [B, T, N] (one group), initial_state [B, H, P, N] or
    None (zeros). Returns (y [B, T, H, P], H_T [B, H, P, N])."""
    _check_ssd(xdt, a, B_t, C_t, initial_state)
    b = xdt[..., None] * B_t[:, :, None, None, :]  # [B, T, H, P, N]
    h, h_last = diagonal_scan_reference(a[..., None, None].expand_as(b), b, initial_state)
    return torch.einsum("bthpn,btn->bthp", h, C_t), h_last


def _chunk_decays(a: torch.Tensor):
    """For a [..., Q], the decays of the steps of a chunk: (L [..., Q, Q], cum [..., Q]) with
    L[i, j] = a_{j+1} ... a_i for j <= i (1 on the diagonal), 0 above it, and cum[i] = a_0 ... a_i.
    Running products, never quotients of them, so zero and negative decays are exact."""
    Q = a.shape[-1]
    below = torch.ones(Q, Q, dtype=torch.bool, device=a.device).tril(-1)
    L = torch.where(below, a[..., :, None], torch.ones((), dtype=a.dtype, device=a.device)).cumprod(-2)
    # L[i, j] is now the product of a_r over j < r <= i, and 1 for i <= j: keep i >= j
    return L.masked_fill(below.T, 0), a.cumprod(-1)


def ssd_scan(
    xdt: torch.Tensor, a: torch.Tensor, B_t: torch.Tensor, C_t: torch.Tensor, initial_state=None, chunk: int = SSD_CHUNK
):
    """Mamba-2's scan, H_t = a_t H_{t-1} + xdt_t B_t^T and y_t = H_t C_t per head, in chunks (Dao & Gu 2024).

    Inside a chunk of Q steps the output is a masked, decayed product of C and B (matrix products,
    no [B, T, H, P, N] tensor); the state crosses chunks through the diagonal scan. The same
    arguments and results as `ssd_scan_reference`, which it equals up to the order of summation.
    """
    _check_ssd(xdt, a, B_t, C_t, initial_state)
    h0 = initial_state
    Bsz, T, H, P = xdt.shape
    N = B_t.shape[-1]
    if T == 0:
        return xdt.new_zeros(Bsz, 0, H, P), (h0.clone() if h0 is not None else xdt.new_zeros(Bsz, H, P, N))
    Q = max(1, min(T, chunk))
    K = -(-T // Q)
    pad = K * Q - T
    if pad:  # steps with a = 1 and no input leave the state as it is
        xdt, B_t, C_t = (F.pad(v, (0, 0) * (v.dim() - 2) + (0, pad)) for v in (xdt, B_t, C_t))
        a = F.pad(a, (0, 0, 0, pad), value=1.0)
    X = xdt.view(Bsz, K, Q, H, P).transpose(2, 3)  # [B, K, H, Q, P]
    Bc, Cc = B_t.view(Bsz, K, Q, N), C_t.view(Bsz, K, Q, N)
    L, cum = _chunk_decays(a.view(Bsz, K, Q, H).transpose(2, 3))  # [B, K, H, Q, Q], [B, K, H, Q]
    scores = Cc @ Bc.transpose(-1, -2)  # [B, K, Q, Q]: C_i . B_j
    y = (scores[:, :, None] * L) @ X  # [B, K, H, Q, P]: the in-chunk part
    # each chunk's own contribution to the state at its end: sum_j L[Q-1, j] xdt_j B_j^T
    ends = (X * L[..., -1, :, None]).transpose(-1, -2) @ Bc[:, :, None]  # [B, K, H, P, N]
    decay = cum[..., -1]  # [B, K, H]: the chunk's product of a
    if K > 1:
        starts, _ = diagonal_scan(decay[:, :-1, :, None, None].expand(-1, -1, -1, P, N), ends[:, :-1], h0)
        if h0 is not None:
            starts = torch.cat([h0[:, None], starts], 1)
        else:
            starts = F.pad(starts, (0, 0) * 3 + (1, 0))
    else:
        starts = h0[:, None] if h0 is not None else None
    if starts is None:
        h_last = ends[:, -1]
    else:  # the state entering each chunk, decayed to each step and read out
        y = y + (Cc[:, :, None] @ starts.transpose(-1, -2)) * cum[..., None]
        h_last = ends[:, -1] + decay[:, -1, :, None, None] * starts[:, -1]
    y = y.transpose(2, 3).reshape(Bsz, K * Q, H, P)
    return (y[:, :T] if pad else y), h_last
