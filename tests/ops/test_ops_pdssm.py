"""PD-SSM's recurrence (Terzić et al. 2025): the log-depth scan equals the dense loop (forward, state,
every gradient, the straight-through one to the column scores included), follows a Python
automaton exactly, carries its state across calls; and the layer equals its equations step by step."""

import pytest
import torch

from ops_helpers import TOL, assert_same, randomised, rel_error
from statetrack.errors import StatetrackError
from statetrack.layers.pdssm import PDSSM
from statetrack.ops.pdssm import column_hardmax, column_index, pdssm, pdssm_reference

DIAGONALS = ["complex", "[0,1]", "[-1,1]"]


def make(B, T, H, N, diagonal="complex", dtype=torch.float64, seed=0):
    """Column scores, a diagonal (complex with |d| < 1, or real in one of the eigenvalue ranges), an
    input term and a start state, each requiring grad."""
    gen = torch.Generator().manual_seed(seed)
    r = torch.rand(B, T, H, N, dtype=dtype, generator=gen)
    if diagonal == "complex":
        d = torch.polar(r, 6.3 * torch.rand(B, T, H, N, dtype=dtype, generator=gen))
    else:
        d = r if diagonal == "[0,1]" else 2 * r - 1
    x = {
        "p": torch.randn(B, T, H, N, N, dtype=dtype, generator=gen).softmax(-2),
        "d": d,
        "b": torch.randn(B, T, H, N, dtype=d.dtype, generator=gen),
        "initial_state": torch.randn(B, H, N, dtype=d.dtype, generator=gen),
    }
    return {n: t.requires_grad_() for n, t in x.items()}


@pytest.mark.parametrize("diagonal", DIAGONALS)
@pytest.mark.parametrize("T", [1, 2, 7, 33])  # 33: one past a power of two, the scan's last level half used
def test_scan_equals_reference_float64(T, diagonal):
    assert_same(pdssm, pdssm_reference, make(2, T, 3, 5, diagonal), TOL[torch.float64])


def test_scan_equals_reference_float32_long():
    x = make(1, 257, 2, 8, dtype=torch.float32, seed=1)
    assert_same(pdssm, pdssm_reference, x, TOL[torch.float32])


def test_without_start_state_and_with_real_input_term():
    x = make(2, 9, 2, 4)
    x["b"] = torch.randn(2, 9, 2, 4, dtype=torch.float64).requires_grad_()  # real B x_t, complex d
    del x["initial_state"]
    assert_same(pdssm, pdssm_reference, x, TOL[torch.float64])


