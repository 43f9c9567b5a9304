"""Mamba's selective scan: the fused native loop and the PyTorch form equal the materialised
definition (`selective_scan_reference`), forward and every gradient; and the Mamba layer on it keeps
its chunked (stateful) evaluation and equals its materialised form (issue #28)."""

import math

import pytest
import torch

from ops_helpers import assert_same, rel_error
from statetrack.layers import Mamba
from statetrack.ops import native, selective_scan, selective_scan_reference
from statetrack.ops import selective as selective_module

needs_native = pytest.mark.skipif(not native.available(), reason="no C compiler for the native loop")
NATIVE = pytest.param("native", marks=needs_native)
IMPLS = [NATIVE, "torch"]


def make(B, T, E, N, dtype=torch.float64, initial=True, seed=0, dt_scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    inputs = {
        "u": torch.randn(B, T, E, dtype=dtype, generator=gen),
        "dt": dt_scale * torch.nn.functional.softplus(torch.randn(B, T, E, dtype=dtype, generator=gen)),
        "A": 0.2 + 3 * torch.rand(E, N, dtype=dtype, generator=gen),
        "B_t": torch.randn(B, T, N, dtype=dtype, generator=gen),
        "C_t": torch.randn(B, T, N, dtype=dtype, generator=gen),
        "initial_state": torch.randn(B, E, N, dtype=dtype, generator=gen) if initial else None,
    }
    return {k: (v.requires_grad_() if v is not None else None) for k, v in inputs.items()}


def call(impl, scale):
    def fn(**inputs):
        return selective_scan(**inputs, scale=scale, impl=impl)
    return fn


def reference(scale):
    def fn(**inputs):
        return selective_scan_reference(**inputs, scale=scale)
    return fn


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("scale", [1.0, 2.0])
@pytest.mark.parametrize("initial", [True, False])
@pytest.mark.parametrize("shape", [(2, 1, 3, 4), (3, 7, 5, 3), (2, 130, 3, 5), (1, 64, 2, 1), (4, 65, 1, 17)])
def test_matches_reference_float64(impl, scale, initial, shape):
    """Output, final state and the gradients in u, dt, A, B_t, C_t (and h0); T = 1, odd sizes, and
    lengths past one and two checkpoint chunks (64 steps)."""
    inputs = make(*shape, initial=initial)
    if not initial:
        inputs.pop("initial_state")
    assert_same(call(impl, scale), reference(scale), inputs, tol=1e-12)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("initial", [True, False])
def test_empty_sequence(impl, initial):
    inputs = make(2, 0, 3, 4, initial=initial)
    y, h = selective_scan(**inputs, scale=2.0, impl=impl)
    assert y.shape == (2, 0, 3)
    if initial:
        assert torch.equal(h, inputs["initial_state"])
        (grad,) = torch.autograd.grad((h * 3).sum(), [inputs["initial_state"]])
        assert torch.equal(grad, torch.full_like(grad, 3))
    else:
        assert torch.equal(h, torch.zeros(2, 3, 4, dtype=torch.float64))


@pytest.mark.parametrize("impl", IMPLS)
def test_transition_zero_and_negative(impl):
    """[-1,1] (scale 2): a_t exactly 0 (exp(-dt A) = 1/2), -1 (exp underflows to 0) and values in
    between; the backward must not divide by a_t."""
    B, T, E, N = 2, 9, 3, 4
    inputs = make(B, T, E, N)
    with torch.no_grad():
        inputs["dt"][:, ::3] = 1.0
        inputs["A"][:, 0] = math.log(2)  # a = 2 exp(-ln 2) - 1 = 0 where dt = 1
        inputs["A"][:, 1] = 800.0  # exp(-800 dt) = 0: a = -1
        inputs["A"][:, 2] = 0.01  # close to 1
    a = 2 * torch.exp(-inputs["dt"][..., None] * inputs["A"]) - 1
    assert (a == 0).any() and (a == -1).any() and (a < 0).any()
    assert_same(call(impl, 2.0), reference(2.0), inputs, tol=1e-12)


@needs_native
@pytest.mark.parametrize("scale", [1.0, 2.0])
@pytest.mark.parametrize("initial", [True, False])
def test_gradcheck_native(scale, initial):
    inputs = make(2, 5, 3, 2, initial=initial)
    names = [n for n, v in inputs.items() if v is not None]

    def fn(*args):
        kwargs = dict(zip(names, args))
        return selective_scan(**kwargs, scale=scale, impl="native")

    assert torch.autograd.gradcheck(fn, tuple(inputs[n] for n in names))


@needs_native
@pytest.mark.parametrize("N", [16, 5])  # the loop compiled for N = 16, and for any N
@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_float32_native_against_float64_reference(scale, N):
    """The float32 loop (polynomial exp) to float32 tolerance of the float64 definition."""
    inputs64 = make(3, 70, 16, N, dt_scale=0.5)
    inputs32 = {k: v.detach().float().requires_grad_() for k, v in inputs64.items()}
    gen = torch.Generator().manual_seed(1)
    y_ref, h_ref = selective_scan_reference(**inputs64, scale=scale)
    wy, wh = torch.randn(y_ref.shape, generator=gen, dtype=torch.float64), torch.randn(h_ref.shape, generator=gen, dtype=torch.float64)
    g_ref = torch.autograd.grad((y_ref * wy).sum() + (h_ref * wh).sum(), list(inputs64.values()))
    y, h = selective_scan(**inputs32, scale=scale, impl="native")
    assert y.dtype == torch.float32
    g = torch.autograd.grad((y * wy.float()).sum() + (h * wh.float()).sum(), list(inputs32.values()))
    assert rel_error(y, y_ref) < 1e-5 and rel_error(h, h_ref) < 1e-5
    for name, a, b in zip(inputs64, g, g_ref):
        assert rel_error(a, b) < 1e-5, name


@needs_native
def test_exp_float32_special_values():
    """The float32 exp of the loop (read off h_T = exp(z) h0 with no input): within 1 ulp of
    torch.exp on [-120, 95], and exact at 0, inf, -inf, NaN and past both ends of the range."""
    z = torch.cat([torch.linspace(-120, 95, 20001), torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, -200.0, 200.0])])
    F = z.numel()
    with torch.no_grad():
        _, h = selective_scan(torch.zeros(1, 1, 1), torch.ones(1, 1, 1), -z[None], torch.zeros(1, 1, F),
                              torch.zeros(1, 1, F), torch.ones(1, 1, F), impl="native")
    got, want = h.view(-1), torch.exp(z)
    normal = torch.isfinite(want) & (want > 1e-37)
    assert ((got - want).abs() / want)[normal].max() <= 1.2e-7
    assert ((got - want).abs() <= 2e-44)[(want <= 1e-37)].all()
    assert torch.equal(got.isnan(), want.isnan())
    special = slice(-7, None)  # 1, 1, inf, 0, NaN, 0, inf
    assert torch.equal(got[special].nan_to_num(-1.0), want[special].nan_to_num(-1.0))


