"""Mamba-2's chunked scan (the state-space dual form, Dao & Gu 2024) equals its materialised
definition (`ssd_scan_reference`: a diagonal scan over [B, T, H, P, N]), forward and every gradient,
with decays in (0, 1) and in (-1, 1) (Grazzi et al. 2025), exact zeros, lengths within one chunk,
on chunk boundaries and past them."""

import pytest
import torch

from ops_helpers import assert_same
from statetrack.ops import ssd_scan, ssd_scan_reference
from statetrack.ops.selective import SSD_CHUNK


def make(B, T, H, P, N, negative=False, initial=True, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    a = torch.rand(B, T, H, dtype=dtype, generator=gen)
    inputs = {
        "xdt": torch.randn(B, T, H, P, dtype=dtype, generator=gen),
        "a": 2 * a - 1 if negative else a,
        "B_t": torch.randn(B, T, N, dtype=dtype, generator=gen),
        "C_t": torch.randn(B, T, N, dtype=dtype, generator=gen),
        "initial_state": torch.randn(B, H, P, N, dtype=dtype, generator=gen) if initial else None,
    }
    if not initial:
        inputs.pop("initial_state")
    return {k: v.requires_grad_() for k, v in inputs.items()}


@pytest.mark.parametrize("negative", [False, True], ids=["[0,1]", "[-1,1]"])
@pytest.mark.parametrize("initial", [True, False])
@pytest.mark.parametrize("T", [1, 5, SSD_CHUNK, 2 * SSD_CHUNK + 3])
def test_chunked_equals_materialised(T, initial, negative):
    inputs = make(2, T, 3, 4, 5, negative=negative, initial=initial)
    assert_same(ssd_scan, ssd_scan_reference, inputs, tol=1e-12)


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_any_chunk_length_gives_the_same_function(chunk):
    inputs = make(2, 20, 2, 3, 4, negative=True)
    assert_same(lambda **v: ssd_scan(**v, chunk=chunk), ssd_scan_reference, inputs, tol=1e-12)


def test_zero_decays_are_exact():
    """a_t = 0 cuts the state off: the chunked form takes running products, never quotients."""
    inputs = make(2, 2 * SSD_CHUNK + 1, 2, 3, 4, negative=True)
    with torch.no_grad():
        inputs["a"][:, ::5] = 0.0
        inputs["a"][:, 1::7] = -1.0
    assert_same(ssd_scan, ssd_scan_reference, inputs, tol=1e-12)


@pytest.mark.parametrize("initial", [True, False])
def test_empty_sequence(initial):
    inputs = make(2, 0, 3, 4, 5, initial=initial)
    y, h = ssd_scan(**inputs)
    assert y.shape == (2, 0, 3, 4)
    expected = inputs["initial_state"] if initial else torch.zeros(2, 3, 4, 5, dtype=torch.float64)
    assert torch.equal(h, expected)


def test_bad_shapes_name_the_expected_shape():
    inputs = {k: v.detach() for k, v in make(2, 5, 3, 4, 5).items()}
    with pytest.raises(ValueError, match=r"a must be \[B, T, H\] = \[2, 5, 3\]"):
        ssd_scan(**{**inputs, "a": inputs["a"][..., :2]})
    with pytest.raises(ValueError, match=r"initial_state must be \[B, H, P, N\] = \[2, 3, 4, 5\]"):
        ssd_scan(**{**inputs, "initial_state": inputs["initial_state"][..., :4]})
