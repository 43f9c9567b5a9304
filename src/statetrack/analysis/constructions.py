"""Exact weights: bilinear models that simulate a finite automaton (Ebrahimi & Memisevic 2025, Props. 2.2-2.4).

An automaton here is a transition table `transitions[s, q]` = the state after token id s from state q,
an initial state and a label (answer class) per state. `build_exact` gives a one-layer bilinear
`SequenceModel` (no MLP) whose argmax at every position is the label of the automaton's state after
that token, through the model's ordinary forward:

- full / cp / block (Prop. 2.2): the state is the one-hot vector of the automaton's state and
  A(x_s) is token s's transition matrix, M[q', q] = 1 when s sends q to q'. cp writes A = U diag(C^T x)
  V^T with one rank-1 term e_i e_j^T per entry used (rank <= n^2); block is one block of size n.
- rotation (Prop. 2.3): when every token permutes the reachable states and the tokens commute (Z_m,
  parity, word problems of abelian groups), the states form an abelian group and each 2-D plane
  carries one of its characters: token s rotates plane j by the angle 2 pi k_j(s) / e. For Z_m one
  plane with theta(a) = 2 pi a / m is enough; planes are added until they tell every state apart.
- diagonal (Prop. 2.4): the same with real characters (+-1), when every token has order <= 2 (parity).

The layer sees x_s = LayerNorm(embedding[s]), not a one-hot vector: the embedding rows are
orthonormal and sum to zero, so the x_s are linearly independent, and the transition weights solve
X W = (the transitions wanted) exactly, in float64 (minimum-norm solution). The readout direction
v = h / ||h|| enters the residual through out_proj = c P (P orthonormal, columns summing to zero,
c large), so the final LayerNorm sees embedding + c P v, about sqrt(d) P v; the readout row of class
y is P times the sum of the v of the states labelled y. `build_exact` checks every (reachable
state, token) pair through the model's own forward and records the smallest logit margin.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import torch

from statetrack.errors import StatetrackError, unknown
from statetrack.layers.bilinear import Bilinear
from statetrack.models import zoo
from statetrack.models.model import Block, SequenceModel
from statetrack.tasks.base import SPECIALS
from statetrack.training.evaluate import Sampling, evaluate_lengths

STRUCTURES = ("full", "cp", "block", "rotation", "diagonal")
TASKS = ("fsm", "modadd", "parity", "word_problem")
MAX_WEIGHTS = 50_000_000  # a dense construction needs d_model * n^2 transition weights
_COMMUTING_USE = "such as modadd, parity or word problems of abelian groups"


@dataclass(frozen=True)
class Automaton:
    """A deterministic finite automaton over token ids.

    transitions [V, n] long: transitions[s, q] is the state after token s from state q (a token that
    should not change the state, e.g. [BOS], maps every q to itself); `initial` the state before the
    first token; labels [n] long: the answer class of each state, in [0, num_classes).
    """

    transitions: torch.Tensor
    initial: int
    labels: torch.Tensor
    num_classes: int
    name: str = "automaton"
    token_names: list[str] | None = None  # None: the ids as names (__post_init__ fills them in)
    state_names: list[str] | None = None

    def __post_init__(self):
        t, labels = self.transitions, self.labels
        if t.dim() != 2 or t.dtype != torch.long or t.numel() == 0:
            raise StatetrackError(
                f"{self.name}: transitions must be a non-empty long tensor [vocab, states], "
                f"got {t.dtype} {tuple(t.shape)}"
            )
        n = t.shape[1]
        if int(t.min()) < 0 or int(t.max()) >= n:
            raise StatetrackError(
                f"{self.name}: transitions must be states in [0, {n}), got values in [{int(t.min())}, {int(t.max())}]"
            )
        if labels.shape != (n,) or labels.dtype != torch.long:
            raise StatetrackError(
                f"{self.name}: labels must be a long tensor [{n}] (one class per state), "
                f"got {labels.dtype} {tuple(labels.shape)}"
            )
        if int(labels.min()) < 0 or int(labels.max()) >= self.num_classes:
            raise StatetrackError(
                f"{self.name}: labels must be classes in [0, {self.num_classes}), "
                f"got values in [{int(labels.min())}, {int(labels.max())}]"
            )
        if not 0 <= self.initial < n:
            raise StatetrackError(f"{self.name}: initial state must be in [0, {n}), got {self.initial}")
        if self.token_names is None:
            object.__setattr__(self, "token_names", [str(s) for s in range(t.shape[0])])
        if self.state_names is None:
            object.__setattr__(self, "state_names", [str(q) for q in range(n)])

    @property
    def vocab_size(self) -> int:
        return self.transitions.shape[0]

    @property
    def num_states(self) -> int:
        return self.transitions.shape[1]

    def run(self, tokens: torch.Tensor) -> torch.Tensor:
        """States after each token, [B, T], for token ids [B, T] (a plain loop: the definition)."""
        state = torch.full((tokens.shape[0],), self.initial, dtype=torch.long)
        out = torch.empty_like(tokens)
        for t in range(tokens.shape[1]):
            state = self.transitions[tokens[:, t], state]
            out[:, t] = state
        return out

    def reachable(self) -> tuple[list[int], dict[int, tuple[int, int]]]:
        """States reachable from `initial` in breadth-first order, and for each but the first its
        (parent state, token) on a shortest word reaching it."""
        order, parent, queue = [self.initial], {}, deque([self.initial])
        seen = {self.initial}
        while queue:
            q = queue.popleft()
            for s, q2 in enumerate(self.transitions[:, q].tolist()):
                if q2 not in seen:
                    seen.add(q2)
                    parent[q2] = (q, s)
                    order.append(q2)
                    queue.append(q2)
        return order, parent


@dataclass
class Construction:
    """An exact model: `model` (eval mode); `spec`, the resolved model spec that
    `zoo.build_model(spec, vocab_size, num_classes)` rebuilds before loading `model.state_dict()`;
    `margin`, the smallest logit gap (right class minus the best other) over every reachable state and token."""

    model: SequenceModel
    spec: dict
    automaton: Automaton
    margin: float


# ---- automata of the tasks ---------------------------------------------------------------------
def _final_answer(
    task, symbol_transitions: torch.Tensor, initial: int, labels: torch.Tensor, states: list[str]
) -> Automaton:
    """Automaton of a `[BOS] s_1 .. s_n [EOI]` task: the special tokens keep the state."""
    n = symbol_transitions.shape[1]
    table = torch.arange(n).repeat(task.vocab_size, 1)
    offset = len(SPECIALS)
    table[offset : offset + symbol_transitions.shape[0]] = symbol_transitions
    return Automaton(table, initial, labels, task.num_classes, repr(task), list(task.vocab), states)


def automaton_for_task(task) -> Automaton:
    """The automaton a task's answers follow: fsm (with an extra start state, since the first
    symbol sets the state), word_problem (the prefix product), parity, modadd."""
    if task.name == "fsm":
        n = task.states
        start = n  # before the first symbol; symbol s sends it to state s
        symbols = torch.cat([task.transitions.t(), torch.arange(n)[:, None]], dim=1)  # [symbol, state]
        labels = torch.cat([torch.arange(n), torch.zeros(1, dtype=torch.long)])
        return _final_answer(task, symbols, start, labels, [str(q) for q in range(n)] + ["start"])
    if task.name == "word_problem":
        group = task.group_object
        table = group.table.t().contiguous()  # token g sends the prefix product q to q * g
        return Automaton(
            table, 0, torch.arange(group.order), group.order, repr(task), list(task.vocab), list(task.answers)
        )
    if task.name in ("parity", "modadd"):
        m = 2 if task.name == "parity" else task.m
        symbols = (torch.arange(m)[:, None] + torch.arange(m)[None, :]) % m  # token a: q -> q + a mod m
        return _final_answer(task, symbols, 0, torch.arange(m), [str(q) for q in range(m)])
    raise unknown("task for an exact construction", task.name, TASKS)


# ---- shared pieces ----------------------------------------------------------------------------
def _mean_zero_basis(d: int) -> torch.Tensor:
    """[d - 1, d]: orthonormal rows that each sum to zero (the DCT-II cosines without the constant)."""
    i = torch.arange(d, dtype=torch.float64) + 0.5
    k = torch.arange(1, d, dtype=torch.float64)[:, None]
    return math.sqrt(2.0 / d) * torch.cos(math.pi * k * i / d)


def _solve(x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Minimum-norm W [d_x, K] with x W = targets exactly (x [V, d_x] of full row rank), in float64."""
    x = x.double()
    w = torch.linalg.pinv(x) @ targets.double()
    residual = (x @ w - targets.double()).abs().max().item()
    if residual > 1e-8:
        raise RuntimeError(f"exact construction: layer inputs are not independent (residual {residual:.2e})")
    return w


