"""IDS4's recurrence (Merrill et al. 2024): a complex diagonal state-space scan whose transition
depends on the input, discretised by zero-order hold (Gu et al. 2022). Per channel c and complex mode n,

    lambda_t[c, n] = lam_re[c, n] + i (A_im[c, n] + phi_t[n]),   a_t = exp(dt_t[c] lambda_t),
    Bbar_t = (a_t - 1) / lambda_t * B[c, n],   h_t = a_t h_{t-1} + Bbar_t u_t[c],
    y_t[c] = 2 Re(sum_n C[c, n] h_t[c, n])       (the conjugate half of the modes implied),

with dt, u [B, T, d], phi [B, T, modes], lam_re, A_im [d, modes] and B, C [d, modes, 2] (real views
of complex tensors). `ids4_scan_reference` is the definition, materialised with autograd ops and
`diagonal_scan_reference`. `ids4_scan` computes the same: on the CPU (float32 or float64, a C
compiler) one compiled pass per (batch row, channel) (`ids4_scan.c` through `native.py`) that forms
no [B, T, d, modes] tensor but a and reruns the recurrence from checkpoints in the backward;
elsewhere the discretisation and the read-out with hand-written backwards around the fast
`diagonal_scan`.
"""

from __future__ import annotations

import torch

from statetrack.ops import native
from statetrack.ops.diagonal import diagonal_scan, diagonal_scan_reference

IMPLS = ("auto", "native", "torch")


def _check(dt, phi, lam_re, A_im, B, C, u, initial_state):
    if u.dim() != 3 or dt.shape != u.shape:
        raise ValueError(f"u and dt must be [B, T, d] of equal shape, got {tuple(u.shape)} and {tuple(dt.shape)}")
    Bsz, T, d = u.shape
    if lam_re.dim() != 2 or lam_re.shape[0] != d or A_im.shape != lam_re.shape:
        raise ValueError(
            f"lam_re and A_im must be [d, modes] with d = {d}, got {tuple(lam_re.shape)} and {tuple(A_im.shape)}"
        )
    n = lam_re.shape[1]
    if tuple(phi.shape) != (Bsz, T, n):
        raise ValueError(f"phi must be [B, T, modes] = {[Bsz, T, n]}, got {tuple(phi.shape)}")
    for name, v in (("B", B), ("C", C)):
        if tuple(v.shape) != (d, n, 2):
            raise ValueError(
                f"{name} must be [d, modes, 2] = {[d, n, 2]} (a complex tensor's real view), got {tuple(v.shape)}"
            )
    if initial_state is not None and tuple(initial_state.shape) != (Bsz, d, n):
        raise ValueError(
            f"initial_state must be [B, d, modes] = {[Bsz, d, n]} (complex), got {tuple(initial_state.shape)}"
        )


def ids4_scan_reference(dt, phi, lam_re, A_im, B, C, u, initial_state=None):
    """The definition (module docstring), materialised: returns (y [B, T, d], h_T [B, d, modes] complex).

    initial_state: [B, d, modes] complex, or None (zeros)."""
    _check(dt, phi, lam_re, A_im, B, C, u, initial_state)
    lam = torch.complex(lam_re.expand(phi.shape[:2] + lam_re.shape), A_im + phi[:, :, None, :])  # [B, T, d, modes]
    a = torch.exp(dt[..., None] * lam)
    b = (a - 1) / lam * torch.view_as_complex(B) * u[..., None]
    h, h_last = diagonal_scan_reference(a, b, initial_state)
    y = 2 * torch.einsum("btdn,dn->btd", h, torch.view_as_complex(C)).real
    return y, h_last


