"""Bilinear RNNs: pure multiplicative state transitions, and the hierarchy of their structures.

Ebrahimi & Memisevic 2025, eqs. 2-5. With x_t the layer input (d_x = d_model) and h_t in R^{d_h}:

    h_t = A(x_t) h_{t-1}  [+ U x_t]  [+ b],          y_t = W_o h_t / ||h_t||

and A(x) linear in x, structured as one of

    full      A(x) = sum_k x[k] W[:, :, k]                       W in R^{d_h x d_h x d_x}   (eq. 2-3)
    cp        A(x) = U diag(C^T x) V^T                           U, V in R^{d_h x R}, C in R^{d_x x R}  (eq. 4)
    block     A(x) = blockdiag(A_1(x), ..., A_{d_h/b}(x))        each A_i a full bilinear block of size b
    rotation  A(x) = blockdiag(R(theta_1(x)), ...),  theta = Theta^T x,  R(t) = [[cos t, -sin t], [sin t, cos t]]
    diagonal  A(x) = diag(D^T x)                                 (block size 1)

"Pure" (the default, `additive="none"`) means no additive term, so h_t may be rescaled by any positive
constant at any step without changing the direction read out. That is the paper's scale invariance,
used here at evaluation: the state is renormalised to unit norm every `normalize_every` steps, so
inputs of any length neither overflow nor underflow (training leaves it unnormalised; lengths are
short). Additive terms (`input`: U x_t, `constant`: b, `both`) break the invariance: such a model is
renormalised only with `normalize_training=True`, which renormalises in training and evaluation
alike, so that the recurrence is h_t = A(x_t) h_{t-1} / ||h_{t-1}|| (+ additive terms) at every k-th
step. Its state carries the number of steps since the last renormalisation, so an input fed in
chunks is renormalised at the same steps as the whole input. Without it, an additive model whose
A(x) grows the state overflows on long inputs.

Fast path (`forward`; figures in docs/performance-layers.md): full and block through
`ops.dense.bilinear_transition`, which for one large head (full) never forms A(x_t) but contracts
the state with W and then with x_t each step, and for small heads (block) forms every A(x_t) in one
matrix product, time-major, before the dense scan (a compiled loop on the CPU); cp in its R
coordinates z = V^T h, where the transition M diag(C^T x_t) (M = V^T U) is R x R; diagonal and
rotation through the diagonal scan of `ops.diagonal` (rotation as a complex scan on the d_h/2
planes). At evaluation a pure model's renormalised states come from `_renormalised_states`: all
steps at once in log-magnitude form for the diagonal structures, a per-step loop for the dense ones
(transitions formed a bounded number of steps at a time). `forward_reference` is the definition: a
per-step loop that forms A(x_t) inside the loop.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from statetrack.errors import StatetrackError
from statetrack.layers.common import Spectral, check_input
from statetrack.layers.registry import register_model
from statetrack.ops import diagonal_scan
from statetrack.ops.dense import bilinear_transition, dense_scan, unit_normalize

STRUCTURES = ("full", "cp", "block", "rotation", "diagonal")
ADDITIVE = ("none", "input", "constant", "both")
_ADDITIVE_SUFFIX = {"none": "", "input": " +input", "constant": " +const", "both": " +both"}


def _display(spec: dict) -> str:
    name = {
        "full": "Bilinear full",
        "cp": f"Bilinear CP R={spec['rank']}",
        "block": f"Bilinear block b={spec['block_size']}",
        "rotation": "Bilinear rotation",
        "diagonal": "Bilinear diagonal",
    }.get(spec["structure"], f"Bilinear {spec['structure']}")
    return (
        name
        + _ADDITIVE_SUFFIX.get(spec["additive"], f" +{spec['additive']}")
        + (" frozen" if spec["frozen_recurrence"] else "")
        + (" norm" if spec.get("normalize_training") else "")
    )


def _uniform(shape, bound: float) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape).uniform_(-bound, bound))


@register_model(
    "bilinear",
    display=_display,
    summary="Bilinear RNN h_t = A(x_t) h_{t-1}, A linear in x: full, CP, block, rotation or real diagonal "
    "(Ebrahimi & Memisevic 2025)",
    stack_defaults={"mlp": False},  # one cell, linear readout, as published
)
class Bilinear(Spectral, nn.Module):
    """Bilinear RNN h_t = A(x_t) h_{t-1}, A linear in x: full, CP, block, rotation or real diagonal
    (Ebrahimi & Memisevic 2025).

    The module docstring has the equations. `hidden` (d_h) defaults to d_model; `rank` is R of the CP
    form, `block_size` b of the block form. Init: weights uniform with the range chosen so that the
    spectral radius of A(x) is about 1 for the unit-variance input the block's LayerNorm gives
    (RMS of the diagonal entries 1 for `diagonal`; angles spread over several turns for `rotation`).
    `additive_init` is a of the additive terms' init U(-a, a). `learn_h0`: h_0 is trained (else a
    fixed random unit vector). `frozen_recurrence`: A's weights, the additive terms and the token
    embedding feeding the layer keep their random init; only the readout (and h_0) train.
    `normalize_every`: at evaluation, renormalise a pure state every k steps (0: never).
    `normalize_training`: renormalise every k steps in training too, and at evaluation whatever the
    additive terms (the consistent choice for a model with additive terms).

    State: h [B, d_h] (real). A model with additive terms and `normalize_training` carries
    (h [B, d_h], steps since the last renormalisation): the schedule goes on across chunks.
    """

    departures = (
        "the readout is W_o h_t / ||h_t|| (the direction of the state), not W_o h_t: the paper's linear readout is "
        "scale invariant only through its argmax, and the residual and LayerNorm around every mixer here are not, "
        "so evaluation-time renormalisation would otherwise change predictions; the input is the block's "
        "LayerNorm of a learned embedding"
    )

    @staticmethod
    def transition_class(spec: dict) -> str | None:
        if spec["additive"] != "none":  # an input term beside A(x_t) h: no statement
            return None
        return {"full": "dense", "rotation": "diagonal-complex", "diagonal": "diagonal-real"}.get(spec["structure"])

    def __init__(
        self,
        d_model: int,
        structure: str = "full",
        hidden: int | None = None,
        rank: int = 16,
        block_size: int = 8,
        additive: str = "none",
        additive_init: float = 0.1,
        learn_h0: bool = True,
        frozen_recurrence: bool = False,
        normalize_every: int = 1,
        normalize_training: bool = False,
    ):
        super().__init__()
        if structure not in STRUCTURES:
            raise StatetrackError(f"unknown bilinear structure {structure!r}; expected one of: {', '.join(STRUCTURES)}")
        if additive not in ADDITIVE:
            raise StatetrackError(f"unknown additive setting {additive!r}; expected one of: {', '.join(ADDITIVE)}")
        d_h = d_model if hidden is None else hidden
        for name, value in (("hidden", d_h), ("rank", rank), ("block_size", block_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise StatetrackError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(normalize_every, bool) or not isinstance(normalize_every, int) or normalize_every < 0:
            raise StatetrackError(f"normalize_every must be an integer >= 0 (0: never), got {normalize_every!r}")
        if not isinstance(additive_init, (int, float)) or additive_init < 0:
            raise StatetrackError(f"additive_init must be a number >= 0, got {additive_init!r}")
        if structure == "block" and d_h % block_size:
            raise StatetrackError(
                f"hidden {d_h} is not divisible by block_size {block_size}; choose a block size dividing it"
            )
        if structure == "rotation" and d_h % 2:
            raise StatetrackError(f"the rotation structure needs an even hidden size (2-D planes), got {d_h}")
        self.d_model, self.hidden, self.structure, self.additive = d_model, d_h, structure, additive
        self.normalize_every, self.normalize_training, self.frozen_recurrence = (
            normalize_every,
            bool(normalize_training),
            frozen_recurrence,
        )
        self.frozen_input = (
            frozen_recurrence  # the FrozenInput feature: SequenceModel freezes the embedding feeding this layer
        )
        d_x = d_model

        if structure in ("full", "block"):
            b = d_h if structure == "full" else block_size
            self.block = b
            # A entries of variance 1/b from unit-variance x: radius of a random b x b block ~ 1
            self.W = _uniform((d_x, d_h // b, b, b), math.sqrt(3.0 / (d_x * b)))
        elif structure == "cp":
            self.block = d_h
            self.U = _uniform((d_h, rank), math.sqrt(3.0 / d_h))
            self.V = _uniform((d_h, rank), math.sqrt(3.0 / d_h))
            # eigenvalues of U diag(c) V^T are those of diag(c) V^T U: radius ~ sqrt(R var(c)), so var(c) = d_h / R
            self.C = _uniform((d_x, rank), math.sqrt(3.0 * d_h / (rank * d_x)))
        elif structure == "diagonal":
            self.D = _uniform((d_x, d_h), math.sqrt(3.0 / d_x))  # a = D^T x with E[a^2] = 1
        else:  # rotation
            self.Theta = _uniform((d_x, d_h // 2), math.pi * math.sqrt(3.0 / d_x))  # theta ~ N(0, pi^2)
        if additive in ("input", "both"):
            self.U_in = _uniform((d_x, d_h), additive_init)
        if additive in ("constant", "both"):
            self.bias = _uniform((d_h,), additive_init)
        h0 = torch.randn(d_h)
        h0 = h0 / h0.norm()
        if learn_h0:
            self.h0 = nn.Parameter(h0)
        else:
            self.register_buffer("h0", h0)
        self.out_proj = nn.Linear(d_h, d_model, bias=False)
        if frozen_recurrence:
            for name, p in self.named_parameters():
                if name not in ("h0", "out_proj.weight"):
                    p.requires_grad_(False)

    # ---- the transition A(x) ------------------------------------------------------------------
    @property
    def pure(self) -> bool:
        return self.additive == "none"

    def transition(self, x: torch.Tensor) -> torch.Tensor:
        """A(x) for x [B, T, d_x]: [B, T, d_h / b, b, b] (full, cp, block), the diagonal [B, T, d_h]
        (diagonal), or the complex rotations exp(i theta) [B, T, d_h / 2] (rotation)."""
        B, T, d_x = x.shape
        if self.structure in ("full", "block"):
            n, b = self.W.shape[1], self.W.shape[2]
            return (x.reshape(B * T, d_x) @ self.W.reshape(d_x, -1)).view(B, T, n, b, b)
        if self.structure == "cp":
            c = x @ self.C  # [B, T, R]
            return torch.matmul(self.U * c[..., None, :], self.V.t()).unsqueeze(2)  # [B, T, 1, d_h, d_h]
        if self.structure == "diagonal":
            return x @ self.D
        theta = (
            x @ self.Theta
        )  # e^{i theta} as cos + i sin (to rounding what torch.polar gives; its backward costs 3x more)
        return torch.complex(torch.cos(theta), torch.sin(theta))

    def additive_term(self, x: torch.Tensor) -> torch.Tensor | None:
        """U x_t + b [B, T, d_h] (the terms this model has), or None for a pure model."""
        term = None
        if self.additive in ("input", "both"):
            term = x @ self.U_in
        if self.additive in ("constant", "both"):
            term = self.bias.expand(x.shape[:2] + self.bias.shape) if term is None else term + self.bias
        return term

    def transition_matrices(self, x):
        """The dense transitions [B, T, d_h / b, b, b] (full, cp, block)."""
        if self.structure in ("diagonal", "rotation"):
            raise NotImplementedError("diagonal structures expose transition_eigenvalues")
        return self.transition(x)

    def transition_eigenvalues(self, x):
        """Eigenvalues of A(x_t): the diagonal itself, the rotations' e^{i theta} (and conjugates
        implied), or those of the blocks."""
        if self.structure in ("diagonal", "rotation"):
            return self.transition(x)
        return super().transition_eigenvalues(x)

    # ---- state layout -------------------------------------------------------------------------
    def _to_state(self, h: torch.Tensor) -> torch.Tensor:
        """Real vector(s) [..., d_h] -> the op's layout ([..., n, b] blocks, or complex planes)."""
        if self.structure == "rotation":
            return torch.view_as_complex(h.reshape(h.shape[:-1] + (-1, 2)).contiguous())
        if self.structure == "diagonal":
            return h
        return h.reshape(h.shape[:-1] + (-1, self.block))

    def _to_vector(self, h: torch.Tensor) -> torch.Tensor:
        """Inverse of `_to_state`: real [..., d_h]."""
        if self.structure == "rotation":
            return torch.view_as_real(h).flatten(-2)
        if self.structure == "diagonal":
            return h
        return h.flatten(-2)

    def _states(self, x, add, h0):
        """All states h_1..h_T [B, T, d_h] from h0 [B, d_h], unnormalised, through the fast ops."""
        B, T, _ = x.shape
        if self.structure in ("full", "block"):
            n, b = self.W.shape[1], self.W.shape[2]
            add = None if add is None else add.reshape(B, T, n, b)
            h, _ = bilinear_transition(x, self.W, add, h0.reshape(B, n, b), output_final_state=False)
            return h.flatten(-2)
        if self.structure == "cp":
            return self._cp_states(x, add, h0)
        A, s0 = self.transition(x), self._to_state(h0)
        b = self._to_state(add) if add is not None else torch.zeros_like(A)
        h, _ = diagonal_scan(A, b, s0, output_final_state=False)
        return self._to_vector(h)

    def _cp_states(self, x, add, h0):
        """The CP recurrence in the R coordinates z = V^T h, where its transition is R x R:

            z_t = M diag(c_t) z_{t-1} + V^T a_t,   h_t = U (c_t * z_{t-1}) + a_t,   M = V^T U,  c_t = C^T x_t,

        (a_t the additive term), the same h_t as U diag(c_t) V^T h_{t-1} + a_t at O(R^2) per step
        instead of O(d_h^2 R) for forming the d_h x d_h transition.
        """
        c = (x @ self.C).transpose(0, 1)  # [T, B, R]
        M = self.V.t() @ self.U  # [R, R]
        A = M * c.unsqueeze(-2)  # [T, B, R, R]
        e = None if add is None else (add @ self.V).transpose(0, 1).unsqueeze(-1)  # [T, B, R, 1]
        z = dense_scan(A, e, (h0 @ self.V).unsqueeze(-1))[:-1, ..., 0]  # z_0..z_{T-1} [T, B, R]
        h = ((c * z) @ self.U.t()).transpose(0, 1)  # [B, T, d_h]
        return h if add is None else h + add

    def _initial(self, x: torch.Tensor) -> torch.Tensor:
        return self.h0.to(x.dtype).expand(x.shape[0], self.hidden)

    def _read(self, h: torch.Tensor) -> torch.Tensor:
        return self.out_proj(unit_normalize(h))

    def _renormalises(self) -> bool:
        """Whether this call renormalises the state: in training only with normalize_training; at
        evaluation for a pure model, or with normalize_training."""
        if self.normalize_every == 0:
            return False
        return self.normalize_training or (not self.training and self.pure)

    # ---- evaluation: renormalised states (scale invariance) -------------------------------------
    def _renormalised_states(self, x, h0):
        """States h_1..h_T [B, T, d_h] of a pure model in the directions of the unnormalised ones, and
        the final state scaled to unit norm, for inputs of any length (no overflow or underflow).

        Diagonal and rotation: a state renormalised every step is, per coordinate, h0 times the
        product of the a's, i.e. log-magnitude log|h0| + cumsum log|a| and phase sign(h0) cumprod
        sign(a) (angles summed for rotation), computed in float64 with each step's largest
        log-magnitude subtracted before exponentiating: all steps at once. Dense structures: a
        per-step loop renormalising every `normalize_every` steps (cp in its R coordinates).
        Differentiable, though meant for inference.
        """
        B, T, _ = x.shape
        tiny = torch.finfo(x.dtype).tiny
        if self.structure in ("diagonal", "rotation"):
            a, s0 = self.transition(x), self._to_state(h0)  # [B, T, F], [B, F]
            wide = torch.float64
            log_mag = torch.log(s0.abs().to(wide)).unsqueeze(1) + torch.cumsum(torch.log(a.abs().to(wide)), 1)
            top = log_mag.amax(-1, keepdim=True)
            top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))  # an all-zero state stays zero
            mag = torch.exp(log_mag - top)
            if a.is_complex():
                angle = torch.angle(s0).to(wide).unsqueeze(1) + torch.cumsum(torch.angle(a).to(wide), 1)
                s = torch.polar(mag, angle).to(a.dtype)
            else:
                s = (mag * (torch.sign(s0).to(wide).unsqueeze(1) * torch.cumprod(torch.sign(a).to(wide), 1))).to(
                    a.dtype
                )
            h = self._to_vector(s)
        else:
            h = self._renormalised_dense_states(x, h0, tiny)
        return h, unit_normalize(h[:, -1])

    def _renormalised_dense_states(self, x, h0, tiny, budget=1 << 22):
        """Per-step loop for full, block and cp (in its R coordinates), transitions formed for as many
        steps at a time as fit in `budget` elements (so memory does not grow with the length).
        Transitions of size >= 32 step a row vector, h^T A^T with the transposes formed directly:
        there batched row-times-matrix products beat matrix-times-column ones, and below it they lose
        (`benchmarks/bilinear.py`)."""
        B, T, K = x.shape
        k = self.normalize_every
        if self.structure == "cp":
            M = self.V.t() @ self.U  # z_t = M diag(c_t) z_{t-1}
            c_all = x @ self.C  # [B, T, R]
            n, b, s = 1, M.shape[0], h0 @ self.V  # z_0
        else:
            n, b, s = self.W.shape[1], self.W.shape[2], h0
        row = b >= 32
        s = s.reshape(B * n, 1, b) if row else s.reshape(B * n, b, 1)
        if self.structure != "cp":
            W = (self.W.transpose(-1, -2) if row else self.W).reshape(K, -1)
        span = max(1, min(T, budget // (B * n * b * b)))
        states = []
        for lo in range(0, T, span):
            if self.structure == "cp":
                c = c_all[:, lo : lo + span].transpose(0, 1)  # [S, B, R]
                A = M.t() * c.unsqueeze(-1) if row else M * c.unsqueeze(-2)  # (M diag(c_t))^T or M diag(c_t)
            else:
                xs = x[:, lo : lo + span].transpose(0, 1)
                A = (xs.reshape(-1, K) @ W).view(xs.shape[0], B * n, b, b)
            for i, A_t in enumerate(A.unbind(0)):
                if self.structure == "cp":
                    states.append(s)  # z_{t-1}: h_t = U (c_t * z_{t-1})
                s = torch.bmm(s, A_t) if row else torch.bmm(A_t, s)
                if (lo + i + 1) % k == 0:
                    flat = s.view(B, -1)  # block: the norm of all n blocks of a sequence together
                    s = (flat / torch.linalg.vector_norm(flat, dim=1, keepdim=True).clamp_min(tiny)).view_as(s)
                if self.structure != "cp":
                    states.append(s)
        stacked = torch.stack(states, 1).view(B, n, T, b)  # z_0..z_{T-1} (cp, n = 1) or h_1..h_T
        if self.structure == "cp":
            return (c_all * stacked[:, 0]) @ self.U.t()
        return stacked.transpose(1, 2).reshape(B, T, self.hidden)

    # ---- forward ------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, state=None):
        check_input(x, self.d_model, type(self).__name__)
        h0 = self._initial(x) if state is None else state
        T = x.shape[1]
        if self._renormalises() and not self.pure:
            h, final = self._renormalised_additive_states(x, h0)
        elif not self._renormalises() or T == 0:
            h = self._states(x, self.additive_term(x), h0)
            final = h[:, -1] if T else h0
        else:  # scale invariance: any positive rescaling leaves the directions read out as they are
            h, final = self._renormalised_states(x, h0)
        return self._read(h), final

    def _renormalised_additive_states(self, x, state):
        """States h_1..h_T [B, T, d_h] with additive terms, h_{t-1} / ||h_{t-1}|| at every k-th step of
        the sequence, exactly as the definition, and the state (h_T, steps since the last
        renormalisation). `state` is h_0 [B, d_h] (the sequence's start) or such a pair."""
        start, since = state if isinstance(state, tuple) else (state, 0)
        add, k, pieces, t = self.additive_term(x), self.normalize_every, [], 0
        while t < x.shape[1]:  # pieces that end where a renormalisation is due
            if since == k:
                start, since = unit_normalize(start), 0
            n = min(k - since, x.shape[1] - t)
            piece = self._states(x[:, t : t + n], None if add is None else add[:, t : t + n], start)
            pieces.append(piece)
            start, since, t = piece[:, -1], since + n, t + n
        h = torch.cat(pieces, 1) if pieces else x.new_zeros(x.shape[0], 0, self.hidden)
        return h, (start, since)

    def forward_reference(self, x: torch.Tensor, state=None):
        """The definition, step by step: A(x_t) formed inside the loop, h_t = A(x_t) h_{t-1} + additive;
        with normalize_training, h_{t-1} is first divided by its norm at every k-th step of the
        sequence (counted from its start across chunks: a model with additive terms carries the
        count in its state, as `forward`)."""
        check_input(x, self.d_model, type(self).__name__)
        h = self._initial(x) if state is None else state
        h, since = h if isinstance(h, tuple) else (h, 0)
        outputs, k = [], self.normalize_every
        for t in range(x.shape[1]):
            if self.normalize_training and k and since == k:
                h, since = unit_normalize(h), 0
            since += 1
            x_t = x[:, t : t + 1]
            A_t, s = self.transition(x_t)[:, 0], self._to_state(h)
            if self.structure in ("diagonal", "rotation"):
                s = A_t * s
            else:
                s = (A_t @ s.unsqueeze(-1)).squeeze(-1)
            h = self._to_vector(s)
            add = self.additive_term(x_t)
            if add is not None:
                h = h + add[:, 0]
            outputs.append(h)
        hs = torch.stack(outputs, 1) if outputs else x.new_zeros(x.shape[0], 0, self.hidden)
        if self.normalize_training and k:
            return self._read(hs), (unit_normalize(h) if self.pure else (h, since))
        return self._read(hs), h