def _assemble(
    automaton: Automaton,
    structure: str,
    hidden: int,
    mixer_spec: dict,
    set_transitions,
    states: torch.Tensor,
    h0: torch.Tensor,
    reachable: list[int],
    normalize_every: int,
    scale: float,
) -> Construction:
    """Build the model, set embedding / readout / out_proj around the transition weights that
    `set_transitions(mixer, x)` writes (x [V, d_model] the layer inputs), then check it.
    states [len(reachable), hidden]: the unit state vector of each reachable state."""
    V, C = automaton.vocab_size, automaton.num_classes
    d = max(V, hidden) + 2
    spec = zoo.resolve(
        {
            "name": "bilinear",
            "structure": structure,
            "hidden": hidden,
            "d_model": d,
            "num_layers": 1,
            "mlp": False,
            "learn_h0": False,
            "normalize_every": normalize_every,
            **mixer_spec,
        }
    )
    with torch.random.fork_rng():  # the init is overwritten; leave the caller's random stream alone
        model = zoo.build_model(spec, V, C)
    basis = _mean_zero_basis(d)
    embedding, project = basis[:V], basis[-hidden:].t()  # [V, d], [d, hidden]
    labels = automaton.labels[reachable]
    readout = torch.zeros(C, d, dtype=torch.float64).index_add_(0, labels, states.double() @ project.t())
    block = model.blocks[0]
    mixer = block.mixer
    # the one block of a bilinear spec, in the common (residual) stack
    assert isinstance(block, Block) and isinstance(mixer, Bilinear) and isinstance(model.norm, torch.nn.LayerNorm)
    with torch.no_grad():
        model.embedding.weight.copy_(embedding)
        for norm in (block.norm1, model.norm):
            norm.weight.fill_(1.0)
            norm.bias.zero_()
        model.readout.weight.copy_(readout)
        model.readout.bias.zero_()
        mixer.out_proj.weight.copy_(scale * project)
        mixer.h0.copy_(h0)
        set_transitions(mixer, block.norm1(model.embedding.weight))
    model.eval()
    margin = _check(model, automaton, reachable, states)
    return Construction(model, spec, automaton, margin)


