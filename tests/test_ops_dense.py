"""The fused dense transition and its reverse-scan backward equal the loop (bilinear models, Ebrahimi & Memisevic 2025)."""

import pytest
import torch
from ops_helpers import TOL, assert_same, rel_error

from statetrack.ops import dense_transition, dense_transition_reference


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
