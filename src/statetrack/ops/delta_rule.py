"""The delta rule (DeltaNet, SPEC section 1.3), layout [B, T, H, D].

    S_t = alpha_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,    o_t = S_t^T q_t

with S_t in R^{d_k x d_v} per head. beta_t in (0, 1) keeps the transition's eigenvalues in [0, 1];
beta_t in (0, 2) extends them to (-1, 1] (reflections, papers/001). The optional gate alpha_t =
exp(g_t) gives Gated DeltaNet. Keys are expected L2-normalised (the layer does it).
"""

from __future__ import annotations

import torch


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
    """The definition: a plain loop over time.

    q, k: [B, T, H, Dk]; v: [B, T, H, Dv]; beta: [B, T, H] in (0, 2); g: [B, T, H] log-gate or None;
    initial_state: [B, H, Dk, Dv] or None (zeros). Returns (o [B, T, H, Dv], S_T or None).
    """
    _check(q, k, v, beta, g, initial_state)
    B, T, H, Dk = q.shape
    Dv = v.shape[-1]
    S = q.new_zeros(B, H, Dk, Dv) if initial_state is None else initial_state
    outputs = []
    for t in range(T):
        k_t, v_t, b_t = k[:, t], v[:, t], beta[:, t, :, None]  # [B,H,Dk], [B,H,Dv], [B,H,1]
        if g is not None:
            S = S * g[:, t].exp()[..., None, None]
        # (I - b k k^T) S + b k v^T  =  S + b k (v - S^T k)^T
        v_new = v_t - torch.einsum("bhkv,bhk->bhv", S, k_t)
        S = S + torch.einsum("bhk,bhv->bhkv", k_t * b_t, v_new)
        outputs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    o = torch.stack(outputs, dim=1) if outputs else v.new_zeros(B, 0, H, Dv)
    return o, (S if output_final_state else None)


def delta_rule(q, k, v, beta, g=None, initial_state=None, output_final_state=True):
    """The delta rule through the fastest available form (the reference loop until a faster one lands)."""
    return delta_rule_reference(q, k, v, beta, g, initial_state, output_final_state)
