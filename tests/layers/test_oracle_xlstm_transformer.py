"""mLSTM, sLSTM and the Transformer's attention against independent definitions.

Each layer's weights are randomised, read out, and fed to an implementation that shares no code
with the layer: for mLSTM and sLSTM a per-step loop written here from the recurrent equations of
Beck et al. 2024; for the attention torch's `scaled_dot_product_attention` with an explicit boolean
causal mask, with the positional encodings written here from Vaswani et al. 2017 and Su et al. 2021.
Everything runs in float64 with relative error <= 1e-10 on outputs and final state; the state is
carried in (the layer runs on two pieces, the oracle on the whole sequence).
"""

import math

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import randomised, rel_error, rms_norm
from statetrack.layers import mLSTM, sLSTM
from statetrack.layers.transformer import POSITIONAL, CausalSelfAttention

EXACT = 1e-10
B, T, DM, H = 2, 10, 8, 2  # batch, length, d_model, heads
D = DM // H




def inputs(seed: int = 1) -> torch.Tensor:
    return torch.randn(B, T, DM, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def in_pieces(layer, x, cuts=(T // 2,)):
    """The layer on x cut at `cuts`, each piece given the state the previous one returned."""
    outputs, state = [], None
    for start, stop in zip((0, *cuts), (*cuts, x.shape[1])):
        y, state = layer(x[:, start:stop], state)
        outputs.append(y)
    return torch.cat(outputs, dim=1), state


def norm_inputs(layer, x):
    """in_pieces, plus what the layer fed its per-head output norm (the cell output h~ of the paper,
    before the norm that the layer adds), caught by a forward pre-hook: a torch hook, no layer code."""
    caught = []
    handle = layer.o_norm.register_forward_pre_hook(lambda module, args: caught.append(args[0]))
    try:
        y, state = in_pieces(layer, x)
    finally:
        handle.remove()
    return y, state, caught




def assert_close(errors: dict) -> None:
    bad = {name: e for name, e in errors.items() if not e <= EXACT}
    assert not bad, f"relative errors above {EXACT}: {bad}"


# ---- mLSTM: Beck et al. 2024, eqs. 19-27 (stabiliser: eqs. 15-17)
def mlstm_per_step(layer, x, forget="sigmoid"):
    """The mLSTM of Beck et al. 2024 step by step, unstabilised, from the read-out weights:

        q_t = W_q x_t,  k_t = W_k x_t / sqrt(d),  v_t = W_v x_t                    (eqs. 22-24, no biases)
        i_t = exp(w_i^T x_t + b_i),  f_t = sigmoid(w_f^T x_t + b_f)                 (eqs. 25-26)
        C_t = f_t C_{t-1} + i_t v_t k_t^T,  n_t = f_t n_{t-1} + i_t k_t             (eqs. 19-20)
        h~_t = C_t q_t / max(|n_t^T q_t|, 1),  o_t = sigmoid(W_o x_t + b_o)         (eqs. 21, 27)
        m_t = max(log f_t + m_{t-1}, log i_t),  m_0 = 0                             (eq. 15)

    per head (d = head dim). The layer's output is W_out (o_t * RMSNorm(h~_t)): the paper's h_t = o_t h~_t
    with a per-head RMSNorm on h~ (the departure). `forget="exp"` is eq. 26's other choice, for the
    test that the layer's forget gate is the sigmoid one. Returns h~ [B, T, H, D], the layer output
    [B, T, DM], C [B, H, D, D] in the paper's v k^T layout, n [B, H, D], m [B, H], and how often each
    branch of the two maxima was taken.
    """
    Wq, Wk, Wv = (w.view(H, D, DM) for w in layer.qkv.weight.chunk(3, dim=0))
    w_i, w_f = layer.gates.weight.view(2, H, DM)
    b_i, b_f = layer.gates.bias.view(2, H)
    C, n, m = x.new_zeros(B, H, D, D), x.new_zeros(B, H, D), x.new_zeros(B, H)
    cells, branches = [], {"|n^T q| > 1": 0, "|n^T q| < 1": 0, "m from f": 0, "m from i": 0}
    for t in range(x.shape[1]):
        x_t = x[:, t]  # [B, DM]
        q = torch.einsum("hdk,bk->bhd", Wq, x_t)
        k = torch.einsum("hdk,bk->bhd", Wk, x_t) / math.sqrt(D)
        v = torch.einsum("hdk,bk->bhd", Wv, x_t)
        i_log = x_t @ w_i.T + b_i  # [B, H]
        f_pre = x_t @ w_f.T + b_f
        f = torch.sigmoid(f_pre) if forget == "sigmoid" else torch.exp(f_pre)
        C = f[..., None, None] * C + i_log.exp()[..., None, None] * v[..., :, None] * k[..., None, :]
        n = f[..., None] * n + i_log.exp()[..., None] * k
        dot = (n * q).sum(-1)  # n_t^T q_t, [B, H]
        cells.append((C @ q[..., None]).squeeze(-1) / torch.clamp(dot.abs(), min=1.0)[..., None])
        m_from_f = torch.log(f) + m
        branches["|n^T q| > 1"] += int((dot.abs() > 1).sum())
        branches["|n^T q| < 1"] += int((dot.abs() < 1).sum())
        branches["m from f"] += int((m_from_f > i_log).sum())
        branches["m from i"] += int((m_from_f < i_log).sum())
        m = torch.maximum(m_from_f, i_log)
    cell = torch.stack(cells, dim=1)  # [B, T, H, D]
    o = torch.sigmoid(x @ layer.o_gate.weight.T + layer.o_gate.bias)  # [B, T, DM]
    normed = rms_norm(cell, layer.o_norm.weight, layer.o_norm.eps).reshape(B, -1, DM)
    return cell, (o * normed) @ layer.o_proj.weight.T, C, n, m, branches


def test_mlstm_matches_per_step_xlstm_equations():
    """The layer computes the stabilised parallel form with a carried state (C~, n~, m); the oracle
    the paper's recurrent form without stabiliser. They agree because with i'_t = exp(i~_t - m_t) and
    f'_t = exp(log f_t + m_{t-1} - m_t) (eqs. 16-17) the stored states are C~_t = C_t exp(-m_t),
    n~_t = n_t exp(-m_t), and C~_t q / max(|n~_t^T q|, exp(-m_t)) = C_t q / max(|n_t^T q|, 1): the
    stabiliser cancels in the output. The final state is compared exactly: m_T against eq. 15's
    recursion from m_0 = 0 (the layer's empty state; m is then a definite number, not a free
    choice), and C~_T exp(m_T), n~_T exp(m_T) against the paper's C_T, n_T (the layer stores C
    transposed, as k v^T, and reads h~ = C^T q). The cell output h~ is compared before the layer's
    RMSNorm too, since a per-head norm would hide a wrong scalar normaliser max(|n^T q|, 1)."""
    layer = randomised(mLSTM(DM, num_heads=H))
    x = inputs()
    y, (C, n, m), caught = norm_inputs(layer, x)
    cell, y_ref, C_ref, n_ref, m_ref, branches = mlstm_per_step(layer, x)
    assert all(branches.values()), f"every branch of eqs. 15 and 21 must be exercised: {branches}"
    scale = m.exp()
    assert_close({
        "h~ (eq. 21, before the norm)": rel_error(torch.cat(caught, dim=2).transpose(1, 2), cell),
        "output": rel_error(y, y_ref),
        "C_T": rel_error(C.transpose(-1, -2) * scale[..., None, None], C_ref),
        "n_T": rel_error(n * scale[..., None], n_ref),
        "m_T (eq. 15)": rel_error(m, m_ref),
    })


def test_mlstm_departures_are_explicit():
    """Departures: no biases on q, k, v (eqs. 22-24 have them); the sigmoid choice of eq. 26 for the
    forget gate (the exponential one gives other outputs); a per-head RMSNorm on h~ before the output
    gate (the paper's block uses a head-wise GroupNorm); none of the mLSTM block around the cell (no
    up-projection, causal convolution or learnable skip): the layer has these five parts only."""
    layer = randomised(mLSTM(DM, num_heads=H))
    assert layer.qkv.bias is None and layer.o_proj.bias is None
    assert [name for name, _ in layer.named_children()] == ["qkv", "gates", "o_gate", "o_norm", "o_proj"]
    assert isinstance(layer.o_norm, torch.nn.RMSNorm) and layer.o_norm.normalized_shape == (D,)
    assert "RMSNorm" in mLSTM.departures and "sigmoid" in mLSTM.departures
    x = inputs()
    y, _ = layer(x)
    assert rel_error(mlstm_per_step(layer, x, forget="exp")[1], y) > 1e-3


# ---- sLSTM: Beck et al. 2024, eqs. 8-17
def block_diagonal(R: torch.Tensor, gate: int) -> torch.Tensor:
    """The layer's recurrent weights R [H, D, 4D] (h_{t-1} @ R per head) as the paper's r_gate
    [DM, DM] acting on h_{t-1} from the left: block-diagonal, one D x D block per head."""
    return torch.block_diag(*(R[h, :, gate * D : (gate + 1) * D].T for h in range(H)))


def slstm_per_step(layer, x):
    """The sLSTM of Beck et al. 2024 step by step, unstabilised, from the read-out weights:

        z_t = tanh(W_z x_t + r_z h_{t-1} + b_z)                                      (eq. 11)
        i_t = exp(W_i x_t + r_i h_{t-1} + b_i),  f_t = sigmoid(W_f x_t + r_f h_{t-1} + b_f)  (eqs. 12-13)
        o_t = sigmoid(W_o x_t + r_o h_{t-1} + b_o)                                   (eq. 14)
        c_t = f_t c_{t-1} + i_t z_t,  n_t = f_t n_{t-1} + i_t,  h_t = o_t c_t / n_t  (eqs. 8-10)
        m_t = max(log f_t + m_{t-1}, log i_t),  m_0 = 0                              (eq. 15)

    with r_* block-diagonal per head (memory mixing within a head only), gates in the layer's
    order z, i, f, o. The layer's output is W_out RMSNorm_head(h_t). Returns h [B, T, DM], the
    output [B, T, DM], the final (h, c, n, m) each [B, DM], and the branches taken in eq. 15.
    """
    W, b = layer.W.weight.view(4, DM, DM), layer.W.bias.view(4, DM)
    r = [block_diagonal(layer.R, g) for g in range(4)]
    h, c, n, m = (x.new_zeros(B, DM) for _ in range(4))
    hs, branches = [], {"m from f": 0, "m from i": 0}
    for t in range(x.shape[1]):
        z_pre, i_log, f_pre, o_pre = (x[:, t] @ W[g].T + h @ r[g].T + b[g] for g in range(4))
        f, o = torch.sigmoid(f_pre), torch.sigmoid(o_pre)
        c = f * c + i_log.exp() * torch.tanh(z_pre)
        n = f * n + i_log.exp()
        h = o * c / n
        m_from_f = torch.log(f) + m
        branches["m from f"] += int((m_from_f > i_log).sum())
        branches["m from i"] += int((m_from_f < i_log).sum())
        m = torch.maximum(m_from_f, i_log)
        hs.append(h)
    h_all = torch.stack(hs, dim=1)  # [B, T, DM]
    y = rms_norm(h_all.view(B, -1, H, D), layer.o_norm.weight, layer.o_norm.eps).reshape(B, -1, DM) @ layer.o_proj.weight.T
    return h_all, y, (h, c, n, m), branches


def test_slstm_matches_per_step_xlstm_equations():
    """The layer runs the stabilised recurrence (eqs. 15-17) with state (h, c~, n~, m); the oracle the
    unstabilised eqs. 8-14. With i'_t = exp(i~_t - m_t), f'_t = exp(log f_t + m_{t-1} - m_t) the stored
    c~_t = c_t exp(-m_t), n~_t = n_t exp(-m_t), so h_t = o_t c~_t / n~_t = o_t c_t / n_t: the stabiliser
    cancels in the output and in h, which feeds back. The final state is compared exactly: h_T and
    m_T (eq. 15's recursion from m_0 = 0, the layer's empty state) as they are, c~_T exp(m_T) and
    n~_T exp(m_T) against the paper's c_T, n_T. h_t is compared before the layer's RMSNorm too."""
    layer = randomised(sLSTM(DM, num_heads=H))
    x = inputs()
    y, (h, c, n, m), caught = norm_inputs(layer, x)
    h_ref, y_ref, (h_T, c_T, n_T, m_T), branches = slstm_per_step(layer, x)
    assert all(branches.values()), f"both branches of eq. 15 must be exercised: {branches}"
    assert_close({
        "h (eq. 10, before the norm)": rel_error(torch.cat(caught, dim=1).reshape(B, T, DM), h_ref),
        "output": rel_error(y, y_ref),
        "h_T": rel_error(h, h_T),
        "c_T": rel_error(c * m.exp(), c_T),
        "n_T": rel_error(n * m.exp(), n_T),
        "m_T (eq. 15)": rel_error(m, m_T),
    })


def test_slstm_departures_are_explicit():
    """Departures: a per-head RMSNorm on h before the output projection (the paper's block uses a
    head-wise GroupNorm), and none of the sLSTM block around the cell (no causal convolution before
    the i, f gates, no gated MLP after): the layer has these four parts only. The forget gate is
    eq. 13's sigmoid choice (checked by the oracle above)."""
    layer = sLSTM(DM, num_heads=H)
    assert [name for name, _ in layer.named_children()] == ["W", "o_norm", "o_proj"]
    assert [name for name, _ in layer.named_parameters(recurse=False)] == ["R"] and layer.R.shape == (H, D, 4 * D)
    assert isinstance(layer.o_norm, torch.nn.RMSNorm) and layer.o_norm.normalized_shape == (D,)
    assert "RMSNorm" in sLSTM.departures and "sigmoid" in sLSTM.departures


# ---- causal self-attention: Vaswani et al. 2017, eq. 1; Radford et al. 2019
def sinusoidal_encoding(T_: int, dim: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/dim)), PE(pos, 2i+1) = cos(...) (Vaswani et al. 2017, sec. 3.5)."""
    pos = torch.arange(T_, dtype=torch.float64)[:, None]
    angle = pos / 10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(T_, dim)


def rope_adjacent_pairs(x: torch.Tensor) -> torch.Tensor:
    """RoPE as published (Su et al. 2021, eq. 34): x [..., T, D], the pair (x_{2j}, x_{2j+1}) at
    position p rotated by the angle p theta_j, theta_j = 10000^(-2j/D)."""
    T_, D_ = x.shape[-2:]
    theta = 10000.0 ** (-torch.arange(0, D_, 2, dtype=torch.float64) / D_)
    angle = torch.arange(T_, dtype=torch.float64)[:, None] * theta  # [T, D/2]
    cos, sin = angle.cos(), angle.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


# the layer rotates the pairs (j, j + D/2); listed in this order they are adjacent pairs
HALVES_TO_ADJACENT = torch.stack([torch.arange(D // 2), torch.arange(D // 2) + D // 2], dim=-1).flatten()


def attention_sdpa(layer, x, rope_layout=HALVES_TO_ADJACENT):
    """Causal self-attention by torch's SDPA with an explicit boolean mask (True: may attend), q, k, v
    from the read-out weights. Sinusoidal: encodings added to the input. RoPE: q and k with their
    head dimensions reordered by `rope_layout` so that the pairs are adjacent, rotated as Su et al.,
and put back in order (a permutation of both q and k leaves q.k unchanged).
    Returns the output [B, T, DM] and the keys and values [B, H, T, D] in the layer's layout."""
    if layer.positional == "sinusoidal":
        x = x + sinusoidal_encoding(x.shape[1], DM)
    q, k, v = ((x @ w.T + b).view(B, -1, H, D).transpose(1, 2)
               for w, b in zip(layer.qkv.weight.chunk(3), layer.qkv.bias.chunk(3)))
    if layer.positional == "rope":  # rotate in adjacent-pair order, then back to the layer's order
        back = torch.argsort(rope_layout)
        q, k = (rope_adjacent_pairs(t[..., rope_layout])[..., back] for t in (q, k))
    mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return y.transpose(1, 2).reshape(B, -1, DM) @ layer.proj.weight.T + layer.proj.bias, (k, v)


@pytest.mark.parametrize("positional", POSITIONAL)
def test_transformer_attention_matches_sdpa_with_explicit_mask(positional):
    """The layer against SDPA with an explicit causal mask, in one call and in three chunks through
    its KV cache (absolute positions continue across chunks); the cache must hold the keys (rotated
    for RoPE) and values of every token. The layer's RoPE pairs dimension j with j + D/2 (the GPT-NeoX
    layout), not 2j with 2j + 1: the same rotation after a fixed permutation of each head's
    dimensions, applied to q and k alike, so the scores q.k are Su et al.'s."""
    layer = randomised(CausalSelfAttention(DM, num_heads=H, positional=positional))
    x = inputs()
    y_ref, (k_ref, v_ref) = attention_sdpa(layer, x)
    y_whole, _ = layer(x)
    y_chunks, (k, v) = in_pieces(layer, x, cuts=(3, 4))
    assert_close({
        "one call": rel_error(y_whole, y_ref),
        "chunks": rel_error(y_chunks, y_ref),
        "cached keys": rel_error(k, k_ref),
        "cached values": rel_error(v, v_ref),
    })
    if positional == "rope":  # the layout matters: Su et al.'s pairs on the layer's own order differ
        assert rel_error(attention_sdpa(layer, x, rope_layout=torch.arange(D))[0], y_ref) > 1e-3


def test_transformer_departures_are_explicit():
    """Departures: no dropout (GPT-2 has attention and residual dropout): the layer is only its qkv and
    output projections and gives the same output twice in training mode. The sinusoidal encoding
    added at the layer's input and the RoPE layout are checked against SDPA above."""
    layer = randomised(CausalSelfAttention(DM, num_heads=H, positional="rope")).train()
    assert [name for name, _ in layer.named_children()] == ["qkv", "proj"]
    x = inputs()
    assert torch.equal(layer(x)[0], layer(x)[0])
    assert all(word in CausalSelfAttention.departures for word in ("dropout", "sinusoidal", "RoPE"))
