"""The diagonal-plus-low-rank (DPLR) delta rule of RWKV-7 (Peng et al. 2025), layout [B, T, H, D].

    S_t = (diag(exp(gk_t)) + b_t a_t^T) S_{t-1} + k_t v_t^T,    o_t = scale S_t^T q_t

with S_t in R^{d_k x d_v} per head: fla's generalized delta rule (`chunk_dplr_delta_rule`), whose
state is the transpose of RWKV's (Peng et al. 2025 write S_t = S_{t-1} (diag(w_t) + a_t b_t^T) +
v_t k_t^T, o_t = S_t r_t). gk_t <= 0 is the log-decay per key channel. RWKV-7 takes a = -kappa,
b = kappa * iclr (kappa the unit removal key, iclr its in-context learning rate), so the low-rank
term is the delta rule's removal along kappa.

`dplr` is the chunkwise (WY-style) form. Within a chunk of C steps, with cumulative log-decay
gamma_i = gk_1 + ... + gk_i (per channel) and Gam_i = exp(gamma_i), the removal read-outs
u_i = a_i^T S_{i-1} [1, Dv] solve a unit lower-triangular system:

    At = diag(Gam_{i-1}) a,  Qt = diag(Gam_i) q,  Kh = diag(1 / Gam_j) k,  Bh = diag(1 / Gam_j) b
    (I - strictly-lower(At Bh^T)) [W | U0] = [At | strictly-lower(At Kh^T) V]
    U  = U0 + W S                                                     (u_i for the start state S)
    O  = (Qt + lower(Qt Bh^T) W) S + lower(Qt Kh^T) V + lower(Qt Bh^T) U0
    S' = (diag(Gam_C) + Bb^T W) S + Bb^T U0 + Kb^T V,   Bb, Kb = diag(Gam_C) Bh, Kh

so all but the chunk-to-chunk recurrence S' = M S + N (a dense D_k transition per chunk) is batched
over every chunk. The decay factors are taken about the chunk's midpoint gamma_C / 2, so none of
them exceeds exp(|gamma_C| / 2): exact while a chunk's total log-decay stays above about -170 in
float32 (RWKV-7's decay, >= -0.61 per step, gives at most 10 over 16 steps). Gradients by autograd.
"""

from __future__ import annotations

import torch

from statetrack.ops import fla_kernels
from statetrack.ops.delta_chunk import from_chunks, to_chunks
from statetrack.ops.delta_rule import chunk_layout
from statetrack.ops.triangular import unit_lower_inverse

DEFAULT_CHUNK_SIZE = 16


def _interaction_mask(C: int, device) -> torch.Tensor:
    """[2C, C], True where an entry of the interactions (At; Qt) X^T (X = Bh or Kh) is dropped: the a
    rows see strictly earlier steps, the q rows their own step too."""
    i, j = torch.arange(2 * C, device=device)[:, None], torch.arange(C, device=device)[None, :]
    return (j > i % C) | ((j == i) & (i < C))


def _check(q, k, v, a, b, gk, initial_state):
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, Dk], got {tuple(q.shape)}")
    B, T, H, Dk = q.shape
    for name, x in (("k", k), ("a", a), ("b", b), ("gk", gk)):
        if x.shape != q.shape:
            raise ValueError(f"{name} must be [B, T, H, Dk] = [{B}, {T}, {H}, {Dk}] as q, got {tuple(x.shape)}")
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be [B, T, H, Dv] = [{B}, {T}, {H}, Dv], got {tuple(v.shape)}")
    if initial_state is not None and initial_state.shape != (B, H, Dk, v.shape[-1]):
        raise ValueError(
            f"initial_state must be [B, H, Dk, Dv] = [{B}, {H}, {Dk}, {v.shape[-1]}], got {tuple(initial_state.shape)}"
        )


def dplr_reference(q, k, v, a, b, gk, scale=None, initial_state=None, output_final_state=True):
    """The definition: a plain loop over time.

    q, k, a, b: [B, T, H, Dk]; gk: [B, T, H, Dk] log-decay (<= 0); v: [B, T, H, Dv]; scale: the
    read-out's factor (None: Dk^-0.5, as fla); initial_state: [B, H, Dk, Dv] or None (zeros).
    Returns (o [B, T, H, Dv], S_T or None).
    """
    _check(q, k, v, a, b, gk, initial_state)
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    scale = Dk**-0.5 if scale is None else scale
    S = q.new_zeros(B, H, Dk, Dv) if initial_state is None else initial_state
    outputs = []
    # unbind, not q[:, t]: indexing makes autograd write a full-size zero gradient per step (O(T^2))
    for q_t, k_t, v_t, a_t, b_t, g_t in zip(*(x.unbind(1) for x in (q, k, v, a, b, gk))):
        removal = torch.einsum("bhk,bhkv->bhv", a_t, S)  # a_t^T S_{t-1}
        S = g_t.exp()[..., None] * S + b_t[..., None] * removal[..., None, :] + k_t[..., None] * v_t[..., None, :]
        outputs.append(scale * torch.einsum("bhkv,bhk->bhv", S, q_t))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, Dv)
    return o, (S if output_final_state else None)


