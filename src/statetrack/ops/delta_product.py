"""DeltaProduct_{n_h} (Siems et al. 2025, eq. 4), layout [B, T, H, D].

Each token t performs n_h delta-rule micro-steps with its own (k_{t,j}, v_{t,j}, beta_{t,j}):

    S <- alpha_t S;   for j = 1..n_h:  S <- (I - beta_{t,j} k_{t,j} k_{t,j}^T) S + beta_{t,j} k_{t,j} v_{t,j}^T;
    o_t = S^T q_t

so A(x_t) is a product of n_h generalised Householder matrices. As in fla's gated DeltaProduct, the
micro-steps are interleaved along time: k, v [B, T n_h, H, D] and beta [B, T n_h, H] hold token t's
micro-step j at position t n_h + j; q and the log-gate g stay [B, T, H, .].

The fast form runs the same chunkwise delta rule on the T n_h micro-steps, with the gate on each
token's first micro-step and q read at its last (Siems et al. 2025: DeltaProduct is DeltaNet run on
the T n_h micro-steps, read at each token's last micro-step). Chunks hold whole tokens, and
the output products (Q K^T, P W, P U) are formed for the T read positions only, not for all T n_h
micro-steps.
"""

from __future__ import annotations

import torch

from statetrack.ops import fla_kernels
from statetrack.ops.delta_chunk import DeltaRuleChunk
from statetrack.ops.delta_rule import DEFAULT_CHUNK_SIZE, chunk_layout, delta_rule_chunk


def _check(q, k, v, beta, g, initial_state, num_householder):
    if not isinstance(num_householder, int) or num_householder < 1:
        raise ValueError(f"num_householder must be a positive integer, got {num_householder!r}")
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, Dk], got {tuple(q.shape)}")
    B, T, H, Dk = q.shape
    Tn = T * num_householder
    if k.shape != (B, Tn, H, Dk):
        raise ValueError(f"k must be [B, T*n_h, H, Dk] = [{B}, {Tn}, {H}, {Dk}], got {tuple(k.shape)}")
    if v.dim() != 4 or v.shape[:3] != (B, Tn, H):
        raise ValueError(f"v must be [B, T*n_h, H, Dv] = [{B}, {Tn}, {H}, Dv], got {tuple(v.shape)}")
    if beta.shape != (B, Tn, H):
        raise ValueError(f"beta must be [B, T*n_h, H] = [{B}, {Tn}, {H}], got {tuple(beta.shape)}")
    if g is not None and g.shape != (B, T, H):
        raise ValueError(f"g must be [B, T, H] = [{B}, {T}, {H}], got {tuple(g.shape)}")
    if initial_state is not None and initial_state.shape != (B, H, Dk, v.shape[-1]):
        raise ValueError(
            f"initial_state must be [B, H, Dk, Dv] = [{B}, {H}, {Dk}, {v.shape[-1]}], got {tuple(initial_state.shape)}"
        )


def delta_product_reference(
    q, k, v, beta, g=None, initial_state=None, output_final_state=True, num_householder: int = 2
):
    """The definition: a loop over tokens and, inside, over the n_h Householder micro-steps.

    q [B, T, H, Dk]; k [B, T n_h, H, Dk]; v [B, T n_h, H, Dv]; beta [B, T n_h, H] in (0, 2);
    g [B, T, H] log-gate or None; initial_state [B, H, Dk, Dv] or None.
    Returns (o [B, T, H, Dv], S_T or None).
    """
    _check(q, k, v, beta, g, initial_state, num_householder)
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    n_h = num_householder
    S = q.new_zeros(B, H, Dk, Dv) if initial_state is None else initial_state
    ks, vs, bs = k.unbind(1), v.unbind(1), beta.unbind(1)
    gates = g.exp().unbind(1) if g is not None else [None] * T
    outputs = []
    for t, (q_t, a_t) in enumerate(zip(q.unbind(1), gates)):
        if a_t is not None:
            S = S * a_t[..., None, None]
        for j in range(t * n_h, (t + 1) * n_h):
            # (I - b k k^T) S + b k v^T  =  S + b k (v - S^T k)^T
            v_new = vs[j] - torch.einsum("bhkv,bhk->bhv", S, ks[j])
            S = S + torch.einsum("bhk,bhv->bhkv", ks[j] * bs[j][..., None], v_new)
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q_t))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, Dv)
    return o, (S if output_final_state else None)


def delta_product(
    q,
    k,
    v,
    beta,
    g=None,
    initial_state=None,
    output_final_state=True,
    num_householder: int = 2,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
):
    """DeltaProduct_{n_h} through the chunkwise delta rule on the interleaved micro-steps.

    Same arguments and results as `delta_product_reference`; chunk_size counts micro-steps. On CUDA
    with fla-core installed, fla's gated delta rule computes it on the micro-steps (`fla_kernels`).
    """
    _check(q, k, v, beta, g, initial_state, num_householder)
    B, T, H, Dk = q.shape
    n_h = num_householder
    if T > 0 and fla_kernels.ready(q):
        return fla_kernels.delta_product(q, k, v, beta, g, initial_state, output_final_state, n_h)
    if n_h == 1:
        return delta_rule_chunk(q, k, v, beta, g, initial_state, output_final_state, chunk_size)
    S0 = q.new_zeros(B, H, Dk, v.shape[-1]) if initial_state is None else initial_state
    if T == 0:
        return v.new_zeros(B, 0, H, v.shape[-1]), (S0 if output_final_state else None)
    # chunks hold whole tokens: n chunks of Cq tokens = Cq n_h micro-steps, q read at each token's last
    n, Cq = chunk_layout(T, max(1, chunk_size // n_h))
    g_micro = None
    if g is not None:  # the gate on each token's first micro-step, none on the others
        g_micro = torch.cat([g.unsqueeze(2), g.new_zeros(B, T, n_h - 1, H)], dim=2).reshape(B, T * n_h, H)
    o, final = DeltaRuleChunk.apply(q, k, v, beta, g_micro, S0, n, Cq * n_h, n_h)
    return o, (final if output_final_state else None)