@needs_native
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_threads_split_channels(dtype):
    """One batch row and several threads: the pieces are channel ranges and the partial sums of
    dB, dC and dA add up (the work must reach two threads' worth)."""
    threads = torch.get_num_threads()

    def on(n, fn):
        def run(**inputs):
            torch.set_num_threads(n)
            assert native.threads(70 * 128 * 16) == n
            return fn(**inputs)
        return run

    try:
        inputs = make(1, 70, 128, 16)
        if dtype == torch.float64:
            assert_same(on(2, call("native", 2.0)), reference(2.0), inputs, tol=1e-12)
        else:  # against the same loop on one thread
            inputs32 = {k: v.detach().float().requires_grad_() for k, v in inputs.items()}
            assert_same(on(2, call("native", 2.0)), on(1, call("native", 2.0)), inputs32, tol=1e-6)
    finally:
        torch.set_num_threads(threads)


def test_arguments_checked():
    inputs = make(2, 3, 4, 5)
    with pytest.raises(ValueError, match="impl"):
        selective_scan(**inputs, impl="fast")
    with pytest.raises(ValueError, match="A must be"):
        selective_scan(inputs["u"], inputs["dt"], inputs["A"][:3], inputs["B_t"], inputs["C_t"])
    with pytest.raises(RuntimeError, match="impl='native'"):
        selective_scan(*(inputs[k].half() for k in ("u", "dt", "A", "B_t", "C_t")), impl="native")


def random_mamba(eig_range, dtype, seed=0, d_model=8):
    torch.manual_seed(seed)
    layer = Mamba(d_model, d_state=5, eig_range=eig_range).to(dtype)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=dtype))
    return layer


@pytest.mark.parametrize("eig_range", ["[0,1]", "[-1,1]"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_mamba_chunked_equals_whole(eig_range, dtype):
    """Evaluating in pieces of 1, 5 and 64 + 1 tokens, carrying the state, equals one call."""
    layer = random_mamba(eig_range, dtype)
    x = torch.randn(2, 75, 8, dtype=dtype, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        y, (conv, h) = layer(x)
        state, pieces = None, []
        for lo, hi in [(0, 1), (1, 6), (6, 71), (71, 75)]:
            out, state = layer(x[:, lo:hi], state)
            pieces.append(out)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert rel_error(torch.cat(pieces, 1), y) < tol
    assert rel_error(state[0], conv) < tol and rel_error(state[1], h) < tol


@needs_native
@pytest.mark.parametrize("eig_range", ["[0,1]", "[-1,1]"])
def test_mamba_native_equals_materialised(eig_range, monkeypatch):
    """The layer on the fused loop and on the PyTorch form it falls back to (native unavailable):
    the same outputs, final state and gradients (parameters, input, initial state)."""
    layer = random_mamba(eig_range, torch.float64)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, 11, 8, dtype=torch.float64, generator=gen, requires_grad=True)
    E = layer.A_log.shape[0]
    h0 = torch.randn(3, E, layer.d_state, dtype=torch.float64, generator=gen, requires_grad=True)
    conv0 = torch.randn(3, layer.conv.kernel_size - 1, E, dtype=torch.float64, generator=gen)
    wy, wh = torch.randn(3, 11, 8, dtype=torch.float64, generator=gen), torch.randn(3, E, layer.d_state, dtype=torch.float64, generator=gen)

    def run():
        y, (_, h) = layer(x, (conv0, h0))
        inputs = [x, h0, *layer.parameters()]
        return [y, h, *torch.autograd.grad((y * wy).sum() + (h * wh).sum(), inputs)]

    fast = run()
    monkeypatch.setattr(selective_module, "native_applies", lambda *tensors: False)
    monkeypatch.setattr("statetrack.layers.mamba.native_applies", lambda *tensors: False)
    slow = run()
    for a, b in zip(fast, slow):
        assert rel_error(a, b) < 1e-12
