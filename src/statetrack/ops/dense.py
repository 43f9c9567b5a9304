"""Dense input-dependent linear recurrence h_t = A_t h_{t-1} + b_t (Ebrahimi & Memisevic 2025), layout [B, T, H, D].

The full bilinear model has A_t = sum_k x_t[k] W[:, :, k]; the CP-factored one A_t = U diag(C^T x_t) V^T
(Ebrahimi & Memisevic 2025, eqs. 1-3). `dense_transition` takes materialised A_t; `bilinear_transition`
(below) takes x and W; the CP layer runs `dense_scan` in its R coordinates. The state may be a vector
h [B, H, D] or a matrix h [B, H, D, E] (E columns carried by the same A_t; the delta rule's chunk
recurrence uses that form).

Fastest correct CPU form found: a plain sequential scan with a custom reverse-scan backward (the
adjoint lambda_t = dL/dh_t + A_{t+1}^T lambda_{t+1}), dA_t = lambda_t h_{t-1}^T computed afterwards
as one batched product. For small real vector states (D <= NATIVE_MAX_D: the block and CP bilinear
models) `dense_scan` runs both passes as one compiled loop each (`dense_scan.c`), dA_t written in
the reverse pass. Vector states step through the strided A[:, t] with a broadcast product
and a row sum (no copy of the large A, which costs more than the arithmetic); matrix states use
one fused `baddbmm` per step in time-major layout. A chunked/parallel form needs products
A_t ... A_s, i.e. O(D^3) per step instead of O(D^2); on CPU that loses for every D worth a dense model.

`bilinear_transition` takes x and W instead of the A_t (A(x) = sum_k x[k] W[k], per head). Small heads
are materialised time-major by one matmul (so each step reads a contiguous slice) and scanned by
`dense_scan`. One large head is never materialised: B T D^2 transition entries would be written once
and read three times (scan, reverse scan, dW and dx), where contracting the state with W first costs
the same flops, 3 B T K D^2 for forward and backward, in [B, D] x [D, K D] matmuls whose operands
stay in cache.

`unit_normalize` (beside `unit_normalize_reference`) is the direction h / ||h|| by which the bilinear
models read out and renormalise their state, as one autograd node.
"""

from __future__ import annotations

import torch

from statetrack.ops import native

NATIVE_MAX_D = 32  # the compiled loop takes vector states up to this size; larger blocks are matmul-bound


def _native(M, X, h0) -> bool:
    """Whether `dense_scan.c` runs this scan: a real vector state (E = 1) of at most NATIVE_MAX_D on
    the CPU, with the library built."""
    E, D = h0.shape[-1], h0.shape[-2]
    tensors = (M, h0) if X is None else (M, X, h0)
    return E == 1 and D <= NATIVE_MAX_D and not M.is_complex() and native.supports(*tensors)


class _DenseScan(torch.autograd.Function):
    """All states of h_{n+1} = M_n h_n + X_n for M [N, Z, D, D], X [N, Z, D, E], h0 [Z, D, E].

    Returns hs [N + 1, Z, D, E] with hs[0] = h0. Backward is the reverse scan; memory is that of the
    forward (the states are its output). A small real vector state on the CPU runs the compiled loop
    of `dense_scan.c` (forward, and the reverse scan with dM written in the same pass); everything
    else steps through batched products here.
    """

    @staticmethod
    def forward(ctx, M, X, h0):
        N = M.shape[0]
        ctx.native = _native(M, X, h0)
        if ctx.native:
            hs = native.dense_scan_forward(M, None if X is None else X.squeeze(-1), h0.squeeze(-1)).unsqueeze(-1)
            ctx.save_for_backward(M, hs)
            return hs
        hs = h0.new_empty((N + 1,) + tuple(h0.shape))
        hs[0] = h0
        for n in range(N):
            if X is None:  # pure recurrence: no zero tensor to read
                torch.bmm(M[n], hs[n], out=hs[n + 1])
            else:
                torch.baddbmm(X[n], M[n], hs[n], out=hs[n + 1])
        ctx.save_for_backward(M, hs)
        return hs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_hs):
        M, hs = ctx.saved_tensors
        N = M.shape[0]
        if ctx.native:
            lam, grad_M = native.dense_scan_backward(
                M, hs.squeeze(-1), grad_hs.squeeze(-1).contiguous(), ctx.needs_input_grad[0]
            )
            lam = lam.unsqueeze(-1)
            return grad_M, (lam[1:] if ctx.needs_input_grad[1] else None), lam[0]
        lam = torch.empty_like(grad_hs)  # lam[n] = dL/dh_n, total
        lam[N] = grad_hs[N]
        Mt = M.transpose(-1, -2).conj()
        for n in range(N - 1, -1, -1):
            torch.baddbmm(grad_hs[n], Mt[n], lam[n + 1], out=lam[n])
        grad_M = grad_X = None
        if ctx.needs_input_grad[0]:
            # dM_n = lambda_{n+1} h_n^H, all n in one batched product; for a vector state (E = 1) an
            # outer product, which a broadcast product writes several times faster than a batch of
            # [D, 1] x [1, D] matmuls
            h_prev = hs[:-1].transpose(-1, -2).conj()
            grad_M = lam[1:] * h_prev if h_prev.shape[-2] == 1 else torch.matmul(lam[1:], h_prev)
        if ctx.needs_input_grad[1]:
            grad_X = lam[1:]
        return grad_M, grad_X, lam[0]


