"""Mamba-3's SISO recurrence (Lahoti et al. 2026): a complex-diagonal state, realised as
data-dependent rotations, with the exponential-trapezoidal discretisation. Layout [B, T, H, D].

Per head, with decay a_t (exp(dt_t A_t), real), step dt_t, trapezoid weight lam_t in [0, 1] and
rotation angles theta_t [R] (2R <= N), the state h_t [P, N] of value channel p and state entry n
pairs its entries (2r, 2r + 1), r < R, into complex numbers z_t[p, r] = h_t[p, 2r] + i h_t[p, 2r + 1];
the other N - 2R entries stay real. Token t's key k_t (the paper's B_t) and query q_t (C_t) pair up
the same way (k^c_t[r] = k_t[2r] + i k_t[2r + 1]), and

    z_t = a_t e^{-i theta_t} z_{t-1} + beta_t e^{-i theta_t} k^c_{t-1} v_{t-1} + gamma_t k^c_t v_t  (rotated pairs)
    h_t = a_t h_{t-1}               + beta_t k_{t-1} v_{t-1}                 + gamma_t k_t v_t    (real entries)
    y_t[p] = sum_r Re(conj(q^c_t[r]) z_t[p, r]) + sum_n q_t[n] h_t[p, n]                          (n >= 2R)

    gamma_t = lam_t dt_t,   beta_t = (1 - lam_t) dt_t a_t

(Lahoti et al. 2026, section 3: the exponential-trapezoidal rule, whose lam_t = 1 is Mamba-2's
exponential-Euler rule, and the complex SSM with transition a_t e^{-i theta_t}). The previous token's
input passes through token t's transition, rotation included. theta = None is the real
recurrence (Mamba-2 with the trapezoid), lam = None the Euler rule (beta = 0).

`mamba3_reference` is that complex loop. `mamba3` is the paper's "RoPE trick": with the cumulative
angle Phi_t = theta_1 + ... + theta_t, the rotated state e^{i Phi_t} z_t obeys a real recurrence
with scalar decay a_t in which the key and the query are rotated by Phi_t (`rotate_pairs`), so it
runs as Mamba-2's chunked scan (`ssd_scan`, heads folded into the batch) with the trapezoid's two
weights of each key summed, lam_s dt_s + (1 - lam_{s+1}) dt_{s+1}, and the second one taken off again
on the diagonal, where token s + 1 has not come yet.

State (both forms): (h [B, H, P, N] in the un-rotated frame above, k_{T-1} [B, H, N], v_{T-1}
[B, H, P]): the trapezoid's pending input, which the next call's first token still weighs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from statetrack.ops.selective import SSD_CHUNK, ssd_scan


def _check(q, k, v, a, dt, lam, theta, initial_state):
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, N], got {tuple(q.shape)}")
    B, T, H, N = q.shape
    if k.shape != q.shape:
        raise ValueError(f"k must be [B, T, H, N] = {[B, T, H, N]}, got {tuple(k.shape)}")
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be [B, T, H, P] = {[B, T, H]} + [P], got {tuple(v.shape)}")
    for name, x in (("a", a), ("dt", dt), ("lam", lam)):
        if x is not None and x.shape != (B, T, H):
            raise ValueError(f"{name} must be [B, T, H] = {[B, T, H]}, got {tuple(x.shape)}")
    if theta is not None and (theta.dim() != 4 or theta.shape[:3] != (B, T, H) or 2 * theta.shape[-1] > N):
        raise ValueError(f"theta must be [B, T, H, R] = {[B, T, H]} + [R] with 2R <= N = {N}, got {tuple(theta.shape)}")
    if initial_state is not None:
        P = v.shape[-1]
        want = ((B, H, P, N), (B, H, N), (B, H, P))
        if not isinstance(initial_state, (tuple, list)) or len(initial_state) != 3:
            raise ValueError(f"initial_state must be (h [B, H, P, N], k [B, H, N], v [B, H, P]), got {initial_state!r}")
        for name, x, shape in zip(("h", "k", "v"), initial_state, want):
            if tuple(x.shape) != shape:
                raise ValueError(f"initial_state's {name} must be {list(shape)}, got {tuple(x.shape)}")


def _zero_state(q, v):
    B, _, H, N = q.shape
    P = v.shape[-1]
    return q.new_zeros(B, H, P, N), q.new_zeros(B, H, N), v.new_zeros(B, H, P)


def _weights(dt, lam):
    """(gamma, beta / a) of every token: lam dt and (1 - lam) dt (Euler: dt and 0)."""
    if lam is None:
        return dt, torch.zeros_like(dt)
    return lam * dt, (1 - lam) * dt


def mamba3_reference(q, k, v, a, dt, lam=None, theta=None, initial_state=None, output_final_state=True):
    """The definition (module docstring): a loop over tokens with the complex state.

    q, k [B, T, H, N]; v [B, T, H, P]; a, dt, lam [B, T, H]; theta [B, T, H, R] or None;
    initial_state (h [B, H, P, N], k [B, H, N], v [B, H, P]) or None (zeros).
    Returns (y [B, T, H, P], (h_T, k_{T-1}, v_{T-1}) or None).
    """
    _check(q, k, v, a, dt, lam, theta, initial_state)
    R = 0 if theta is None else theta.shape[-1]
    h, k_prev, v_prev = _zero_state(q, v) if initial_state is None else initial_state

    def split(x):  # [..., N] -> (complex pairs [..., R], real rest [..., N - 2R])
        return torch.complex(x[..., 0 : 2 * R : 2], x[..., 1 : 2 * R : 2]), x[..., 2 * R :]

    z, r = split(h)  # [B, H, P, R], [B, H, P, N - 2R]
    kc_prev, kr_prev = split(k_prev)
    gamma, beta_over_a = _weights(dt, lam)
    outputs = []
    for t in range(q.shape[1]):
        a_t = a[:, t, :, None, None]  # [B, H, 1, 1]
        turn = (
            torch.ones_like(z[:, :, :1]) if theta is None else torch.polar(torch.ones_like(theta[:, t]), -theta[:, t])
        )
        turn = turn.view(z.shape[0], z.shape[1], 1, R)
        g_t, b_t = gamma[:, t, :, None, None], beta_over_a[:, t, :, None, None] * a_t
        v_t = v[:, t, :, :, None]  # [B, H, P, 1]
        kc, kr = split(k[:, t, :, None, :])
        z = a_t * turn * z + b_t * turn * kc_prev[:, :, None] * v_prev[..., None] + g_t * kc * v_t
        r = a_t * r + b_t * kr_prev[:, :, None] * v_prev[..., None] + g_t * kr * v_t
        qc, qr = split(q[:, t, :, None, :])
        outputs.append((qc.conj() * z).real.sum(-1) + (qr * r).sum(-1))
        kc_prev, kr_prev, v_prev = kc[:, :, 0], kr[:, :, 0], v[:, t]
    B, T, H, _ = q.shape
    y = torch.stack(outputs, 1) if outputs else v.new_zeros(B, 0, H, v.shape[-1])
    if not output_final_state:
        return y, None
    h = torch.cat([torch.stack([z.real, z.imag], -1).flatten(-2), r], -1)
    k_last = torch.cat([torch.stack([kc_prev.real, kc_prev.imag], -1).flatten(-2), kr_prev], -1)
    return y, (h, k_last, v_prev)


def rotate_pairs(x: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """x [..., N] with its pairs (2r, 2r + 1), r < R, turned by the angles phase [..., R] (x_{2r} + i
    x_{2r+1} times e^{i phase_r}); the entries from 2R on unchanged."""
    R = phase.shape[-1]
    x0, x1 = x[..., 0 : 2 * R : 2], x[..., 1 : 2 * R : 2]
    cos, sin = phase.cos(), phase.sin()
    turned = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1).flatten(-2)
    return torch.cat([turned, x[..., 2 * R :]], -1)


def _turns(phase: torch.Tensor, N: int) -> torch.Tensor:
    """e^{i phase} [..., N / 2] (complex) for phase [..., R]: 1 for the pairs from R on."""
    phase = F.pad(phase, (0, N // 2 - phase.shape[-1]))
    return torch.polar(torch.ones_like(phase), phase)


def _turn(x: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
    """`rotate_pairs` for an even N, as one complex product: x [..., N] taken as N / 2 complex numbers."""
    pairs = torch.view_as_complex(x.contiguous().unflatten(-1, (-1, 2)))
    return torch.view_as_real(pairs * turn).flatten(-2)


def _fold_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, T, H, ...] -> [B H, T, ...]: the heads as batch rows of the one-group chunked scan."""
    B, T, H = x.shape[:3]
    return x.transpose(1, 2).reshape(B * H, T, *x.shape[3:])


