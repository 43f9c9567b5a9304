"""PaTH attention (Yang et al. 2025b): softmax attention whose logit between query i and key j
passes through the data-dependent generalised Householders of the tokens between them, layout
[B, T, H, D].

    H_s = I - beta_s w_s w_s^T,
    s_ij = scale (q_i^T H_i H_{i-1} ... H_{j+1} k_j + sum_{s=j+1..i} g_s)   (j <= i; j = i: q_i^T k_i),
    o_i = sum_{j <= i} softmax_j(s_ij) v_j

beta_s in (0, 2) lets H_s reflect (eigenvalue 1 - beta_s along w_s); g is the optional log forget
gate of PaTH-FoX, which (as in fla's kernels) sits inside the scaled logit.

The state (a cache, so that feeding a sequence in pieces equals one call) is (k, v, g) of the P
tokens seen so far: each key already transformed by every Householder after it, k_j <- H_P ... H_{j+1} k_j
[B, P, H, Dk]; the values [B, P, H, Dv]; the log-gate accumulated since each key,
sum_{s=j+1..P} g_s [B, P, H] (zeros without a gate). A new token's H_t acts on every cached key.

`path_attention_reference` is that per-step definition. `path_attention` is the blocked form of
Yang et al. 2025b: within a chunk of C tokens the cumulative products of Householders in
the UT/WY form (as in the chunkwise delta rule, Yang et al. 2024b), so that the
logits within a chunk, the queries transformed back to the chunk's start, the keys transformed to
its end and the chunk's whole product M = H_C ... H_1 (a Dk x Dk matrix) all come from a few
matrix products; across chunks the keys seen so far are carried, transformed by each chunk's M.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Tokens per chunk, by input length: the solve within a chunk costs C^3 against C^2 Dk for its
# products, which favours small chunks on short inputs; the loop over chunks, large ones on long inputs
# (measured on a CPU: 16 best up to 64 tokens, 32-64 at 1024).
SHORT_CHUNK, LONG_CHUNK, LONG_INPUT = 16, 64, 128

PathState = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (k [B, P, H, Dk], v [B, P, H, Dv], g [B, P, H])


def _check(q, k, v, w, beta, g, initial_state) -> None:
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, Dk], got {tuple(q.shape) if isinstance(q, torch.Tensor) else q!r}")
    B, T, H, Dk = q.shape
    for name, x in (("k", k), ("w", w)):
        if x.shape != (B, T, H, Dk):
            raise ValueError(f"{name} must be [B, T, H, Dk] = [{B}, {T}, {H}, {Dk}], got {tuple(x.shape)}")
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise ValueError(f"v must be [B, T, H, Dv] = [{B}, {T}, {H}, Dv], got {tuple(v.shape)}")
    if beta.shape != (B, T, H):
        raise ValueError(f"beta must be [B, T, H] = [{B}, {T}, {H}], got {tuple(beta.shape)}")
    if g is not None and g.shape != (B, T, H):
        raise ValueError(f"g must be [B, T, H] = [{B}, {T}, {H}] or None, got {tuple(g.shape)}")
    if initial_state is None:
        return
    if not isinstance(initial_state, tuple | list) or len(initial_state) != 3:
        raise ValueError("initial_state must be (k [B, P, H, Dk], v [B, P, H, Dv], g [B, P, H]) or None")
    k0, v0, g0 = initial_state
    P = k0.shape[1] if k0.dim() == 4 else -1
    Dv = v.shape[-1]
    expected = ((k0, (B, P, H, Dk), "k"), (v0, (B, P, H, Dv), "v"), (g0, (B, P, H), "g"))
    for x, shape, name in expected:
        if P < 0 or x.shape != shape:
            want = ", ".join(str(s) for s in shape) if P >= 0 else f"{B}, P, {H}, {Dk}"
            raise ValueError(f"initial_state's {name} must be [{want}], got {tuple(x.shape)}")


def _empty_state(q: torch.Tensor, v: torch.Tensor) -> PathState:
    B, _, H, Dk = q.shape
    return q.new_zeros(B, 0, H, Dk), v.new_zeros(B, 0, H, v.shape[-1]), q.new_zeros(B, 0, H)


def path_attention_reference(
    q, k, v, w, beta, g=None, scale: float | None = None, initial_state=None, output_final_state: bool = True
):
    """The definition: a loop over tokens, each H_t applied to every cached key before token t reads.

    q, k, w [B, T, H, Dk]; v [B, T, H, Dv]; beta, g [B, T, H] (g: log forget gate or None);
    scale defaults to Dk^-1/2; initial_state (k, v, g) as the module docstring, or None.
    Returns (o [B, T, H, Dv], the state after token T or None).
    """
    _check(q, k, v, w, beta, g, initial_state)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    keys, values, gates = _empty_state(q, v) if initial_state is None else initial_state
    outputs = []
    for t in range(q.shape[1]):
        w_t, b_t = w[:, t, None], beta[:, t, None, :, None]  # [B, 1, H, Dk], [B, 1, H, 1]
        keys = keys - b_t * (keys * w_t).sum(-1, keepdim=True) * w_t  # H_t k_j for every j < t
        if g is not None:
            gates = gates + g[:, t, None]
        keys = torch.cat([keys, k[:, t, None]], 1)
        values = torch.cat([values, v[:, t, None]], 1)
        gates = torch.cat([gates, gates.new_zeros(gates.shape[0], 1, gates.shape[2])], 1)
        logits = scale * ((keys * q[:, t, None]).sum(-1) + gates)  # [B, t + 1 (+ P), H]
        outputs.append(torch.einsum("bjh,bjhd->bhd", logits.softmax(1), values))
    o = torch.stack(outputs, 1) if outputs else v.new_zeros(v.shape)
    return o, ((keys, values, gates) if output_final_state else None)


def path_attention(
    q,
    k,
    v,
    w,
    beta,
    g=None,
    scale: float | None = None,
    initial_state=None,
    output_final_state: bool = True,
    chunk_size: int | None = None,
):
    """PaTH attention in chunks of `chunk_size` tokens (the UT/WY form within a chunk; None:
    SHORT_CHUNK tokens for inputs up to LONG_INPUT tokens, LONG_CHUNK beyond).

    Same arguments and results as `path_attention_reference`.
    """
    _check(q, k, v, w, beta, g, initial_state)
    B, T, H, Dk = q.shape
    if chunk_size is None:
        chunk_size = SHORT_CHUNK if T <= LONG_INPUT else LONG_CHUNK
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    Dv = v.shape[-1]
    scale = Dk**-0.5 if scale is None else scale
    k0, v0, g0 = _empty_state(q, v) if initial_state is None else initial_state
    P = k0.shape[1]
    if T == 0:
        return v.new_zeros(B, 0, H, Dv), ((k0, v0, g0) if output_final_state else None)
    C = min(chunk_size, T)
    n = -(-T // C)
    pad = n * C - T  # padded tokens: w = 0, beta = 0 (H = I), so they change no product

    def padded(x):  # [B, T, H, ...] -> [B, H, n C, ...]
        x = x.movedim(1, 2)
        return x if not pad else F.pad(x, (0, 0, 0, pad) if x.dim() == 4 else (0, pad))

    def blocks(x):  # [B, T, H, ...] -> [B, H, n, C, ...]
        return padded(x).reshape(B, H, n, C, *x.shape[3:])

    qc, kc, wc, bc = blocks(q), blocks(k), blocks(w), blocks(beta)  # [B, H, n, C, Dk], beta [B, H, n, C]
    wb = wc * bc[..., None]
    wk = torch.cat([wc, kc], -2).transpose(-1, -2)  # [B, H, n, Dk, 2C]: the chunk's w, then its k
    strict = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1).repeat(1, 2)
    # beta_r w_r . w_t and beta_r w_r . k_j for t, j < r; (I + L) with L the first is the UT transform's T^-1
    wb_wk = (wb @ wk).masked_fill(~strict, 0)
    unit_lower = wb_wk[..., :C] + torch.eye(C, dtype=q.dtype, device=q.device)
    # Y: H_r..H_1 = I - sum_{s<=r} w_s y_s^T; Z_rj: how much of w_r the key k_j loses at r > j, so
    # H_r..H_{j+1} k_j = k_j - sum_{j<s<=r} Z_sj w_s; one solve for both
    YZ = torch.linalg.solve_triangular(unit_lower, torch.cat([wb, wb_wk[..., C:]], -1), upper=False, unitriangular=True)
    q_wk = qc @ wk
    qw = q_wk[..., :C].tril()  # q_i . w_s for s <= i
    qw_yz, yz_w = qw @ YZ, YZ.transpose(-1, -2) @ wc  # [qw Y | qw Z], [Y^T W; Z^T W]: one product each
    intra = q_wk[..., C:] - qw_yz[..., Dk:]  # [B, H, n, C, C]: q_i^T H_i..H_{j+1} k_j for j <= i
    q_start = qc - qw_yz[..., :Dk]  # (H_start .. H_i q_i): the query carried back to its chunk's start
    k_end = kc - yz_w[..., Dk:, :]  # H_end .. H_{j+1} k_j: the key carried to its chunk's end
    M_t = torch.eye(Dk, dtype=q.dtype, device=q.device) - yz_w[..., :Dk, :]  # (H_C .. H_1)^T

    v_all = torch.cat([v0.movedim(1, 2), padded(v)], 2)  # [B, H, P + n C, Dv]
    gated = g is not None or P > 0  # else every gate offset is 0
    G = padded(g).cumsum(-1) if g is not None else q.new_zeros(B, H, n * C)
    gk = torch.cat([-g0.transpose(1, 2), G], -1)  # a key's gate offset: bias_ij = G_i - gk_j
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    keys = k0.movedim(1, 2)  # [B, H, P, Dk]: every earlier key, carried to the current chunk's start
    outputs = []
    for a in range(n):
        seen = P + a * C
        scores, visible = intra[:, :, a], causal  # [B, H, C, seen + C] once the earlier keys are in
        if seen:
            scores = torch.cat([q_start[:, :, a] @ keys.transpose(-1, -2), scores], -1)
            visible = torch.cat([causal.new_ones(C, seen), causal], 1)
        if gated:
            scores = scores + (G[:, :, a * C : (a + 1) * C, None] - gk[:, :, None, : seen + C])
        logits = (scale * scores).masked_fill(~visible, float("-inf"))
        outputs.append(logits.softmax(-1) @ v_all[:, :, : seen + C])  # [B, H, C, Dv]
        keys = torch.cat([keys @ M_t[:, :, a], k_end[:, :, a]], 2) if seen else k_end[:, :, a]
    o = torch.cat(outputs, 2)[:, :, :T].movedim(1, 2)
    if not output_final_state:
        return o, None
    k_final = keys[:, :, : P + T].movedim(1, 2)
    g_final = (G[:, :, T - 1 : T] - gk[:, :, : P + T]).transpose(1, 2)
    return o, (k_final, torch.cat([v0, v], 1), g_final)
