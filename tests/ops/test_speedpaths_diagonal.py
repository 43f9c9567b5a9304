"""The fast paths of S4D, IDS4, Mamba and Mamba-2 against their materialised forms (issue #28).

S4D's chunked convolution, Mamba-2's chunked SSD form, IDS4's compiled pass (`ops/ids4_scan.c`) and
the hand-written backwards of its PyTorch form's discretisation and of Mamba's selective inputs and
read-out, and the shifted-product causal
convolution all compute the recurrence of the module docstrings in another order. Here each layer's
output, final state and every gradient (parameters, input, initial state) are compared in float64
with the plain form: [B, T, ..., N] tensors built by autograd ops, `diagonal_scan_reference`,
`CausalConv1d` itself. Lengths span several chunks and start from a random state.
"""

import pytest
import torch
import torch.nn.functional as F

from statetrack.layers import IDS4, S4D, Mamba, Mamba2
from statetrack.layers.common import decay_to_range
from statetrack.layers.s4d import S4D_CHUNK
from statetrack.ops import diagonal_scan_reference, native
from statetrack.ops.ids4 import _IDS4Scan, _InputDependentZOH
from statetrack.ops.selective import SSD_CHUNK, _SelectiveInputs

B, D = 2, 8


def randomised(layer, seed):
    gen = torch.Generator().manual_seed(seed)
    layer = layer.double()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return layer


def s4d_plain(layer, x, h0):
    lam = torch.complex(-layer.A_re_log.exp(), layer.A_im.expand(x.shape[:2] + layer.A_im.shape)
                        + (layer.phi_proj(x)[:, :, None, :] if layer.input_dependent else 0))
    dt = F.softplus(layer.dt_proj(x))[..., None] if layer.input_dependent else layer.log_dt.exp()[:, None]
    a = torch.exp(dt * lam)
    b = (a - 1) / lam * torch.view_as_complex(layer.B) * x[..., None]
    h, h_last = diagonal_scan_reference(a.expand_as(b), b, h0)
    y = 2 * torch.einsum("btdn,dn->btd", h, torch.view_as_complex(layer.C)).real + layer.D * x
    return F.glu(layer.out_proj(F.gelu(y)), dim=-1), h_last


def mamba_plain(layer, x, state):
    conv_state, h0 = state
    u, z = layer.in_proj(x).chunk(2, dim=-1)
    u, conv_state = layer.conv(u, conv_state)
    u = F.silu(u)
    dt_low, B_t, C_t = layer.x_proj(u).split([layer.dt_rank, layer.d_state, layer.d_state], dim=-1)
    dt = F.softplus(layer.dt_proj(dt_low))
    a = decay_to_range(torch.exp(-dt[..., None] * layer.A_log.exp()), layer.eig_range)
    h, h_last = diagonal_scan_reference(a, (dt * u)[..., None] * B_t[:, :, None, :], h0)
    y = torch.einsum("bten,btn->bte", h, C_t) + layer.D * u
    return layer.out_proj(y * F.silu(z)), (conv_state, h_last)


def mamba2_plain(layer, x, state):
    conv_state, h0 = state
    z, xbc, dt = layer.in_proj(x).split([layer.inner, layer.inner + 2 * layer.d_state, layer.num_heads], dim=-1)
    xbc, conv_state = layer.conv(xbc, conv_state)
    u, B_t, C_t = F.silu(xbc).split([layer.inner, layer.d_state, layer.d_state], dim=-1)
    dt = F.softplus(dt + layer.dt_bias)
    a = decay_to_range(torch.exp(-dt * layer.A_log.exp()), layer.eig_range)
    u = u.view(*x.shape[:2], layer.num_heads, layer.head_dim)
    b = (dt[..., None] * u)[..., None] * B_t[:, :, None, None, :]
    h, h_last = diagonal_scan_reference(a[..., None, None].expand_as(b), b, h0)
    y = torch.einsum("bthpn,btn->bthp", h, C_t) + layer.D[:, None] * u
    y = layer.norm(y.reshape(*x.shape[:2], layer.inner) * F.silu(z))
    return layer.out_proj(y), (conv_state, h_last)


def random_state(layer, gen):
    if isinstance(layer, S4D):
        return torch.randn(B, D, layer.modes, generator=gen, dtype=torch.complex128)
    conv = torch.randn(B, layer.conv.kernel_size - 1, layer.conv.conv.in_channels, generator=gen, dtype=torch.float64)
    shape = (B, layer.A_log.shape[0], layer.d_state) if isinstance(layer, Mamba) else (B, layer.num_heads, layer.head_dim, layer.d_state)
    return conv, torch.randn(shape, generator=gen, dtype=torch.float64)


def flat(state):
    return [] if state is None else list(state) if isinstance(state, tuple) else [state]


def run(layer, fn, x, state, w):
    """Output, final state and the gradients of a fixed functional of both; state None: none given."""
    x = x.clone().requires_grad_(True)
    given = [s.clone().requires_grad_(True) for s in flat(state)]
    layer.zero_grad()
    y, last = fn(x, None if state is None else tuple(given) if isinstance(state, tuple) else given[0])
    loss = (y * w).sum() + sum((torch.view_as_real(s) if s.is_complex() else s).sum() * 0.3 for s in flat(last))
    loss.backward()
    grads = [x.grad] + [s.grad for s in given] + [p.grad for p in layer.parameters()]
    return [y.detach()] + [s.detach() for s in flat(last)] + grads


