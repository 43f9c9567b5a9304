"""DeltaNet against an explicit-matrix recurrence in both eigenvalue ranges; state carrying."""

import pytest
import torch

from statetrack import StatetrackError
from statetrack.layers import LSTM, DeltaNet


def explicit_deltanet(layer: DeltaNet, x):
    """S_t = (I - beta k k^T) S_{t-1} + beta k v^T with the transition built as a matrix."""
    g = layer.gates(x)
    q, k, v, beta = g["q"], g["k"], g["v"], g["beta"]
    B, T, H, D = q.shape
    S = torch.zeros(B, H, D, D, dtype=x.dtype)
    eye = torch.eye(D, dtype=x.dtype)
    outs = []
    for t in range(T):
        kk = k[:, t, :, :, None] * k[:, t, :, None, :]  # [B, H, D, D]
        A = eye - beta[:, t, :, None, None] * kk
        S = A @ S + beta[:, t, :, None, None] * k[:, t, :, :, None] * v[:, t, :, None, :]
        outs.append((S.transpose(-1, -2) @ q[:, t, :, :, None]).squeeze(-1))
    o = torch.stack(outs, 1)
    return layer.o_proj(layer.o_norm(o).reshape(B, T, -1))


@pytest.mark.parametrize("eig_range", ["[0,1]", "[-1,1]"])
def test_deltanet_equals_explicit_recurrence(eig_range):
    torch.manual_seed(0)
    layer = DeltaNet(16, num_heads=2, eig_range=eig_range).double()
    with torch.no_grad():
        layer.b_proj.bias.fill_(2.0)  # push beta towards the top of its range
    x = torch.randn(3, 11, 16, dtype=torch.float64)
    y, _ = layer(x)
    torch.testing.assert_close(y, explicit_deltanet(layer, x), rtol=1e-10, atol=1e-10)


def transition_eigenvalues(layer, x):
    g = layer.gates(x)
    k, beta = g["k"], g["beta"]
    D = k.shape[-1]
    A = torch.eye(D, dtype=x.dtype) - beta[..., None, None] * k[..., :, None] * k[..., None, :]
    return torch.linalg.eigvalsh(A)  # symmetric: real eigenvalues


def test_eig_range_bounds_transition_spectrum():
    torch.manual_seed(1)
    x = torch.randn(4, 20, 16, dtype=torch.float64) * 3
    positive = DeltaNet(16, 2, eig_range="[0,1]").double()
    negative = DeltaNet(16, 2, eig_range="[-1,1]").double()
    negative.load_state_dict(positive.state_dict())
    with torch.no_grad():
        for layer in (positive, negative):
            layer.b_proj.bias.fill_(3.0)
        ev_pos, ev_neg = transition_eigenvalues(positive, x), transition_eigenvalues(negative, x)
    assert ev_pos.min() >= -1e-12 and ev_pos.max() <= 1 + 1e-12
    assert ev_neg.min() < -0.5  # reflections are reachable
    assert ev_neg.min() >= -1 - 1e-12 and ev_neg.max() <= 1 + 1e-12


def test_unknown_eig_range():
    with pytest.raises(StatetrackError, match=r"unknown eig_range '\[0,2\]'"):
        DeltaNet(8, eig_range="[0,2]")


@pytest.mark.parametrize(
    "make",
    [
        lambda: DeltaNet(12, 3, eig_range="[-1,1]"),
        lambda: DeltaNet(12, 3, eig_range="[-1,1]", short_conv=4),
        lambda: LSTM(12),
    ],
)
def test_state_carried_across_calls_equals_one_call(make):
    torch.manual_seed(2)
    layer = make().double()
    x = torch.randn(2, 17, 12, dtype=torch.float64)
    y, _ = layer(x)
    y1, state = layer(x[:, :6])
    y2, _ = layer(x[:, 6:], state)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("short_conv", [0, 4])
@pytest.mark.parametrize("eig_range", ["[0,1]", "[-1,1]"])
def test_deltanet_fast_path_equals_reference_op(eig_range, short_conv):
    from statetrack.ops import delta_rule_reference

    torch.manual_seed(3)
    layer = DeltaNet(16, num_heads=2, eig_range=eig_range, short_conv=short_conv).double()
    with torch.no_grad():
        layer.b_proj.bias.fill_(1.5)
    x = torch.randn(2, 70, 16, dtype=torch.float64, requires_grad=True)  # longer than one chunk
    y, state = layer(x)
    o, ref_state = delta_rule_reference(**layer.gates(x))
    ref = layer.o_proj(layer.o_norm(o).reshape(2, 70, -1))
    torch.testing.assert_close(y, ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(state[1] if short_conv else state, ref_state, rtol=1e-9, atol=1e-9)
    (grad,) = torch.autograd.grad(y.square().sum(), x)
    (ref_grad,) = torch.autograd.grad(ref.square().sum(), x)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-9)
