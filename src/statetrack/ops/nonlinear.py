"""Nonlinear recurrences, which no parallel scan computes: they step token by token.

Two cells, each given the input part of its pre-activations for the whole sequence at once (one
matrix product, computed by the layer):

- the sLSTM (Beck et al. 2024, eqs. 8-17, with the stabiliser m_t of eqs. 15-17), per head with
  block-diagonal recurrent weights R;
- the NRU (Chandar et al. 2019, in the one-head form of Anonymous 2025, App. A.1.4, eq. 5, summed
  over write and erase heads).

`<cell>_reference` is the definition, a PyTorch loop over time, differentiated by autograd op by op.
`<cell>` is the same recurrence for inference: where no gradient is needed and the tensors are on the
CPU (float32 or float64, a C compiler present), the compiled loop of `nonlinear.c` (`native.py`),
which runs a token in a few microseconds where the PyTorch loop pays a dozen op dispatches; otherwise
(a gradient recorded, CUDA, no compiler) the reference itself. `<cell>_fused` is the training form:
the loop as one autograd node, run without a graph into preallocated buffers, with the backward
written out (the loop in reverse, the recurrent weights' gradient one product over all steps). All
three give the same outputs, final state and gradients to float rounding (tests/ops/test_long_input.py,
tests/ops/test_speedpaths_misc.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from statetrack.ops import native

NRU_EPS = 1e-6  # the floor of the 5-norm that divides the NRU's write and erase vectors


def _compiled(*tensors: torch.Tensor) -> bool:
    """The compiled loop applies: no gradient to record, CPU tensors of one real dtype, library built."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return tensors[0].dtype in (torch.float32, torch.float64) and native.supports(*tensors)


# ---- sLSTM (Beck et al. 2024) ---------------------------------------------------------------------
def _slstm_state(pre: torch.Tensor, initial_state):
    B, _, _, H, D = pre.shape
    if initial_state is None:
        return tuple(pre.new_zeros(B, H, D) for _ in range(4))
    if len(initial_state) != 4 or any(tuple(s.shape) != (B, H, D) for s in initial_state):
        shapes = [tuple(s.shape) for s in initial_state]
        raise ValueError(f"initial_state must be (h, c, n, m), each [B, H, D] = {[B, H, D]}, got {shapes}")
    return tuple(initial_state)


def _check_slstm(pre, R):
    if pre.dim() != 5 or pre.shape[2] != 4:
        raise ValueError(f"pre must be [B, T, 4, H, D] (gates z, i, f, o), got {tuple(pre.shape)}")
    H, D = pre.shape[3:]
    if tuple(R.shape) != (H, D, 4 * D):
        raise ValueError(f"R must be [H, D, 4 D] = {[H, D, 4 * D]}, got {tuple(R.shape)}")


def slstm_recurrence_reference(pre: torch.Tensor, R: torch.Tensor, initial_state=None):
    """The stabilised sLSTM per head (Beck et al. 2024, eqs. 8-17), a loop over time:

        (z~, i~, f~, o~)_t = pre_t + h_{t-1} R    (per head; R block-diagonal over heads)
        m_t = max(log f_t + m_{t-1}, i~_t),  i' = exp(i~_t - m_t),  f' = exp(log f_t + m_{t-1} - m_t)
        c_t = f' c_{t-1} + i' tanh(z~_t),  n_t = f' n_{t-1} + i',  h_t = sigmoid(o~_t) c_t / n_t

    with log f = logsigmoid(f~). pre: [B, T, 4, H, D], the input part of the gates z, i, f, o (W x_t + b);
    R: [H, D, 4 D], head k's h_{t-1} [D] times R[k] gives its four gates, gate-major.
    initial_state: (h, c, n, m), each [B, H, D], or None (zeros). Returns (h [B, T, H, D] = h_1..h_T,
    (h, c, n, m) at T).
    """
    _check_slstm(pre, R)
    B, T, _, H, D = pre.shape
    h, c, n, m = _slstm_state(pre, initial_state)
    outputs = []
    for pre_t in pre.unbind(1):
        rec = torch.einsum("bhd,hde->bhe", h, R).view(B, H, 4, D).transpose(1, 2)  # [B, 4, H, D]
        z_pre, i_pre, f_pre, o_pre = (pre_t + rec).unbind(1)
        log_f = F.logsigmoid(f_pre)
        m_new = torch.maximum(log_f + m, i_pre)
        i_gate, f_gate = torch.exp(i_pre - m_new), torch.exp(log_f + m - m_new)
        c = f_gate * c + i_gate * torch.tanh(z_pre)
        n = f_gate * n + i_gate
        h = torch.sigmoid(o_pre) * c / n
        m = m_new
        outputs.append(h)
    out = torch.stack(outputs, 1) if outputs else pre.new_zeros(B, 0, H, D)
    return out, (h, c, n, m)


