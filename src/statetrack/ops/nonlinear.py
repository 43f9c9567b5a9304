"""Nonlinear recurrences, which no parallel scan computes: they step token by token.

Two cells, each given the input part of its pre-activations for the whole sequence at once (one
matrix product, computed by the layer):

- the sLSTM (Beck et al. 2024, eqs. 8-17, with the stabiliser m_t of eqs. 15-17), per head with
  block-diagonal recurrent weights R;
- the NRU (Chandar et al. 2019, in the one-head form of Anonymous 2025, App. A.1.4, eq. 5, summed
  over write and erase heads).

`<cell>_reference` is the definition, a PyTorch loop over time (differentiable: the training form).
`<cell>` is the same recurrence for inference: where no gradient is needed and the tensors are on the
CPU (float32 or float64, a C compiler present), the compiled loop of `nonlinear.c` (`native.py`),
which runs a token in a few microseconds where the PyTorch loop pays a dozen op dispatches; otherwise
(training, CUDA, no compiler) the reference itself. Both give the same outputs and final state to
float rounding (tests/test_long_input.py).
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


# ---- NRU (Chandar et al. 2019) --------------------------------------------------------------------
def _nru_state(pre, W, hidden, initial_state):
    B, memory = pre.shape[0], W.shape[0] - hidden
    if initial_state is None:
        return pre.new_zeros(B, hidden), pre.new_zeros(B, memory)
    h, m = initial_state
    if tuple(h.shape) != (B, hidden) or tuple(m.shape) != (B, memory):
        raise ValueError(f"initial_state must be (h [B, hidden] = {[B, hidden]}, m [B, memory] = {[B, memory]}), "
                         f"got {tuple(h.shape)} and {tuple(m.shape)}")
    return h, m


def _check_nru(pre, W, hidden, heads):
    if pre.dim() != 3 or W.dim() != 2:
        raise ValueError(f"pre must be [B, T, O] and W [hidden + memory, O], got {tuple(pre.shape)} and {tuple(W.shape)}")
    memory = W.shape[0] - hidden
    outputs = hidden + 2 * heads * (1 + memory)
    if memory < 1 or pre.shape[-1] != outputs or W.shape[1] != outputs:
        raise ValueError(f"with hidden {hidden} and heads {heads}, W [hidden + memory, O] and pre [B, T, O] need "
                         f"O = hidden + 2 heads (1 + memory); got W {tuple(W.shape)}, pre {tuple(pre.shape)}")


def unit_5_norm(v: torch.Tensor, eps: float = NRU_EPS) -> torch.Tensor:
    """v / max(||v||_5, eps) over the last dimension: the NRU's write and erase vectors, normalised as
    in the release of Chandar et al. 2019 (p = 5)."""
    return v / v.norm(p=5, dim=-1, keepdim=True).clamp(min=eps)


def nru_recurrence_reference(pre: torch.Tensor, W: torch.Tensor, hidden: int, heads: int, normalize: bool = True,
                             initial_state=None):
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
        coef = torch.cat([act[:, hidden : hidden + K], -act[:, hidden + K : hidden + 2 * K]], dim=-1)  # alpha_i, -beta_i
        vectors = act[:, hidden + 2 * K :].view(B, 2 * K, M)  # v^w_i, v^e_i
        if normalize:
            vectors = unit_5_norm(vectors)
        m = m + torch.bmm(coef.unsqueeze(1), vectors).squeeze(1)
        outs.append(h)
    out = torch.stack(outs, dim=1) if outs else pre.new_zeros(B, 0, hidden)
    return out, (h, m)


def nru_recurrence(pre: torch.Tensor, W: torch.Tensor, hidden: int, heads: int, normalize: bool = True, initial_state=None):
    """`nru_recurrence_reference`, same arguments and results; the compiled loop where it applies
    (module docstring), else the reference."""
    _check_nru(pre, W, hidden, heads)
    state = _nru_state(pre, W, hidden, initial_state)
    if not _compiled(pre, W, *state):
        return nru_recurrence_reference(pre, W, hidden, heads, normalize, state)
    state = tuple(s.clone(memory_format=torch.contiguous_format) for s in state)  # advanced in place by the loop
    out = native.nru_forward(pre.contiguous(), W.contiguous(), state, hidden, heads, normalize, NRU_EPS)
    return out, state
