"""The bilinear fast forms (Ebrahimi & Memisevic 2025) against their definitions: the contracted and
materialised `bilinear_transition`, the pure `dense_scan`, the layer at a hidden size where the full
structure contracts, and the evaluation-time renormalised states against the unnormalised ones."""

import pytest
import torch

from statetrack.layers.bilinear import STRUCTURES, Bilinear
from statetrack.ops.dense import bilinear_transition, bilinear_transition_reference, dense_scan


def grads(out, inputs, seed=0):
    """Outputs and the gradients of a fixed random projection of them."""
    g = torch.Generator().manual_seed(seed)
    weights = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in out]
    loss = sum((o * w).sum() for o, w in zip(out, weights))
    return list(out) + list(torch.autograd.grad(loss, inputs, allow_unused=True))


def assert_all_close(a, b, tol=1e-10):
    for u, v in zip(a, b):
        assert (u is None) == (v is None)
        if u is not None:
            torch.testing.assert_close(u, v, rtol=tol, atol=tol)


@pytest.mark.parametrize("impl, H, D", [("contract", 1, 5), ("contract", 1, 33), ("materialize", 3, 4), ("materialize", 1, 6)])
@pytest.mark.parametrize("additive", [False, True])
def test_bilinear_transition_equals_forming_every_transition(impl, H, D, additive):
    gen = torch.Generator().manual_seed(1)
    B, T, K = 3, 7, 6
    x = torch.randn(B, T, K, dtype=torch.float64, generator=gen, requires_grad=True)
    W = (torch.randn(K, H, D, D, dtype=torch.float64, generator=gen) / (K * D) ** 0.5).requires_grad_()
    b = torch.randn(B, T, H, D, dtype=torch.float64, generator=gen, requires_grad=True) if additive else None
    h0 = torch.randn(B, H, D, dtype=torch.float64, generator=gen, requires_grad=True)
    inputs = [t for t in (x, W, b, h0) if t is not None]
    fast = grads(bilinear_transition(x, W, b, h0, impl=impl), inputs)
    ref = grads(bilinear_transition_reference(x, W, b, h0), inputs)
    assert_all_close(fast, ref)


def test_contract_skips_the_gradients_nobody_asked_for():
    """A frozen recurrence (W and x fixed) still gets the initial state's gradient, and only that."""
    gen = torch.Generator().manual_seed(2)
    x, W = torch.randn(2, 5, 4, dtype=torch.float64, generator=gen), torch.randn(4, 1, 6, 6, dtype=torch.float64, generator=gen) / 5
    h0 = torch.randn(2, 1, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    (fast,) = torch.autograd.grad(bilinear_transition(x, W, None, h0, impl="contract")[0].sum(), [h0])
    (ref,) = torch.autograd.grad(bilinear_transition_reference(x, W, None, h0)[0].sum(), [h0])
    torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-12)


def test_bilinear_transition_empty_sequence_and_bad_settings():
    x, W, h0 = torch.rand(2, 0, 4), torch.rand(4, 1, 3, 3), torch.rand(2, 1, 3)
    h, final = bilinear_transition(x, W, None, h0)
    assert h.shape == (2, 0, 1, 3) and torch.equal(final, h0)
    with pytest.raises(ValueError, match=r"W must be \[K, H, D, D\]"):
        bilinear_transition(torch.rand(2, 3, 5), W)
    with pytest.raises(ValueError, match="impl='contract' needs one head"):
        bilinear_transition(torch.rand(2, 3, 4), torch.rand(4, 2, 3, 3), impl="contract")
    with pytest.raises(ValueError, match="impl must be one of"):
        bilinear_transition(torch.rand(2, 3, 4), W, impl="fast")