@torch.no_grad()
def _check(model: SequenceModel, automaton: Automaton, reachable: list[int], states: torch.Tensor) -> float:
    """One step of the model's forward from every reachable state and token: the new state must be
    the automaton's next state and the argmax its label. Returns the smallest logit margin."""
    index = {q: i for i, q in enumerate(reachable)}
    margin = math.inf
    tokens_named = automaton.token_names
    assert tokens_named is not None  # filled in by Automaton.__post_init__
    for s in range(automaton.vocab_size):
        following = [index[q] for q in automaton.transitions[s, reachable].tolist()]
        tokens = torch.full((len(reachable), 1), s, dtype=torch.long)
        logits, (h,) = model(tokens, [states.float()])
        h = h / h.norm(dim=-1, keepdim=True)
        error = (h - states[following].float()).abs().max().item()
        if error > 1e-4:
            raise RuntimeError(f"exact construction: token {tokens_named[s]!r} leaves the states off by {error:.2e}")
        logits = logits[:, 0].double()
        target = automaton.labels[reachable][following]
        right = logits.gather(1, target[:, None])[:, 0]
        other = logits.scatter(1, target[:, None], -math.inf).amax(1)
        margin = min(margin, (right - other).min().item())
    if not margin > 0:
        raise RuntimeError(f"exact construction: a wrong class wins (margin {margin:.3g})")
    return margin