CASES = [
    ("s4d", lambda: S4D(D, d_state=6), s4d_plain, [1, S4D_CHUNK, 2 * S4D_CHUNK + 5]),
    ("ids4", lambda: IDS4(D, d_state=6), s4d_plain, [1, 13, 2 * native.IDS4_CHUNK + 5]),
    ("mamba", lambda: Mamba(D, d_state=5), mamba_plain, [1, 13]),
    ("mamba-neg", lambda: Mamba(D, d_state=5, eig_range="[-1,1]"), mamba_plain, [1, 13]),
    ("mamba2", lambda: Mamba2(D, d_state=5, head_dim=4), mamba2_plain, [1, SSD_CHUNK, 2 * SSD_CHUNK + 3]),
    ("mamba2-neg", lambda: Mamba2(D, d_state=5, head_dim=4, eig_range="[-1,1]"), mamba2_plain, [1, 2 * SSD_CHUNK + 3]),
]


@pytest.mark.parametrize("name, make, plain, lengths", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("with_state", [False, True])
def test_fast_path_matches_materialised_form(name, make, plain, lengths, with_state):
    torch.manual_seed(0)
    layer = randomised(make(), seed=1)
    gen = torch.Generator().manual_seed(2)
    for T in lengths:
        x = torch.randn(B, T, D, generator=gen, dtype=torch.float64)
        state = random_state(layer, gen)
        w = torch.randn(B, T, D, generator=gen, dtype=torch.float64)
        if not with_state:
            state = None
        no_state = None if isinstance(layer, S4D) else (None, None)
        fast = run(layer, lambda x, s: layer(x, s), x, state, w)
        ref = run(layer, lambda x, s: plain(layer, x, no_state if s is None else s), x, state, w)
        assert len(fast) == len(ref)
        for f, r in zip(fast, ref):
            torch.testing.assert_close(f, r, rtol=1e-9, atol=1e-11)


def random_leaves(seed):
    """rnd(*shape, positive=False): a float64 leaf wanting its gradient, positive (0.05..) when asked."""
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape, positive=False):
        v = torch.randn(*shape, generator=gen, dtype=torch.float64)
        return (v.abs() * 0.5 + 0.05 if positive else v).requires_grad_(True)
    return rnd


def test_hand_written_backwards_pass_gradcheck():
    rnd = random_leaves(0)
    Bsz, T, d, n = 2, 3, 4, 3
    args = (rnd(Bsz, T, d, positive=True), rnd(Bsz, T, n), -rnd(d, n, positive=True), rnd(d, n), rnd(d, n, 2), rnd(Bsz, T, d))
    assert torch.autograd.gradcheck(lambda *a: _InputDependentZOH.apply(*a), args)
    for scale in (1.0, 2.0):
        args = (rnd(Bsz, T, d, positive=True), rnd(d, n, positive=True), rnd(Bsz, T, d), rnd(Bsz, T, n))  # dt, A, u, B_t
        assert torch.autograd.gradcheck(lambda *a: _SelectiveInputs.apply(*a, scale), args)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pytorch"])
def test_ids4_takes_its_compiled_pass_on_the_cpu_and_its_pytorch_form_elsewhere(monkeypatch, compiled):
    """Both of IDS4's forms against the materialised definition, in float64 and in float32 (where
    the compiled pass forms a with torch's own cos, sin and exp, as the PyTorch form does)."""
    if compiled and not native.available():
        pytest.skip("no C compiler: the compiled pass is not built")
    if not compiled:
        monkeypatch.setattr(native, "supports_real", lambda *tensors: False)
    torch.manual_seed(0)
    layer = randomised(IDS4(D, d_state=6), seed=4)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(B, 70, D, generator=gen, dtype=torch.float64)
    state = torch.randn(B, D, 3, generator=gen, dtype=torch.complex128)
    w = torch.randn(B, 70, D, generator=gen, dtype=torch.float64)
    fast = run(layer, lambda x, s: layer(x, s), x, state, w)
    ref = run(layer, lambda x, s: s4d_plain(layer, x, s), x, state, w)
    for f, r in zip(fast, ref):
        torch.testing.assert_close(f, r, rtol=1e-9, atol=1e-11)
    layer32 = layer.float()
    y32, h32 = layer32(x.float(), state.to(torch.complex64))
    y64, h64 = s4d_plain(layer.double(), x, state)
    torch.testing.assert_close(y32.double(), y64.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(h32.to(torch.complex128), h64.detach(), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not native.available(), reason="no C compiler: the compiled pass is not built")
def test_ids4_compiled_pass_passes_gradcheck():
    rnd = random_leaves(0)
    Bsz, T, d, n = 2, 3, 4, 3
    args = (rnd(Bsz, T, d, positive=True), rnd(Bsz, T, n), -rnd(d, n, positive=True), rnd(d, n), rnd(d, n, 2),
            rnd(d, n, 2), rnd(Bsz, T, d), rnd(Bsz, d, 2, n))
    assert torch.autograd.gradcheck(lambda *a: _IDS4Scan.apply(*a), args)
