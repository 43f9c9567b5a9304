"""Mamba's selective scan (S6; Gu & Dao 2023): discretisation, diagonal recurrence and read-out.

Per batch row, channel e and state n, with inputs u, dt [B, T, E], B_t, C_t [B, T, N] and rates A [E, N]:

    a_t[e, n] = scale exp(-dt_t[e] A[e, n]) - (scale - 1)      (scale 1: eig_range [0,1]; 2: [-1,1],
                                                                 Grazzi et al. 2025)
    h_t[e, n] = a_t[e, n] h_{t-1}[e, n] + dt_t[e] u_t[e] B_t[n],   y_t[e] = sum_n C_t[n] h_t[e, n].

`selective_scan_reference` is the definition, materialised: a and b as [B, T, E, N] tensors,
`diagonal_scan_reference`, the read-out as a product and a sum. The PyTorch form ("torch") is the
same with the fast diagonal scan. The fused form ("native", CPU; `selective_scan.c` through
`native.py`) does it all per (batch row, channel) in one compiled loop and forms no a, b or h
tensor: the forward keeps exp(-dt A) (the costly part of a step; one [B, E, T, N] buffer) and the
state every 64 steps, and the backward reruns each 64-step chunk's recurrence from its checkpoint
in cache and walks it backwards (G_t = dy_t C_t + a_{t+1} G_{t+1}), recomputing a_t rather than
dividing by it, so a_t = 0 and negative a_t are exact. Its float32 exp is a polynomial (about
1 ulp); float64 uses libm.
"""

from __future__ import annotations

import torch

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


def _torch_form(u, dt, A, B_t, C_t, h0, scale):
    a = _transitions(dt, A, scale)
    b = (dt * u)[..., None] * B_t[:, :, None, :]
    h, h_last = diagonal_scan(a, b, h0)
    y = torch.einsum("bten,btn->bte", h, C_t)
    return y, h_last


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
            _kernel("forward", u.dtype)(*map(native._ptr, (dt, A, u, B_t, C_t, state, y)),
                                         *(None if v is None else native._ptr(v) for v in (ckpt, exps)),
                                         scale, Bsz, T, E, N, threads)
        ctx.scale, ctx.threads = scale, threads
        ctx.save_for_backward(u, dt, A, B_t, C_t, ckpt, exps)
        return y, state

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y, grad_final):
        u, dt, A, B_t, C_t, ckpt, exps = ctx.saved_tensors
        Bsz, T, E = u.shape
        N = A.shape[1]
        carry = u.new_zeros(Bsz, E, N) if grad_final is None else grad_final.clone(memory_format=torch.contiguous_format)
        if u.numel() == 0 or N == 0:
            return (torch.zeros_like(u), torch.zeros_like(dt), torch.zeros_like(A), torch.zeros_like(B_t),
                    torch.zeros_like(C_t), carry, None, None)
        grad_y = torch.zeros_like(u) if grad_y is None else grad_y.contiguous()
        threads = ctx.threads
        parts = 1 if Bsz >= threads else threads
        grad_dt, grad_u = torch.empty_like(dt), torch.empty_like(u)
        grad_B, grad_C = u.new_empty(parts, Bsz, T, N), u.new_empty(parts, Bsz, T, N)
        grad_A = A.new_empty(threads, E, N)
        _kernel("backward", u.dtype)(*map(native._ptr, (dt, A, u, B_t, C_t, ckpt, exps, grad_y, carry, grad_dt, grad_u,
                                                         grad_B, grad_C, grad_A)), ctx.scale, Bsz, T, E, N, threads)
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
    use_native = (impl != "torch" and dtype in (torch.float32, torch.float64)
                  and all(v.device.type == "cpu" for v in args) and native.available())
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