class _DenseVectorScan(torch.autograd.Function):
    """All states of h_{t+1} = A_t h_t + X_t in the user layout: A [B, T, H, D, D], X and h0 [B, (T,) H, D].

    Returns hs [B, T + 1, H, D] (hs[:, 0] = h0). Each step is one broadcast product and a row sum over
    the strided A[:, t] (no copy of the large A); the backward is the reverse scan, and
    dA_t = lambda_{t+1} h_t^H is one broadcast product written straight into A's layout.
    """

    @staticmethod
    def forward(ctx, A, X, h0):
        B, T, H, D, _ = A.shape
        hs = X.new_empty(B, T + 1, H, D)
        hs[:, 0] = h0
        for t in range(T):
            torch.sum(A[:, t] * hs[:, t, :, None, :], dim=-1, out=hs[:, t + 1])
            hs[:, t + 1] += X[:, t]
        ctx.save_for_backward(A, hs)
        return hs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_hs):
        A, hs = ctx.saved_tensors
        T = A.shape[1]
        Ac = A.conj()
        lam = torch.empty_like(hs)
        lam[:, T] = grad_hs[:, T]
        for t in range(T - 1, -1, -1):
            torch.sum(Ac[:, t] * lam[:, t + 1, :, :, None], dim=-2, out=lam[:, t])  # A_t^H lambda_{t+1}
            lam[:, t] += grad_hs[:, t]
        grad_A = lam[:, 1:, :, :, None] * hs[:, :-1, :, None, :].conj() if ctx.needs_input_grad[0] else None
        return grad_A, lam[:, 1:], lam[:, 0]


def dense_scan(M: torch.Tensor, X: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """h_{n+1} = M_n h_n + X_n over the leading axis; returns [N + 1, Z, D, E] states (hs[0] = h0).

    M [N, Z, D, D], X [N, Z, D, E] or None (no additive term), h0 [Z, D, E]; differentiable in all three.
    """
    return _DenseScan.apply(M.contiguous(), None if X is None else X.contiguous(), h0.contiguous())


def _check(A, b, initial_state):
    if A.dim() != 5 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"A must be [B, T, H, D, D], got {tuple(A.shape)}")
    B, T, H, D, _ = A.shape
    if b is not None and (b.dim() not in (4, 5) or b.shape[:4] != (B, T, H, D)):
        raise ValueError(f"b must be [B, T, H, D] = [{B}, {T}, {H}, {D}] or [B, T, H, D, E], got {tuple(b.shape)}")
    if initial_state is not None and initial_state.shape[:3] != (B, H, D):
        raise ValueError(
            f"initial_state must be [B, H, D] = [{B}, {H}, {D}] (or [B, H, D, E]), got {tuple(initial_state.shape)}"
        )
    if b is not None and initial_state is not None and b.dim() - 1 != initial_state.dim():
        raise ValueError(
            f"b {tuple(b.shape)} and initial_state {tuple(initial_state.shape)} disagree on a vector or matrix state"
        )


