"""DeltaFormer attention (Zhong et al. 2025), layout [B, T, H, D].

Softmax attention over values u that are themselves written by a delta rule in a kernel's feature
space: each token's u is its value minus beta times what the memory already recalls at its key,
and the output attends over the u's:

    u_t = v_t - beta_t sum_{j<t}  w_{tj} u_j,
    o_t =       sum_{j<=t} a_{tj} u_j,            a_{tj} = exp(s q_t.k_j) / sum_{i<=t} exp(s q_t.k_i)

with s = `scale` (1/sqrt(D) by default) and the write kernel w compares keys with keys, as fla's
DeltaFormer layer does; the first token has nothing to recall, so u_0 = v_0. `write_kernel`
chooses w:

- "gaussian" (the default): w_{tj} = exp(-s |k_t - k_j|^2 / 2) = exp(s k_t.k_j) / (|phi(k_t)| |phi(k_j)|),
  the exponential kernel exp(s x.y) = phi(x).phi(y) with its feature vectors scaled to unit norm;
- "softmax" (fla's op): w_{tj} = exp(s k_t.k_j) / sum_{i<t} exp(s k_t.k_i).

In the feature space the u-update is a delta rule on
the state S_t = sum_{j<=t} u_j f_j^T: u_t = v_t - beta_t S_{t-1} f_t / n_t, so

    S_t = S_{t-1} (I - beta_t f_t f_t^T / n_t) + v_t f_t^T,

with f_t = phi(k_t) / |phi(k_t)| and n_t = 1 for "gaussian" (unit-norm features), and f_t = phi(k_t)
and n_t = Z_t, the softmax normaliser, for "softmax". For "gaussian" the transition is a
generalized Householder, eigenvalue 1 - beta_t along f_t and 1 elsewhere, so beta in [0, 2]
bounds every eigenvalue by 1 and the u's grow at most linearly with the length; for "softmax" the
eigenvalue along f_t is 1 - beta_t |phi(k_t)|^2 / Z_t, which no bound on beta bounds. The state
grows with the sequence, so the "state" carried across calls is a cache of the keys and u's seen
so far, (k [B, P, H, D], u [B, P, H, Dv]).

The fast form solves for the u's a block of C rows at a time, as fla's parallel form does: with
W the block's strictly lower-triangular write weights against itself and W_past against every
earlier token (the cache and the blocks before), (I + diag(beta) W) u = v - diag(beta) W_past
u_past is one unit lower-triangular C x C system per head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

DEFAULT_CHUNK_SIZE = 128  # rows of the write weights per block
WRITE_KERNELS = ("gaussian", "softmax")


def _check(q, k, v, beta, initial_state, write_kernel):
    if write_kernel not in WRITE_KERNELS:
        raise ValueError(f"write_kernel must be one of {', '.join(WRITE_KERNELS)}, got {write_kernel!r}")
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, Dk], got {tuple(q.shape)}")
    B, T, H, Dk = q.shape
    if k.shape != (B, T, H, Dk):
        raise ValueError(f"k must be [B, T, H, Dk] = [{B}, {T}, {H}, {Dk}], got {tuple(k.shape)}")
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be [B, T, H, Dv] = [{B}, {T}, {H}, Dv], got {tuple(v.shape)}")
    if beta.shape != (B, T, H):
        raise ValueError(f"beta must be [B, T, H] = [{B}, {T}, {H}], got {tuple(beta.shape)}")
    if initial_state is not None:
        if not (isinstance(initial_state, (tuple, list)) and len(initial_state) == 2):
            raise ValueError("initial_state must be the cache (k [B, P, H, Dk], u [B, P, H, Dv]) or None")
        k_past, u_past = initial_state
        if k_past.dim() != 4 or k_past.shape[0] != B or k_past.shape[2:] != (H, Dk):
            raise ValueError(
                f"initial_state's k must be [B, P, H, Dk] = [{B}, P, {H}, {Dk}], got {tuple(k_past.shape)}"
            )
        P = k_past.shape[1]
        if u_past.shape != (B, P, H, v.shape[-1]):
            raise ValueError(
                f"initial_state's u must be [B, P, H, Dv] = [{B}, {P}, {H}, {v.shape[-1]}], got {tuple(u_past.shape)}"
            )


def _past(k, v, initial_state):
    """The cache (k, u) of the P earlier tokens, empty when there are none."""
    if initial_state is not None:
        return initial_state
    B, _, H, Dk = k.shape
    return k.new_zeros(B, 0, H, Dk), v.new_zeros(B, 0, H, v.shape[-1])


def deltaformer_reference(
    q, k, v, beta, scale=None, initial_state=None, output_final_state=True, write_kernel: str = "gaussian"
):
    """The definition: a loop over tokens, each writing its u and then reading the u's so far.

    q, k [B, T, H, Dk]; v [B, T, H, Dv]; beta [B, T, H]; scale default 1/sqrt(Dk);
    initial_state: the cache (k [B, P, H, Dk], u [B, P, H, Dv]) of earlier tokens, or None;
    write_kernel: "gaussian" or "softmax" (the module docstring).
    Returns (o [B, T, H, Dv], the cache extended by these T tokens, or None).
    """
    _check(q, k, v, beta, initial_state, write_kernel)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    k_past, u_past = _past(k, v, initial_state)
    keys, us, outputs = list(k_past.unbind(1)), list(u_past.unbind(1)), []
    for q_t, k_t, v_t, b_t in zip(q.unbind(1), k.unbind(1), v.unbind(1), beta.unbind(1)):
        if keys:  # recall at k_t from the tokens before t
            K, U = torch.stack(keys, 1), torch.stack(us, 1)  # [B, t, H, D]
            if write_kernel == "gaussian":
                w = torch.exp(-0.5 * scale * (k_t[:, None] - K).square().sum(-1))
            else:
                w = torch.softmax(scale * torch.einsum("bhd,bjhd->bjh", k_t, K), dim=1)
            u_t = v_t - b_t[..., None] * torch.einsum("bjh,bjhd->bhd", w, U)
        else:
            u_t = v_t
        keys.append(k_t)
        us.append(u_t)
        K, U = torch.stack(keys, 1), torch.stack(us, 1)
        a = torch.softmax(scale * torch.einsum("bhd,bjhd->bjh", q_t, K), dim=1)
        outputs.append(torch.einsum("bjh,bjhd->bhd", a, U))
    B, T, H, _ = q.shape
    o = torch.stack(outputs, 1) if outputs else v.new_zeros(B, 0, H, v.shape[-1])
    state = (torch.stack(keys, 1), torch.stack(us, 1)) if keys else (k_past, u_past)
    return o, (state if output_final_state else None)


def deltaformer(
    q,
    k,
    v,
    beta,
    scale=None,
    initial_state=None,
    output_final_state=True,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    write_kernel: str = "gaussian",
):
    """DeltaFormer by a blocked triangular solve for the u's and one softmax attention over them.

    Same arguments and results as `deltaformer_reference`; `chunk_size` rows of the write weights
    at a time, so memory is chunk_size x T per head, not T x T.
    """
    _check(q, k, v, beta, initial_state, write_kernel)
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    B, T, H, Dk = q.shape
    scale = 1.0 / math.sqrt(Dk) if scale is None else scale
    k_past, u_past = _past(k, v, initial_state)
    P = k_past.shape[1]
    if T == 0:
        return v.new_zeros(B, 0, H, v.shape[-1]), ((k_past, u_past) if output_final_state else None)
    k_all = torch.cat([k_past, k], 1).transpose(1, 2)  # [B, H, P + T, Dk]
    kh, vh, bh = k.transpose(1, 2), v.transpose(1, 2), beta.transpose(1, 2)[..., None]  # [B, H, T, .]
    u_all = u_past.transpose(1, 2)  # [B, H, P + s, Dv]: the u's of the rows solved so far
    for s in range(0, T, chunk_size):
        e = min(s + chunk_size, T)
        rows = torch.arange(P + s, P + e, device=q.device)[:, None]
        cols = torch.arange(P + e, device=q.device)[None, :]
        scores = scale * kh[:, :, s:e] @ k_all[:, :, : P + e].transpose(-1, -2)  # [B, H, e - s, P + e]
        if write_kernel == "gaussian":  # s k_t.k_j - s |k_t|^2 / 2 - s |k_j|^2 / 2 <= 0, rounding aside
            half = 0.5 * scale * k_all[:, :, : P + e].square().sum(-1)  # [B, H, P + e]
            scores = (scores - half[..., P + s : P + e, None] - half[..., None, :]).clamp_max(0)
            w = scores.masked_fill(cols >= rows, float("-inf")).exp()
        else:  # token 0 has no earlier token: its row may read itself, on the diagonal the solve never reads
            w = torch.softmax(scores.masked_fill(cols >= rows.clamp_min(1), float("-inf")), dim=-1)
        b = bh[:, :, s:e]
        rhs = vh[:, :, s:e] - b * (w[..., : P + s] @ u_all) if P + s else vh[:, :, s:e]
        # unit lower-triangular: the solve reads the strictly lower part of diag(beta) W and takes 1 on the diagonal
        u = torch.linalg.solve_triangular(b * w[..., P + s :], rhs, upper=False, unitriangular=True)
        u_all = torch.cat([u_all, u], 2)
    qh = q.transpose(1, 2)
    if P == 0:
        o = F.scaled_dot_product_attention(qh, k_all, u_all, is_causal=True, scale=scale)
    else:  # query i (absolute P + i) reads keys 0 .. P + i
        attend = torch.ones(T, P + T, dtype=torch.bool, device=q.device).tril(diagonal=P)
        o = F.scaled_dot_product_attention(qh, k_all, u_all, attn_mask=attend, scale=scale)
    state = (k_all.transpose(1, 2), u_all.transpose(1, 2))
    return o.transpose(1, 2), (state if output_final_state else None)