# ---- full, cp, block (Prop. 2.2) ----------------------------------------------------------------
def _dense(automaton: Automaton, structure: str, normalize_every: int, scale: float) -> Construction:
    reachable, _ = automaton.reachable()
    n = len(reachable)
    index = torch.full((automaton.num_states,), -1, dtype=torch.long)
    index[reachable] = torch.arange(n)
    following = index[automaton.transitions[:, reachable]]  # [V, n]: token s sends state i to following[s, i]
    M = torch.zeros(automaton.vocab_size, n, n, dtype=torch.float64)
    M.scatter_(1, following[:, None, :], 1.0)  # M[s, following[s, i], i] = 1
    d = max(automaton.vocab_size, n) + 2
    if d * n * n > MAX_WEIGHTS:
        raise StatetrackError(
            f"{automaton.name}: {n} reachable states need {d} x {n}^2 = {d * n * n:,} transition weights "
            f"(at most {MAX_WEIGHTS:,}); use structure rotation for commuting tokens"
        )
    if structure == "cp":
        rows, cols = M.abs().sum(0).nonzero(as_tuple=True)  # every entry some token uses: one rank-1 term each
        mixer_spec = {"rank": len(rows)}

        def set_transitions(mixer, x):
            U = torch.zeros(n, len(rows)).index_put_((rows, torch.arange(len(rows))), torch.tensor(1.0))
            Vf = torch.zeros(n, len(rows)).index_put_((cols, torch.arange(len(rows))), torch.tensor(1.0))
            mixer.U.copy_(U)
            mixer.V.copy_(Vf)
            mixer.C.copy_(_solve(x, M[:, rows, cols]))
    else:
        mixer_spec = {"block_size": n} if structure == "block" else {}

        def set_transitions(mixer, x):
            mixer.W.copy_(_solve(x, M.reshape(len(M), -1)).reshape(mixer.W.shape))

    states = torch.eye(n, dtype=torch.float64)
    return _assemble(
        automaton, structure, n, mixer_spec, set_transitions, states, states[0], reachable, normalize_every, scale
    )


# ---- rotation and diagonal (Props. 2.3, 2.4) ----------------------------------------------------
def _commuting_permutations(automaton: Automaton, structure: str) -> tuple[list[int], dict, torch.Tensor]:
    """Reachable states, BFS parents and [V, n] the permutation each token induces on them; errors
    name the token that is not a permutation, or two that do not commute."""
    reachable, parent = automaton.reachable()
    n = len(reachable)
    index = torch.full((automaton.num_states,), -1, dtype=torch.long)
    index[reachable] = torch.arange(n)
    perms = index[automaton.transitions[:, reachable]]
    hint = (
        f"structure {structure!r} computes only automata whose tokens permute the states and commute, "
        f"{_COMMUTING_USE}; use full, cp or block"
    )
    tokens_named, names = automaton.token_names, automaton.state_names
    assert tokens_named is not None and names is not None  # filled in by Automaton.__post_init__
    for s in range(automaton.vocab_size):
        first: dict[int, int] = {}
        for j, target in enumerate(perms[s].tolist()):
            i = first.setdefault(target, j)
            if i == j:
                continue
            raise StatetrackError(
                f"{automaton.name}: token {tokens_named[s]!r} sends states {names[reachable[i]]!r} and "
                f"{names[reachable[j]]!r} to the same state, which no {structure} transition can do; {hint}"
            )
    for s in range(automaton.vocab_size):  # s after t against t after s, for every t
        clash = (perms[s][perms] != perms[:, perms[s]]).any(-1).nonzero()
        if not len(clash):
            continue
        t = int(clash[0])
        raise StatetrackError(
            f"{automaton.name}: tokens {tokens_named[s]!r} and {tokens_named[t]!r} do not commute "
            f"(their order matters), but {structure} transitions do; {hint}"
        )
    return reachable, parent, perms


