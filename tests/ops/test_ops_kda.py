"""KDA, the gated delta rule with a decay per key channel (Kimi Team 2025): the chunkwise form equals
its loop, both equal fla's naive KDA, and the layer feeds them the recurrence of its docstring."""

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import TOL, assert_same, load_fla_naive, randomised, rel_error
from statetrack.errors import StatetrackError
from statetrack.layers.kda import KDA
from statetrack.ops import delta_rule_reference
from statetrack.ops.kda import SAFE_SPAN, kda, kda_reference


def make(B, T, H, Dk, Dv, dtype, beta_scale=2.0, decay=1.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = {
        "q": torch.randn(B, T, H, Dk, dtype=dtype, generator=gen),
        "k": F.normalize(torch.randn(B, T, H, Dk, dtype=dtype, generator=gen), dim=-1),
        "v": torch.randn(B, T, H, Dv, dtype=dtype, generator=gen),
        "beta": beta_scale * torch.rand(B, T, H, dtype=dtype, generator=gen),
        "g": -decay * torch.rand(B, T, H, Dk, dtype=dtype, generator=gen),
        "initial_state": torch.randn(B, H, Dk, Dv, dtype=dtype, generator=gen),
    }
    return {n: t.requires_grad_() for n, t in x.items()}


@pytest.mark.parametrize("beta_scale", [1.0, 2.0], ids=["eig[0,1]", "eig[-1,1]"])
@pytest.mark.parametrize("T, chunk_size", [(37, 8), (5, 16), (16, 16)])
def test_chunked_equals_reference_float64(T, chunk_size, beta_scale):
    x = make(2, T, 3, 6, 5, torch.float64, beta_scale=beta_scale)  # 37: never a whole chunk
    assert_same(lambda **a: kda(**a, chunk_size=chunk_size), kda_reference, x, TOL[torch.float64])


def test_chunked_is_exact_under_a_decay_that_would_overflow_as_a_ratio():
    """Cumulative log-decays reach -1600 inside a chunk: exp(gamma_i) / exp(gamma_j) would be 0 / 0,
    so the chunk takes the path through the differences, forward and backward."""
    x = make(1, 40, 2, 4, 4, torch.float64, decay=80.0)
    with torch.no_grad():
        x["g"][:, ::3] = 0.0  # some steps keep their state, so the output is not all zero
    assert -x["g"][:, :20].sum(1).min() > SAFE_SPAN[torch.float64]
    assert_same(lambda **a: kda(**a, chunk_size=20), kda_reference, x, TOL[torch.float64])


def test_float32_past_the_safe_span_stays_finite_and_exact():
    """80 to 160 nats of decay per chunk: exp(-gamma) would overflow float32 in the factored product."""
    x64 = make(2, 32, 2, 8, 8, torch.float64, decay=10.0)
    x32 = {n: t.detach().float().requires_grad_() for n, t in x64.items()}
    o, S = kda(**x32)
    (o.sum() + S.sum()).backward()
    o_ref, S_ref = kda_reference(**x64)
    (o_ref.sum() + S_ref.sum()).backward()
    assert rel_error(o, o_ref) <= TOL[torch.float32] and rel_error(S, S_ref) <= TOL[torch.float32]
    assert all(rel_error(x32[n].grad, x64[n].grad) <= TOL[torch.float32] for n in x32)


@pytest.mark.parametrize("fast", [False, True], ids=["reference", "chunked"])
def test_agrees_with_fla_naive_recurrent_kda_float32(fast):
    fla = load_fla_naive("kda/naive.py")
    x = make(2, 24, 2, 8, 8, torch.float32)
    op = kda if fast else kda_reference
    o, S = op(**x)
    fla_o, fla_S = fla.naive_recurrent_kda(
        x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["initial_state"], output_final_state=True
    )
    assert rel_error(o, fla_o) <= TOL[torch.float32] and rel_error(S, fla_S) <= TOL[torch.float32]
    # fla's loop is differentiable: every input gradient agrees too
    w = torch.randn(o.shape, generator=torch.Generator().manual_seed(1))
    names = list(x)
    ours = torch.autograd.grad((o * w).sum() + S.sum(), [x[n] for n in names])
    theirs = torch.autograd.grad((fla_o * w).sum() + fla_S.sum(), [x[n] for n in names])
    errors = {n: rel_error(a, b) for n, a, b in zip(names, ours, theirs)}
    assert max(errors.values()) <= TOL[torch.float32], errors


def test_agrees_with_fla_naive_chunk_kda_float32():
    fla = load_fla_naive("kda/naive.py")
    x = {n: t.detach() for n, t in make(1, 32, 2, 8, 4, torch.float32, seed=3).items()}
    fla_o, fla_S = fla.naive_chunk_kda(
        x["q"],
        x["k"],
        x["v"],
        x["g"],
        x["beta"],
        scale=0.7,
        initial_state=x["initial_state"],
        output_final_state=True,
        chunk_size=16,
    )
    o, S = kda(**x, scale=0.7, chunk_size=8)
    assert rel_error(o, fla_o) <= TOL[torch.float32] and rel_error(S, fla_S) <= TOL[torch.float32]


def test_a_decay_equal_across_channels_is_gated_deltanet():
    x = make(2, 13, 2, 4, 3, torch.float64)
    g_head = x["g"][..., 0].detach()
    o, S = kda(**{**x, "g": g_head[..., None].expand_as(x["g"])}, scale=1.0, chunk_size=4)
    o_ref, S_ref = delta_rule_reference(x["q"], x["k"], x["v"], x["beta"], g_head, x["initial_state"])
    assert rel_error(o, o_ref) <= 1e-12 and rel_error(S, S_ref) <= 1e-12


def test_state_carried_across_calls_equals_one_call():
    x = {n: t.detach() for n, t in make(2, 30, 2, 4, 4, torch.float64).items()}
    o_all, S_all = kda(**x, chunk_size=8)
    S, pieces = x["initial_state"], []
    for lo, hi in [(0, 7), (7, 8), (8, 30)]:
        piece = {n: x[n][:, lo:hi] for n in ("q", "k", "v", "beta", "g")}
        o, S = kda(**piece, initial_state=S, chunk_size=8)
        pieces.append(o)
    assert rel_error(torch.cat(pieces, 1), o_all) <= 1e-12 and rel_error(S, S_all) <= 1e-12


def test_empty_input_returns_the_initial_state():
    x = {n: t.detach() for n, t in make(1, 0, 1, 4, 4, torch.float32).items()}
    o, S = kda(**x)
    assert o.shape == (1, 0, 1, 4) and torch.equal(S, x["initial_state"])


def test_bad_shapes_are_clear_errors():
    x = {n: t.detach() for n, t in make(1, 3, 2, 4, 4, torch.float32).items()}
    for op in (kda, kda_reference):
        with pytest.raises(
            ValueError, match=r"g \(the log-decay per key channel\) must be \[B, T, H, Dk\] = \[1, 3, 2, 4\]"
        ):
            op(**{**x, "g": x["g"][..., 0]})  # a decay per head is Gated DeltaNet's, not KDA's
        with pytest.raises(ValueError, match=r"beta must be \[B, T, H\] = \[1, 3, 2\]"):
            op(**{**x, "beta": x["beta"][..., None]})
        with pytest.raises(ValueError, match=r"initial_state must be \[B, H, Dk, Dv\]"):
            op(**{**x, "initial_state": x["initial_state"][0]})
        with pytest.raises(ValueError, match="scale must be a number"):
            op(**x, scale="1")


def test_layer_runs_the_recurrence_of_its_docstring():
    """The layer's gates fed to the loop give its output; its transition is (I - beta k k^T) diag(alpha)."""
    layer = randomised(KDA(8, num_heads=2, eig_range="[-1,1]"))
    x = torch.randn(2, 9, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    g = layer.gates(x)
    assert g["g"].shape == (2, 9, 2, 4) and (g["g"] < 0).all()
    assert not torch.allclose(g["g"][..., 0], g["g"][..., 1])  # a decay per channel, not per head
    o, _ = kda_reference(**g)
    torch.testing.assert_close(layer(x)[0], layer.o_proj(layer.o_norm(o).reshape(2, 9, -1)))
    S0 = torch.randn(2, 2, 4, 4, dtype=torch.float64)
    one = {n: t[:, :1] for n, t in g.items()}
    _, S1 = kda_reference(**{**one, "v": torch.zeros_like(one["v"])}, initial_state=S0)
    torch.testing.assert_close(S1, layer.transition_matrices(x[:, :1])[:, 0] @ S0)


@pytest.mark.parametrize("eig_range, low", [("[0,1]", 0.0), ("[-1,1]", -1.0)])
def test_layer_eig_range_bounds_the_transition_spectrum(eig_range, low):
    """(I - beta k k^T) diag(alpha) is similar to diag(alpha)^1/2 (I - beta k k^T) diag(alpha)^1/2:
    real eigenvalues in [0, 1] for beta in (0, 1), in [-1, 1] for beta in (0, 2), reaching below -1/2
    there when the decay is close to 1."""
    torch.manual_seed(3)
    layer = KDA(8, num_heads=2, eig_range=eig_range).double()
    with torch.no_grad():
        layer.b_proj.bias.fill_(3.0)  # beta near its top
        layer.f_proj[1].bias.fill_(-8.0)  # alpha near 1
    with torch.no_grad():
        ev = layer.transition_eigenvalues(3 * torch.randn(4, 12, 8, dtype=torch.float64))
    assert ev.imag.abs().max() <= 1e-9
    assert ev.real.min() >= low - 1e-9 and ev.real.max() <= 1 + 1e-9
    if low < 0:
        assert ev.real.min() < -0.5


def test_layer_decay_bias_starts_at_the_dt_init_or_at_flas_zero():
    """"dt": softplus(b) log-uniform in [1e-3, 1e-1] (Mamba's dt init); "zero": fla's KDA layer's b = 0;
    the same seed gives the same weights otherwise."""
    layers = {}
    for decay_bias in ("dt", "zero"):
        torch.manual_seed(0)
        layers[decay_bias] = KDA(8, num_heads=2, decay_bias=decay_bias)
    dt = F.softplus(layers["dt"].f_proj[1].bias)
    assert dt.min() >= 1e-3 - 1e-9 and dt.max() <= 1e-1 + 1e-9 and dt.max() / dt.min() > 3
    assert torch.equal(layers["zero"].f_proj[1].bias, torch.zeros(8))
    assert torch.equal(layers["dt"].A_log, layers["zero"].A_log)
    with pytest.raises(StatetrackError, match="unknown decay_bias 'one'; expected one of: dt, zero"):
        KDA(8, decay_bias="one")
