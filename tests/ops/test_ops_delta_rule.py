"""The chunkwise delta rule equals its reference loop and fla's naive forms (Yang et al. 2024b)."""

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import TOL, assert_same, load_fla_naive, rel_error
from statetrack.ops import delta_rule, delta_rule_reference, native
from statetrack.ops.delta_rule import chunk_layout
from statetrack.ops.triangular import unit_lower_inverse, unit_lower_inverse_doubling

BETA = {
    "whole (0,2)": lambda u: 2 * u,
    "near 0": lambda u: 1e-3 * u + 1e-6,
    "near 2": lambda u: 2 - 1e-3 * u - 1e-6,
}


def make(B, T, H, Dk, Dv, dtype, beta="whole (0,2)", gated=False, initial=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = {
        "q": torch.randn(B, T, H, Dk, dtype=dtype, generator=gen),
        "k": F.normalize(torch.randn(B, T, H, Dk, dtype=dtype, generator=gen), dim=-1),
        "v": torch.randn(B, T, H, Dv, dtype=dtype, generator=gen),
        "beta": BETA[beta](torch.rand(B, T, H, dtype=dtype, generator=gen)),
        "g": -torch.rand(B, T, H, dtype=dtype, generator=gen) if gated else None,
        "initial_state": torch.randn(B, H, Dk, Dv, dtype=dtype, generator=gen) if initial else None,
    }
    return {n: (t.requires_grad_() if t is not None else None) for n, t in x.items()}


@pytest.mark.parametrize("beta", list(BETA))
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("T", [1, 5, 16, 37])
def test_chunk_equals_reference_float64(T, gated, beta):
    x = make(2, T, 2, 8, 6, torch.float64, beta=beta, gated=gated, initial=True)
    assert_same(lambda **a: delta_rule(**a, chunk_size=8), delta_rule_reference, x, TOL[torch.float64])


@pytest.mark.parametrize("gated", [False, True])
def test_default_chunk_several_chunks_float32(gated):
    x = make(2, 100, 2, 16, 16, torch.float32, gated=gated, initial=True)  # 100 = 4 chunks of 25
    assert_same(delta_rule, delta_rule_reference, x, TOL[torch.float32])


def test_no_initial_state_and_no_final_state():
    x = make(1, 9, 1, 4, 4, torch.float64)
    o, S = delta_rule(**x, output_final_state=False, chunk_size=4)
    o_ref, _ = delta_rule_reference(**x)
    assert S is None and rel_error(o, o_ref) <= 1e-12


def test_empty_sequence_returns_initial_state():
    x = make(2, 0, 2, 4, 3, torch.float64, initial=True)
    o, S = delta_rule(**x)
    assert o.shape == (2, 0, 2, 3) and torch.equal(S, x["initial_state"])


@pytest.mark.parametrize("gated", [False, True])
def test_state_carried_across_calls_equals_one_call(gated):
    x = make(2, 45, 2, 8, 8, torch.float64, gated=gated, initial=True)
    o_all, S_all = delta_rule(**x, chunk_size=16)
    S, pieces = x["initial_state"], []
    for lo, hi in [(0, 7), (7, 8), (8, 40), (40, 45)]:
        part = {n: x[n][:, lo:hi] if x[n] is not None else None for n in ("q", "k", "v", "beta", "g")}
        o, S = delta_rule(**part, initial_state=S, chunk_size=16)
        pieces.append(o)
    assert rel_error(torch.cat(pieces, 1), o_all) <= 1e-12
    assert rel_error(S, S_all) <= 1e-12


def test_chunk_layout_pads_least():
    assert chunk_layout(100, 64) == (2, 50)
    assert chunk_layout(20, 64) == (1, 20)
    assert chunk_layout(1024, 32) == (32, 32)
    with pytest.raises(ValueError, match="chunk_size"):
        chunk_layout(10, 0)


def test_bad_shapes_name_the_expected_shape():
    x = make(2, 5, 2, 4, 4, torch.float32)
    with pytest.raises(ValueError, match=r"beta must be \[B, T, H\]"):
        delta_rule(x["q"], x["k"], x["v"], x["beta"][:, :3])


@pytest.mark.parametrize("C", [1, 3, 16, 50])
def test_unit_lower_inverse_matches_dense_inverse_and_gradient(C):
    gen = torch.Generator().manual_seed(C)
    A = (0.3 * torch.randn(3, C, C, dtype=torch.float64, generator=gen)).requires_grad_()
    T = unit_lower_inverse(A)
    ref = torch.linalg.inv(torch.eye(C, dtype=torch.float64) + A.tril(-1))
    assert rel_error(T, ref) <= 1e-12
    w = torch.randn(C, C, dtype=torch.float64, generator=gen)
    (g,) = torch.autograd.grad((T * w).sum(), A)
    (g_ref,) = torch.autograd.grad((ref * w).sum(), A)
    assert rel_error(g, g_ref) <= 1e-10


@pytest.mark.parametrize("form", ["native", "doubling"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("C", [1, 2, 7, 32, 33, 100])
def test_both_inverse_forms_match_the_dense_inverse(C, dtype, form):
    if form == "native" and not native.available():
        pytest.skip("no C compiler for the native kernels")
    gen = torch.Generator().manual_seed(C)
    A = (0.3 * torch.randn(2, 3, C, C, dtype=torch.float64, generator=gen)).to(dtype)
    A.diagonal(dim1=-2, dim2=-1).fill_(float("nan"))  # only the strictly lower part may be read
    inverse = native.unit_lower_inverse(A.reshape(-1, C, C)).view(A.shape) if form == "native" else unit_lower_inverse_doubling(A)
    ref = torch.linalg.inv(torch.eye(C, dtype=torch.float64) + A.double().tril(-1))
    assert inverse.dtype == dtype
    assert rel_error(inverse, ref) <= (1e-12 if dtype == torch.float64 else 1e-5)


def _to_fla(t):
    return t.detach().transpose(1, 2).contiguous()


def test_agrees_with_fla_naive_recurrence_float32():
    fla = load_fla_naive("delta_rule/naive.py")
    x = make(2, 40, 2, 16, 8, torch.float32, initial=True)
    scale = 16**-0.5
    o_fla, S_fla = fla.delta_rule_recurrence(
        *map(_to_fla, (x["q"], x["k"], x["v"], x["beta"])), initial_state=x["initial_state"].detach().clone()
    )
    o, S = delta_rule(x["q"].detach() * scale, x["k"], x["v"], x["beta"], initial_state=x["initial_state"], chunk_size=16)
    assert rel_error(o, o_fla.transpose(1, 2)) <= 1e-4
    assert rel_error(S, S_fla) <= 1e-4


def test_agrees_with_fla_naive_chunkwise_float64():
    fla = load_fla_naive("delta_rule/naive.py")
    x = make(2, 64, 2, 8, 8, torch.float64)
    o_fla, S_fla = fla.delta_rule_chunkwise(*map(_to_fla, (x["q"], x["k"], x["v"], x["beta"])), chunk_size=32)
    o, S = delta_rule(x["q"].detach() * 8**-0.5, x["k"], x["v"], x["beta"], chunk_size=16)
    assert rel_error(o, o_fla.transpose(1, 2)) <= 1e-9
    assert rel_error(S, S_fla) <= 1e-9