def dplr(q, k, v, a, b, gk, scale=None, initial_state=None, output_final_state=True, chunk_size=DEFAULT_CHUNK_SIZE):
    """The DPLR delta rule through the chunkwise form (module docstring); same contract as `dplr_reference`.

    Padding steps (q = k = v = a = b = gk = 0) are identity transitions, so T need not divide by the
    chunk. Differentiable in every tensor argument; feeding a sequence in pieces with the state
    carried equals one call. On CUDA with fla-core installed, fla's `chunk_dplr_delta_rule` computes it
    (`fla_kernels`; chunk_size unused).
    """
    _check(q, k, v, a, b, gk, initial_state)
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    scale = Dk**-0.5 if scale is None else scale
    if T > 0 and fla_kernels.ready(q):
        return fla_kernels.dplr(q, k, v, a, b, gk, scale, initial_state, output_final_state)
    S = q.new_zeros(B, H, Dk, Dv) if initial_state is None else initial_state
    if T == 0:
        return v.new_zeros(B, 0, H, Dv), (S if output_final_state else None)
    n, C = chunk_layout(T, chunk_size)
    # [B H n, C, D]: 3-d products (a 5-d matmul measured twice the time of the same bmm)
    q, k, v, a, b, gk = (to_chunks(x, n, C).flatten(0, 2) for x in (q * scale, k, v, a, b, gk))
    gamma = gk.cumsum(-2)
    centre = gamma[:, -1:] / 2  # [B H n, 1, Dk]
    outer = centre.exp()  # exp(gamma_C / 2): undoes the centring
    # centred factors: every product below pairs one exp(gamma_i - centre) with one exp(centre - gamma_j)
    Qc, Ac = q * (gamma - centre).exp(), a * (gamma - gk - centre).exp()
    inverse = (centre - gamma).exp()
    rows = torch.cat([Ac, Qc], -2)  # (At; Qt) [.., 2C, Dk]: two products give the four C x C interactions
    mask = _interaction_mask(C, q.device)
    A_ab, A_qb = (rows @ (b * inverse).transpose(-1, -2)).masked_fill(mask, 0).split(C, -2)
    # (strictly-lower(At Kh^T) V; lower(Qt Kh^T) V)
    Av_a, Av_q = ((rows @ (k * inverse).transpose(-1, -2)).masked_fill(mask, 0) @ v).split(C, -2)
    WU = unit_lower_inverse(-A_ab) @ torch.cat([Ac * outer, Av_a], -1)  # [W | U0]  [.., C, Dk + Dv]
    Bb = (b * inverse * outer).transpose(-1, -2)  # diag(Gam_C / Gam_j) b, [.., Dk, C]
    BW, BU = (Bb @ WU).split([Dk, Dv], -1)
    M = BW + torch.diag_embed(outer.squeeze(-2).square())  # [B H n, Dk, Dk]
    N = BU + (k * inverse * outer).transpose(-1, -2) @ v  # [B H n, Dk, Dv]
    starts, S = [], S.reshape(B * H, Dk, Dv)
    for M_c, N_c in zip(M.unflatten(0, (B * H, n)).unbind(1), N.unflatten(0, (B * H, n)).unbind(1)):
        starts.append(S)  # the only sequential step: S <- M S + N per chunk
        S = torch.baddbmm(N_c, M_c, S)
    S_n = torch.stack(starts, 1).flatten(0, 1)  # [B H n, Dk, Dv], the state entering each chunk
    P, R = (A_qb @ WU).split([Dk, Dv], -1)  # lower(Qt Bh^T) W, lower(Qt Bh^T) U0
    o = ((Qc * outer + P) @ S_n + R + Av_q).view(B, H, n, C, Dv)
    S = S.view(B, H, Dk, Dv)
    return from_chunks(o, T), (S if output_final_state else None)
