"""DeltaProduct_{n_h} through the chunkwise delta rule equals its loop and fla's naive form (Siems et al. 2025)."""

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import TOL, assert_same, load_fla_naive, rel_error
from statetrack.ops import delta_product, delta_product_reference, delta_rule_reference


def make(B, T, H, Dk, Dv, n_h, dtype, gated=False, beta_scale=2.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = {
        "q": torch.randn(B, T, H, Dk, dtype=dtype, generator=gen),
        "k": F.normalize(torch.randn(B, T * n_h, H, Dk, dtype=dtype, generator=gen), dim=-1),
        "v": torch.randn(B, T * n_h, H, Dv, dtype=dtype, generator=gen),
        "beta": beta_scale * torch.rand(B, T * n_h, H, dtype=dtype, generator=gen),
        "g": -torch.rand(B, T, H, dtype=dtype, generator=gen) if gated else None,
        "initial_state": torch.randn(B, H, Dk, Dv, dtype=dtype, generator=gen),
    }
    return {n: (t.requires_grad_() if t is not None else None) for n, t in x.items()}


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("n_h", [1, 2, 3, 4])
def test_fast_equals_reference_float64(n_h, gated):
    x = make(2, 11, 2, 6, 5, n_h, torch.float64, gated=gated)  # 11 n_h micro-steps: never a whole chunk
    assert_same(
        lambda **a: delta_product(**a, num_householder=n_h, chunk_size=8),
        lambda **a: delta_product_reference(**a, num_householder=n_h),
        x,
        TOL[torch.float64],
    )


def test_one_householder_is_the_delta_rule():
    x = make(1, 9, 2, 4, 4, 1, torch.float64, gated=True)
    o, S = delta_product_reference(**x, num_householder=1)
    o_ref, S_ref = delta_rule_reference(**x)
    assert rel_error(o, o_ref) <= 1e-14 and rel_error(S, S_ref) <= 1e-14


def test_state_carried_across_calls_equals_one_call():
    n_h = 3
    x = make(2, 20, 1, 4, 4, n_h, torch.float64, gated=True)
    o_all, S_all = delta_product(**x, num_householder=n_h, chunk_size=8)
    S, pieces = x["initial_state"], []
    for lo, hi in [(0, 5), (5, 6), (6, 20)]:
        o, S = delta_product(
            x["q"][:, lo:hi], x["k"][:, lo * n_h : hi * n_h], x["v"][:, lo * n_h : hi * n_h],
            x["beta"][:, lo * n_h : hi * n_h], x["g"][:, lo:hi], initial_state=S, num_householder=n_h, chunk_size=8,
        )
        pieces.append(o)
    assert rel_error(torch.cat(pieces, 1), o_all) <= 1e-12 and rel_error(S, S_all) <= 1e-12


def test_bad_num_householder_is_a_clear_error():
    x = make(1, 3, 1, 4, 4, 2, torch.float32)
    with pytest.raises(ValueError, match=r"k must be \[B, T\*n_h, H, Dk\]"):
        delta_product(**x, num_householder=3)
    with pytest.raises(ValueError, match="num_householder"):
        delta_product(**x, num_householder=0)


@pytest.mark.parametrize("n_h", [2, 3])
def test_agrees_with_fla_naive_gated_delta_product_float32(n_h):
    fla = load_fla_naive("gated_delta_product/naive.py")
    x = make(2, 12, 2, 8, 8, n_h, torch.float32, gated=True)
    detached = {n: t.detach().clone() for n, t in x.items()}
    o_fla, S_fla = fla.naive_recurrent_gated_delta_product(
        detached["q"], detached["k"], detached["v"], detached["g"], detached["beta"], scale=1.0,
        initial_state=detached["initial_state"], output_final_state=True, num_householder=n_h,
    )
    o, S = delta_product(**detached, num_householder=n_h, chunk_size=8)
    assert rel_error(o, o_fla) <= 1e-4 and rel_error(S, S_fla) <= 1e-4
