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


# ---- the Gated DeltaProduct layer (Siems et al. 2025, as fla's gated DeltaProduct) ----------------
def _gated_layer(n_h, eig_range="[-1,1]", short_conv=0, dtype=torch.float32):
    from statetrack.layers.deltanet import GatedDeltaProduct

    torch.manual_seed(0)
    return GatedDeltaProduct(12, num_heads=2, n_h=n_h, eig_range=eig_range, short_conv=short_conv).to(dtype)


@pytest.mark.parametrize("n_h, short_conv", [(2, 0), (3, 4)])
def test_gated_deltaproduct_layer_agrees_with_fla_naive_float32(n_h, short_conv):
    """The layer's gates fed to fla's naive gated DeltaProduct give the layer's own output."""
    fla = load_fla_naive("gated_delta_product/naive.py")
    layer = _gated_layer(n_h, short_conv=short_conv)
    x = torch.randn(2, 10, 12, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        g = layer.gates(x)
        o, _ = fla.naive_recurrent_gated_delta_product(
            g["q"], g["k"], g["v"], g["g"], g["beta"], scale=1.0, num_householder=n_h
        )
        y = layer.o_proj(layer.o_norm(o).reshape(2, 10, -1))
        o_ref, _ = delta_product_reference(**g, num_householder=n_h)
        assert rel_error(o_ref, o) <= TOL[torch.float32]
        assert rel_error(layer(x)[0], y) <= TOL[torch.float32]


def test_gated_deltaproduct_defaults_to_negative_eigenvalues_and_its_gate_decays():
    from statetrack.layers.deltanet import GatedDeltaProduct

    assert GatedDeltaProduct(8).eig_range == "[-1,1]"  # fla's GatedDeltaProduct: allow_neg_eigval=True
    layer = _gated_layer(2, dtype=torch.float64)
    x = torch.randn(1, 6, 12, dtype=torch.float64)
    g = layer.gates(x)
    assert g["g"].shape == (1, 6, 2) and (g["g"] < 0).all()  # alpha = exp(g) < 1: a real decay
    _, S_gated = delta_product_reference(**g, num_householder=2)
    _, S_plain = delta_product_reference(**{**g, "g": None}, num_householder=2)
    assert rel_error(S_gated, S_plain) > 1e-3
    # the transition is alpha_t times the product of the Householders: A S0 is the state part of a step
    S0 = torch.randn(1, 2, 6, 6, dtype=torch.float64)
    one = {n: t[:, : (2 if n in ("k", "v", "beta") else 1)] for n, t in g.items()}
    _, S1 = delta_product_reference(**{**one, "v": torch.zeros_like(one["v"])}, initial_state=S0, num_householder=2)
    torch.testing.assert_close(S1, layer.transition_matrices(x[:, :1])[:, 0] @ S0)
    eig = layer.transition_eigenvalues(x).abs()
    assert (eig <= g["g"].exp()[..., None] + 1e-9).all()  # |eigenvalues| <= alpha_t
