"""Kimi Delta Attention (KDA, Kimi Team 2025): the gated delta rule with a decay per key channel,
layout [B, T, H, D].

    S_t = (I - beta_t k_t k_t^T) diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T,    o_t = S_t^T (scale q_t)

with S_t in R^{d_k x d_v} per head and a log-decay g_t [B, T, H, Dk] (g <= 0) per key channel:
Gated DeltaNet's scalar decay (Yang et al. 2025a) made channel-wise, as GLA's (Yang et al. 2024a).
beta_t in (0, 1) keeps the transition's eigenvalues in [0, 1] for keys of unit norm; beta_t in (0, 2)
lets them reach -1 (Grazzi et al. 2025). `scale` defaults to Dk^-1/2, as fla's KDA ops.

`kda` is the chunkwise WY/UT form (Yang et al. 2024b, section 3) with the per-channel decay inside
the chunk. Within a chunk of C steps, with cumulative log-decays gamma_i = sum_{s <= i} g_s [Dk]
from the chunk's start state S:

    E_ij = exp(gamma_i - gamma_j)  (i >= j; 0 above the diagonal)       [C, C, Dk]
    A    = strictly-lower(diag(beta) [sum_d k_id k_jd E_ijd]),  (I + A) [W | U] = diag(beta) [exp(gamma) K | V]
    P    = [sum_d q_id k_jd E_ijd]                                       (diagonal included)
    V'   = U - W S,   O = (exp(gamma) Q) S + P V'
    S'   = diag(exp(gamma_C)) S + (exp(gamma_C - gamma) K)^T V'

While every |gamma| in a chunk stays below `SAFE_SPAN` (a decay of at most 30 nats over a chunk in
float32), the sums over d are one product per chunk, (exp(gamma) K) (exp(-gamma) K)^T, with both
factors finite. Past it, E is formed from differences of cumulative decays, so every exponent is
<= 0 and nothing overflows however fast the decay (fla's chunk kernel uses relative decays for the
same reason); the [C, C, Dk] tensor costs more. The chunk-to-chunk recurrence is the only
sequential step; gradients come from autograd.
"""

from __future__ import annotations

import torch

from statetrack.ops import fla_kernels
from statetrack.ops.delta_chunk import from_chunks, to_chunks
from statetrack.ops.delta_rule import chunk_layout
from statetrack.ops.triangular import unit_lower_inverse

DEFAULT_CHUNK_SIZE = 16  # the [C, C, Dk] decay tensor grows with C; 16 beat 32 and 64 at T = 1024 here
# The largest |cumulative log-decay| inside a chunk for which exp(gamma_i) exp(-gamma_j) is formed as two
# factors (one product per chunk): exp(30) ~ 1e13 keeps float32's factors and their gradients finite.
SAFE_SPAN = {torch.float32: 30.0, torch.float64: 300.0}


def _check(q, k, v, beta, g, initial_state):
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must be [B, T, H, Dk] of equal shape, got {tuple(q.shape)} and {tuple(k.shape)}")
    B, T, H, Dk = q.shape
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be [B, T, H, Dv] = [{B}, {T}, {H}, Dv], got {tuple(v.shape)}")
    if beta.shape != (B, T, H):
        raise ValueError(f"beta must be [B, T, H] = [{B}, {T}, {H}], got {tuple(beta.shape)}")
    if g is None or g.shape != (B, T, H, Dk):
        got = None if g is None else tuple(g.shape)
        raise ValueError(f"g (the log-decay per key channel) must be [B, T, H, Dk] = [{B}, {T}, {H}, {Dk}], got {got}")
    if initial_state is not None and initial_state.shape != (B, H, Dk, v.shape[-1]):
        raise ValueError(
            f"initial_state must be [B, H, Dk, Dv] = [{B}, {H}, {Dk}, {v.shape[-1]}], got {tuple(initial_state.shape)}"
        )


def _scale(scale, Dk: int) -> float:
    if scale is None:
        return Dk**-0.5
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ValueError(f"scale must be a number or None (Dk^-1/2), got {scale!r}")
    return float(scale)


