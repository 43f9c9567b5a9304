"""RWKV-7 (Peng et al. 2025): the layer equals a token-by-token transcription of the paper's time
mixing in its own state orientation, and eig_range bounds the transitions' spectrum."""

import math

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import randomised, rel_error
from statetrack import StatetrackError
from statetrack.layers.rwkv7 import RWKV7


def paper_time_mixing(layer: RWKV7, x: torch.Tensor) -> torch.Tensor:
    """One token at a time with the paper's state S [Dv, Dk]: S_t = S_{t-1} (diag(w_t) - kappa_t^T
    (iclr_t kappa_t)) + v_t^T k~_t, o_t = S_t r_t; lerp token shift, low-rank maps, GroupNorm per
    head, bonus and gate written out."""
    B, T, D = x.shape
    H, hd = layer.num_heads, layer.head_dim
    mu = layer.shift_mix
    lin = lambda m, z: z @ m.weight.T + (m.bias if m.bias is not None else 0)  # noqa: E731
    S = x.new_zeros(B, H, hd, hd)
    previous = x.new_zeros(B, D)
    ys = []
    for t in range(T):
        xt = x[:, t]
        xr, xw, xk, xv, xa, xg = (xt + (previous - xt) * mu[c] for c in range(6))
        previous = xt
        split = lambda z: z.view(B, H, hd)  # noqa: E731
        r, k, v = split(lin(layer.r_proj, xr)), split(lin(layer.k_proj, xk)), split(lin(layer.v_proj, xv))
        d = lin(layer.w_lora[2], torch.tanh(lin(layer.w_lora[0], xw)))
        w = split(torch.exp(-math.exp(-0.5) * torch.sigmoid(d)))
        iclr = split(torch.sigmoid(lin(layer.a_lora[2], lin(layer.a_lora[0], xa))))
        if layer.eig_range == "[-1,1]":
            iclr = iclr * (1 + w)
        g = lin(layer.g_lora[2], torch.sigmoid(lin(layer.g_lora[0], xg)))
        kappa = k * layer.k_k.view(H, hd)
        kappa = kappa / kappa.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        k = k * (1 + (iclr - 1) * layer.k_a.view(H, hd))
        transition = torch.diag_embed(w) - kappa[..., :, None] * (iclr * kappa)[..., None, :]  # [B, H, Dk, Dk]
        S = S @ transition + v[..., :, None] * k[..., None, :]
        o = (S @ r[..., None])[..., 0]  # [B, H, Dv]
        mean, var = o.mean(-1, keepdim=True), o.var(-1, unbiased=False, keepdim=True)
        o = (o - mean) / torch.sqrt(var + layer.g_norm.eps) * layer.g_norm.weight.view(H, hd) + layer.g_norm.bias.view(
            H, hd
        )
        o = o + (r * k * layer.r_k).sum(-1, keepdim=True) * v
        ys.append(lin(layer.o_proj, o.reshape(B, -1) * g))
    return torch.stack(ys, 1)


@pytest.mark.parametrize("eig_range", ["[0,1]", "[-1,1]"])
def test_layer_equals_the_papers_time_mixing_token_by_token(eig_range):
    layer = randomised(RWKV7(12, num_heads=3, eig_range=eig_range, low_rank=5), seed=1)
    x = torch.randn(2, 19, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    y, _ = layer(x)
    assert rel_error(y, paper_time_mixing(layer, x)) <= 1e-10


def _driven(eig_range: str) -> RWKV7:
    """A layer whose iclr is near its top (a bias of 8) and whose decay spans (0.55, 1)."""
    torch.manual_seed(3)
    layer = RWKV7(8, num_heads=2, eig_range=eig_range).double()
    with torch.no_grad():
        layer.a_lora[2].bias.fill_(8.0)
    return layer


def test_eig_range_bounds_the_transition_spectrum():
    x = torch.randn(4, 12, 8, dtype=torch.float64) * 3
    with torch.no_grad():
        for eig_range, low in (("[0,1]", math.exp(-math.exp(-0.5)) - 1), ("[-1,1]", -1.0)):
            layer = _driven(eig_range)
            ev = layer.transition_eigenvalues(x)  # [B, T, H, Dk], real
            general = torch.linalg.eigvals(layer.transition_matrices(x))  # the non-symmetric matrices themselves
            assert general.imag.abs().max() < 1e-8
            assert rel_error(ev, general.real.sort(-1).values) < 1e-10
            assert ev.min() > low - 1e-9 and ev.max() <= 1 + 1e-9
        assert ev.min() < -0.9, f"[-1,1] never reaches a reflection (min {ev.min():.3f})"
        assert _driven("[0,1]").transition_eigenvalues(x).min() < 0  # the paper's range dips below 0 with the decay


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"low_rank": 0}, "low_rank .* must be an integer >= 1, got 0"),
        ({"low_rank": True}, "low_rank .* must be an integer >= 1, got True"),
        ({"eig_range": "[-2,1]"}, "unknown eig_range '\\[-2,1\\]'"),
        ({"num_heads": 3}, "d_model 8 is not divisible by num_heads 3"),
    ],
)
def test_bad_parameters_are_one_line_errors(kwargs, match):
    with pytest.raises(StatetrackError, match=match):
        RWKV7(8, **kwargs)


def test_state_is_the_last_input_and_the_matrix_state():
    layer = RWKV7(8).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    _, (last, S) = layer(x)
    assert torch.equal(last, x[:, -1]) and S.shape == (2, 2, 4, 4)
    y_empty, state = layer(x[:, :0], (last, S))
    assert y_empty.shape == (2, 0, 8) and torch.equal(state[0], last)
    assert F.mse_loss(layer(x[:, 2:], layer(x[:, :2])[1])[0], layer(x)[0][:, 2:]) < 1e-24
