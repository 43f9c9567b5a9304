"""The Panini recurrence (Siems et al. 2026, App. C.2): a matrix state sandwiched between two
state transitions, decoded by Sinkhorn-Knopp onto the Birkhoff polytope of doubly stochastic
matrices,

    H_t = A_l(x_t) H_{t-1} A_r(x_t) + B(x_t),    y_t = dec(H_t, x_t),

affine in vec(H): vec(H_t) = (A_r(x_t)^T (x) A_l(x_t)) vec(H_{t-1}) + vec(B(x_t)). With H[i, j] =
P(position i holds element j) a probabilistic shuffle is A_l = sum_k c_k P_k (a convex combination
of permutation matrices), A_r = I, B = 0; a reveal "position i holds element j" is
A_l = I - e_i e_i^T, A_r = I - e_j e_j^T, B = e_i e_j^T (zero row i and column j, then put 1 at
(i, j)); the decoder renormalises rows and columns in turn (Sinkhorn & Knopp 1967).

`panini_recurrence` is the definition (a plain loop over time), `sinkhorn` the decoder, `Panini` the
learnable token mixer and `exact_panini(task)` the recurrence with the exact shuffle and reveal
matrices of the `pfsa` task, per token id.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import check_input
from statetrack.layers.registry import register_model
from statetrack.ops import native


# ---- the decoder and the recurrence ---------------------------------------------------------------
def margin_error(S: torch.Tensor) -> torch.Tensor:
    """max over rows and columns of |sum - 1| for S [..., n, n]: [...] (0 on the Birkhoff polytope)."""
    rows = (S.sum(-1) - 1).abs().amax(-1)
    columns = (S.sum(-2) - 1).abs().amax(-1)
    return torch.maximum(rows, columns)


def sinkhorn_reference(H: torch.Tensor, max_iter: int = 16, tol: float = 1e-5) -> torch.Tensor:
    """Sinkhorn & Knopp 1967 on nonnegative H [..., n, n]: S <- T_c(T_r(S)), rows then columns
    divided by their sums (Siems et al. 2026, App. C.2, item 3).

    Each matrix stops on its own once every row and column sums to 1 within `tol` (`margin_error`),
    or after `max_iter` sweeps: a matrix's result does not depend on what else is in the batch, so
    feeding a sequence in chunks gives the same numbers. A matrix already within `tol` is returned
    unchanged. A zero row or column stays zero (its sum is clamped away from 0) instead of NaN.

    This is the definition, differentiated by autograd op by op; `sinkhorn` computes the same
    numbers with one autograd node and a hand-written backward.
    """
    tiny = torch.finfo(H.dtype).tiny
    S = H
    for _ in range(max_iter):
        rows, columns = S.sum(-1), S.sum(-2)  # [..., n]
        error = torch.maximum((rows - 1).abs().amax(-1), (columns - 1).abs().amax(-1))  # margin_error(S)
        done = error <= tol
        if bool(done.all()):
            break
        by_rows = S / rows.clamp_min(tiny)[..., None]
        swept = by_rows / by_rows.sum(-2, keepdim=True).clamp_min(tiny)
        S = torch.where(done[..., None, None], S, swept)
    return S


def panini_recurrence_reference(
    A_l: torch.Tensor,
    A_r: torch.Tensor,
    B: torch.Tensor,
    initial_state: torch.Tensor,
    renormalize: bool = True,
    max_iter: int = 16,
    tol: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """H_t = A_l,t H_{t-1} A_r,t + B_t one step at a time (Siems et al. 2026, App. C.2).

    A_l, A_r, B: [B, T, ..., n, n]; initial_state H_0: [B, ..., n, n]. Returns (decoded
    [B, T, ..., n, n], the state after the last step [B, ..., n, n]). `renormalize`: project the
    state with `sinkhorn` after every step (then decoded = state); without it the recurrence is the
    paper's linear one and only the outputs are projected, so the state's mass can decay (a reveal
    removes the mass in its row and column) until it underflows.

    This is the definition (autograd op by op); `panini_recurrence` computes the same numbers with
    one autograd node for the whole loop.
    """
    H, states = initial_state, []
    for t in range(A_l.shape[1]):
        H = A_l[:, t] @ H @ A_r[:, t] + B[:, t]
        if renormalize:
            H = sinkhorn_reference(H, max_iter, tol)
        states.append(H)
    states = torch.stack(states, dim=1)
    decoded = states if renormalize else sinkhorn_reference(states, max_iter, tol)
    return decoded, H




# ---- the same, fused: no graph in the loops, the backward written out ------------------------------
# A Panini step is a few dozen operations on tensors of a few thousand numbers, so its time is the
# per-operation overhead, autograd's included. The fused forms below run the loops without a graph
# (each Sinkhorn sweep recorded), and their backward replays them in reverse by hand; the
# gradients of A_l, A_r and B are then matrix products over all steps at once.
def _sum_matrix(n: int, dtype: torch.dtype, device) -> torch.Tensor:
    """[n * n, 2n] of zeros and ones: a flattened n x n matrix times it gives its row sums, then its
    column sums, in one product (each sum adds the same n numbers as S.sum does, exactly rounded
    products of ones)."""
    eye = torch.eye(n, dtype=dtype, device=device)
    return torch.cat((eye.repeat_interleave(n, 0), eye.repeat(n, 1)), 1)


def _sinkhorn_forward(S: torch.Tensor, max_iter: int, tol: float, record: list | None) -> torch.Tensor:
    """`sinkhorn_reference` on [M, n, n] without autograd: the same sweeps and stopping rule in fewer
    operations (the row and column sums of the check from one product, which the row normalisation
    reuses; masks kept at [M, 1, 1]). `record` (a list, or None) receives each sweep's
    (stopped [M, 1, 1] or None, rows, clamped rows [M, n, 1], R, column sums, clamped column sums
    [M, 1, n], result)."""
    M, n = S.shape[0], S.shape[-1]
    tiny = torch.finfo(S.dtype).tiny
    ones = _sum_matrix(n, S.dtype, S.device)
    for _ in range(max_iter):
        sums = torch.mm(S.view(M, n * n), ones)  # [M, 2n]: row sums, then column sums
        error = (sums - 1).abs_().amax(-1, keepdim=True)  # margin_error(S)
        done = error <= tol
        stopped = int(torch.count_nonzero(done))
        if stopped == M:
            break
        rows = sums[:, :n].view(M, n, 1)
        rows_c = rows.clamp_min(tiny)
        R = S / rows_c
        column_sums = R.sum(-2, keepdim=True)
        columns_c = column_sums.clamp_min(tiny)
        swept = R / columns_c
        done = done.view(M, 1, 1) if stopped else None
        S = swept if done is None else torch.where(done, S, swept)
        if record is not None:
            record.append((done, rows, rows_c, R, column_sums, columns_c, swept))
    return S


def _sinkhorn_backward(grad: torch.Tensor, record: list, masks: bool) -> torch.Tensor:
    """The gradient with respect to the input of `_sinkhorn_forward` from that of its result, the
    sweeps of `record` in reverse. `masks`: some sum was clamped (the clamp passes no gradient there)."""
    tiny = torch.finfo(grad.dtype).tiny
    for done, rows, rows_c, R, column_sums, columns_c, swept in reversed(record):
        # swept = R / c with c the column sums of R; R = S / r with r the row sums of S
        inner = (grad * swept).sum(-2, keepdim=True)
        if masks:
            inner = inner * (column_sums >= tiny)
        grad_R = (grad - inner) / columns_c
        inner = (grad_R * R).sum(-1, keepdim=True)
        if masks:
            inner = inner * (rows >= tiny)
        grad_S = (grad_R - inner) / rows_c
        grad = grad_S if done is None else torch.where(done, grad, grad_S)
    return grad


def _clamped(record: list) -> bool:
    """Whether a row or column sum of some sweep was below the clamp (or not a number)."""
    if not record:
        return False
    tiny = torch.finfo(record[0][1].dtype).tiny
    sums = torch.cat([torch.cat((r[1].flatten(1), r[4].flatten(1)), -1) for r in record], 0)
    return not bool((sums >= tiny).all())


class _Sinkhorn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, H, max_iter, tol):
        n = H.shape[-1]
        record, flat = [], H.reshape(-1, n, n)
        S = _sinkhorn_forward(flat, max_iter, tol, record)
        ctx.record = record
        return H.clone() if S is flat else S.view(H.shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        n = grad.shape[-1]
        record, ctx.record = ctx.record, None
        return _sinkhorn_backward(grad.reshape(-1, n, n), record, _clamped(record)).view(grad.shape), None, None


def sinkhorn(H: torch.Tensor, max_iter: int = 16, tol: float = 1e-5) -> torch.Tensor:
    """`sinkhorn_reference` (Sinkhorn & Knopp 1967, per-matrix stopping; its docstring), the same
    numbers, computed without a graph per operation: one autograd node whose backward replays the
    sweeps in reverse."""
    if H.shape[-1] == 0 or H.numel() == 0:
        return sinkhorn_reference(H, max_iter, tol)
    if torch.is_grad_enabled() and H.requires_grad:
        return _Sinkhorn.apply(H, max_iter, tol)
    n = H.shape[-1]
    flat = H.reshape(-1, n, n)
    S = _sinkhorn_forward(flat, max_iter, tol, None)
    return H if S is flat else S.view(H.shape)


class _PaniniRecurrence(torch.autograd.Function):
    """The renormalised recurrence H_t = Sinkhorn(A_l,t H_{t-1} A_r,t + B_t) on time-major
    A_l, A_r, B [T, M, n, n] and H_0 [M, n, n]: (states [T, M, n, n], H_T). On CPU one compiled
    loop per matrix (`ops/panini.c`, n <= 32); elsewhere PyTorch operations on all matrices at once,
    each Sinkhorn sweep recorded for the backward."""

    @staticmethod
    def forward(ctx, A_l, A_r, B, H0, max_iter, tol):
        T = A_l.shape[0]
        ctx.max_iter = max_iter
        ctx.compiled = native_applies(A_l, A_r, B, H0)
        if ctx.compiled:
            A_l, A_r, B, H0 = (v.contiguous() for v in (A_l, A_r, B, H0))
            keep = any(ctx.needs_input_grad[:4])  # X and the sweeps are for the backward alone
            states, X, sweeps, ctx.masks = native.panini_forward(A_l, A_r, B, H0, max_iter, tol, keep_inputs=keep)
            ctx.save_for_backward(A_l, A_r, H0, states, X, sweeps)
            return states, (states[-1].clone() if T else H0.clone())
        states = torch.empty_like(B)
        records, H = [], H0
        for t in range(T):
            X = torch.baddbmm(B[t], torch.bmm(A_l[t], H), A_r[t])
            record = []
            H = _sinkhorn_forward(X, max_iter, tol, record)
            states[t] = H
            records.append(record)
        ctx.records = records
        ctx.save_for_backward(A_l, A_r, H0, states)
        return states, (states[-1].clone() if T else H0.clone())

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_states, grad_last):
        A_l, A_r, H0, states, *kept = ctx.saved_tensors
        if ctx.compiled:
            X, sweeps = kept
            grad_X, grad_A_l, grad_A_r, carry = native.panini_backward(
                A_l, A_r, H0, states, X, sweeps, grad_states.contiguous(), grad_last, ctx.masks, ctx.max_iter,
                *ctx.needs_input_grad[:2])
            return grad_A_l, grad_A_r, grad_X, carry, None, None
        records, ctx.records = ctx.records, None
        masks = any(_clamped(r) for r in records)
        grad_X = torch.empty_like(grad_states)
        carry = grad_last
        for t in reversed(range(A_l.shape[0])):
            g = _sinkhorn_backward(grad_states[t] + carry, records[t], masks)
            grad_X[t] = g
            carry = torch.bmm(torch.bmm(A_l[t].mT, g), A_r[t].mT)  # dL/dH_{t-1}
        previous = torch.cat((H0[None], states[:-1]), 0)  # H_{t-1} for every t
        grad_A_l = grad_A_r = None
        if ctx.needs_input_grad[0]:
            grad_A_l = grad_X @ (previous @ A_r).mT
        if ctx.needs_input_grad[1]:
            grad_A_r = (A_l @ previous).mT @ grad_X
        return grad_A_l, grad_A_r, grad_X, carry, None, None


def native_applies(*tensors: torch.Tensor) -> bool:
    """Whether the compiled Panini loop takes these tensors: real float32 or float64 on the CPU,
    n <= `native.PANINI_MAX_N`, library built (else the PyTorch form runs)."""
    return tensors[0].shape[-1] <= native.PANINI_MAX_N and native.supports_real(*tensors)


def panini_recurrence(
    A_l: torch.Tensor,
    A_r: torch.Tensor,
    B: torch.Tensor,
    initial_state: torch.Tensor,
    renormalize: bool = True,
    max_iter: int = 16,
    tol: float = 1e-5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`panini_recurrence_reference` (same arguments and results, the same numbers to float
    rounding): with `renormalize` the whole loop is one autograd node (`_PaniniRecurrence`), without
    it the linear loop runs op by op and the decoder is the fused `sinkhorn`."""
    n = A_l.shape[-1]
    if not renormalize:  # linear: op by op (three per step), then the fused decoder on all states at once
        H, states = initial_state, []
        for t in range(A_l.shape[1]):
            H = A_l[:, t] @ H @ A_r[:, t] + B[:, t]
            states.append(H)
        states = torch.stack(states, dim=1)
        return sinkhorn(states, max_iter, tol), H
    same = A_l.shape == A_r.shape == B.shape and A_l.shape[:1] + A_l.shape[2:] == initial_state.shape
    if not same or A_l.shape[1] == 0 or initial_state.numel() == 0:  # broadcast shapes or nothing to do
        return panini_recurrence_reference(A_l, A_r, B, initial_state, renormalize, max_iter, tol)
    Bsz, T = A_l.shape[:2]
    dtype = torch.promote_types(torch.promote_types(A_l.dtype, A_r.dtype), torch.promote_types(B.dtype, initial_state.dtype))

    def time_major(x):
        return x.to(dtype).transpose(0, 1).reshape(T, -1, n, n)

    states, last = _PaniniRecurrence.apply(time_major(A_l), time_major(A_r), time_major(B),
                                           initial_state.to(dtype).reshape(-1, n, n), max_iter, tol)
    states = states.view((T, Bsz) + tuple(A_l.shape[2:])).transpose(0, 1)
    return states, last.view(initial_state.shape)