def dense_transition_reference(
    A: torch.Tensor,
    b: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = True,
):
    """The definition, h_t = A_t h_{t-1} + b_t (Ebrahimi & Memisevic 2025; b = None for the pure model), a plain loop.

    A [B, T, H, D, D]; b [B, T, H, D] (or [B, T, H, D, E]) or None; initial_state [B, H, D] (or
    [B, H, D, E]) or None (zeros). Returns (h [B, T, H, D(, E)] = h_1..h_T, h_T or None).
    """
    _check(A, b, initial_state)
    B, T, H, D, _ = A.shape
    matrix = (b is not None and b.dim() == 5) or (initial_state is not None and initial_state.dim() == 4)
    if initial_state is not None:
        h = initial_state
    elif matrix and b is not None:  # without an initial state, matrix means b is [B, T, H, D, E]
        h = A.new_zeros((B, H, D, b.shape[-1]))
    else:
        h = A.new_zeros((B, H, D))
    states = []
    b_steps = b.unbind(1) if b is not None else [None] * T
    for A_t, b_t in zip(A.unbind(1), b_steps):
        h = A_t @ h if matrix else (A_t @ h.unsqueeze(-1)).squeeze(-1)
        if b_t is not None:
            h = h + b_t
        states.append(h)
    out = torch.stack(states, 1) if states else A.new_zeros((B, 0, H, D) + tuple(h.shape[3:]))
    return out, (h if output_final_state else None)


def dense_transition(
    A: torch.Tensor,
    b: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = True,
):
    """h_t = A_t h_{t-1} + b_t (Ebrahimi & Memisevic 2025) through the fused scan with the reverse-scan backward.

    Same arguments and results as `dense_transition_reference`.
    """
    _check(A, b, initial_state)
    B, T, H, D, _ = A.shape
    matrix = (b is not None and b.dim() == 5) or (initial_state is not None and initial_state.dim() == 4)
    if not matrix:
        E = 1
    elif b is not None:
        E = b.shape[-1]
    else:
        assert initial_state is not None  # matrix: b or the initial state is in the matrix form
        E = initial_state.shape[-1]
    h0 = initial_state if initial_state is not None else A.new_zeros((B, H, D, E) if matrix else (B, H, D))
    if T == 0:
        return A.new_zeros((B, 0) + tuple(h0.shape[1:])), (h0 if output_final_state else None)
    if not matrix:
        X = b if b is not None else A.new_zeros(B, T, H, D)
        out = _DenseVectorScan.apply(A, X, h0)[:, 1:]
        return out, (out[:, -1] if output_final_state else None)
    h0 = h0.reshape(B * H, D, E)
    M = A.transpose(0, 1).reshape(T, B * H, D, D)
    if b is None:
        X = A.new_zeros(T, B * H, D, E)
    else:
        X = b.transpose(0, 1).reshape(T, B * H, D, E)
    hs = dense_scan(M, X, h0)[1:]  # [T, B*H, D, E]
    out = hs.reshape(T, B, H, D, E).transpose(0, 1)
    return out, (out[:, -1] if output_final_state else None)


