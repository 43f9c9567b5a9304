"""DeltaFormer attention by one triangular solve equals its loop (Zhong et al. 2025); with the softmax
write kernel, fla's naive form; with the gaussian one, the delta rule on unit-norm features."""

import pytest
import torch

from ops_helpers import TOL, assert_same, load_fla_naive, rel_error
from statetrack.ops.deltaformer import WRITE_KERNELS, deltaformer, deltaformer_reference


def make(B, T, H, Dk, Dv, dtype, beta_scale=2.0, past=0, seed=0):
    """Inputs and, with past > 0, a cache (k_past, u_past) of `past` earlier tokens, all requiring grad."""
    gen = torch.Generator().manual_seed(seed)
    x = {
        "q": torch.randn(B, T, H, Dk, dtype=dtype, generator=gen),
        "k": torch.randn(B, T, H, Dk, dtype=dtype, generator=gen),
        "v": torch.randn(B, T, H, Dv, dtype=dtype, generator=gen),
        "beta": beta_scale * torch.rand(B, T, H, dtype=dtype, generator=gen),
    }
    if past:
        x["k_past"] = torch.randn(B, past, H, Dk, dtype=dtype, generator=gen)
        x["u_past"] = torch.randn(B, past, H, Dv, dtype=dtype, generator=gen)
    return {n: t.requires_grad_() for n, t in x.items()}


def with_cache(op, **options):
    """op as (o, u cache) of named tensors, so assert_same differentiates through the cache too."""

    def run(q, k, v, beta, k_past=None, u_past=None):
        cache = None if k_past is None else (k_past, u_past)
        o, (_, u) = op(q, k, v, beta, initial_state=cache, **options)
        return o, u

    return run


@pytest.mark.parametrize("write_kernel", WRITE_KERNELS)
@pytest.mark.parametrize("chunk_size", [4, 128])  # 11 tokens: three blocks, the last one short; one block
@pytest.mark.parametrize("past", [0, 4])
@pytest.mark.parametrize("beta_scale", [1.0, 2.0])  # eig_range [0,1] and [-1,1]: beta in (0, 1) and (0, 2)
def test_fast_equals_reference_float64(beta_scale, past, chunk_size, write_kernel):
    x = make(2, 11, 2, 6, 5, torch.float64, beta_scale=beta_scale, past=past)
    fast = with_cache(deltaformer, chunk_size=chunk_size, write_kernel=write_kernel)
    assert_same(fast, with_cache(deltaformer_reference, write_kernel=write_kernel), x, TOL[torch.float64])


@pytest.mark.parametrize("beta_scale", [1.0, 2.0])
def test_gaussian_write_is_the_delta_rule_on_unit_norm_features(beta_scale):
    """The module docstring's feature-space form, built independently: features f_t of unit norm with
    f_t.f_j = exp(-s |k_t - k_j|^2 / 2) (rows of the Cholesky factor of the keys' Gram matrix), the state
    S_t = S_{t-1} (I - beta_t f_t f_t^T) + v_t f_t^T with its transition materialised, and u_t read
    back as (S_t - S_{t-1}) f_t; the transition's eigenvalues are 1 - beta_t and 1."""
    x = {n: t.detach() for n, t in make(1, 9, 2, 4, 3, torch.float64, beta_scale=beta_scale, past=3).items()}
    _, (k_all, u_all) = deltaformer(x["q"], x["k"], x["v"], x["beta"], initial_state=(x["k_past"], x["u_past"]))
    P, T, s = 3, 9, 0.5  # s = 1/sqrt(4)
    for h in range(2):
        keys = k_all[0, :, h]  # [P + T, D]
        F_ = torch.linalg.cholesky(torch.exp(-0.5 * s * torch.cdist(keys, keys).square()))  # row t: f_t
        S = x["u_past"][0, :, h].T @ F_[:P]  # [Dv, P + T]: sum_j u_j f_j^T over the cache
        eye = torch.eye(P + T, dtype=torch.float64)
        for t in range(T):
            f, b = F_[P + t], x["beta"][0, t, h]
            A = eye - b * torch.outer(f, f)
            eigs = torch.linalg.eigvalsh(A)
            assert torch.allclose(eigs[0], 1 - b) and torch.allclose(eigs[1:], torch.ones(P + T - 1, dtype=A.dtype))
            S_next = S @ A + torch.outer(x["v"][0, t, h], f)
            assert rel_error((S_next - S) @ f, u_all[0, P + t, h]) <= 1e-10
            S = S_next


