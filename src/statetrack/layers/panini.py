"""The Panini recurrence (Siems et al. 2026, App. C.2): a matrix state sandwiched between two
state transitions, decoded by Sinkhorn-Knopp onto the Birkhoff polytope of doubly stochastic
matrices,

    H_t = A_l(x_t) H_{t-1} A_r(x_t) + B(x_t),    y_t = dec(H_t, x_t),

affine in vec(H): vec(H_t) = (A_r(x_t)^T (x) A_l(x_t)) vec(H_{t-1}) + vec(B(x_t)). With H[i, j] =
P(position i holds element j) a probabilistic shuffle is A_l = sum_k c_k P_k (a convex combination
of permutation matrices), A_r = I, B = 0; a reveal "position i holds element j" is
A_l = I - e_i e_i^T, A_r = I - e_j e_j^T, B = e_i e_j^T (zero row i and column j, then put 1 at
(i, j)); the decoder renormalises rows and columns in turn (Sinkhorn & Knopp 1967).

The recurrence and the decoder are ops (`statetrack.ops.panini`: `panini_recurrence`, `sinkhorn`,
each beside its reference); here are `Panini`, the learnable token mixer, and `exact_panini(task)`,
the recurrence with the exact shuffle and reveal matrices of the `pfsa` task, per token id.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import check_input
from statetrack.layers.registry import register_model
from statetrack.ops.panini import panini_recurrence


def _check_settings(layer: str, n: int, renormalize: bool, sinkhorn_iters: int, sinkhorn_tol: float) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise StatetrackError(
            f"{layer} n (positions and elements of the state, n x n) must be an integer >= 2, got {n!r}"
        )
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
@register_model(
    "panini",
    display="Panini",
    summary="Panini: a matrix state between two input-dependent transitions, H_t = A_l H_{t-1} A_r + B, "
    "decoded by Sinkhorn-Knopp (Siems et al. 2026)",
)
class Panini(nn.Module):
    """Panini: a matrix state between two input-dependent transitions, H_t = A_l H_{t-1} A_r + B,
    decoded by Sinkhorn-Knopp (Siems et al. 2026).

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
    decoder is a linear map of the flattened decoded states (the dependence of dec on x_t is left to
    the residual stream and MLP after the mixer), and by default (`renormalize`) the state itself is
    projected by Sinkhorn after every step, where the paper keeps the recurrence linear and projects
    only the output: the linear state loses the mass of the revealed row and column at every reveal
    and can underflow (the paper's Fig. 12 cycle does in float32 after 149 cycles), and the
    projected one tracks the exact marginals more closely (docs/models.md gives the figures).
    `renormalize: false` is the paper's form. Sinkhorn stops per matrix at `sinkhorn_tol` (max |row
    or column sum - 1|) or after `sinkhorn_iters` sweeps. Initialisation: P_s near I (c_0 about
    0.9), D near I (0.88), g about 0.12, so the state is kept at the start. State: H [B, heads, n, n].
    """

    permutations: torch.Tensor  # a buffer: the identity and the transpositions, [K + 1, n, n]

    departures = (
        "the paper gives the factorisation A_l = P_s D_l, A_r = D_r but not how they depend on x_t: here "
        "P_s is a softmax mixture of the identity and the n(n-1)/2 transpositions (not all n! permutations), "
        "D_l, D_r sigmoid gates and B = g u v^T rank one (sigmoid g, softmax u and v), all from one linear map of x_t; "
        "by default (renormalize) the state is projected by Sinkhorn after every step, where the paper keeps the "
        "recurrence linear and projects only the output (renormalize: false); the decoder is a linear map of the "
        "flattened Sinkhorn-decoded states, with x_t reaching the output through the residual stream"
    )

    def __init__(
        self,
        d_model: int,
        n: int = 4,
        num_heads: int = 2,
        renormalize: bool = True,
        sinkhorn_iters: int = 16,
        sinkhorn_tol: float = 1e-4,
    ):
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
        B = (
            torch.sigmoid(g)[..., None]
            * torch.softmax(u, dim=-1)[..., :, None]
            * torch.softmax(v, dim=-1)[..., None, :]
        )
        return A_l, A_r, B

    def initial_state(self, x: torch.Tensor) -> torch.Tensor:
        eye = torch.eye(self.n, dtype=x.dtype, device=x.device)
        return eye.repeat(x.shape[0], self.num_heads, 1, 1)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        check_input(x, self.d_model, type(self).__name__)
        B_, T, _ = x.shape
        H0 = self.initial_state(x) if state is None else state
        if H0.shape != (B_, self.num_heads, self.n, self.n):
            raise StatetrackError(
                f"Panini expects a state of shape [B, heads, n, n] = [{B_}, {self.num_heads}, {self.n}, {self.n}], "
                f"got {tuple(H0.shape)}"
            )
        decoded, state = panini_recurrence(
            *self.transitions(x), H0, self.renormalize, self.sinkhorn_iters, self.sinkhorn_tol
        )
        return self.out_proj(decoded.reshape(B_, T, -1)), state


# ---- exact parameters for the pfsa task ----------------------------------------------------------
class PaniniTable(nn.Module):
    """The Panini recurrence with fixed A_l, A_r, B per token id ([V, n, n] each): token ids [B, T]
    -> (decoded beliefs [B, T, n, n], state [B, n, n]); H_0 = I."""

    A_l: torch.Tensor  # buffers, [V, n, n] each
    A_r: torch.Tensor
    B: torch.Tensor

    def __init__(
        self,
        A_l: torch.Tensor,
        A_r: torch.Tensor,
        B: torch.Tensor,
        renormalize: bool = True,
        sinkhorn_iters: int = 100,
        sinkhorn_tol: float = 1e-6,
    ):
        super().__init__()
        n = A_l.shape[-1]
        _check_settings("PaniniTable", n, renormalize, sinkhorn_iters, sinkhorn_tol)
        for name, table in (("A_l", A_l), ("A_r", A_r), ("B", B)):
            if table.dim() != 3 or table.shape != A_l.shape or table.shape[1:] != (n, n):
                raise StatetrackError(
                    f"PaniniTable expects A_l, A_r and B of shape [V, n, n] = {list(A_l.shape)}, "
                    f"got {name} {list(table.shape)}"
                )
        self.register_buffer("A_l", A_l)
        self.register_buffer("A_r", A_r)
        self.register_buffer("B", B)
        self.n, self.renormalize, self.sinkhorn_iters, self.sinkhorn_tol = (
            n,
            renormalize,
            sinkhorn_iters,
            float(sinkhorn_tol),
        )

    def forward(self, tokens: torch.Tensor, state: torch.Tensor | None = None):
        vocab = self.A_l.shape[0]
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise StatetrackError(
                f"PaniniTable expects token ids of shape [B, T] (long), got {tuple(tokens.shape)} {tokens.dtype}"
            )
        if tokens.numel() and not (0 <= int(tokens.min()) and int(tokens.max()) < vocab):
            raise StatetrackError(
                f"PaniniTable: token ids must lie in [0, {vocab}), got {int(tokens.min())}..{int(tokens.max())}"
            )
        if state is None:
            state = torch.eye(self.n, dtype=self.A_l.dtype, device=self.A_l.device).repeat(tokens.shape[0], 1, 1)
        return panini_recurrence(
            self.A_l[tokens],
            self.A_r[tokens],
            self.B[tokens],
            state,
            self.renormalize,
            self.sinkhorn_iters,
            self.sinkhorn_tol,
        )


def exact_panini(
    task,
    renormalize: bool = True,
    sinkhorn_iters: int = 100,
    sinkhorn_tol: float = 1e-6,
    dtype: torch.dtype = torch.float64,
) -> PaniniTable:
    """The Panini recurrence with the exact matrices of a `pfsa` task's tokens (Siems et al. 2026, App. C.2):
    `swap(i,j)?` is A_l = (1 - noise) P_(i j) + noise I, A_r = I, B = 0; `p[i]=j` is
    A_l = I - e_i e_i^T, A_r = I - e_j e_j^T, B = e_i e_j^T; the padding token is the identity.

    On shuffles alone this is the exact marginal belief (a mixture of permutations acts linearly on
    marginals); a reveal only sees the marginals, not the joint, so afterwards it is an approximation.
    """
    if not all(hasattr(task, key) for key in ("n", "noise", "vocab", "decode_token")):
        raise StatetrackError(
            f"exact_panini expects a 'pfsa' task (n, noise, vocab, decode_token), got {type(task).__name__}"
        )
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
