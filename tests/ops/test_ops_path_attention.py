"""PaTH attention (Yang et al. 2025b): the blocked UT/WY form equals the per-step definition, an
explicit product of Householder matrices per (query, key) and fla's naive form; the cache carries."""

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import TOL, assert_same, load_fla_naive, rel_error
from statetrack.ops.path_attention import path_attention, path_attention_reference


def make(B, T, H, D, dtype, gated=True, beta_scale=2.0, past=0, Dv=None, seed=0):
    """Inputs with w unit vectors (as the layer's) and beta in (0, beta_scale); `past` cached tokens."""
    gen = torch.Generator().manual_seed(seed)
    Dv = D if Dv is None else Dv
    x = {
        "q": torch.randn(B, T, H, D, dtype=dtype, generator=gen),
        "k": torch.randn(B, T, H, D, dtype=dtype, generator=gen),
        "v": torch.randn(B, T, H, Dv, dtype=dtype, generator=gen),
        "w": F.normalize(torch.randn(B, T, H, D, dtype=dtype, generator=gen), dim=-1),
        "beta": beta_scale * torch.rand(B, T, H, dtype=dtype, generator=gen),
        "g": -torch.rand(B, T, H, dtype=dtype, generator=gen) if gated else None,
    }
    if past:
        x["k0"] = torch.randn(B, past, H, D, dtype=dtype, generator=gen)
        x["v0"] = torch.randn(B, past, H, Dv, dtype=dtype, generator=gen)
        x["g0"] = -torch.rand(B, past, H, dtype=dtype, generator=gen) * past
    return {n: t.requires_grad_() for n, t in x.items() if t is not None}


def flat(op, **options):
    """op as assert_same wants it: the cache as three inputs k0, v0, g0, the final cache as one tensor."""

    def run(k0=None, v0=None, g0=None, **x):
        state = None if k0 is None else (k0, v0, g0)
        o, (k, v, g) = op(**x, initial_state=state, **options)
        return o, torch.cat([k.flatten(), v.flatten(), g.flatten()])

    return run


@pytest.mark.parametrize("beta_scale", [1.0, 2.0])  # eig_range [0,1] and [-1,1]
@pytest.mark.parametrize("gated, past", [(False, 0), (True, 0), (True, 5)])
def test_fast_equals_reference_float64(beta_scale, gated, past):
    x = make(2, 19, 3, 5, torch.float64, gated, beta_scale, past, Dv=4)  # 19 tokens: chunks of 8, 8 and 3
    assert_same(flat(path_attention, chunk_size=8), flat(path_attention_reference), x, TOL[torch.float64])


def test_one_chunk_and_one_token_chunks_equal_the_reference():
    x = make(1, 9, 2, 4, torch.float64, past=2)
    for chunk_size in (1, 9, 64, None):
        assert_same(flat(path_attention, chunk_size=chunk_size), flat(path_attention_reference), x, TOL[torch.float64])


def explicit_products(q, k, v, w, beta, g, scale):
    """The logit as the work writes it: q_i^T (H_i H_{i-1} .. H_{j+1}) k_j with every H_s an explicit
    D x D matrix, plus the gates g_{j+1} + .. + g_i; then a causal softmax."""
    B, T, H, D = q.shape
    eye = torch.eye(D, dtype=q.dtype)
    Hs = eye - beta[..., None, None] * w[..., :, None] * w[..., None, :]  # [B, T, H, D, D]
    logits = torch.full((B, H, T, T), float("-inf"), dtype=q.dtype)
    for i in range(T):
        product = eye.expand(B, H, D, D)
        for j in range(i, -1, -1):  # product = H_i .. H_{j+1}
            gate = g[:, j + 1 : i + 1].sum(1)
            logits[:, :, i, j] = scale * (torch.einsum("bhd,bhde,bhe->bh", q[:, i], product, k[:, j]) + gate)
            product = product @ Hs[:, j]
    return torch.einsum("bhij,bjhd->bihd", logits.softmax(-1), v)


@pytest.mark.parametrize("beta_scale", [1.0, 2.0])
def test_reference_is_the_product_of_householders_between_key_and_query(beta_scale):
    x = make(2, 7, 2, 3, torch.float64, beta_scale=beta_scale)
    with torch.no_grad():
        o, _ = path_attention_reference(**x, scale=0.7)
        assert rel_error(o, explicit_products(**x, scale=0.7)) <= TOL[torch.float64]


def fla_inputs(x):
    """fla's naive_path_attn takes (q, k, v, w, beta, g, scale) in float32; g cannot be None."""
    g = x["g"] if "g" in x else torch.zeros_like(x["beta"])
    return x["q"], x["k"], x["v"], x["w"], x["beta"], g