def kda_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = True,
):
    """The definition: a plain loop over time (module docstring, Kimi Team 2025).

    q, k: [B, T, H, Dk]; v: [B, T, H, Dv]; beta: [B, T, H] in (0, 2); g: [B, T, H, Dk] log-decay;
    scale: q's factor (None: Dk^-1/2); initial_state: [B, H, Dk, Dv] or None (zeros).
    Returns (o [B, T, H, Dv], S_T or None).
    """
    _check(q, k, v, beta, g, initial_state)
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    scale = _scale(scale, Dk)
    S = q.new_zeros(B, H, Dk, Dv) if initial_state is None else initial_state
    outputs = []
    # unbind, not q[:, t]: indexing makes autograd write a full-size zero gradient per step (O(T^2))
    for q_t, k_t, v_t, b_t, g_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), beta.unbind(1), g.unbind(1)):
        S = S * g_t.exp()[..., None]  # diag(exp(g_t)) S: row d of S decays by exp(g_t[d])
        # (I - b k k^T) S + b k v^T  =  S + b k (v - S^T k)^T
        v_new = v_t - torch.einsum("bhkv,bhk->bhv", S, k_t)
        S = S + torch.einsum("bhk,bhv->bhkv", k_t * b_t[..., None], v_new)
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q_t) * scale)
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, Dv)
    return o, (S if output_final_state else None)


def kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = True,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
):
    """KDA through the chunkwise WY/UT form (module docstring); same arguments and results as
    `kda_reference`, differentiable in every tensor argument. Padding steps (k = v = q = beta = g = 0)
    are identity transitions, so T need not divide by the chunk; feeding a sequence in pieces with the
    state carried equals one call. On CUDA with fla-core installed, fla's `chunk_kda` computes it
    (`fla_kernels`; chunk_size unused)."""
    _check(q, k, v, beta, g, initial_state)
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    scale = _scale(scale, Dk)
    if T > 0 and fla_kernels.ready(q):
        return fla_kernels.kda(q, k, v, beta, g, scale, initial_state, output_final_state)
    S = q.new_zeros(B, H, Dk, Dv) if initial_state is None else initial_state
    if T == 0:
        return v.new_zeros(B, 0, H, Dv), (S if output_final_state else None)
    n, C = chunk_layout(T, chunk_size)
    qc, kc, vc, gamma = (to_chunks(x, n, C) for x in (q * scale, k, v, g))  # [B, H, n, C, D]
    bc = to_chunks(beta, n, C)[..., None]  # [B, H, n, C, 1]
    gamma = gamma.cumsum(-2)
    decay = gamma.exp()  # exp(gamma_i), <= 1
    if float(gamma.detach().abs().amax()) <= SAFE_SPAN.get(q.dtype, 0.0):
        # E_ijd = exp(gamma_id) exp(-gamma_jd): two factors below exp(SAFE_SPAN), so one product (the fast path)
        KQ = (torch.cat([kc, qc], dim=-2) * decay.repeat(1, 1, 1, 2, 1)) @ (kc * (-gamma).exp()).transpose(-1, -2)
        A, P = (bc * KQ[..., :C, :]).tril(-1), KQ[..., C:, :].tril()  # [B, H, n, C, C]
    else:  # a decay too fast for the factors: E itself, every exponent <= 0
        upper = torch.ones(C, C, dtype=torch.bool, device=q.device).triu(1)[..., None]  # j > i: no look-ahead
        E = (
            (gamma[..., :, None, :] - gamma[..., None, :, :]).masked_fill(upper, -torch.inf).exp()
        )  # [B, H, n, C, C, Dk]
        # rows i of K and Q against K (.) E_i.: one batched product for both
        KQ = torch.einsum("...iad,...ijd->...aij", torch.stack([kc, qc], dim=-2), kc[..., None, :, :] * E)
        A, P = (bc * KQ[..., 0, :, :]).tril(-1), KQ[..., 1, :, :]
    WU = unit_lower_inverse(A) @ torch.cat([bc * decay * kc, bc * vc], dim=-1)
    W, U = WU.split([Dk, Dv], dim=-1)  # [B, H, n, C, Dk], [B, H, n, C, Dv]
    last = gamma[..., -1:, :]  # gamma_C [B, H, n, 1, Dk]
    KdT = (kc * (last - gamma).exp()).transpose(-1, -2)  # [B, H, n, Dk, C]
    M = torch.diag_embed(last.squeeze(-2).exp()) - KdT @ W  # S' = M S + X
    X = KdT @ U
    starts = []
    for i in range(n):
        starts.append(S)
        S = torch.baddbmm(X[:, :, i].flatten(0, 1), M[:, :, i].flatten(0, 1), S.flatten(0, 1)).view(B, H, Dk, Dv)
    S0 = torch.stack(starts, dim=2)  # [B, H, n, Dk, Dv]
    o = (qc * decay) @ S0 + P @ (U - W @ S0)
    return from_chunks(o, T), (S if output_final_state else None)
