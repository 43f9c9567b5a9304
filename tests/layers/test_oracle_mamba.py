"""Mamba and Mamba-2 against independent definitions, in float64 on small random weights.

Mamba: a per-step loop written here from the S6 equations (Gu & Dao 2023, eq. 2 and Alg. 2).
Mamba-2: fla-core's naive scalar-decay linear attention (simple GLA, written by others) for the
scan, with the block around it (projections, short convolution, gate, D skip, RMSNorm) written here
from Dao & Gu 2024. Neither oracle calls statetrack.ops or any function of the layer: both read the
layer's weights and compute from them. Each layer starts from a random state (conv history and h)
and runs on two halves, carrying its state; the oracle runs on the whole sequence. Relative error
<= 1e-10 on outputs and on both parts of the final state.
"""

import pytest
import torch

from ops_helpers import load_fla_naive, randomised, rel_error
from statetrack.layers import Mamba, Mamba2

EXACT = 1e-10
B, T, D = 2, 10, 8
EIG_RANGES = ["[0,1]", "[-1,1]"]


def silu(x):
    return x * torch.sigmoid(x)


def softplus(x):
    return torch.log1p(torch.exp(x))


def transition(decay, eig_range):
    """The published decay exp(dt A) (A = -exp(A_log)) for "[0,1]"; Grazzi et al. 2025's
    2 exp(dt A) - 1 for "[-1,1]"."""
    return decay if eig_range == "[0,1]" else 2 * decay - 1


def randomised_ssm(layer, seed):
    """The layer in float64 with every parameter random; A_log and the dt bias in ranges where
    dt A spans about [0.1, 4], so decays range over (0, 1) and, for [-1,1], take both signs."""
    layer = randomised(layer, seed, std=0.4)
    gen = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        layer.A_log.copy_(torch.log(0.5 + 3.5 * torch.rand(layer.A_log.shape, generator=gen, dtype=torch.float64)))
        dt_bias = layer.dt_proj.bias if isinstance(layer, Mamba) else layer.dt_bias
        dt = 0.2 + 0.8 * torch.rand(dt_bias.shape, generator=gen, dtype=torch.float64)
        dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)
        if isinstance(layer, Mamba2):
            layer.norm.weight.add_(1.0)
    return layer


