"""The fused training paths of Panini, the NRU, Bedouin, the sLSTM and GLA against their reference
forms: the same outputs, final states and gradients (float64 to rounding, float32 to float tolerance)."""

import pytest
import torch

from statetrack.layers import panini as panini_layer
from statetrack.layers.rnn import NRU
from statetrack.ops import panini as P
from statetrack.ops.nonlinear import nru_recurrence_fused, nru_recurrence_reference


def close(a, b, dtype):
    tol = 1e-10 if dtype == torch.float64 else 2e-4
    torch.testing.assert_close(a, b, atol=tol * max(1.0, float(b.detach().abs().max())), rtol=tol, equal_nan=True)


def grads(outputs, inputs, seed=0):
    """Gradients of a random linear function of `outputs` with respect to `inputs`."""
    g = torch.Generator().manual_seed(seed)
    total = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outputs)
    return torch.autograd.grad(total, inputs, allow_unused=True)


# ---- NRU -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("hidden, memory, heads, normalize", [(6, 5, 1, True), (9, 7, 3, True), (4, 3, 2, False), (8, 32, 1, True)])
def test_nru_fused_equals_the_reference(dtype, hidden, memory, heads, normalize):
    torch.manual_seed(0)
    B, T = 3, 9
    O = hidden + 2 * heads * (1 + memory)
    pre = (torch.randn(B, T, O, dtype=dtype) * 0.5 + 0.1).requires_grad_()
    W = (torch.randn(hidden + memory, O, dtype=dtype) * 0.4 / (hidden + memory) ** 0.5).requires_grad_()
    h0 = torch.randn(B, hidden, dtype=dtype).relu().requires_grad_()
    m0 = torch.randn(B, memory, dtype=dtype).requires_grad_()
    results = []
    for f in (nru_recurrence_reference, nru_recurrence_fused):
        y, (h, m) = f(pre, W, hidden, heads, normalize, (h0, m0))
        results.append((y, h, m) + grads((y, h, m), (pre, W, h0, m0)))
    for a, b in zip(*results):
        close(a, b, dtype)


def test_nru_layer_trains_the_same_with_and_without_the_fused_path():
    torch.manual_seed(0)
    layer = NRU(6, hidden=5, memory=7, heads=2).double()
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) * 0.4 / p.shape[-1] ** 0.5)
    x = torch.randn(2, 11, 6, dtype=torch.float64, requires_grad=True)
    results = []
    for fused in (False, True):
        layer.fused_training = fused
        y, (h, m) = layer(x)
        results.append((y, h, m) + grads((y, h, m), (x, *layer.parameters())))
    layer.fused_training = True
    for a, b in zip(*results):
        close(a, b, torch.float64)


# ---- Panini --------------------------------------------------------------------------------------
def panini_pair(layer, x, state=None):
    """(outputs, state, gradients) of the layer with the fused recurrence, then with the reference."""
    results = []
    for fast in (True, False):
        saved = panini_layer.panini_recurrence
        if not fast:
            panini_layer.panini_recurrence = P.panini_recurrence_reference
        try:
            y, s = layer(x, state)
            results.append((y, s) + grads((y, s), (x, *layer.parameters())))
        finally:
            panini_layer.panini_recurrence = saved
    return results


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-6), (torch.float32, 1e-4)])
@pytest.mark.parametrize("renormalize", [True, False])
def test_panini_fused_equals_the_reference(dtype, tol, renormalize):
    torch.manual_seed(0)
    layer = panini_layer.Panini(8, n=4, num_heads=2, renormalize=renormalize, sinkhorn_tol=tol).to(dtype)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    x = torch.randn(5, 12, 8, dtype=dtype, requires_grad=True)
    state = torch.softmax(torch.randn(5, 2, 4, 4, dtype=dtype), -1)
    for s in (None, state):
        fast, ref = panini_pair(layer, x, s)
        for a, b in zip(fast, ref):
            close(a, b, dtype)


def test_sinkhorn_fused_equals_the_reference_with_degenerate_matrices():
    g = torch.Generator().manual_seed(0)
    H = torch.rand(9, 4, 4, generator=g, dtype=torch.float64) + 0.1
    H[2] = torch.full((4, 4), 0.25, dtype=torch.float64)  # already doubly stochastic
    H[4, 1] = 0.0  # a zero row
    H[6, :, 3] = 0.0  # a zero column
    H.requires_grad_()
    for max_iter, tol in ((20, 1e-6), (3, 1e-12)):
        fast, ref = P.sinkhorn(H, max_iter, tol), P.sinkhorn_reference(H, max_iter, tol)
        assert torch.equal(fast, ref)
        close(grads((fast,), (H,))[0], grads((ref,), (H,))[0], torch.float64)
    with torch.no_grad():
        assert torch.equal(P.sinkhorn(H, 20, 1e-6), P.sinkhorn_reference(H, 20, 1e-6))


def test_panini_table_fused_equals_the_reference():
    from statetrack.tasks import make_task

    task = make_task("pfsa", n=3, noise=0.2, reveal_prob=0.3, belief="marginal")
    table = panini_layer.exact_panini(task)
    tokens = task.sample(4, 30, torch.Generator().manual_seed(0)).inputs
    A_l, A_r, B = table.A_l[tokens], table.A_r[tokens], table.B[tokens]
    H0 = torch.eye(3, dtype=torch.float64).repeat(4, 1, 1)
    fast = P.panini_recurrence(A_l, A_r, B, H0, True, 100, 1e-6)
    ref = P.panini_recurrence_reference(A_l, A_r, B, H0, True, 100, 1e-6)
    for a, b in zip(fast, ref):
        close(a, b, torch.float64)


