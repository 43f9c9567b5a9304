"""The Mamba-3 mixer (Lahoti et al. 2026): its output equals a per-token complex loop written from
the docstring's equations with the layer's own weights; switches, names, errors and spectrum."""

import math

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import randomised, rel_error, rms_norm
from statetrack import StatetrackError
from statetrack.layers.mamba3 import A_FLOOR, Mamba3
from statetrack.models import zoo

D = 8


def explicit_mamba3(layer: Mamba3, x: torch.Tensor) -> torch.Tensor:
    """The docstring's recurrence token by token, state S [N, P] per head as complex pairs and real
    entries, written from the parameters alone (no op of the package)."""
    Bsz, T, _ = x.shape
    H, P, N, R = layer.num_heads, layer.head_dim, layer.d_state, layer.num_angles
    z, u, BC, dt, A, lam, ang = layer.in_proj(x).split(layer.sizes, dim=-1)
    Bp, Cp = BC.split(N, dim=-1)
    dt = F.softplus(dt + layer.dt_bias)
    a = torch.exp(-dt * F.softplus(A).clamp(min=A_FLOOR))
    if layer.eig_range == "[-1,1]":
        a = 2 * a - 1
    lam = torch.sigmoid(lam) if layer.trapezoid else torch.ones_like(dt)
    k = rms_norm(Bp, layer.BC_norm[0, 0], 1e-5)[:, :, None] + layer.BC_bias[0]  # [B, T, H, N]
    q = rms_norm(Cp, layer.BC_norm[1, 0], 1e-5)[:, :, None] + layer.BC_bias[1]
    v = u.view(Bsz, T, H, P)
    theta = math.pi * torch.tanh(ang)[:, :, None] * dt[..., None]  # [B, T, H, R]
    ys = []
    for b in range(Bsz):
        for h in range(H):
            zc = [[0j] * P for _ in range(R)]  # complex pairs
            zr = [[0.0] * P for _ in range(N - 2 * R)]
            prev = None
            for t in range(T):
                turn = [complex(math.cos(theta[b, t, h, r]), -math.sin(theta[b, t, h, r])) for r in range(R)]
                at, g = float(a[b, t, h]), float(lam[b, t, h] * dt[b, t, h])
                beta = float((1 - lam[b, t, h]) * dt[b, t, h] * a[b, t, h])
                kt, qt, vt = k[b, t, h].tolist(), q[b, t, h].tolist(), v[b, t, h].tolist()
                out = []
                for p in range(P):
                    acc = 0.0
                    for r in range(R):
                        new = g * complex(kt[2 * r], kt[2 * r + 1]) * vt[p]
                        old = at * zc[r][p] + (
                            beta * complex(prev[0][2 * r], prev[0][2 * r + 1]) * prev[1][p] if prev else 0
                        )
                        zc[r][p] = turn[r] * old + new
                        acc += (complex(qt[2 * r], qt[2 * r + 1]).conjugate() * zc[r][p]).real
                    for n in range(N - 2 * R):
                        m = 2 * R + n
                        zr[n][p] = at * zr[n][p] + (beta * prev[0][m] * prev[1][p] if prev else 0) + g * kt[m] * vt[p]
                        acc += qt[m] * zr[n][p]
                    out.append(acc + float(layer.D[h]) * vt[p])
                ys.append(out)
                prev = (kt, vt)
    y = torch.tensor(ys, dtype=x.dtype).view(Bsz, H, T, P).transpose(1, 2).reshape(Bsz, T, H * P)
    return layer.out_proj(y * F.silu(z))


@pytest.mark.parametrize(
    "options",
    [{}, {"eig_range": "[-1,1]"}, {"rope": False}, {"trapezoid": False}],
    ids=["default", "eig[-1,1]", "no-rope", "euler"],
)
def test_layer_equals_the_explicit_complex_loop(options):
    layer = randomised(Mamba3(D, d_state=8, expand=1, head_dim=4, **options), seed=1)
    x = torch.randn(2, 6, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y, _ = layer(x)
        assert rel_error(y, explicit_mamba3(layer, x)) <= 1e-12


@pytest.mark.parametrize("options", [{"rope": False}, {"trapezoid": False}, {"rope": False, "trapezoid": False}])
def test_every_variant_carries_its_state_across_calls(options):
    layer = randomised(Mamba3(D, d_state=8, head_dim=4, **options), seed=3)
    x = torch.randn(2, 9, D, dtype=torch.float64)
    with torch.no_grad():
        y, _ = layer(x)
        y1, state = layer(x[:, :4])
        y2, _ = layer(x[:, 4:], state)
    assert rel_error(torch.cat([y1, y2], 1), y) <= 1e-12


@pytest.mark.parametrize(
    "spec, name",
    [
        ({"name": "mamba3"}, "Mamba-3 [0,1]"),
        ({"name": "mamba3", "eig_range": "[-1,1]"}, "Mamba-3 [-1,1]"),
        ({"name": "mamba3", "rope": False}, "Mamba-3 (no RoPE) [0,1]"),
        ({"name": "mamba3", "trapezoid": False, "rope": False}, "Mamba-3 (no RoPE) (Euler) [0,1]"),
    ],
)
def test_display_names(spec, name):
    assert zoo.display_name(spec) == name


@pytest.mark.parametrize(
    "options, match",
    [
        ({"d_state": 3}, r"rope needs d_state >= 4 \(d_state // 4 rotation angles\), got 3"),
        ({"d_state": 0}, "d_state must be an integer >= 1, got 0"),
        ({"head_dim": 5}, r"expand \* d_model = 16 is not divisible by head_dim 5"),
        ({"rope": "yes"}, "rope must be true or false, got 'yes'"),
        ({"trapezoid": 1}, "trapezoid must be true or false, got 1"),
        ({"expand": 2**70}, "expand must be an integer from 1 to 65,536"),
        ({"eig_range": "[0,2]"}, r"unknown eig_range '\[0,2\]'"),
    ],
)
def test_bad_parameters_are_one_line_errors(options, match):
    with pytest.raises(StatetrackError, match=match):
        Mamba3(D, **options)


def test_transition_eigenvalues_are_decay_times_turns():
    layer = randomised(Mamba3(D, d_state=8, head_dim=4), seed=4)
    x = torch.randn(2, 5, D, dtype=torch.float64)
    with torch.no_grad():
        ev = layer.transition_eigenvalues(x)  # [B, T, H, N]
        _, _, _, _, a, _, _, theta = layer._inputs(x)
    assert ev.shape == (2, 5, 4, 8) and ev.is_complex()
    assert rel_error(ev.abs(), a[..., None].abs().expand(ev.shape)) <= 1e-14
    turns = a[..., None] * torch.polar(torch.ones_like(theta), -theta)  # a e^{-i theta}
    assert rel_error(ev[..., :2], turns) <= 1e-14 and rel_error(ev[..., 2:4], ev[..., :2].conj()) == 0
    negative = Mamba3(D, d_state=8, head_dim=4, rope=False, eig_range="[-1,1]").double()
    with torch.no_grad():
        negative.dt_bias.fill_(3.0)
        real = negative.transition_eigenvalues(3 * x)
    assert not real.is_complex() and real.min() >= -1 and real.max() < 1 and real.min() < -0.5
