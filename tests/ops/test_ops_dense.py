"""The fused dense transition and its reverse-scan backward equal the loop (bilinear models, Ebrahimi & Memisevic 2025)."""

import pytest
import torch

from ops_helpers import TOL, assert_same, rel_error
from statetrack.ops import dense as dense_module
from statetrack.ops import (
    dense_transition,
    dense_transition_reference,
    native,
    unit_normalize,
    unit_normalize_reference,
)
from statetrack.ops.dense import dense_scan


def make(B, T, H, D, E=None, additive=True, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tail = (D,) if E is None else (D, E)
    x = {
        "A": torch.randn(B, T, H, D, D, dtype=dtype, generator=gen) / D**0.5,
        "b": torch.randn((B, T, H) + tail, dtype=dtype, generator=gen) if additive else None,
        "initial_state": torch.randn((B, H) + tail, dtype=dtype, generator=gen),
    }
    return {n: (t.requires_grad_() if t is not None else None) for n, t in x.items()}


@pytest.mark.parametrize("E", [None, 3])
@pytest.mark.parametrize("additive", [True, False])
@pytest.mark.parametrize("T", [1, 13])
def test_fast_equals_reference_float64(T, additive, E):
    x = make(2, T, 2, 5, E=E, additive=additive)
    assert_same(dense_transition, dense_transition_reference, x, TOL[torch.float64])


def test_fast_equals_reference_float32():
    x = make(4, 60, 2, 16, dtype=torch.float32)
    assert_same(dense_transition, dense_transition_reference, x, TOL[torch.float32])


def test_state_carried_across_calls_equals_one_call():
    x = make(2, 30, 1, 4)
    h_all, S_all = dense_transition(**x)
    S, pieces = x["initial_state"], []
    for lo, hi in [(0, 11), (11, 30)]:
        h, S = dense_transition(x["A"][:, lo:hi], x["b"][:, lo:hi], initial_state=S)
        pieces.append(h)
    assert rel_error(torch.cat(pieces, 1), h_all) <= 1e-13 and rel_error(S, S_all) <= 1e-13


def test_empty_sequence_returns_initial_state():
    x = make(2, 0, 2, 3)
    h, S = dense_transition(**x)
    assert h.shape == (2, 0, 2, 3) and torch.equal(S, x["initial_state"])


def test_bad_shapes_name_the_expected_shape():
    with pytest.raises(ValueError, match=r"A must be \[B, T, H, D, D\]"):
        dense_transition(torch.rand(2, 3, 1, 4, 5))


def scan_case(N, Z, D, additive, negative, dtype=torch.float64, seed=0):
    """Inputs of `dense_scan` (time-major, vector state); `negative` makes every M_n = -I + small
    noise, a transition whose eigenvalues are all near -1 (the sign flips parity needs)."""
    gen = torch.Generator().manual_seed(seed)
    M = torch.randn(N, Z, D, D, dtype=dtype, generator=gen) / D**0.5
    if negative:
        M = -torch.eye(D, dtype=dtype) + 0.1 * M
    X = torch.randn(N, Z, D, 1, dtype=dtype, generator=gen) if additive else None
    h0 = torch.randn(Z, D, 1, dtype=dtype, generator=gen)
    return [t.requires_grad_() if t is not None else None for t in (M, X, h0)]


def scan_and_grads(inputs, seed=1):
    hs = dense_scan(*inputs)
    weights = torch.randn(hs.shape, dtype=hs.dtype, generator=torch.Generator().manual_seed(seed))
    grads = torch.autograd.grad((hs * weights).sum(), [t for t in inputs if t is not None and t.requires_grad])
    return hs, grads


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler for the native scan")
@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("additive", [True, False])
@pytest.mark.parametrize("D", [1, 2, 4, 5, 8, 16])
def test_native_dense_scan_equals_the_batched_loop_float64(D, additive, negative, monkeypatch):
    """The compiled loop (sizes 2, 4, 8, 16 specialised, others generic) against the batched
    products, forward and the gradients of M, X and h0."""
    inputs = scan_case(13, 7, D, additive, negative)
    assert dense_module._native(*inputs), "the compiled loop should take this scan"
    hs, grads = scan_and_grads(inputs)
    monkeypatch.setattr(dense_module, "NATIVE_MAX_D", 0)  # the batched-product loop
    assert not dense_module._native(*inputs)
    hs_ref, grads_ref = scan_and_grads(inputs)
    assert rel_error(hs, hs_ref) <= 1e-13
    for grad, grad_ref in zip(grads, grads_ref):
        assert rel_error(grad, grad_ref) <= 1e-13


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler for the native scan")
def test_native_dense_scan_float32_and_frozen_transitions(monkeypatch):
    """float32 within rounding; with M not requiring a gradient no dM is formed and the others agree."""
    inputs = scan_case(64, 33, 8, True, False, dtype=torch.float32)
    inputs[0].requires_grad_(False)
    hs, grads = scan_and_grads(inputs)
    monkeypatch.setattr(dense_module, "NATIVE_MAX_D", 0)
    hs_ref, grads_ref = scan_and_grads(inputs)
    assert rel_error(hs, hs_ref) <= TOL[torch.float32]
    assert all(rel_error(g, r) <= TOL[torch.float32] for g, r in zip(grads, grads_ref))


def test_large_or_matrix_states_keep_the_batched_loop():
    M, X, h0 = scan_case(3, 2, dense_module.NATIVE_MAX_D + 1, True, False)
    assert not dense_module._native(M, X, h0)
    assert not dense_module._native(M, X.expand(-1, -1, -1, 3), h0.expand(-1, -1, 3))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_unit_normalize_equals_its_reference_with_zero_and_tiny_vectors(dtype):
    """The direction h / ||h|| of a bilinear state: the same numbers and gradient as autograd's
    division, clamp and norm, where a zero vector stays zero (its gradient g / tiny, as the clamp's)."""
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(4, 3, 6, dtype=dtype, generator=gen)
    h[0, 1] = 0.0
    h[2, 0] = 1e-3
    h.requires_grad_()
    w = torch.randn(h.shape, dtype=dtype, generator=gen)
    results = []
    for f in (unit_normalize, unit_normalize_reference):
        y = f(h)
        results.append((y, *torch.autograd.grad((y * w).sum(), h)))
    (y, g), (y_ref, g_ref) = results
    assert torch.equal(y, y_ref)
    assert torch.equal(y[0, 1], torch.zeros(6, dtype=dtype))
    assert rel_error(g, g_ref) < TOL[dtype]
    torch.testing.assert_close(g[0, 1], w[0, 1] / torch.finfo(dtype).tiny)