def _check_settings(layer: str, n: int, renormalize: bool, sinkhorn_iters: int, sinkhorn_tol: float) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise StatetrackError(f"{layer} n (positions and elements of the state, n x n) must be an integer >= 2, got {n!r}")
    if not isinstance(renormalize, bool):
        raise StatetrackError(f"{layer} renormalize must be true or false, got {renormalize!r}")
    if isinstance(sinkhorn_iters, bool) or not isinstance(sinkhorn_iters, int) or sinkhorn_iters < 1:
        raise StatetrackError(f"{layer} sinkhorn_iters must be an integer >= 1, got {sinkhorn_iters!r}")
    if isinstance(sinkhorn_tol, bool) or not isinstance(sinkhorn_tol, (int, float)) or not sinkhorn_tol > 0:
        raise StatetrackError(f"{layer} sinkhorn_tol must be a number > 0, got {sinkhorn_tol!r}")


def transpositions(n: int) -> torch.Tensor:
    """The identity then the n(n-1)/2 transpositions (i j), i < j, as row permutations: [K + 1, n, n]."""
    rows = [list(range(n))]
    for i in range(n):
        for j in range(i + 1, n):
            order = list(range(n))
            order[i], order[j] = j, i
            rows.append(order)
    return torch.eye(n)[torch.tensor(rows)]  # P[k] = I with its rows reordered: (P H) swaps rows i and j of H