class _ComplexReadOut(torch.autograd.Function):
    """y [B, T, d] = 2 Re(sum_n C h) = sum_n (2 Re C) (Re h) + (-2 Im C) (Im h) for complex h [B, T, d, n]
    and C_ri [d, n, 2] (real view), on the real view of h, a few hundred tokens at a time: one
    reused temporary instead of a fresh [B, T, d, n] one each way."""

    ROWS = 256

    @staticmethod
    def forward(ctx, h, C_ri):
        Bsz, T, d, n = h.shape
        sign = C_ri.new_tensor([2.0, -2.0])
        Cv = (C_ri * sign).view(d, 2 * n)
        hr = torch.view_as_real(h).view(Bsz * T, d, 2 * n)
        y = hr.new_empty(Bsz * T, d)
        for r in range(0, Bsz * T, _ComplexReadOut.ROWS):
            torch.sum(hr[r : r + _ComplexReadOut.ROWS] * Cv, -1, out=y[r : r + _ComplexReadOut.ROWS])
        ctx.save_for_backward(h, Cv, sign)
        return y.view(Bsz, T, d)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        h, Cv, sign = ctx.saved_tensors
        Bsz, T, d, n = h.shape
        g = g.reshape(Bsz * T, d, 1)
        grad_h = torch.view_as_complex((g * Cv).view(Bsz, T, d, n, 2))
        hr = torch.view_as_real(h).view(Bsz * T, d, 2 * n)
        grad_Cv = Cv.new_zeros(d, 2 * n)
        for r in range(0, Bsz * T, _ComplexReadOut.ROWS):
            grad_Cv += (hr[r : r + _ComplexReadOut.ROWS] * g[r : r + _ComplexReadOut.ROWS]).sum(0)
        return grad_h, grad_Cv.view(d, n, 2) * sign


class _InputDependentZOH(torch.autograd.Function):
    """IDS4's (a, b = Bbar u) [B, T, d, modes] complex, with a hand-written backward in complex arithmetic.

    lambda = lam_re + i (A_im + phi_t), a = exp(dt lambda), Bbar = (a - 1) / lambda * B, b = Bbar u.
    Autograd's backward of these ops ran on strided real and imaginary views (unvectorised loops)
    and through complex division; this one is a dozen contiguous complex products. Gradients follow
    torch's convention (dL/dRe + i dL/dIm): for holomorphic w = f(z), grad_z = grad_w conj(f'(z)).
    """

    @staticmethod
    def forward(ctx, dt, phi, lam_re, A_im, B_ri, u):
        # dt, u [B, T, d]; phi [B, T, n]; lam_re, A_im [d, n]; B_ri [d, n, 2] (real view of complex B)
        dt4, u4 = dt[..., None], u[..., None]
        lam_im = phi[:, :, None, :] + A_im  # [B, T, d, n]
        lam = torch.complex(lam_re.expand_as(lam_im), lam_im)
        # exp(dt lambda) as |a| (cos + i sin): torch's complex exp is not vectorised (40x slower)
        mag = torch.exp(lam_re * dt4)
        angle = lam_im.mul_(dt4)
        a = torch.complex(torch.cos(angle).mul_(mag), torch.sin_(angle).mul_(mag))
        del mag, angle, lam_im
        Bc = torch.view_as_complex(B_ri)
        inv = lam.reciprocal()  # 1 / lambda
        P = (a - 1).mul_(inv)  # (a - 1) / lambda
        q = inv.mul_(Bc)  # B / lambda
        B_bar = P * Bc
        b = B_bar * u4
        # the backward multiplies by their conjugates: conjugated once here, in place (a product
        # with a lazily conjugated operand materialises it, a fresh buffer every time)
        ctx.save_for_backward(dt, u, a, lam, q.conj_physical_(), P.conj_physical_(), B_bar)
        return a, b

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_a, grad_b):
        dt, u, a, lam, q_conj, P_conj, B_bar = ctx.saved_tensors
        dt4, u4 = dt[..., None], u[..., None]
        grad_a = torch.zeros_like(a) if grad_a is None else grad_a
        grad_b = torch.zeros_like(a) if grad_b is None else grad_b
        # b = Bbar u: dL/du = Re(sum_n grad_b conj(Bbar)), dL/dBbar = grad_b u =: G
        grad_u = (torch.view_as_real(grad_b) * torch.view_as_real(B_bar)).sum((-1, -2))
        # Bbar = (a - 1) q: dL/da += G conj(q); a = exp(z), z = dt lambda: dL/dz = dL/da conj(a),
        # taken as conj(conj(dL/da) a) on our own buffer (grad_a: the scan's fresh one, nothing else holds it)
        M = (grad_b * q_conj).mul_(u4)  # G conj(q)
        g_z = grad_a.add_(M).conj_physical_().mul_(a).conj_physical_()
        # dL/dq = G conj(a - 1), q = B / lambda: dL/dB = sum_bt G conj(P) (P = (a - 1) / lambda), and
        # dL/dlambda gets dL/dq conj(-B / lambda^2) = -G conj(q) conj(P), plus dL/dz dt
        g_lam = g_z * dt4
        g_lam.sub_(M.mul_(P_conj))
        grad_B = grad_b.mul_(P_conj).mul_(u4).sum((0, 1))
        grad_dt = (torch.view_as_real(g_z) * torch.view_as_real(lam)).sum((-1, -2))  # Re(sum_n dL/dz conj(lambda))
        g_ri = torch.view_as_real(g_lam)
        g_im = g_ri[..., 1]
        return grad_dt, g_im.sum(2), g_ri[..., 0].sum((0, 1)), g_im.sum((0, 1)), torch.view_as_real(grad_B), grad_u