@pytest.mark.parametrize("N", [1, 2, 5, 6, 17])  # odd row counts: a row waits a round of the tournament
def test_column_hardmax_is_column_one_hot_at_the_argmax(N):
    p = torch.randn(3, 4, N, N, generator=torch.Generator().manual_seed(N))
    P = column_hardmax(p)
    assert set(P.unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(P.sum(-2), torch.ones(3, 4, N))  # each column exactly one 1
    assert torch.equal(column_index(p), p.argmax(-2))
    assert torch.equal(P.argmax(-2), p.argmax(-2))


def test_follows_a_random_automaton_exactly():
    """Independent oracle: a Python walk through a random transition table (merging states too, not
    only permutations). With P(sigma)[delta(q, sigma), q] = 1, D = I, b = 0 and h_0 the start state's
    basis vector, h_t is the basis vector of the automaton's state after t symbols."""
    gen = torch.Generator().manual_seed(3)
    Q, S, B, T = 5, 3, 4, 40
    delta = torch.randint(0, Q, (S, Q), generator=gen)  # delta[sigma, q]
    symbols = torch.randint(0, S, (B, T), generator=gen)
    scores = torch.zeros(S, Q, Q, dtype=torch.float64)
    scores[torch.arange(S)[:, None], delta, torch.arange(Q)[None, :]] = 1.0
    p = (scores + 0.1 * torch.rand(S, Q, Q, generator=gen, dtype=torch.float64))[symbols].unsqueeze(2)
    d = torch.ones(B, T, 1, Q, dtype=torch.float64)
    h0 = torch.zeros(B, 1, Q, dtype=torch.float64)
    h0[:, 0, 0] = 1
    h, _ = pdssm(p, d, torch.zeros_like(d), initial_state=h0)
    for i in range(B):
        q = 0
        for t in range(T):
            q = int(delta[symbols[i, t], q])
            assert h[i, t, 0].argmax().item() == q and h[i, t, 0].sum().item() == 1.0, (i, t)


def test_straight_through_gradient_is_the_dense_transitions():
    """dL/dp = dL/dP for the dense matrices P_t = column_hardmax(p_t), taken as free leaves."""
    x = make(2, 6, 1, 4)
    w = torch.randn(2, 6, 1, 4, dtype=torch.complex128)
    h, _ = pdssm(**x)
    (grad_p,) = torch.autograd.grad((h * w).sum().real, x["p"])
    P = column_hardmax(x["p"].detach()).requires_grad_()
    state, states = x["initial_state"], []
    for t in range(6):
        state = torch.einsum("bhmn,bhn->bhm", P[:, t] * x["d"][:, t, :, None, :], state) + x["b"][:, t]
        states.append(state)
    (grad_P,) = torch.autograd.grad((torch.stack(states, 1) * w).sum().real, P)
    assert grad_p.abs().sum() > 0 and rel_error(grad_p, grad_P) <= 1e-12


def test_state_carried_across_calls_equals_one_call():
    x = {n: t.detach() for n, t in make(2, 20, 2, 4).items()}
    h_all, S_all = pdssm(**x)
    S, pieces = x["initial_state"], []
    for lo, hi in [(0, 5), (5, 6), (6, 6), (6, 20)]:
        h, S = pdssm(x["p"][:, lo:hi], x["d"][:, lo:hi], x["b"][:, lo:hi], initial_state=S)
        pieces.append(h)
    assert rel_error(torch.cat(pieces, 1), h_all) <= 1e-14 and rel_error(S, S_all) <= 1e-14


def test_bad_shapes_name_the_expected_shape():
    x = {n: t.detach() for n, t in make(1, 3, 2, 4).items()}
    with pytest.raises(ValueError, match=r"p must be \[B, T, H, N, N\] = \[1, 3, 2, 4, 4\]"):
        pdssm(x["p"][..., :3], x["d"], x["b"])
    with pytest.raises(ValueError, match=r"b must be \[B, T, H, N\] = \[1, 3, 2, 4\]"):
        pdssm(x["p"], x["d"], x["b"][:, :2])
    with pytest.raises(ValueError, match=r"initial_state must be \[B, H, N\] = \[1, 2, 4\]"):
        pdssm(x["p"], x["d"], x["b"], initial_state=x["initial_state"][:, :1])
    with pytest.raises(ValueError, match=r"d must be \[B, T, H, N\]"):
        pdssm(x["p"], x["d"][0], x["b"])
    with pytest.raises(ValueError, match="must be real"):
        pdssm(x["p"].to(torch.complex128), x["d"], x["b"])


# ---- the layer -----------------------------------------------------------------------------------
def test_layer_equals_its_equations_step_by_step():
    """h_0 = e_1, h_t = P(x_t) D(x_t) h_{t-1} + B x_t, y_t = read-out([Re h_t, Im h_t]) + e * x_t,
    written out per step with the dense transitions of `transition_matrices`, random weights."""
    layer = randomised(PDSSM(6, state_size=5, dictionary_size=3), seed=2)
    x = torch.randn(2, 9, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    y, state = layer(x)
    A = layer.transition_matrices(x)[:, :, 0]  # [B, T, N, N]
    Bmat = torch.complex(layer.B_re, layer.B_im)
    h = torch.zeros(2, 5, dtype=torch.complex128)
    h[:, 0] = 1  # h_0 = e_1
    for t in range(9):
        h = torch.einsum("bmn,bn->bm", A[:, t], h) + x[:, t].to(h.dtype) @ Bmat.T
        y_t = layer.readout(torch.cat([h.real, h.imag], -1)) + layer.skip * x[:, t]
        assert rel_error(y[:, t], y_t) <= 1e-12, t
    assert rel_error(state[:, 0], h) <= 1e-12


def test_layer_transitions_are_column_one_hot_times_a_diagonal_inside_the_unit_disk():
    layer = PDSSM(8, state_size=6).double()
    A = layer.transition_matrices(torch.randn(3, 7, 8, dtype=torch.float64))
    nonzero = A != 0
    assert torch.equal(nonzero.sum(-2), torch.ones(3, 7, 1, 6, dtype=torch.long))  # one entry per column
    assert (A.abs().sum(-2) < 1).all()
    assert (layer.transition_eigenvalues(torch.randn(2, 3, 8, dtype=torch.float64)).abs() < 1).all()


def test_layer_gradients_reach_every_parameter():
    layer = PDSSM(8, state_size=4)
    y, _ = layer(torch.randn(2, 11, 8))
    y.square().sum().backward()
    missing = [n for n, p in layer.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, missing


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"state_size": 0}, "state_size must be an integer >= 1"),
        ({"state_size": 2.5}, "state_size must be an integer >= 1"),
        ({"dictionary_size": True}, "dictionary_size must be an integer >= 1"),
        ({"dictionary_size": 2**20}, "dictionary_size must be an integer from 1 to"),
    ],
)
def test_bad_layer_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(StatetrackError, match=message):
        PDSSM(8, **kwargs)
