"""Mamba-3's recurrence (Lahoti et al. 2026): the rotations folded into q and k with Mamba-2's
chunked scan equal the complex per-step loop; the loop equals the real rotation ("RoPE trick")
recurrence and, without rotation and trapezoid, Mamba-2's scan. fla-core has no Mamba-3 form."""

import math

import pytest
import torch

from ops_helpers import TOL, assert_same, rel_error
from statetrack.ops.mamba3 import mamba3, mamba3_reference, rotate_pairs
from statetrack.ops.selective import ssd_scan_reference

STATE = ("h0", "k0", "v0")


def make(B, T, H, N, P, R, dtype, signed=False, rope=True, trapezoid=True, state=True, seed=0):
    """Random inputs; signed: decays in (-1, 1) (eig_range [-1,1]), else in (0, 1)."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.rand(B, T, H, dtype=dtype, generator=gen)
    x = {
        "q": torch.randn(B, T, H, N, dtype=dtype, generator=gen),
        "k": torch.randn(B, T, H, N, dtype=dtype, generator=gen),
        "v": torch.randn(B, T, H, P, dtype=dtype, generator=gen),
        "a": 2 * a - 1 if signed else a,
        "dt": torch.rand(B, T, H, dtype=dtype, generator=gen),
        "lam": torch.rand(B, T, H, dtype=dtype, generator=gen) if trapezoid else None,
        "theta": math.pi * (2 * torch.rand(B, T, H, R, dtype=dtype, generator=gen) - 1) if rope else None,
    }
    if state:
        x.update(
            h0=torch.randn(B, H, P, N, dtype=dtype, generator=gen),
            k0=torch.randn(B, H, N, dtype=dtype, generator=gen),
            v0=torch.randn(B, H, P, dtype=dtype, generator=gen),
        )
    return {n: (t.requires_grad_() if t is not None else None) for n, t in x.items()}


def flat(op, **options):
    """op with the state as three inputs and as one flat tensor (for `assert_same`)."""

    def run(h0=None, k0=None, v0=None, **x):
        state = None if h0 is None else (h0, k0, v0)
        y, (h, k, v) = op(**x, initial_state=state, **options)
        return y, torch.cat([h.flatten(1), k.flatten(1), v.flatten(1)], 1)

    return run


@pytest.mark.parametrize("signed", [False, True], ids=["eig[0,1]", "eig[-1,1]"])
@pytest.mark.parametrize(
    "rope, trapezoid, state", [(True, True, True), (True, True, False), (True, False, True), (False, True, True)]
)
def test_fast_equals_reference_float64(rope, trapezoid, state, signed):
    x = make(2, 37, 3, 8, 5, 2, torch.float64, signed, rope, trapezoid, state)  # 37 steps: never whole chunks of 8
    assert_same(flat(mamba3, chunk=8), flat(mamba3_reference), x, TOL[torch.float64])


def test_fast_equals_reference_with_every_pair_rotated_an_odd_state_and_one_step():
    for T, N, R in ((1, 6, 3), (2, 6, 3), (9, 7, 2)):  # N = 7: the pairwise rotation, not the complex product
        x = make(1, T, 2, N, 3, R, torch.float64)
        assert_same(flat(mamba3, chunk=4), flat(mamba3_reference), x, TOL[torch.float64])


def rotation_form(q, k, v, a, dt, lam, theta, h0, k0, v0):
    """Lahoti et al. 2026's real form of the complex SSM by the "RoPE trick", one step at a time:
    the rotated state H_t = rot(Phi_t) h_t follows a scalar-decay recurrence in which k_t and q_t
    are rotated by the cumulative angle Phi_t, H_t = a_t H_{t-1} + beta_t v_{t-1} K_{t-1}^T +
    gamma_t v_t K_t^T, y_t = H_t Q_t (the previous key keeps its own angle). Written apart from
    the op, from the equations."""
    B, T, H, N = q.shape
    phase = torch.zeros_like(theta[:, 0])
    S = rotate_pairs(h0, phase[:, :, None])  # Phi_{-1} = 0: the frames agree
    K_prev, v_prev = k0, v0
    ys = []
    for t in range(T):
        phase = phase + theta[:, t]
        Q, K = rotate_pairs(q[:, t], phase), rotate_pairs(k[:, t], phase)
        beta, gamma = ((1 - lam[:, t]) * dt[:, t] * a[:, t])[..., None, None], (lam[:, t] * dt[:, t])[..., None, None]
        S = (
            a[:, t, :, None, None] * S
            + beta * v_prev[..., None] * K_prev[:, :, None]
            + gamma * v[:, t, ..., None] * K[:, :, None]
        )
        ys.append(torch.einsum("bhpn,bhn->bhp", S, Q))
        K_prev, v_prev = K, v[:, t]
    return torch.stack(ys, 1), rotate_pairs(S, -phase[:, :, None])


def test_complex_recurrence_equals_the_rotation_form():
    x = make(2, 13, 2, 8, 3, 2, torch.float64, signed=True)
    y_ref, (h_ref, _, _) = mamba3_reference(
        *(x[n] for n in ("q", "k", "v", "a", "dt", "lam", "theta")), initial_state=tuple(x[n] for n in STATE)
    )
    y, h = rotation_form(**x)
    assert rel_error(y, y_ref) <= 1e-13 and rel_error(h, h_ref) <= 1e-13


def test_one_pair_turns_by_minus_theta_per_step():
    """One complex entry, Euler rule, no input after the first step: z_t = a^t e^{-i t theta} z_0, so
    y_t = Re(conj(q) z_t) with q = 1 is a^t cos(t theta) and with q = i it is -a^t sin(t theta)."""
    T, a, theta = 9, 0.9, 0.7
    ones = torch.ones(1, T, 1, dtype=torch.float64)
    v = torch.zeros(1, T, 1, 1, dtype=torch.float64)
    h0 = torch.tensor([[[[1.0, 0.0]]]], dtype=torch.float64)  # z_0 = 1
    zeros_k = torch.zeros(1, 1, 2, dtype=torch.float64)
    t = torch.arange(1, T + 1, dtype=torch.float64)
    for q_pair, expected in (([1.0, 0.0], a**t * torch.cos(t * theta)), ([0.0, 1.0], -(a**t) * torch.sin(t * theta))):
        q = torch.tensor(q_pair, dtype=torch.float64).expand(1, T, 1, 2)
        for op in (mamba3_reference, mamba3):
            y, _ = op(
                q,
                torch.zeros_like(q),
                v,
                a * ones,
                ones,
                None,
                theta * ones[..., None],
                initial_state=(h0, zeros_k, v[:, 0]),
            )
            assert rel_error(y[0, :, 0, 0], expected) <= 1e-13


def test_euler_without_rotation_is_mamba2():
    """lam = 1 (no trapezoid) and no rotation, one B and C for every head: Mamba-2's recurrence
    (`ssd_scan_reference`, with input dt v)."""
    x = make(2, 11, 3, 4, 5, 0, torch.float64, rope=False, trapezoid=False, state=False)
    q, k = x["q"][:, :, :1].expand_as(x["q"]), x["k"][:, :, :1].expand_as(x["k"])
    y, (h, _, _) = mamba3_reference(q, k, x["v"], x["a"], x["dt"])
    y2, h2 = ssd_scan_reference(x["dt"][..., None] * x["v"], x["a"], x["k"][:, :, 0], x["q"][:, :, 0])
    assert rel_error(y, y2) <= 1e-13 and rel_error(h, h2) <= 1e-13


def test_trapezoid_weighs_the_previous_input_through_the_transition():
    """Two steps from a zero state, one real entry: h_1 = lam_1 dt_1 k_1 v_1 and
    h_2 = a_2 h_1 + (1 - lam_2) dt_2 a_2 k_1 v_1 + lam_2 dt_2 k_2 v_2 (the exponential-trapezoidal rule)."""
    k, v = torch.tensor([2.0, 3.0], dtype=torch.float64), torch.tensor([5.0, 7.0], dtype=torch.float64)
    a, dt, lam = [0.5, 0.8], [0.3, 0.6], [0.25, 0.75]
    h1 = lam[0] * dt[0] * k[0] * v[0]
    h2 = a[1] * h1 + (1 - lam[1]) * dt[1] * a[1] * k[0] * v[0] + lam[1] * dt[1] * k[1] * v[1]
    as_input = lambda s: torch.tensor(s, dtype=torch.float64).view(1, 2, 1)  # noqa: E731
    for op in (mamba3_reference, mamba3):
        y, _ = op(
            torch.ones(1, 2, 1, 1, dtype=torch.float64),
            k.view(1, 2, 1, 1),
            v.view(1, 2, 1, 1),
            as_input(a),
            as_input(dt),
            as_input(lam),
        )
        assert rel_error(y.flatten(), torch.stack([h1, h2])) <= 1e-14


@pytest.mark.parametrize("op", [mamba3, mamba3_reference])
def test_state_carried_across_calls_equals_one_call(op):
    x = make(2, 20, 2, 8, 4, 2, torch.float64, signed=True)
    names = ("q", "k", "v", "a", "dt", "lam", "theta")
    y_all, s_all = op(*(x[n] for n in names), initial_state=tuple(x[n] for n in STATE))
    state, pieces = tuple(x[n] for n in STATE), []
    for lo, hi in [(0, 5), (5, 6), (6, 6), (6, 20)]:
        y, state = op(*(x[n][:, lo:hi] for n in names), initial_state=state)
        pieces.append(y)
    assert rel_error(torch.cat(pieces, 1), y_all) <= 1e-12
    assert all(rel_error(s, s_ref) <= 1e-12 for s, s_ref in zip(state, s_all))


def test_float32_fast_form_stays_close_to_float64_over_a_long_input():
    """The cumulative angle of 600 steps of up to pi each (summed in float64) leaves float32 at TOL."""
    x = make(1, 600, 2, 8, 4, 2, torch.float64, state=False)
    with torch.no_grad():
        x["a"].copy_(0.98 + 0.02 * x["a"])  # a long memory: the late outputs depend on early angles
        y64, _ = mamba3(**x)
        y32, _ = mamba3(**{n: t.float() for n, t in x.items()})
    assert y32.dtype == torch.float32 and rel_error(y32, y64) <= TOL[torch.float32]


def test_bad_shapes_are_clear_errors():
    x = make(1, 4, 2, 8, 3, 2, torch.float32, state=False)
    with pytest.raises(ValueError, match=r"k must be \[B, T, H, N\] = \[1, 4, 2, 8\]"):
        mamba3(**{**x, "k": x["k"][..., :4]})
    with pytest.raises(ValueError, match=r"theta must be \[B, T, H, R\] = \[1, 4, 2\] \+ \[R\] with 2R <= N = 8"):
        mamba3(**{**x, "theta": torch.zeros(1, 4, 2, 5)})
    with pytest.raises(ValueError, match=r"lam must be \[B, T, H\] = \[1, 4, 2\]"):
        mamba3(**{**x, "lam": torch.zeros(1, 4, 3)})
    with pytest.raises(ValueError, match=r"initial_state's k must be \[1, 2, 8\]"):
        mamba3(**x, initial_state=(torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 7), torch.zeros(1, 2, 3)))
    with pytest.raises(ValueError, match=r"initial_state must be \(h \[B, H, P, N\]"):
        mamba3_reference(**x, initial_state=torch.zeros(1, 2, 3, 8))