def _characters(
    perms: torch.Tensor, reachable: list[int], parent: dict, exponent: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every character of the abelian group the tokens generate, as integers mod `exponent`:
    (k [V] per token, k [n] per state), with the state after token s from q at k(q) + k(s).

    The joint eigenvectors of the commuting permutation matrices, found by diagonalising one
    random Hermitian combination of them; each eigenvalue is then rounded to the exponent-th root of
    unity it must be and the homomorphism property checked in integers, so a character is kept only
    when it is exact."""
    V, n = perms.shape
    g = torch.Generator().manual_seed(0)
    alpha = torch.complex(
        torch.randn(V, generator=g, dtype=torch.float64), torch.randn(V, generator=g, dtype=torch.float64)
    )
    H = torch.zeros(n, n, dtype=torch.complex128)
    cols = torch.arange(n)
    for s in range(V):  # H = sum_s alpha_s T_s + conj(alpha_s) T_s^T, T_s[perms[s, q], q] = 1
        H[perms[s], cols] += alpha[s]
        H[cols, perms[s]] += alpha[s].conj()
    _, vectors = torch.linalg.eigh(H)  # [n, n]: one joint eigenvector per column
    # T_s u = lambda_s u, read at each vector's largest entry q*: lambda_s = u[T_s^-1 q*] / u[q*]
    top = vectors.abs().argmax(0)  # [n]
    before = torch.argsort(perms, dim=1)[:, top]  # [V, n]: the state token s sends to q*
    eig = vectors[before, torch.arange(n)] / vectors[top, torch.arange(n)]  # [V, n]
    k_tokens = torch.round(torch.angle(eig) * exponent / (2 * math.pi)).long() % exponent
    exact = (eig - torch.polar(torch.ones_like(eig.real), 2 * math.pi * k_tokens.double() / exponent)).abs().amax(
        0
    ) < 1e-6
    pos = {q: i for i, q in enumerate(reachable)}
    k_states = torch.zeros(n, n, dtype=torch.long)  # [state, character], along the breadth-first words
    for q in reachable[1:]:
        p, s = parent[q]
        k_states[pos[q]] = (k_states[pos[p]] + k_tokens[s]) % exponent
    homomorphism = torch.ones(n, dtype=torch.bool)  # [character]: k(next state) = k(state) + k(token) everywhere
    for s in range(V):
        homomorphism &= (k_states[perms[s]] == (k_states + k_tokens[s]) % exponent).all(0)
    found, seen = [], set()
    for c in (exact & homomorphism).nonzero()[:, 0].tolist():
        key = tuple(k_tokens[:, c].tolist())
        if key not in seen:
            seen.add(key)
            found.append((k_tokens[:, c], k_states[:, c]))
    return found


def _wrap(k: torch.Tensor, exponent: int) -> torch.Tensor:
    """k mod exponent as the representative in (-exponent/2, exponent/2]."""
    k = k % exponent
    return torch.where(2 * k > exponent, k - exponent, k)


def _separating(characters: list, n: int, exponent: int, all_needed: bool) -> list:
    """The characters to put on planes: all when labels share states (the state vectors must then be
    orthonormal), else a few that tell every state apart: highest order first, then the smallest angles
    for the first tokens."""

    def key(c):
        k = _wrap(c[0], exponent)
        order = exponent // math.gcd(exponent, *c[0].tolist())
        return (-order, tuple(k.abs().tolist()), tuple((-k).tolist()))  # Z_m: theta(1) = 2 pi / m

    def classes(chars):
        return len({tuple(int(c[1][i]) for c in chars) for i in range(n)})

    chosen = sorted(characters, key=key)
    if not all_needed:
        chosen, candidates = [], chosen
        for c in candidates:
            if classes(chosen + [c]) > classes(chosen):
                chosen.append(c)
            if classes(chosen) == n:
                break
    if classes(chosen) < n:
        raise RuntimeError("exact construction: the characters found do not tell the states apart")
    return chosen


def _commuting(automaton: Automaton, structure: str, normalize_every: int, scale: float) -> Construction:
    reachable, parent, perms = _commuting_permutations(automaton, structure)
    n = len(reachable)
    orders = []
    for p in perms.tolist():  # order of each token's permutation: lcm of its cycle lengths
        order, seen = 1, set()
        for start in range(n):
            length, q = 0, start
            while q not in seen:
                seen.add(q)
                q, length = p[q], length + 1
            order = math.lcm(order, max(length, 1))
        orders.append(order)
    if structure == "diagonal" and max(orders) > 2:
        s = max(range(len(orders)), key=orders.__getitem__)
        assert automaton.token_names is not None  # filled in by Automaton.__post_init__
        raise StatetrackError(
            f"{automaton.name}: token {automaton.token_names[s]!r} cycles states with period {orders[s]}, but a real "
            f"diagonal A(x) can only flip signs: structure 'diagonal' computes only tokens of order 2 (parity, Z2xZ2); "
            f"use rotation for Z_m"
        )
    exponent = math.lcm(*orders)
    labels = automaton.labels[reachable]
    shared = len(set(labels.tolist())) < n
    chosen = _separating(_characters(perms, reachable, parent, exponent), n, exponent, shared)
    k_tokens = torch.stack([_wrap(c[0], exponent) for c in chosen], 1).double()  # [V, planes]
    k_states = torch.stack([c[1] for c in chosen], 1).double()  # [n, planes]
    planes = len(chosen)
    if structure == "diagonal":  # every character is +-1: one real unit per character
        signs = torch.cos(math.pi * 2 * k_tokens / exponent).round()
        states = torch.cos(2 * math.pi * k_states / exponent).round() / math.sqrt(planes)

        def set_signs(mixer, x):
            mixer.D.copy_(_solve(x, signs))

        h0 = torch.full((planes,), 1 / math.sqrt(planes))
        return _assemble(automaton, structure, planes, {}, set_signs, states, h0, reachable, normalize_every, scale)
    angles = 2 * math.pi * k_tokens / exponent  # in (-pi, pi]
    phase = 2 * math.pi * k_states / exponent
    states = torch.stack([phase.cos(), phase.sin()], -1).flatten(1) / math.sqrt(planes)  # planes as (re, im) pairs

    def set_angles(mixer, x):
        mixer.Theta.copy_(_solve(x, angles))

    return _assemble(
        automaton, structure, 2 * planes, {}, set_angles, states, states[0], reachable, normalize_every, scale
    )


# ---- public ---------------------------------------------------------------------------------
def build_exact(
    automaton: Automaton, structure: str = "full", normalize_every: int = 1, scale: float = 1e3
) -> Construction:
    """A bilinear model of `structure` that simulates `automaton` exactly (module docstring).
    `normalize_every` is the mixer's evaluation-time renormalisation; `scale` is c of out_proj = c P."""
    if structure not in STRUCTURES:
        raise unknown("structure", structure, STRUCTURES)
    if structure in ("rotation", "diagonal"):
        return _commuting(automaton, structure, normalize_every, scale)
    return _dense(automaton, structure, normalize_every, scale)


def construct(task, structure: str = "full", normalize_every: int = 1) -> Construction:
    """`build_exact` for a task (`automaton_for_task`): a model whose argmax is the task's answer at
    every supervised position."""
    return build_exact(automaton_for_task(task), structure, normalize_every)


def evaluate_construction(
    model, task, lengths: list[int], samples: int = 8, batch_size: int = 8, seed: int = 0, chunk_size: int = 1024
) -> list[dict]:
    """Accuracy per length through the normal evaluation path (`evaluate_lengths`, inputs fed in
    chunks of `chunk_size` carrying the state): rows {length, accuracy, scaled_accuracy, samples}."""
    for length in lengths:
        task.check_length(length)
    return evaluate_lengths(model, task, lengths, Sampling(samples, batch_size, seed, chunk_size))