def mamba3(q, k, v, a, dt, lam=None, theta=None, initial_state=None, output_final_state=True, chunk: int = SSD_CHUNK):
    """Mamba-3's recurrence by the rotations folded into q and k and Mamba-2's chunked scan.

    Same arguments and results as `mamba3_reference`, which it equals up to the order of summation;
    `chunk` is the chunked scan's chunk length.
    """
    _check(q, k, v, a, dt, lam, theta, initial_state)
    B, T, H, N = q.shape
    P = v.shape[-1]
    h0, k_prev, v_prev = _zero_state(q, v) if initial_state is None else initial_state
    if T == 0:
        return v.new_zeros(B, 0, H, P), ((h0, k_prev, v_prev) if output_final_state else None)
    gamma, beta_over_a = _weights(dt, lam)
    k_rot, phase, turn = k, None, None
    if theta is not None:
        # the cumulative angle in float64: at float32 a running sum of thousands of angles drifts
        phase = theta.double().cumsum(1).to(theta.dtype)  # [B, T, H, R]
        if N % 2 == 0:  # one complex product per tensor
            turn = _turns(phase, N)  # [B, T, H, N / 2]
            q, k_rot = _turn(q, turn), _turn(k, turn)
        else:
            q, k_rot = rotate_pairs(q, phase), rotate_pairs(k, phase)
    # key s enters at its own step (gamma_s) and again, through a_{s+1}, at the next (beta_{s+1} / a_{s+1})
    later = F.pad(beta_over_a[:, 1:], (0, 0, 0, 1))  # [B, T, H]
    weight = gamma if lam is None else gamma + later
    if initial_state is not None:  # the previous call's last input, weighed by this call's first step
        h0 = h0 + beta_over_a[:, 0, :, None, None] * v_prev[..., None] * k_prev[:, :, None]
    y, h_last = ssd_scan(
        _fold_heads(weight[..., None] * v)[:, :, None],  # [B H, T, 1, P]
        _fold_heads(a)[..., None],  # [B H, T, 1]
        _fold_heads(k_rot),
        _fold_heads(q),
        None if initial_state is None else h0.reshape(B * H, 1, P, N),
        chunk,
    )
    y = y.view(B, H, T, P).transpose(1, 2)
    if lam is not None:  # on the diagonal the second weight is not there yet (q_t . k_t: the same turn on both)
        y = y - (later * (q * k_rot).sum(-1))[..., None] * v
    if not output_final_state:
        return y, None
    h_last = h_last.view(B, H, P, N)
    if turn is not None:  # back to the un-rotated frame
        h_last = _turn(h_last, turn[:, -1, :, None].conj())
    elif phase is not None:
        h_last = rotate_pairs(h_last, -phase[:, -1, :, None])
    return y, (h_last, k[:, -1].clone(), v[:, -1].clone())  # copies: a view would keep the whole input alive