def slstm_recurrence(pre: torch.Tensor, R: torch.Tensor, initial_state=None):
    """`slstm_recurrence_reference`, same arguments and results; the compiled loop where it applies
    (module docstring), else the reference."""
    _check_slstm(pre, R)
    state = _slstm_state(pre, initial_state)
    if not _compiled(pre, R, *state):
        return slstm_recurrence_reference(pre, R, state)
    state = tuple(s.clone(memory_format=torch.contiguous_format) for s in state)  # advanced in place by the loop
    out = native.slstm_forward(pre.contiguous(), R.contiguous(), state)
    return out, state


def slstm_recurrence_fused(pre: torch.Tensor, R: torch.Tensor, initial_state=None):
    """`slstm_recurrence_reference` (same arguments and results, the same function to
    float rounding) as one autograd Function: the loop over time runs without a graph on a
    head-major layout ([H, B, .]: one batched product per step gives every gate), storing the
    pre-activations and the states; the backward is the loop in reverse by hand, with every factor
    that does not depend on the incoming gradient computed for all steps at once, and the gradient
    of R one batched product over all steps. torch.maximum's gradient convention is kept (a tie
    splits the gradient in half)."""
    _check_slstm(pre, R)
    state = _slstm_state(pre, initial_state)
    y, *state = _SLSTMFused.apply(pre, R, *state)
    return y, tuple(state)