@pytest.mark.parametrize("beta_scale", [1.0, 2.0])
@pytest.mark.parametrize("gated", [False, True])
def test_agrees_with_fla_naive_float32(beta_scale, gated):
    fla = load_fla_naive("path_attn/naive.py")
    x = make(2, 21, 2, 8, torch.float32, gated, beta_scale)  # fla's chunks of 16: a partial one
    scale = 8**-0.5
    o, _ = path_attention(**x, scale=scale, chunk_size=8)
    o_fla = fla.naive_path_attn(*fla_inputs(x), scale=scale, chunk_size=16)
    assert rel_error(o, o_fla) <= TOL[torch.float32]
    weights = torch.randn(o.shape, generator=torch.Generator().manual_seed(1))
    names = list(x)
    ours = torch.autograd.grad((o * weights).sum(), [x[n] for n in names])
    theirs = torch.autograd.grad((o_fla * weights).sum(), [x[n] for n in names])
    errors = {n: rel_error(a, b) for n, a, b in zip(names, ours, theirs)}
    assert all(e <= TOL[torch.float32] for e in errors.values()), errors


@pytest.mark.parametrize("op", [path_attention, path_attention_reference])
def test_cache_carried_across_calls_equals_one_call(op):
    x = {n: t.detach() for n, t in make(2, 23, 2, 4, torch.float64).items()}
    o_all, state_all = op(**x)
    state, pieces = None, []
    for lo, hi in [(0, 6), (6, 7), (7, 23)]:
        o, state = op(**{n: t[:, lo:hi] for n, t in x.items()}, initial_state=state)
        pieces.append(o)
    assert rel_error(torch.cat(pieces, 1), o_all) <= 1e-12
    assert all(rel_error(a, b) <= 1e-12 for a, b in zip(state, state_all))


def test_the_cache_holds_keys_carried_through_every_later_householder():
    x = {n: t.detach() for n, t in make(1, 6, 1, 3, torch.float64).items()}
    _, (keys, values, gates) = path_attention(**x)
    w, beta = x["w"][0, :, 0], x["beta"][0, :, 0]
    key = x["k"][0, 1, 0]
    for s in range(2, 6):  # key 1 through H_2 .. H_5
        key = key - beta[s] * (w[s] @ key) * w[s]
    assert rel_error(keys[0, 1, 0], key) <= 1e-14
    assert rel_error(gates[0, :, 0], x["g"][0, :, 0].flip(0).cumsum(0).flip(0) - x["g"][0, :, 0]) <= 1e-14
    assert torch.equal(values, x["v"])


def test_empty_input_returns_the_cache_unchanged():
    x = {n: t.detach() for n, t in make(2, 4, 2, 3, torch.float64).items()}
    _, state = path_attention(**x)
    o, after = path_attention(**{n: t[:, :0] for n, t in x.items()}, initial_state=state)
    assert o.shape == (2, 0, 2, 3) and all(torch.equal(a, b) for a, b in zip(after, state))


@pytest.mark.parametrize("op", [path_attention, path_attention_reference])
def test_bad_shapes_are_clear_errors(op):
    x = {n: t.detach() for n, t in make(2, 5, 2, 4, torch.float32).items()}
    with pytest.raises(ValueError, match=r"w must be \[B, T, H, Dk\] = \[2, 5, 2, 4\], got \(2, 5, 2, 3\)"):
        op(**{**x, "w": x["w"][..., :3]})
    with pytest.raises(ValueError, match=r"beta must be \[B, T, H\] = \[2, 5, 2\], got \(2, 5\)"):
        op(**{**x, "beta": x["beta"][..., 0]})
    with pytest.raises(ValueError, match=r"g must be \[B, T, H\] = \[2, 5, 2\] or None"):
        op(**{**x, "g": x["g"][:, :4]})
    k0, v0, g0 = torch.zeros(2, 3, 2, 4), torch.zeros(2, 3, 2, 4), torch.zeros(2, 3, 2)
    with pytest.raises(ValueError, match=r"initial_state's v must be \[2, 3, 2, 4\], got \(2, 2, 2, 4\)"):
        op(**x, initial_state=(k0, v0[:, :2], g0))
    with pytest.raises(ValueError, match=r"initial_state must be \(k \[B, P, H, Dk\]"):
        op(**x, initial_state=(k0, v0))


def test_bad_chunk_size_is_a_clear_error():
    x = {n: t.detach() for n, t in make(1, 3, 1, 4, torch.float32).items()}
    with pytest.raises(ValueError, match="chunk_size must be a positive integer or None, got 0"):
        path_attention(**x, chunk_size=0)