class _IDS4Scan(torch.autograd.Function):
    """IDS4's y [B, T, d] (without the D skip) and last state of `_InputDependentZOH`, the diagonal
    scan and `_ComplexReadOut`, as one compiled pass per (batch row, channel) on the CPU (`ids4_scan.c`):
    no [B, T, d, modes] tensor but a = exp(dt lambda) itself, formed here by the same operations as
    `_InputDependentZOH`; the backward reruns the recurrence from checkpoints. h0 and the last state
    are [B, d, 2, modes]: the real parts, then the imaginary ones (the kernel's layout)."""

    @staticmethod
    def forward(ctx, dt, phi, lam_re, A_im, B_ri, C_ri, u, h0):
        dt4 = dt[..., None]
        mag = torch.exp(lam_re * dt4)
        angle = (phi[:, :, None, :] + A_im).mul_(dt4)
        a = mag.new_empty(mag.shape[:-1] + (2, mag.shape[-1]))
        torch.mul(torch.cos(angle), mag, out=a[..., 0, :])
        torch.mul(torch.sin_(angle), mag, out=a[..., 1, :])
        phi, lam_re, A_im, u = (v.contiguous() for v in (phi, lam_re, A_im, u))
        B, C = (v.transpose(-1, -2).contiguous() for v in (B_ri, C_ri))  # [d, 2, modes]
        keep = any(ctx.needs_input_grad)
        y, h_last, ckpt = native.ids4_forward(a, u, phi, lam_re, A_im, B, C, h0, keep)
        if keep:
            ctx.save_for_backward(a, dt.contiguous(), u, phi, lam_re, A_im, B, C, ckpt)
        return y, h_last

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y, grad_last):
        ddt, du, dphi, dlam_re, dA_im, dB, dC, dh0 = native.ids4_backward(
            *ctx.saved_tensors, grad_y.contiguous(), grad_last
        )
        return ddt, dphi, dlam_re, dA_im, dB.transpose(-1, -2), dC.transpose(-1, -2), du, dh0


def ids4_scan(dt, phi, lam_re, A_im, B, C, u, initial_state=None, impl="auto"):
    """The recurrence of the module docstring: (y [B, T, d], h_T [B, d, modes] complex), the same
    arguments and results as `ids4_scan_reference`.

    impl: "native" is the compiled pass (CPU, float32/64, every tensor of one dtype, a C compiler),
    "torch" the materialised PyTorch form with hand-written backwards (any device), "auto" the
    compiled pass where it applies and the PyTorch form elsewhere. Differentiable in every input.
    """
    _check(dt, phi, lam_re, A_im, B, C, u, initial_state)
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {', '.join(IMPLS)}, got {impl!r}")
    compiled = impl != "torch" and native.supports_real(
        dt, phi, lam_re, A_im, B, C, u, *(() if initial_state is None else (initial_state.real,))
    )
    if impl == "native" and not compiled:
        raise RuntimeError(
            "impl='native' needs CPU tensors of one dtype, float32 or float64, and a C compiler "
            f"(got {u.device.type}, {u.dtype}; compiler: {native.compiler() or 'none'}, "
            f"STATETRACK_NATIVE={'on' if native.enabled() else 'off'})"
        )
    if compiled:
        h0 = (
            torch.stack((initial_state.real, initial_state.imag), -2)
            if initial_state is not None
            else u.new_zeros(u.shape[0], u.shape[2], 2, lam_re.shape[-1])
        )  # [B, d, 2, modes]: the kernel's layout
        y, h_last = _IDS4Scan.apply(dt, phi, lam_re, A_im, B, C, u, h0)
        return y, torch.complex(h_last[..., 0, :], h_last[..., 1, :])
    a, b = _InputDependentZOH.apply(dt, phi, lam_re, A_im, B, u)
    h, h_last = diagonal_scan(a, b, initial_state)
    return _ComplexReadOut.apply(h, C), h_last