class _BilinearContract(torch.autograd.Function):
    """All states of h_{t+1} = (sum_k x_t[k] W[k]) h_t + X_t without forming the transition.

    Time-major: x [T, B, K], W [K, D, D] (W[k, r, j] is row r, column j of the k-th matrix), X [T, B, D]
    or None, h0 [B, D]; real. Returns hs [T + 1, B, D] (hs[0] = h0). A step contracts the state with W
    first, P[b, k, r] = sum_j W[k, r, j] h[b, j] (one [B, D] x [D, K D] matmul), then with x_t. The
    backward contracts lambda with W the same way, g[b, k, j] = sum_r lambda[b, r] W[k, r, j], which
    gives both dL/dx_t = g h_t and A_t^T lambda = x_t g; dW accumulates x_t^T (lambda h_t^T) per step.
    """

    @staticmethod
    def forward(ctx, x, W, X, h0):
        T, B, K = x.shape
        D = h0.shape[-1]
        W_state = W.permute(2, 0, 1).reshape(D, K * D)  # [j, (k, r)]
        hs = h0.new_empty(T + 1, B, D)
        hs[0] = h0
        P = h0.new_empty(B, K * D)
        for t in range(T):
            torch.mm(hs[t], W_state, out=P)
            out = hs[t + 1].unsqueeze(1)
            if X is None:
                torch.bmm(x[t].unsqueeze(1), P.view(B, K, D), out=out)
            else:
                torch.baddbmm(X[t].unsqueeze(1), x[t].unsqueeze(1), P.view(B, K, D), out=out)
        ctx.save_for_backward(x, W, hs)
        ctx.has_X = X is not None
        return hs

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_hs):
        x, W, hs = ctx.saved_tensors
        T, B, K = x.shape
        D = hs.shape[-1]
        W_adjoint = W.transpose(0, 1).reshape(D, K * D)  # [r, (k, j)]
        grad_W = W.new_zeros(K, D * D)  # [k, (r, j)]
        grad_x = torch.empty_like(x)
        lam = torch.empty_like(hs)  # lam[t] = dL/dh_t, total
        lam[T] = grad_hs[T]
        g = hs.new_empty(B, K * D)
        outer = hs.new_empty(B, D, D)
        want_x, want_W = ctx.needs_input_grad[:2]  # a frozen recurrence needs neither
        for t in range(T - 1, -1, -1):
            torch.mm(lam[t + 1], W_adjoint, out=g)
            gv = g.view(B, K, D)
            if want_x:  # dL/dx_t[b, k] = sum_j g[b, k, j] h_t[b, j], as a row vector times g^T (the fast batched form)
                torch.bmm(hs[t].unsqueeze(1), gv.transpose(1, 2), out=grad_x[t].unsqueeze(1))
            if want_W:
                torch.mul(lam[t + 1].unsqueeze(2), hs[t].unsqueeze(1), out=outer)
                grad_W.addmm_(x[t].t(), outer.view(B, D * D))
            torch.baddbmm(grad_hs[t].unsqueeze(1), x[t].unsqueeze(1), gv, out=lam[t].unsqueeze(1))
        grad_X = lam[1:] if ctx.has_X else None
        return grad_x if want_x else None, grad_W.view(K, D, D) if want_W else None, grad_X, lam[0]


def _check_bilinear(x, W, b, initial_state):
    if x.dim() != 3:
        raise ValueError(f"x must be [B, T, K], got {tuple(x.shape)}")
    B, T, K = x.shape
    if W.dim() != 4 or W.shape[0] != K or W.shape[-1] != W.shape[-2]:
        raise ValueError(f"W must be [K, H, D, D] with K = {K} (x's last axis), got {tuple(W.shape)}")
    H, D = W.shape[1], W.shape[2]
    if b is not None and tuple(b.shape) != (B, T, H, D):
        raise ValueError(f"b must be [B, T, H, D] = [{B}, {T}, {H}, {D}], got {tuple(b.shape)}")
    if initial_state is not None and tuple(initial_state.shape) != (B, H, D):
        raise ValueError(f"initial_state must be [B, H, D] = [{B}, {H}, {D}], got {tuple(initial_state.shape)}")


def bilinear_transition_reference(x, W, b=None, initial_state=None, output_final_state=True):
    """The definition, h_t = A(x_t) h_{t-1} + b_t with A(x)_i = sum_k x[k] W[k, i] per head i
    (Ebrahimi & Memisevic 2025, eqs. 2-3): every A(x_t) formed, then `dense_transition_reference`.

    x [B, T, K]; W [K, H, D, D]; b [B, T, H, D] or None; initial_state [B, H, D] or None (zeros).
    Returns (h [B, T, H, D] = h_1..h_T, h_T or None).
    """
    _check_bilinear(x, W, b, initial_state)
    B, T, K = x.shape
    A = (x.reshape(B * T, K) @ W.reshape(K, -1)).view((B, T) + tuple(W.shape[1:]))
    return dense_transition_reference(A, b, initial_state, output_final_state)


BILINEAR_IMPLS = ("auto", "materialize", "contract")
CONTRACT_MIN_D = 32  # "auto": contract one-head transitions of at least this size, materialise smaller ones