@pytest.mark.parametrize("beta_scale", [1.0, 2.0])
def test_softmax_write_agrees_with_fla_naive_float32(beta_scale):
    """fla's naive form uses its q for the write kernel and the read alike, and fla's layer passes k
    as that q (key-key write kernel): so our op with q = k and the softmax write kernel is fla's naive
    form on (k, k, v, beta)."""
    fla = load_fla_naive("deltaformer/naive.py")
    x = make(2, 12, 2, 8, 8, torch.float32, beta_scale=beta_scale)
    x.pop("q")
    ours = {n: t.detach().clone().requires_grad_() for n, t in x.items()}
    o, _ = deltaformer(ours["k"], ours["k"], ours["v"], ours["beta"], chunk_size=5, write_kernel="softmax")
    o_fla = fla.naive_deltaformer_attn(x["k"], x["k"], x["v"], x["beta"])
    o_ref, _ = deltaformer_reference(x["k"], x["k"], x["v"], x["beta"], write_kernel="softmax")
    assert rel_error(o, o_fla) <= TOL[torch.float32] and rel_error(o_ref, o_fla) <= TOL[torch.float32]
    w = torch.randn(o.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((o * w).sum(), list(ours.values()))
    grads_fla = torch.autograd.grad((o_fla * w).sum(), list(x.values()))
    for name, g, g_fla in zip(ours, grads, grads_fla):
        assert rel_error(g, g_fla) <= TOL[torch.float32], name


def test_state_carried_across_calls_equals_one_call():
    x = {n: t.detach() for n, t in make(2, 20, 2, 4, 3, torch.float64).items()}
    o_all, (k_all, u_all) = deltaformer(**x)
    state, pieces = None, []
    for lo, hi in [(0, 5), (5, 6), (6, 6), (6, 20)]:
        o, state = deltaformer(*(x[n][:, lo:hi] for n in ("q", "k", "v", "beta")), initial_state=state, chunk_size=3)
        pieces.append(o)
    assert rel_error(torch.cat(pieces, 1), o_all) <= 1e-12
    assert rel_error(state[0], k_all) == 0 and rel_error(state[1], u_all) <= 1e-12
    o_ref, _ = deltaformer_reference(
        *(x[n][:, 7:] for n in ("q", "k", "v", "beta")), initial_state=(k_all[:, :7], u_all[:, :7])
    )
    assert rel_error(o_ref, o_all[:, 7:]) <= 1e-12


@pytest.mark.parametrize("write_kernel", WRITE_KERNELS)
def test_first_token_writes_its_value_and_reads_itself(write_kernel):
    x = {n: t.detach() for n, t in make(1, 3, 2, 4, 4, torch.float64).items()}
    o, (_, u) = deltaformer(**x, write_kernel=write_kernel)
    assert torch.equal(u[:, 0], x["v"][:, 0]) and rel_error(o[:, 0], x["v"][:, 0]) <= 1e-15
    # the second token recalls only the first: u_1 = v_1 - beta_1 w_10 v_0, the softmax's w_10 = 1
    w = 1.0 if write_kernel == "softmax" else torch.exp(-0.25 * (x["k"][:, 1] - x["k"][:, 0]).square().sum(-1))
    assert rel_error(u[:, 1], x["v"][:, 1] - (x["beta"][:, 1] * w)[..., None] * x["v"][:, 0]) <= 1e-14


def test_bad_shapes_are_clear_errors():
    x = {n: t.detach() for n, t in make(1, 3, 2, 4, 4, torch.float32).items()}
    with pytest.raises(ValueError, match=r"k must be \[B, T, H, Dk\] = \[1, 3, 2, 4\]"):
        deltaformer(x["q"], x["k"][:, :2], x["v"], x["beta"])
    with pytest.raises(ValueError, match=r"beta must be \[B, T, H\] = \[1, 3, 2\]"):
        deltaformer(x["q"], x["k"], x["v"], x["beta"][..., None])
    with pytest.raises(ValueError, match="initial_state must be the cache"):
        deltaformer(**x, initial_state=torch.zeros(1, 2, 4, 4))
    with pytest.raises(ValueError, match=r"initial_state's u must be \[B, P, H, Dv\] = \[1, 5, 2, 4\]"):
        deltaformer(**x, initial_state=(torch.zeros(1, 5, 2, 4), torch.zeros(1, 4, 2, 4)))
    with pytest.raises(ValueError, match="chunk_size must be a positive integer, got 0"):
        deltaformer(**x, chunk_size=0)
    with pytest.raises(ValueError, match="write_kernel must be one of gaussian, softmax, got 'linear'"):
        deltaformer_reference(**x, write_kernel="linear")