class _SLSTMFused(torch.autograd.Function):
    """The sLSTM loop as one autograd node (`slstm_recurrence_fused`)."""

    @staticmethod
    def forward(ctx, pre, R, h0, c0, n0, m0):
        B, T, _, H, D = pre.shape
        P = pre.permute(1, 3, 0, 2, 4).reshape(T, H, B, 4 * D)  # [T, H, B, 4D], gate-major as R's columns
        G = torch.empty_like(P)  # the pre-activations z~, i~, f~, o~
        hs, cs, ns, ms = (P.new_empty(T + 1, H, B, D) for _ in range(4))  # states 0..T
        for buf, s0 in zip((hs, cs, ns, ms), (h0, c0, n0, m0)):
            buf[0] = s0.transpose(0, 1)
        for t in range(T):
            g = torch.baddbmm(P[t], hs[t], R, out=G[t])
            z_pre, i_pre, f_pre, o_pre = g.split(D, -1)
            a = F.logsigmoid(f_pre).add_(ms[t])  # log f_t + m_{t-1}
            m = torch.maximum(a, i_pre, out=ms[t + 1])
            i_gate, f_gate = torch.exp(i_pre - m), torch.exp(a.sub_(m))
            c = torch.addcmul(f_gate * cs[t], i_gate, torch.tanh(z_pre), out=cs[t + 1])
            n = torch.addcmul(i_gate, f_gate, ns[t], out=ns[t + 1])
            torch.mul(torch.sigmoid(o_pre), c, out=hs[t + 1]).div_(n)
        ctx.save_for_backward(R, G, hs, cs, ns, ms)
        y = hs[1:].permute(2, 0, 1, 3).contiguous()  # [B, T, H, D]
        return (y,) + tuple(buf[T].transpose(0, 1).clone() for buf in (hs, cs, ns, ms))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y, grad_h, grad_c, grad_n, grad_m):
        R, G, hs, cs, ns, ms = ctx.saved_tensors
        T, H, B, D4 = G.shape
        D = D4 // 4
        # every factor that does not depend on the gradient, for all steps at once: [T, H, B, D]
        z_pre, i_pre, f_pre, o_pre = G.split(D, -1)
        a = F.logsigmoid(f_pre) + ms[:-1]
        m = ms[1:]
        i_gate, f_gate = torch.exp(i_pre - m), torch.exp(a - m)
        z, o = torch.tanh(z_pre), torch.sigmoid(o_pre)
        h, c, n = hs[1:], cs[1:], ns[1:]
        k_o = c / n * o * (1 - o)  # dL/do~ = dL/dh k_o
        o_n = o / n  # dh/dc
        h_n = h / n  # -dh/dn
        k_z = i_gate * (1 - z * z)  # dL/dz~ = dL/dc k_z
        sig_neg_f = torch.sigmoid(-f_pre)  # d logsigmoid(f~) / df~
        half = 0.5 * (a == i_pre)
        w_a, w_i = (a > i_pre) + half, (i_pre > a) + half  # torch.maximum's gradient split
        gy = grad_y.permute(1, 2, 0, 3)  # [T, H, B, D]
        dh, dc, dn, dm = (x.transpose(0, 1) for x in (grad_h, grad_c, grad_n, grad_m))
        dG = torch.empty_like(G)
        dz_pre, di_pre, df_pre, do_pre = dG.split(D, -1)
        Rt = R.mT
        for t in reversed(range(T)):
            dh = dh + gy[t]
            torch.mul(dh, k_o[t], out=do_pre[t])
            dc = torch.addcmul(dc, dh, o_n[t])
            dn = torch.addcmul(dn, dh, h_n[t], value=-1)
            torch.mul(dc, k_z[t], out=dz_pre[t])
            d_f = torch.addcmul(dc * cs[t], dn, ns[t]) * f_gate[t]  # dL/d(a - m) through f' = exp(a - m)
            d_i = torch.addcmul(dn, dc, z[t]) * i_gate[t]  # dL/d(i~ - m) through i' = exp(i~ - m)
            dm = dm - d_f - d_i
            da = torch.addcmul(d_f, dm, w_a[t])
            torch.addcmul(d_i, dm, w_i[t], out=di_pre[t])
            torch.mul(da, sig_neg_f[t], out=df_pre[t])
            dm = da
            dc = dc * f_gate[t]
            dn = dn * f_gate[t]
            dh = torch.bmm(dG[t], Rt)
        grad_R = None
        if ctx.needs_input_grad[1]:  # sum over t and b of h_{t-1} dG_t: [H, D, 4D]
            grad_R = torch.bmm(
                hs[:-1].permute(1, 3, 0, 2).reshape(H, D, T * B), dG.transpose(0, 1).reshape(H, T * B, D4)
            )
        grad_pre = dG.view(T, H, B, 4, D).permute(2, 0, 3, 1, 4)  # [B, T, 4, H, D]
        return (grad_pre, grad_R) + tuple(x.transpose(0, 1) for x in (dh, dc, dn, dm))


# ---- NRU (Chandar et al. 2019) --------------------------------------------------------------------
def _nru_state(pre, W, hidden, initial_state):
    B, memory = pre.shape[0], W.shape[0] - hidden
    if initial_state is None:
        return pre.new_zeros(B, hidden), pre.new_zeros(B, memory)
    h, m = initial_state
    if tuple(h.shape) != (B, hidden) or tuple(m.shape) != (B, memory):
        raise ValueError(
            f"initial_state must be (h [B, hidden] = {[B, hidden]}, m [B, memory] = {[B, memory]}), "
            f"got {tuple(h.shape)} and {tuple(m.shape)}"
        )
    return h, m


def _check_nru(pre, W, hidden, heads):
    if pre.dim() != 3 or W.dim() != 2:
        raise ValueError(
            f"pre must be [B, T, O] and W [hidden + memory, O], got {tuple(pre.shape)} and {tuple(W.shape)}"
        )
    memory = W.shape[0] - hidden
    outputs = hidden + 2 * heads * (1 + memory)
    if memory < 1 or pre.shape[-1] != outputs or W.shape[1] != outputs:
        raise ValueError(
            f"with hidden {hidden} and heads {heads}, W [hidden + memory, O] and pre [B, T, O] need "
            f"O = hidden + 2 heads (1 + memory); got W {tuple(W.shape)}, pre {tuple(pre.shape)}"
        )


def unit_5_norm(v: torch.Tensor, eps: float = NRU_EPS) -> torch.Tensor:
    """v / max(||v||_5, eps) over the last dimension: the NRU's write and erase vectors, normalised as
    in the release of Chandar et al. 2019 (p = 5)."""
    return v / v.norm(p=5, dim=-1, keepdim=True).clamp(min=eps)