def bilinear_transition(x, W, b=None, initial_state=None, output_final_state=True, impl="auto"):
    """h_t = A(x_t) h_{t-1} + b_t with A(x)_i = sum_k x[k] W[k, i] (Ebrahimi & Memisevic 2025), exact, fast.

    Same arguments and results as `bilinear_transition_reference`. impl: "materialize" forms every
    A(x_t) in one [B T, K] x [K, H D D] matmul, time-major, and runs the time-major scan (`dense_scan`);
    "contract" (one head only) never forms A: each step contracts the state with W, then with x_t
    (`_BilinearContract`), the same flops without writing and reading B T D^2 transition entries
    twice each way; "auto" contracts one head of D >= CONTRACT_MIN_D and materialises otherwise.
    """
    _check_bilinear(x, W, b, initial_state)
    if impl not in BILINEAR_IMPLS:
        raise ValueError(f"impl must be one of {', '.join(BILINEAR_IMPLS)}, got {impl!r}")
    B, T, K = x.shape
    H, D = W.shape[1], W.shape[2]
    if impl == "contract" and (H != 1 or x.is_complex() or W.is_complex()):
        raise ValueError(f"impl='contract' needs one head (H = 1) and real tensors, got H = {H}, {W.dtype}")
    h0 = initial_state if initial_state is not None else x.new_zeros(B, H, D)
    if T == 0:
        return x.new_zeros(B, 0, H, D), (h0 if output_final_state else None)
    contract = impl == "contract" or (impl == "auto" and H == 1 and D >= CONTRACT_MIN_D and not W.is_complex())
    x_tm = x.transpose(0, 1)  # [T, B, K]
    b_tm = None if b is None else b.transpose(0, 1)  # [T, B, H, D]
    if contract:
        X = None if b_tm is None else b_tm.reshape(T, B, D).contiguous()
        hs = _BilinearContract.apply(x_tm.contiguous(), W[:, 0].contiguous(), X, h0.reshape(B, D).contiguous())
    else:
        A = (x_tm.reshape(T * B, K) @ W.reshape(K, -1)).view(T, B * H, D, D)
        X = None if b_tm is None else b_tm.reshape(T, B * H, D, 1)
        hs = dense_scan(A, X, h0.reshape(B * H, D, 1))
    out = hs[1:].view(T, B, H, D).transpose(0, 1)
    return out, (out[:, -1] if output_final_state else None)


# ---- the direction of a bilinear state -----------------------------------------------------------
def unit_normalize_reference(h: torch.Tensor) -> torch.Tensor:
    """h / max(||h||, tiny) over the last axis, the direction of a bilinear state (a zero vector stays
    zero): a pure bilinear RNN's state matters only up to a positive scale (Ebrahimi & Memisevic 2025),
    so it is read out and renormalised by its direction. Autograd op by op."""
    tiny = torch.finfo(h.dtype).tiny
    return h / torch.linalg.vector_norm(h, dim=-1, keepdim=True).clamp_min(tiny)


class _UnitNormalize(torch.autograd.Function):
    """`unit_normalize` with the backward in three passes instead of autograd's eight for the
    division, the clamp and the norm (it runs on every state of a bilinear model)."""

    @staticmethod
    def forward(ctx, h):
        norm = torch.linalg.vector_norm(h, dim=-1, keepdim=True)
        clamped = norm < torch.finfo(h.dtype).tiny
        norm = norm.clamp_min_(torch.finfo(h.dtype).tiny)
        y = h / norm
        ctx.save_for_backward(y, norm, clamped)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        y, norm, clamped = ctx.saved_tensors
        # d(h / ||h||) = (g - y <y, g>) / ||h||; where the clamp holds, the divisor is a constant: g / tiny
        along = torch.linalg.vecdot(y, g, dim=-1).unsqueeze(-1).masked_fill_(clamped, 0)
        return torch.addcmul(g, y, along, value=-1).div_(norm)


def unit_normalize(h: torch.Tensor) -> torch.Tensor:
    """`unit_normalize_reference` (the same numbers, the same gradient to float rounding) as one
    autograd node."""
    return _UnitNormalize.apply(h)