# ---- sLSTM ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("B, T, H, D, with_state", [(3, 7, 2, 4, True), (4, 9, 1, 5, False), (2, 1, 3, 2, True)])
def test_slstm_fused_equals_the_reference(dtype, B, T, H, D, with_state):
    from statetrack.ops.nonlinear import slstm_recurrence_fused, slstm_recurrence_reference

    torch.manual_seed(0)
    pre = torch.randn(B, T, 4, H, D, dtype=dtype, requires_grad=True)
    R = (torch.randn(H, D, 4 * D, dtype=dtype) / D**0.5).requires_grad_()
    inputs, state = [pre, R], None
    if with_state:
        h, c, n, m = (torch.randn(B, H, D, dtype=dtype) for _ in range(4))
        state = tuple(s.requires_grad_() for s in (h, c, n.abs() + 0.5, m))
        inputs += list(state)
    results = []
    for f in (slstm_recurrence_reference, slstm_recurrence_fused):
        y, s = f(pre, R, state)
        results.append((y, *s) + grads((y, *s), inputs))
    for a, b in zip(*results):
        close(a, b, dtype)


def test_slstm_fused_splits_the_gradient_of_a_tied_maximum_as_torch_does():
    """m_1 = max(log f_1 + m_0, i~_1) with the two equal (m_0 = 0, R = 0): torch.maximum gives each
    side half the gradient, and so does the fused backward."""
    from statetrack.ops.nonlinear import slstm_recurrence_fused, slstm_recurrence_reference

    pre = torch.randn(2, 3, 4, 1, 3, dtype=torch.float64)
    pre[:, 0, 1] = torch.nn.functional.logsigmoid(pre[:, 0, 2])  # i~_1 = log f_1 exactly
    pre.requires_grad_()
    R = torch.zeros(1, 3, 12, dtype=torch.float64, requires_grad=True)
    results = []
    for f in (slstm_recurrence_reference, slstm_recurrence_fused):
        y, s = f(pre, R)
        results.append((y, *s) + grads((y, *s), (pre, R)))
    for a, b in zip(*results):
        close(a, b, torch.float64)


def test_slstm_layer_trains_the_same_with_and_without_the_fused_path():
    from statetrack.layers.xlstm import sLSTM

    torch.manual_seed(0)
    layer = sLSTM(8, num_heads=2).double()
    x = torch.randn(3, 10, 8, dtype=torch.float64, requires_grad=True)
    results = []
    for fused in (False, True):
        layer.fused_training = fused
        y, s = layer(x)
        results.append((y, *s) + grads((y, *s), (x, *layer.parameters())))
    layer.fused_training = True
    for a, b in zip(*results):
        close(a, b, torch.float64)


# ---- GLA -----------------------------------------------------------------------------------------
def test_gla_is_its_recurrence_step_by_step():
    """S_t = diag(alpha_t) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t per head (the layer reads S out
    elementwise): outputs, final state and gradients against a loop with a batched product."""
    from statetrack.layers.gla import GLA

    torch.manual_seed(0)
    layer = GLA(8, num_heads=2).double()
    x = torch.randn(3, 9, 8, dtype=torch.float64, requires_grad=True)
    S0 = torch.randn(3, 2, 4, 4, dtype=torch.float64)

    def reference(x, S):
        B, T, _ = x.shape
        heads = (B, T, 2, 4)
        q = layer.q_proj(x).view(heads) * 4**-0.5
        k, v, alpha = layer.k_proj(x).view(heads), layer.v_proj(x).view(heads), layer.decay(x)
        outs = []
        for t in range(T):
            S = alpha[:, t, ..., None] * S + k[:, t, ..., :, None] * v[:, t, ..., None, :]
            outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
        o = layer.o_norm(torch.stack(outs, 1)).reshape(B, T, -1) * torch.nn.functional.silu(layer.g_proj(x))
        return layer.o_proj(o), S

    results = []
    for f in (layer, reference):
        y, S = f(x, S0)
        results.append((y, S) + grads((y, S), (x, *layer.parameters())))
    for a, b in zip(*results):
        close(a, b, torch.float64)


# ---- Bedouin -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("shape", [(3, 5), (7,), (2, 70)])
def test_bedouin_decay_equals_its_broadcast_form(dtype, shape, monkeypatch):
    from statetrack.ops.fixed_point import _GatedDecay, gated_decay, gated_decay_reference

    monkeypatch.setattr(_GatedDecay, "SLICE", 3 * 4 * 6)  # several slices, the last one short
    torch.manual_seed(0)
    rate = (-torch.rand(6, 4, dtype=dtype) * 3).requires_grad_()
    delta = torch.rand(*shape, 6, dtype=dtype, requires_grad=True)
    results = []
    for f in (gated_decay_reference, gated_decay):
        lam = f(rate, delta)
        results.append((lam,) + grads((lam,), (rate, delta)))
    for a, b in zip(*results):
        close(a, b, dtype)


def test_bedouin_joint_mixing_equals_the_split_form(monkeypatch):
    from statetrack.layers.fixedpoint import Bedouin

    torch.manual_seed(0)
    layer = Bedouin(8, d_state=4, reflections=2, max_iter=6).double()
    x = torch.randn(3, 7, 8, dtype=torch.float64, requires_grad=True)
    results = []
    for joint in (True, False):
        if not joint:
            def split(self, y_shifted, x_parts):
                return self._mixing(y_shifted, *x_parts.split(self.y_sizes, dim=-1))
            monkeypatch.setattr(Bedouin, "_mixing_joint", split)
        y, (h, y_last) = layer(x)
        results.append((y, h, y_last) + grads((y, h, y_last), (x, *layer.parameters())))
    for a, b in zip(*results):
        close(a, b, torch.float64)