def nru_recurrence_reference(
    pre: torch.Tensor, W: torch.Tensor, hidden: int, heads: int, normalize: bool = True, initial_state=None
):
    """The NRU (Anonymous 2025, App. A.1.4, eq. 5, heads summed), a loop over time:

        a_t = relu(pre_t + [h_{t-1}, m_{t-1}] W),     h_t = a_t[:hidden],
        m_t = m_{t-1} + sum_i alpha_{t,i} v^w_{t,i} - beta_{t,i} v^e_{t,i}

    where a_t's entries after h are alpha [heads], beta [heads], v^w [heads, memory], v^e [heads,
    memory]; with `normalize` each v is first divided by max(||v||_5, 1e-6) (Chandar et al. 2019's
    release). pre: [B, T, O], the x_t part and bias of every pre-activation; W: [hidden + memory, O],
    the weights reading h_{t-1} and m_{t-1} (transposed). initial_state: (h [B, hidden], m [B, memory])
    or None (zeros). Returns (h [B, T, hidden] = h_1..h_T, (h, m) at T).
    """
    _check_nru(pre, W, hidden, heads)
    B, T, _ = pre.shape
    K, M = heads, W.shape[0] - hidden
    h, m = _nru_state(pre, W, hidden, initial_state)
    outs = []
    for t in range(T):
        act = F.relu(torch.addmm(pre[:, t], torch.cat([h, m], dim=-1), W))
        h = act[:, :hidden]
        coef = torch.cat(
            [act[:, hidden : hidden + K], -act[:, hidden + K : hidden + 2 * K]], dim=-1
        )  # alpha_i, -beta_i
        vectors = act[:, hidden + 2 * K :].view(B, 2 * K, M)  # v^w_i, v^e_i
        if normalize:
            vectors = unit_5_norm(vectors)
        m = m + torch.bmm(coef.unsqueeze(1), vectors).squeeze(1)
        outs.append(h)
    out = torch.stack(outs, dim=1) if outs else pre.new_zeros(B, 0, hidden)
    return out, (h, m)


def nru_recurrence(
    pre: torch.Tensor, W: torch.Tensor, hidden: int, heads: int, normalize: bool = True, initial_state=None
):
    """`nru_recurrence_reference`, same arguments and results; the compiled loop where it applies
    (module docstring), else the reference."""
    _check_nru(pre, W, hidden, heads)
    state = _nru_state(pre, W, hidden, initial_state)
    if not _compiled(pre, W, *state):
        return nru_recurrence_reference(pre, W, hidden, heads, normalize, state)
    state = tuple(s.clone(memory_format=torch.contiguous_format) for s in state)  # advanced in place by the loop
    out = native.nru_forward(pre.contiguous(), W.contiguous(), state, hidden, heads, normalize, NRU_EPS)
    return out, state


def nru_recurrence_fused(
    pre: torch.Tensor, W: torch.Tensor, hidden: int, heads: int, normalize: bool = True, initial_state=None
):
    """`nru_recurrence_reference` (same arguments and results, the same function to float
    rounding) as one autograd Function: the loop over time writes into preallocated buffers with no
    graph, the backward is the loop run in reverse by hand, and the gradient of W is one matrix
    product over all steps at once (instead of one per step, each zero-filled and accumulated). The
    5-norm is taken as (sum v^5)^(1/5) with v >= 0 (after the ReLU), by multiplications, as
    `linalg.vector_norm` computes it without rescaling."""
    _check_nru(pre, W, hidden, heads)
    h0, m0 = _nru_state(pre, W, hidden, initial_state)
    if pre.shape[1] == 0:
        return nru_recurrence_reference(pre, W, hidden, heads, normalize, (h0, m0))
    y, h, m = _NRUFused.apply(pre, W, h0, m0, hidden, heads, normalize)
    return y, (h, m)


