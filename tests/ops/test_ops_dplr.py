"""The DPLR delta rule of RWKV-7 (Peng et al. 2025): the chunkwise form equals its loop and fla's naive form."""

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import TOL, assert_same, load_fla_naive, rel_error
from statetrack.ops.dplr import dplr, dplr_reference


def make(B, T, H, Dk, Dv, dtype, iclr_scale=1.0, decay=0.6065, seed=0):
    """RWKV-7's inputs: a = -kappa, b = kappa * iclr with kappa a unit key and iclr in (0, iclr_scale);
    log-decay in (-decay, 0)."""
    gen = torch.Generator().manual_seed(seed)
    kappa = F.normalize(torch.randn(B, T, H, Dk, dtype=dtype, generator=gen), dim=-1)
    iclr = iclr_scale * torch.rand(B, T, H, Dk, dtype=dtype, generator=gen)
    x = {
        "q": torch.randn(B, T, H, Dk, dtype=dtype, generator=gen),
        "k": torch.randn(B, T, H, Dk, dtype=dtype, generator=gen),
        "v": torch.randn(B, T, H, Dv, dtype=dtype, generator=gen),
        "a": -kappa,
        "b": kappa * iclr,
        "gk": -decay * torch.rand(B, T, H, Dk, dtype=dtype, generator=gen),
        "initial_state": torch.randn(B, H, Dk, Dv, dtype=dtype, generator=gen),
    }
    return {n: t.requires_grad_() for n, t in x.items()}


@pytest.mark.parametrize("iclr_scale", [1.0, 2.0])  # eig_range [0,1] and [-1,1]
@pytest.mark.parametrize(
    "T, chunk_size", [(37, 8), (5, 16), (16, 16)]
)  # a ragged last chunk, one short chunk, one whole
def test_fast_equals_reference_float64(T, chunk_size, iclr_scale):
    x = make(2, T, 3, 6, 5, torch.float64, iclr_scale=iclr_scale)
    assert_same(lambda **a: dplr(**a, chunk_size=chunk_size), lambda **a: dplr_reference(**a), x, TOL[torch.float64])


def test_fast_equals_reference_with_strong_decay_and_any_low_rank_pair():
    """The centred decay factors: a chunk of 16 steps of log-decay down to -8 (a span of about -64)
    in float64, and a, b not tied to one key."""
    x = make(1, 40, 2, 4, 3, torch.float64, decay=8.0, seed=1)
    with torch.no_grad():
        x["a"].copy_(0.3 * torch.randn_like(x["a"]))
        x["b"].copy_(0.3 * torch.randn_like(x["b"]))
    assert_same(lambda **a: dplr(**a, scale=0.7), lambda **a: dplr_reference(**a, scale=0.7), x, TOL[torch.float64])


def test_agrees_with_fla_naive_dplr_float32():
    """fla's `dplr_recurrence` (layout [B, H, T, D], its q scaled by Dk^-0.5 as our default), forward,
    final state and every input gradient."""
    fla = load_fla_naive("generalized_delta_rule/dplr/naive.py")
    x = make(2, 21, 2, 8, 6, torch.float32, iclr_scale=2.0)

    def fla_form(q, k, v, a, b, gk, initial_state):
        to = lambda t: t.transpose(1, 2)  # noqa: E731
        o, S = fla.dplr_recurrence(
            to(q), to(k), to(v), to(a), to(b), to(gk), initial_state=initial_state, output_final_state=True
        )
        return to(o), S

    assert_same(lambda **a: dplr(**a, chunk_size=8), fla_form, x, TOL[torch.float32])


def test_state_carried_across_calls_equals_one_call():
    x = make(2, 30, 2, 4, 4, torch.float64, iclr_scale=2.0)
    o_all, S_all = dplr(**x, chunk_size=8)
    S, pieces = x["initial_state"], []
    for lo, hi in [(0, 7), (7, 8), (8, 30)]:
        piece = {n: x[n][:, lo:hi] for n in ("q", "k", "v", "a", "b", "gk")}
        o, S = dplr(**piece, initial_state=S, chunk_size=8)
        pieces.append(o)
    assert rel_error(torch.cat(pieces, 1), o_all) <= 1e-12 and rel_error(S, S_all) <= 1e-12


def test_the_low_rank_term_is_the_delta_rule_removal():
    """With no decay, a = -kappa and b = beta kappa, the DPLR rule is the delta rule with the write
    k v^T not scaled by beta: S_t = (I - beta kappa kappa^T) S_{t-1} + k v^T, checked one step by hand."""
    x = make(1, 1, 1, 4, 3, torch.float64)
    q, k, v, a, b = (x[n].detach()[0, 0, 0] for n in ("q", "k", "v", "a", "b"))
    S0 = x["initial_state"].detach()[0, 0]
    with torch.no_grad():
        o, S = dplr_reference(**{**x, "gk": torch.zeros_like(x["gk"])}, scale=1.0)
    expected = (torch.eye(4, dtype=torch.float64) + b[:, None] * a[None, :]) @ S0 + k[:, None] * v[None, :]
    assert rel_error(S[0, 0], expected) <= 1e-14 and rel_error(o[0, 0, 0], expected.T @ q) <= 1e-14


def test_empty_input_and_no_final_state():
    x = {n: t.detach() for n, t in make(1, 0, 2, 4, 3, torch.float64).items()}
    o, S = dplr(**x)
    assert o.shape == (1, 0, 2, 3) and torch.equal(S, x["initial_state"])
    assert dplr(**make(1, 3, 1, 4, 3, torch.float64), output_final_state=False)[1] is None


@pytest.mark.parametrize("fn", [dplr, dplr_reference])
def test_bad_shapes_are_clear_errors(fn):
    x = {n: t.detach() for n, t in make(2, 5, 2, 4, 3, torch.float32).items()}
    with pytest.raises(ValueError, match=r"gk must be \[B, T, H, Dk\] = \[2, 5, 2, 4\] as q, got \(2, 5, 2\)"):
        fn(**{**x, "gk": x["gk"][..., 0]})
    with pytest.raises(ValueError, match=r"v must be \[B, T, H, Dv\] = \[2, 5, 2, Dv\]"):
        fn(**{**x, "v": x["v"][:, :4]})
    with pytest.raises(ValueError, match=r"initial_state must be \[B, H, Dk, Dv\] = \[2, 2, 4, 3\]"):
        fn(**{**x, "initial_state": x["initial_state"][0]})
    with pytest.raises(ValueError, match=r"q must be \[B, T, H, Dk\]"):
        fn(**{**x, "q": x["q"][0]})