def halves(layer, x, state):
    """The layer on x[:, :T//2] from `state`, then on the rest with the returned state."""
    y1, state = layer(x[:, : T // 2], state)
    y2, state = layer(x[:, T // 2 :], state)
    return torch.cat([y1, y2], dim=1), state


def causal_depthwise_conv(u, history, conv):
    """out_t[c] = bias[c] + sum_j w[c, j] u_{t-k+1+j}[c], the k - 1 inputs before u taken from
    `history` [B, k-1, C]; returns (out [B, T, C], the last k - 1 inputs)."""
    w, bias = conv.weight[:, 0], conv.bias  # [C, k], [C]
    k = w.shape[1]
    seq = torch.cat([history, u], dim=1)
    out = torch.stack([bias + (w * seq[:, t : t + k].transpose(1, 2)).sum(-1) for t in range(u.shape[1])], dim=1)
    return out, seq[:, seq.shape[1] - (k - 1) :]


def mamba_s6_loop(layer, x, history, h0, b_discretisation="euler"):
    """Gu & Dao 2023, Alg. 2 inside the Mamba block, one step at a time:

        (u, z) = W_in x,  u = silu(conv(u)),  (dt_low, B_t, C_t) = W_x u,  dt = softplus(W_dt dt_low + b_dt)
        h_t = A_bar h_{t-1} + B_bar u_t,  A_bar = exp(dt A),  B_bar = dt B_t   (A = -exp(A_log))
        y_t = C_t h_t + D u_t,  out = W_out (y * silu(z))

    B_bar = dt B is the reference implementation's simplification of the zero-order hold
    (A^{-1}(exp(dt A) - 1) B, selectable here as "zoh" to show that the test tells them apart).
    Returns (out, h_T, conv history, the published decay exp(dt A) [B, T, E, N]).
    """
    E, N, R = layer.A_log.shape[0], layer.A_log.shape[1], layer.dt_proj.weight.shape[1]
    uz = x @ layer.in_proj.weight.T  # [B, T, 2E]
    u, z = uz[..., :E], uz[..., E:]
    u, history = causal_depthwise_conv(u, history, layer.conv.conv)
    u = silu(u)
    A = -torch.exp(layer.A_log)  # [E, N]
    h, outs, decays = h0.clone(), [], []
    for t in range(x.shape[1]):
        proj = u[:, t] @ layer.x_proj.weight.T  # [B, R + 2N]
        dt_low, B_t, C_t = proj[:, :R], proj[:, R : R + N], proj[:, R + N :]
        dt = softplus(dt_low @ layer.dt_proj.weight.T + layer.dt_proj.bias)  # [B, E]
        dtA = dt[:, :, None] * A  # [B, E, N]
        decay = torch.exp(dtA)
        A_bar = transition(decay, layer.eig_range)
        if b_discretisation == "euler":
            B_bar = dt[:, :, None] * B_t[:, None, :]
        else:
            B_bar = torch.expm1(dtA) / A * B_t[:, None, :]
        h = A_bar * h + B_bar * u[:, t, :, None]
        y = (h * C_t[:, None, :]).sum(-1) + layer.D * u[:, t]  # [B, E]
        outs.append(y * silu(z[:, t]))
        decays.append(decay)
    return torch.stack(outs, 1) @ layer.out_proj.weight.T, h, history, torch.stack(decays, 1)


class _TorchWithFloat32As:
    """The torch module, except that `torch.float32` names another dtype (see fla_simple_gla)."""

    def __init__(self, dtype):
        self.float32 = dtype

    def __getattr__(self, name):
        return getattr(torch, name)


def fla_simple_gla(fla, q, k, v, a, initial_state):
    """S_t = a_t S_{t-1} + k_t v_t^T, o_t = S_t^T q_t per head, by fla's naive_parallel_simple_gla
    (q, k [B, T, H, K], v [B, T, H, V], a [B, T, H], initial_state [B, H, K, V]).

    Two adaptations, neither touching fla's arithmetic:
    - fla's naive forms cast to float32 (`.to(torch.float32)`); the parallel form does nothing
      else dtype-specific, so its module is given a `torch` whose float32 is float64 (complex128
      when some a_t <= 0: fla takes g = log a, and log of a negative decay is log|a| + i pi).
    - The parallel form has no state arguments (the recurrent one has, but stays float32), so the
      initial state enters as K prefix tokens (k = e_j, v = S_0[j], g = 0, q = 0) and the final
      state is read by K suffix tokens (q = e_j, k = v = 0, g = 0): o = S_T[j].
    """
    Bn, T_, H, K = k.shape
    V = v.shape[-1]
    g = torch.log(a) if bool((a > 0).all()) else torch.log(a.to(torch.complex128))
    fla.torch = _TorchWithFloat32As(g.dtype)
    eye = torch.eye(K, dtype=k.dtype)[None, :, None, :].expand(Bn, K, H, K)  # token j: e_j
    zk, zv, zg = k.new_zeros(Bn, K, H, K), v.new_zeros(Bn, K, H, V), g.new_zeros(Bn, K, H)
    o, _ = fla.naive_parallel_simple_gla(
        torch.cat([zk, q, eye], 1), torch.cat([eye, k, zk], 1),
        torch.cat([initial_state.transpose(1, 2), v, zv], 1), torch.cat([zg, g, zg], 1), scale=1.0,
    )
    if o.is_complex():
        assert o.imag.abs().max() <= 1e-12 * o.abs().max()
        o = o.real
    return o[:, K : K + T_], o[:, K + T_ :].transpose(1, 2)  # [B, T, H, V], S_T [B, H, K, V]


def mamba2_block(layer, x, history, H0, fla, norm_eps=1e-5):
    """Dao & Gu 2024, the Mamba-2 block with one group (B, C shared by all heads):

        (z, xBC, dt) = W_in x,  (u, B_t, C_t) = silu(conv(xBC)),  dt = softplus(dt + dt_bias)  [per head]
        H_t = a_t H_{t-1} + dt_t u_t B_t^T  (per head, H in R^{P x N}),  a_t = exp(-dt_t exp(A_log))
        y_t = H_t C_t + D u_t,  out = W_out RMSNorm(y * silu(z)),  RMSNorm eps 1e-5 as the reference code

    with a_t = 2 exp(.) - 1 for "[-1,1]" (Grazzi et al. 2025).

    The scan is fla's simple GLA with q = C, k = B, v = dt u, g = log a, scale 1 and S = H^T.
    Returns (out, H_T [B, heads, P, N], conv history, the published decay exp(dt A) [B, T, heads]).
    """
    inner, H = layer.out_proj.weight.shape[1], layer.A_log.shape[0]
    N = (layer.in_proj.weight.shape[0] - 2 * inner - H) // 2
    P = inner // H
    proj = x @ layer.in_proj.weight.T
    z, xbc, dt = proj[..., :inner], proj[..., inner : 2 * inner + 2 * N], proj[..., 2 * inner + 2 * N :]
    xbc, history = causal_depthwise_conv(xbc, history, layer.conv.conv)
    xbc = silu(xbc)
    u, B_t, C_t = xbc[..., :inner], xbc[..., inner : inner + N], xbc[..., inner + N :]
    dt = softplus(dt + layer.dt_bias)  # [B, T, H]
    decay = torch.exp(-dt * torch.exp(layer.A_log))  # [B, T, H]
    a = transition(decay, layer.eig_range)
    Bn, T_ = x.shape[:2]
    u = u.reshape(Bn, T_, H, P)
    C_h, B_h = (t[:, :, None, :].expand(Bn, T_, H, N) for t in (C_t, B_t))  # one group: shared by heads
    y, S_T = fla_simple_gla(fla, C_h, B_h, dt[..., None] * u, a, H0.transpose(-1, -2))
    y = (y + layer.D[:, None] * u).reshape(Bn, T_, inner) * silu(z)
    y = y * torch.rsqrt((y * y).mean(-1, keepdim=True) + norm_eps) * layer.norm.weight
    return y @ layer.out_proj.weight.T, S_T.transpose(-1, -2), history, decay


def random_state(layer, channels, h_shape, seed):
    gen = torch.Generator().manual_seed(seed)
    k = layer.conv.conv.weight.shape[-1]
    return (torch.randn(B, k - 1, channels, generator=gen, dtype=torch.float64),
            0.5 * torch.randn(h_shape, generator=gen, dtype=torch.float64))


def check_transition(layer, x, decay, eig_range):
    """The one departure, explicitly: the layer's transitions are the published decay exp(dt A)
    for [0,1] and 2 exp(dt A) - 1 for [-1,1] (Grazzi et al. 2025); and the random weights exercise
    the range: decays spread over (0, 1), transitions of both signs for [-1,1]."""
    a = decay if eig_range == "[0,1]" else 2 * decay - 1
    assert rel_error(layer.transition_eigenvalues(x), a) <= EXACT
    assert decay.min() < 0.2 and decay.max() > 0.8 and bool((decay > 0).all() and (decay < 1).all())
    if eig_range == "[-1,1]":
        assert (a < -0.5).any() and (a > 0.5).any()


@pytest.mark.parametrize("eig_range", EIG_RANGES)
def test_mamba_matches_per_step_s6_loop(eig_range):
    layer = randomised_ssm(Mamba(D, d_state=4, expand=2, d_conv=4, eig_range=eig_range), seed=1)
    E, N = layer.A_log.shape
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    history, h0 = random_state(layer, E, (B, E, N), seed=3)
    with torch.no_grad():
        y, (conv_state, h_T) = halves(layer, x, (history, h0))
        y_ref, h_ref, history_ref, _ = mamba_s6_loop(layer, x, history, h0)
        errors = {"y": rel_error(y, y_ref), "h_T": rel_error(h_T, h_ref), "conv": rel_error(conv_state, history_ref)}
        assert all(e <= EXACT for e in errors.values()), errors
        # transition_eigenvalues(x) starts from a zero conv history
        check_transition(layer, x, mamba_s6_loop(layer, x, 0 * history, 0 * h0)[3], eig_range)
        # the test tells B_bar = dt B (as the reference code) from the full zero-order hold
        y_zoh = mamba_s6_loop(layer, x, history, h0, b_discretisation="zoh")[0]
        assert rel_error(y, y_zoh) > 1e-3


@pytest.mark.parametrize("eig_range", EIG_RANGES)
def test_mamba2_matches_fla_simple_gla_naive(eig_range):
    fla = load_fla_naive("simple_gla/naive.py")
    layer = randomised_ssm(Mamba2(D, d_state=4, expand=2, head_dim=4, d_conv=4, eig_range=eig_range), seed=4)
    H, P, N = layer.num_heads, layer.head_dim, layer.d_state
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    history, h0 = random_state(layer, layer.inner + 2 * N, (B, H, P, N), seed=6)
    with torch.no_grad():
        y, (conv_state, h_T) = halves(layer, x, (history, h0))
        y_ref, h_ref, history_ref, _ = mamba2_block(layer, x, history, h0, fla)
        errors = {"y": rel_error(y, y_ref), "h_T": rel_error(h_T, h_ref), "conv": rel_error(conv_state, history_ref)}
        assert all(e <= EXACT for e in errors.values()), errors
        check_transition(layer, x, mamba2_block(layer, x, 0 * history, 0 * h0, fla)[3], eig_range)
        # the test tells the reference code's RMSNorm eps (1e-5) from torch's default (machine eps)
        y_eps = mamba2_block(layer, x, history, h0, fla, norm_eps=torch.finfo(torch.float64).eps)[0]
        assert rel_error(y, y_eps) > 1e-6