class _NRUFused(torch.autograd.Function):
    """The NRU loop as one autograd node. Big buffers are few, as their first touch costs more than
    their arithmetic (page faults): the activations A [T, B, O] and the inputs of every step
    Z [B, T, hidden + memory] are kept, v^4 is recomputed in the backward, and the gradient of pre
    is written batch-major in place (no transposed copy)."""

    @staticmethod
    def forward(ctx, pre, W, h0, m0, hidden, heads, normalize):
        B, T, Od = pre.shape
        Hd, K = hidden, heads
        M = W.shape[0] - Hd
        Z = pre.new_empty(B, T, Hd + M)  # Z[:, t] = [h_{t-1}, m_{t-1}], the input of step t
        Z[:, 0, :Hd], Z[:, 0, Hd:] = h0, m0
        A = pre.new_empty(T, B, Od)  # the activations (after the ReLU)
        sign = pre.new_tensor([1.0] * K + [-1.0] * K)  # + alpha_i v^w_i, - beta_i v^e_i
        norms = pre.new_empty(T, B, 2 * K) if normalize else None  # the 5-norms, clamped
        v4 = pre.new_empty(B, 2 * K, M) if normalize else None
        for t in range(T):
            a = torch.addmm(pre[:, t], Z[:, t], W, out=A[t]).relu_()
            coef = a[:, Hd : Hd + 2 * K] * sign
            vec = a[:, Hd + 2 * K :].view(B, 2 * K, M)
            if normalize:
                torch.mul(vec, vec, out=v4).mul_(v4)
                n = torch.linalg.vecdot(v4, vec).pow_(0.2).clamp_min_(NRU_EPS)
                norms[t] = n
                coef = coef / n
            m = torch.baddbmm(Z[:, t, None, Hd:], coef[:, None, :], vec)[:, 0]
            if t + 1 < T:
                Z[:, t + 1, :Hd], Z[:, t + 1, Hd:] = a[:, :Hd], m
        ctx.save_for_backward(W, Z, A, sign, norms)
        ctx.sizes = hidden, heads, normalize
        y = A[:, :, :Hd].transpose(0, 1).contiguous()
        return y, A[-1, :, :Hd].clone(), m

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y, grad_h, grad_m):
        W, Z, A, sign, norms = ctx.saved_tensors
        Hd, K, normalize = ctx.sizes
        T, B, Od = A.shape
        M = W.shape[0] - Hd
        gh = grad_h if grad_h is not None else Z.new_zeros(B, Hd)
        gm = grad_m if grad_m is not None else Z.new_zeros(B, M)
        G = Z.new_empty(B, T, Od)  # the gradient of the pre-activations, which is that of pre
        v4 = Z.new_empty(B, 2 * K, M) if normalize else None
        Wt = W.t()
        for t in reversed(range(T)):
            a, g = A[t], G[:, t]
            if grad_y is not None:
                torch.add(gh, grad_y[:, t], out=g[:, :Hd])
            else:
                g[:, :Hd] = gh
            vec = a[:, Hd + 2 * K :].view(B, 2 * K, M)
            dot = torch.bmm(vec, gm[:, :, None])[..., 0] * sign  # sign_j (dL/dm_t . v_j)  [B, 2K]
            dv = g[:, Hd + 2 * K :].view(B, 2 * K, M)
            if normalize:
                n = norms[t]
                torch.div(dot, n, out=g[:, Hd : Hd + 2 * K])
                c = a[:, Hd : Hd + 2 * K]
                w = c * sign / n  # the scaled coefficients of the forward
                # d(s c v / n(v)) = s c / n dv - s c v / n^2 dn, dn = (v^4 / n^4) . dv (0 where n was clamped)
                k = (c * dot / n / n / n.pow(4)).masked_fill_(n <= NRU_EPS, 0)
                torch.mul(w[:, :, None], gm[:, None, :], out=dv)
                torch.mul(vec, vec, out=v4).mul_(v4)
                dv.sub_(v4.mul_(k[:, :, None]))
            else:
                g[:, Hd : Hd + 2 * K] = dot
                w = a[:, Hd : Hd + 2 * K] * sign
                torch.mul(w[:, :, None], gm[:, None, :], out=dv)
            g.mul_(a > 0)  # the ReLU
            dz = torch.mm(g, Wt)
            gh = dz[:, :Hd]
            gm = gm + dz[:, Hd:]
        grad_W = torch.mm(Z.view(B * T, -1).t(), G.view(B * T, Od)) if ctx.needs_input_grad[1] else None
        return G, grad_W, gh, gm, None, None, None