def test_pure_dense_scan_equals_a_zero_additive_term():
    gen = torch.Generator().manual_seed(3)
    M = (torch.randn(6, 4, 3, 3, dtype=torch.float64, generator=gen) / 2).requires_grad_()
    h0 = torch.randn(4, 3, 1, dtype=torch.float64, generator=gen, requires_grad=True)
    pure = grads([dense_scan(M, None, h0)], [M, h0])
    zero = grads([dense_scan(M, torch.zeros(6, 4, 3, 1, dtype=torch.float64), h0)], [M, h0])
    assert_all_close(pure, zero, tol=1e-14)


@pytest.mark.parametrize("additive", ["none", "both"])
@pytest.mark.parametrize("structure", STRUCTURES)
def test_layer_at_a_size_where_full_contracts(structure, additive):
    """hidden 32: the full structure takes the contracted form (the default-size tests take the
    materialised one); forward, final state and every gradient against the per-step definition."""
    torch.manual_seed(4)
    m = Bilinear(12, structure=structure, hidden=32, rank=5, block_size=8, additive=additive).double()
    x = torch.randn(2, 6, 12, dtype=torch.float64, requires_grad=True)
    params = [x, *[p for p in m.parameters() if p.requires_grad]]
    assert_all_close(grads(m(x), params), grads(m.forward_reference(x), params), tol=1e-9)


@pytest.mark.parametrize("structure", ["diagonal", "rotation"])
def test_log_magnitude_states_keep_zeros_and_signs(structure):
    """The diagonal structures' renormalised states in log-magnitude form: transitions that are exactly
    zero (a coordinate dies; all of them: the state stays zero, not NaN) and negative or rotating ones,
    against the unnormalised scan."""
    torch.manual_seed(5)
    m = Bilinear(8, structure=structure, hidden=6).double().eval()
    x = torch.randn(2, 30, 8, dtype=torch.float64)
    with torch.no_grad():
        if structure == "diagonal":
            m.D[:, 0] = 0  # coordinate 0 is multiplied by 0 at every step
            m.D[0, 1] = 50.0  # a large, sign-changing coordinate
        y, h = m(x)
        m.normalize_every = 0
        y_plain, _ = m(x)
    torch.testing.assert_close(y, y_plain, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(h.norm(dim=-1), torch.ones(2, dtype=torch.float64))
    if structure == "diagonal":
        with torch.no_grad():
            m.D.zero_()
            m.normalize_every = 1
            y, h = m(x)
        assert torch.isfinite(y).all() and torch.equal(h, torch.zeros_like(h))


# size 32: the dense structures' evaluation loop steps row vectors through transposed transitions
SIZES = [{"hidden": 6, "rank": 3, "block_size": 3}, {"hidden": 64, "rank": 32, "block_size": 32}]


@pytest.mark.parametrize("size", SIZES, ids=["small", "row-form"])
@pytest.mark.parametrize("structure", STRUCTURES)
def test_renormalised_states_are_differentiable(structure, size):
    """Evaluation with gradients on (no torch.no_grad): the renormalised forms give the unnormalised
    outputs' gradients (the readout is scale invariant)."""
    torch.manual_seed(6)
    m = Bilinear(8, structure=structure, **size).double().eval()
    x = torch.randn(2, 12, 8, dtype=torch.float64, requires_grad=True)
    params = [x, *m.parameters()]
    renormalised = grads([m(x)[0]], params)
    m.normalize_every = 0
    assert_all_close(renormalised, grads([m(x)[0]], params), tol=1e-9)


@pytest.mark.parametrize("size", SIZES, ids=["small", "row-form"])
@pytest.mark.parametrize("structure", STRUCTURES)
def test_evaluation_in_chunks_continues_the_sequence(structure, size):
    """The renormalised evaluation carries a unit-norm state across calls: chunks give one call's outputs."""
    torch.manual_seed(7)
    m = Bilinear(8, structure=structure, **size).double().eval()
    x = torch.randn(1, 40, 8, dtype=torch.float64)
    with torch.no_grad():
        y, h = m(x)
        y1, s = m(x[:, :17])
        y2, s = m(x[:, 17:], s)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(s, h, rtol=1e-10, atol=1e-10)
