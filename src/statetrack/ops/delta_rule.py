"""The delta rule (DeltaNet, Schlag et al. 2021; Yang et al. 2024b), layout [B, T, H, D].

    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,    o_t = S_t^T q_t

with S_t in R^{d_k x d_v} per head. beta_t in (0, 1) keeps the transition's eigenvalues in [0, 1];
beta_t in (0, 2) extends them to (-1, 1] (reflections, Grazzi et al. 2025). The optional gate alpha_t =
exp(g_t) gives Gated DeltaNet (Yang et al. 2025a). Keys are expected L2-normalised (the layer does it).

`delta_rule` is the chunkwise WY/UT form of the delta rule (Yang et al. 2024b, "Parallelizing linear
transformers with the delta rule over sequence length", section 3; gated form as in Gated DeltaNet,
Yang et al. 2025a, section 3.3). Within a chunk of C steps with cumulative log-gate gamma_i and
decay Gamma_i = exp(gamma_i):

    A   = strictly-lower(diag(beta) (Gamma_i / Gamma_j) K K^T),
          (I + A) [W | U] = [diag(beta Gamma) K | diag(beta) V]
    P   = lower(Q K^T (.) Gamma_i / Gamma_j)                          (diagonal included)
    O   = (diag(Gamma) Q - P W) S + P U
    S' = (Gamma_C I - K~^T W) S + K~^T U,                            K~ = diag(Gamma_C / Gamma) K

so everything but the last line is batched over all chunks, and the chunk-to-chunk recurrence is a
dense transition of size D_k (one fused product per chunk). The backward is written by hand
(`delta_chunk.py`): the same recurrence in reverse, then batched products.
"""

from __future__ import annotations

import math

import torch

from statetrack.ops import fla_kernels
from statetrack.ops.delta_chunk import DeltaRuleChunk

DEFAULT_CHUNK_SIZE = 32  # timed against 16 and 64 for heads of 16..32 rows: 16..32 beat 64 at every T


def _check(q, k, v, beta, g, initial_state):
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must be [B, T, H, Dk] of equal shape, got {tuple(q.shape)} and {tuple(k.shape)}")
    B, T, H, _ = q.shape
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be [B, T, H, Dv] = [{B}, {T}, {H}, Dv], got {tuple(v.shape)}")
    if beta.shape != (B, T, H):
        raise ValueError(f"beta must be [B, T, H] = [{B}, {T}, {H}], got {tuple(beta.shape)}")
    if g is not None and g.shape != (B, T, H):
        raise ValueError(f"g must be [B, T, H] = [{B}, {T}, {H}], got {tuple(g.shape)}")
    if initial_state is not None and initial_state.shape != (B, H, q.shape[-1], v.shape[-1]):
        raise ValueError(
            f"initial_state must be [B, H, Dk, Dv] = [{B}, {H}, {q.shape[-1]}, {v.shape[-1]}], "
            f"got {tuple(initial_state.shape)}"
        )


def delta_rule_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    g: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = True,
):
    """The definition: a plain loop over time (the DeltaNet / Gated DeltaNet recurrence, Yang et al. 2024b, 2025).

    q, k: [B, T, H, Dk]; v: [B, T, H, Dv]; beta: [B, T, H] in (0, 2); g: [B, T, H] log-gate or None;
    initial_state: [B, H, Dk, Dv] or None (zeros). Returns (o [B, T, H, Dv], S_T or None).
    """
    _check(q, k, v, beta, g, initial_state)
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    S = q.new_zeros(B, H, Dk, Dv) if initial_state is None else initial_state
    outputs = []
    gates = g.exp().unbind(1) if g is not None else [None] * T
    # unbind, not q[:, t]: indexing makes autograd write a full-size zero gradient per step (O(T^2))
    for q_t, k_t, v_t, b_t, a_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), beta.unbind(1), gates):
        if a_t is not None:
            S = S * a_t[..., None, None]
        # (I - b k k^T) S + b k v^T  =  S + b k (v - S^T k)^T
        v_new = v_t - torch.einsum("bhkv,bhk->bhv", S, k_t)
        S = S + torch.einsum("bhk,bhv->bhkv", k_t * b_t[..., None], v_new)
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q_t))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, Dv)
    return o, (S if output_final_state else None)


def chunk_layout(T: int, chunk_size: int) -> tuple[int, int]:
    """(number of chunks n, chunk length C) with n C >= T and the least padding for at most chunk_size."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
    n = math.ceil(T / chunk_size)
    return n, math.ceil(T / n)


def delta_rule_chunk(q, k, v, beta, g=None, initial_state=None, output_final_state=True, chunk_size=DEFAULT_CHUNK_SIZE):
    """Chunkwise WY/UT form (module docstring; backward in `delta_chunk`), equal to the reference.

    Padding steps (k = v = q = beta = g = 0) are identity transitions, so T need not divide by the chunk.
    """
    _check(q, k, v, beta, g, initial_state)
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    S0 = q.new_zeros(B, H, Dk, Dv) if initial_state is None else initial_state
    if T == 0:
        return v.new_zeros(B, 0, H, Dv), (S0 if output_final_state else None)
    n, C = chunk_layout(T, chunk_size)
    o, final = DeltaRuleChunk.apply(q, k, v, beta, g, S0, n, C, 1)
    return o, (final if output_final_state else None)


def delta_rule(q, k, v, beta, g=None, initial_state=None, output_final_state=True, chunk_size=DEFAULT_CHUNK_SIZE):
    """The delta rule (Yang et al. 2024b) through the chunkwise WY/UT form; same contract as the reference.

    q, k: [B, T, H, Dk]; v: [B, T, H, Dv]; beta: [B, T, H] in (0, 2); g: [B, T, H] log-gate or None;
    initial_state: [B, H, Dk, Dv] or None. Returns (o [B, T, H, Dv], S_T or None). Differentiable
    in every tensor argument; feeding a sequence in pieces with the state carried equals one call.
    On CUDA with fla-core installed, fla's chunked kernel computes it (`fla_kernels`; chunk_size unused).
    """
    if q.dim() == 4 and q.shape[1] > 0 and fla_kernels.ready(q):
        _check(q, k, v, beta, g, initial_state)  # delta_rule_chunk checks on the other path
        return fla_kernels.delta_rule(q, k, v, beta, g, initial_state, output_final_state)
    return delta_rule_chunk(q, k, v, beta, g, initial_state, output_final_state, chunk_size)