# ---- the learnable mixer --------------------------------------------------------------------------
@register_model("panini", display="Panini")
class Panini(nn.Module):
    """Panini: a matrix state between two input-dependent transitions, H_t = A_l H_{t-1} A_r + B, decoded by Sinkhorn-Knopp (Siems et al. 2026).

    Per head, with the paper's factorisation A_l = P_s(x_t) D_l(x_t), A_r = D_r(x_t) (App. C.2):

        P_s = sum_k c_k P_k,  c = softmax(W_c x_t + b_c)     P_0 = I, P_1.. the n(n-1)/2 transpositions
        D_l = diag(sigmoid(W_l x_t + b_l)),  D_r = diag(sigmoid(W_r x_t + b_r))
        B   = g u v^T,  g = sigmoid(w_g x_t + b_g),  u = softmax(W_u x_t + b_u),  v = softmax(W_v x_t + b_v)
        H_t = Sinkhorn(P_s D_l H_{t-1} D_r + B),    H_0 = I           (renormalize; else no Sinkhorn here)
        y_t = W_o [vec(S_t^1), ..., vec(S_t^heads)] + b_o,  S_t = Sinkhorn(H_t)  (= H_t with renormalize)

    Every factor is nonnegative, P_s doubly stochastic: a shuffle (c on a transposition, D = I,
    g = 0) moves H inside the Birkhoff polytope, and a reveal of position i holding element j is the
    limit D_l -> I - e_i e_i^T, D_r -> I - e_j e_j^T, u -> e_i, v -> e_j, g -> 1. All projections
    come from one linear map of x_t; the recurrence is a loop over time (`panini_recurrence`).

    Choices the paper leaves open (`departures`): the mixture runs over the identity and the
    transpositions (they generate S_n; all n! permutations are intractable), B is rank one, the
    decoder is a linear map of the flattened decoded states (the dependence of dec on x_t is left
    to the residual stream and MLP after the mixer), and by default (`renormalize`) the state itself
    is projected by Sinkhorn after every step, where the paper keeps the recurrence linear and
    projects only the output: the linear state loses the mass of the revealed row and column at
    every reveal and can underflow (the paper's Fig. 12 cycle does in float32 after 149 cycles),
    and the projected one tracks the exact marginals more closely (docs/models.md gives the figures). `renormalize: false` is the paper's form.
    Sinkhorn stops per matrix at `sinkhorn_tol` (max |row or column sum - 1|) or after
    `sinkhorn_iters` sweeps. Initialisation: P_s near I (c_0 about 0.9), D near I (0.88), g
    about 0.12, so the state is kept at the start. State: H [B, heads, n, n].
    """

    departures = ("the paper gives the factorisation A_l = P_s D_l, A_r = D_r but not how they depend on x_t: here "
                  "P_s is a softmax mixture of the identity and the n(n-1)/2 transpositions (not all n! permutations), "
                  "D_l, D_r sigmoid gates and B = g u v^T rank one (sigmoid g, softmax u and v), all from one linear map of x_t; "
                  "by default (renormalize) the state is projected by Sinkhorn after every step, where the paper keeps the "
                  "recurrence linear and projects only the output (renormalize: false); the decoder is a linear map of the "
                  "flattened Sinkhorn-decoded states, with x_t reaching the output through the residual stream")

    def __init__(self, d_model: int, n: int = 4, num_heads: int = 2, renormalize: bool = True,
                 sinkhorn_iters: int = 16, sinkhorn_tol: float = 1e-4):
        super().__init__()
        _check_settings("Panini", n, renormalize, sinkhorn_iters, sinkhorn_tol)
        if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
            raise StatetrackError(f"Panini num_heads must be an integer >= 1, got {num_heads!r}")
        self.d_model, self.n, self.num_heads = d_model, n, num_heads
        self.renormalize, self.sinkhorn_iters, self.sinkhorn_tol = renormalize, sinkhorn_iters, float(sinkhorn_tol)
        self.register_buffer("permutations", transpositions(n), persistent=False)  # [K + 1, n, n]
        K = self.permutations.shape[0]
        self.widths = [K, n, n, 1, n, n]  # c, D_l, D_r, g, u, v per head
        self.in_proj = nn.Linear(d_model, num_heads * sum(self.widths))
        self.out_proj = nn.Linear(num_heads * n * n, d_model)
        with torch.no_grad():
            bias = self.in_proj.bias.view(num_heads, sum(self.widths))
            bias.zero_()
            bias[:, 0] = math.log(9 * (K - 1))  # c_0 = 0.9: the identity dominates
            bias[:, K : K + 2 * n] = 2.0  # D_l, D_r = sigmoid(2) = 0.88
            bias[:, K + 2 * n] = -2.0  # g = sigmoid(-2) = 0.12

    def transitions(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A_l = P_s D_l, A_r = D_r and B for x [B, T, d_model]: each [B, T, heads, n, n]."""
        B_, T, _ = x.shape
        parts = self.in_proj(x).view(B_, T, self.num_heads, sum(self.widths)).split(self.widths, dim=-1)
        c, d_l, d_r, g, u, v = parts
        P_s = torch.einsum("bthk,kij->bthij", torch.softmax(c, dim=-1), self.permutations.to(x.dtype))
        A_l = P_s * torch.sigmoid(d_l)[..., None, :]  # P_s D_l: column j scaled by D_l[j]
        A_r = torch.diag_embed(torch.sigmoid(d_r))
        B = torch.sigmoid(g)[..., None] * torch.softmax(u, dim=-1)[..., :, None] * torch.softmax(v, dim=-1)[..., None, :]
        return A_l, A_r, B

    def initial_state(self, x: torch.Tensor) -> torch.Tensor:
        eye = torch.eye(self.n, dtype=x.dtype, device=x.device)
        return eye.repeat(x.shape[0], self.num_heads, 1, 1)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        check_input(x, self.d_model, type(self).__name__)
        B_, T, _ = x.shape
        H0 = self.initial_state(x) if state is None else state
        if H0.shape != (B_, self.num_heads, self.n, self.n):
            raise StatetrackError(f"Panini expects a state of shape [B, heads, n, n] = [{B_}, {self.num_heads}, {self.n}, {self.n}], "
                                  f"got {tuple(H0.shape)}")
        decoded, state = panini_recurrence(*self.transitions(x), H0, self.renormalize, self.sinkhorn_iters, self.sinkhorn_tol)
        return self.out_proj(decoded.reshape(B_, T, -1)), state


# ---- exact parameters for the pfsa task ----------------------------------------------------------
class PaniniTable(nn.Module):
    """The Panini recurrence with fixed A_l, A_r, B per token id ([V, n, n] each): token ids [B, T]
    -> (decoded beliefs [B, T, n, n], state [B, n, n]); H_0 = I."""

    def __init__(self, A_l: torch.Tensor, A_r: torch.Tensor, B: torch.Tensor, renormalize: bool = True,
                 sinkhorn_iters: int = 100, sinkhorn_tol: float = 1e-6):
        super().__init__()
        n = A_l.shape[-1]
        _check_settings("PaniniTable", n, renormalize, sinkhorn_iters, sinkhorn_tol)
        for name, table in (("A_l", A_l), ("A_r", A_r), ("B", B)):
            if table.dim() != 3 or table.shape != A_l.shape or table.shape[1:] != (n, n):
                raise StatetrackError(f"PaniniTable expects A_l, A_r and B of shape [V, n, n] = {list(A_l.shape)}, "
                                      f"got {name} {list(table.shape)}")
        self.register_buffer("A_l", A_l)
        self.register_buffer("A_r", A_r)
        self.register_buffer("B", B)
        self.n, self.renormalize, self.sinkhorn_iters, self.sinkhorn_tol = n, renormalize, sinkhorn_iters, float(sinkhorn_tol)

    def forward(self, tokens: torch.Tensor, state: torch.Tensor | None = None):
        vocab = self.A_l.shape[0]
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise StatetrackError(f"PaniniTable expects token ids of shape [B, T] (long), got {tuple(tokens.shape)} {tokens.dtype}")
        if tokens.numel() and not (0 <= int(tokens.min()) and int(tokens.max()) < vocab):
            raise StatetrackError(f"PaniniTable: token ids must lie in [0, {vocab}), got {int(tokens.min())}..{int(tokens.max())}")
        if state is None:
            state = torch.eye(self.n, dtype=self.A_l.dtype, device=self.A_l.device).repeat(tokens.shape[0], 1, 1)
        return panini_recurrence(self.A_l[tokens], self.A_r[tokens], self.B[tokens], state,
                                 self.renormalize, self.sinkhorn_iters, self.sinkhorn_tol)


def exact_panini(task, renormalize: bool = True, sinkhorn_iters: int = 100, sinkhorn_tol: float = 1e-6,
                 dtype: torch.dtype = torch.float64) -> PaniniTable:
    """The Panini recurrence with the exact matrices of a `pfsa` task's tokens (Siems et al. 2026, App. C.2):
    `swap(i,j)?` is A_l = (1 - noise) P_(i j) + noise I, A_r = I, B = 0; `p[i]=j` is
    A_l = I - e_i e_i^T, A_r = I - e_j e_j^T, B = e_i e_j^T; the padding token is the identity.

    On shuffles alone this is the exact marginal belief (a mixture of permutations acts linearly on
    marginals); a reveal only sees the marginals, not the joint, so afterwards it is an approximation.
    """
    if not all(hasattr(task, key) for key in ("n", "noise", "vocab", "decode_token")):
        raise StatetrackError(f"exact_panini expects a 'pfsa' task (n, noise, vocab, decode_token), got {type(task).__name__}")
    n, V = task.n, len(task.vocab)
    eye = torch.eye(n, dtype=dtype)
    A_l, A_r, B = eye.repeat(V, 1, 1), eye.repeat(V, 1, 1), torch.zeros(V, n, n, dtype=dtype)
    for token in range(1, V):
        kind, a, b = task.decode_token(token)
        if kind == "swap":
            swap = eye.clone()
            swap[[a, b]] = swap[[b, a]]
            A_l[token] = (1 - task.noise) * swap + task.noise * eye
        else:  # position a holds element b
            A_l[token, a, a] = 0.0
            A_r[token, b, b] = 0.0
            B[token, a, b] = 1.0
    return PaniniTable(A_l, A_r, B, renormalize, sinkhorn_iters, sinkhorn_tol)
