"""The two-level diagonal scan and its reverse-scan backward equal the loop (SPEC 1.1, 1.2)."""

import pytest
import torch
from ops_helpers import TOL, assert_same, rel_error

from statetrack.ops import diagonal_scan, diagonal_scan_reference


def make(shape, kind, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    B, T = shape[:2]
    if kind == "positive":
        a = torch.rand(shape, dtype=dtype, generator=gen)
    elif kind == "negative":  # the [-1, 1] eigenvalue range, with exact zeros (resets) mixed in
        a = 2 * torch.rand(shape, dtype=dtype, generator=gen) - 1
        a = a * (torch.rand(shape, dtype=dtype, generator=gen) > 0.1)
    else:  # complex, |a| < 1 (S4D / IDS4, rotation models)
        r = torch.rand(shape, dtype=dtype, generator=gen)
        theta = 6.3 * torch.rand(shape, dtype=dtype, generator=gen)
        a = torch.polar(r, theta)
    cdtype = a.dtype
    b = torch.randn(shape, dtype=cdtype, generator=gen)
    h0 = torch.randn((B,) + tuple(shape[2:]), dtype=cdtype, generator=gen)
    return {"a": a.requires_grad_(), "b": b.requires_grad_(), "initial_state": h0.requires_grad_()}


@pytest.mark.parametrize("kind", ["positive", "negative", "complex"])
@pytest.mark.parametrize("T", [1, 2, 9, 30, 101])
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_fast_equals_reference_float64(T, kind, chunk_size):
    x = make((2, T, 3, 4), kind)
    assert_same(lambda **a: diagonal_scan(**a, chunk_size=chunk_size), diagonal_scan_reference, x, TOL[torch.float64])


@pytest.mark.parametrize("kind", ["negative", "complex"])
def test_fast_equals_reference_float32(kind):
    x = make((3, 257, 8, 4), kind, dtype=torch.float32)
    assert_same(diagonal_scan, diagonal_scan_reference, x, TOL[torch.float32])


def test_real_gate_with_complex_input_promotes():
    x = make((2, 20, 3), "positive")
    b = torch.randn(2, 20, 3, dtype=torch.complex128)
    h, S = diagonal_scan(x["a"], b)
    h_ref, S_ref = diagonal_scan_reference(x["a"], b)
    assert h.dtype == torch.complex128 and rel_error(h, h_ref) <= 1e-12


def test_state_carried_across_calls_equals_one_call():
    x = make((2, 50, 5), "negative")
    h_all, S_all = diagonal_scan(**x)
    S, pieces = x["initial_state"], []
    for lo, hi in [(0, 1), (1, 17), (17, 50)]:
        h, S = diagonal_scan(x["a"][:, lo:hi], x["b"][:, lo:hi], initial_state=S)
        pieces.append(h)
    assert rel_error(torch.cat(pieces, 1), h_all) <= 1e-13 and rel_error(S, S_all) <= 1e-13


def test_empty_sequence_and_no_initial_state():
    h, S = diagonal_scan(torch.rand(2, 0, 3), torch.rand(2, 0, 3))
    assert h.shape == (2, 0, 3) and torch.equal(S, torch.zeros(2, 3))
    x = make((1, 12, 2), "positive")
    h, S = diagonal_scan(x["a"], x["b"], output_final_state=False)
    assert S is None and rel_error(h, diagonal_scan_reference(x["a"], x["b"])[0]) <= 1e-13


def test_bad_shapes_name_the_expected_shape():
    with pytest.raises(ValueError, match="equal shape"):
        diagonal_scan(torch.rand(2, 5, 3), torch.rand(2, 5, 4))
    with pytest.raises(ValueError, match=r"initial_state must be \[B, ...\]"):
        diagonal_scan(torch.rand(2, 5, 3), torch.rand(2, 5, 3), torch.rand(2, 4))
