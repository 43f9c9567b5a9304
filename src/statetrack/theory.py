"""What a model can represent on a state-tracking task, according to the works' theorems.

`predict(model, task, layers)` answers "can", "cannot" or "not known" for `layers` layers of the
model on the task, with the statement it rests on. It reads two things:

- the task's algebra (`structure`): for a group word problem, its elements' orders, whether it is
  abelian, solvable, and the fewest points it permutes faithfully (its degree); for the random
  automaton (`fsm`), the cycles a repeated symbol walks and whether the symbols' maps commute or are
  permutations;
- the model's transition class (`transition_class`): what kind of matrix A(x_t) one layer applies
  to its state, derived from the model's definition (eigenvalue range, diagonal or not, products of
  how many generalized Householders).

The rules, each with the statement it applies:

- positive real eigenvalues at every layer cannot track a state whose input, repeated, cycles
  (Grazzi et al. 2025, Thm. 1: under a constant input such a model's output becomes constant, as
  parity's alternation cannot);
- real eigenvalues cannot count modulo m for m not a power of two (Grazzi et al. 2025, Thm. 2), so a
  task with an element or a repeated symbol of such a cycle length is out of reach; for diagonal
  transitions at any depth (products of real diagonals stay real), for one layer otherwise;
- one generalized Householder per token and two layers count modulo m (Grazzi et al. 2025:
  "Addition modulo m (and more) can be done with 2 layers");
- products of k - 1 generalized Householders with eigenvalues in [-1, 1] model any automaton whose
  transitions are permutations of at most k elements in one layer (Siems et al. 2025, Thm. 3); a
  rotation is a product of two reflections, so two reach Z_m and A5 (a rotation group of R^3) too;
- diagonal transitions sharing one eigenbasis simulate any abelian group and only commutative
  structure (Ebrahimi & Memisevic 2025, for the pure bilinear form); with an input term added
  (Mamba-3, IDS4) no non-solvable group (Merrill et al. 2024); a full bilinear transition
  simulates any automaton;
- RNNs with a nonlinear recurrence track states with one layer (Grazzi et al. 2025, after Merrill
  et al. 2024); Transformers cannot at arbitrary lengths (Grazzi et al. 2025, after Hahn 2020 and
  Merrill & Sabharwal 2023, Merrill et al. 2024);
- PD-SSM's transitions, a column one-hot matrix times a diagonal, emulate any automaton of at most
  `state_size` states in one layer (Terzić et al. 2025).

A model outside these classes (a user's, or a mixer no work states a theorem for) is "not known".
A user's layer can declare its class with a `transition_class` attribute naming one of
`TRANSITION_CLASSES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch

CAN, CANNOT, UNKNOWN = "can", "cannot", "not known"

# transition classes: what A(x_t) one layer applies (see the module docstring)
TRANSITION_CLASSES = {
    "nonlinear": "a nonlinear recurrence (h_t = f(h_{t-1}, x_t))",
    "dense": "a dense input-dependent matrix, linear in the input (full bilinear)",
    "diagonal-positive": "diagonal, eigenvalues in [0, 1]",
    "diagonal-real": "diagonal, eigenvalues in [-1, 1]",
    "diagonal-complex": "diagonal complex (rotations) in one eigenbasis, no input term (the pure bilinear rotation)",
    "diagonal-complex-affine": "diagonal complex, input-dependent, plus an input term (h_t = a_t * h_{t-1} + b_t)",
    "time-invariant": "one diagonal complex matrix for every input",
    "householder-positive": "generalized Householders with eigenvalues in [0, 1], real spectrum",
    "householder-real": "one generalized Householder with eigenvalues in [-1, 1] (real spectrum)",
    "householder-products": "products of n_h >= 2 generalized Householders, eigenvalues in [-1, 1]",
    "real-spectrum": "similar to a symmetric matrix: real eigenvalues, some possibly negative",
    "real-spectrum-signed": "similar to a symmetric matrix: real eigenvalues, -1 among them",
    "automaton": "a column one-hot matrix times a diagonal (any automaton of `state_size` states)",
    "attention": "no recurrence: causal softmax attention",
}


@dataclass(frozen=True)
class Structure:
    """The algebra of a task: `cycles`, the cycle lengths a repeated input walks (element orders
    for a group); `abelian` (the inputs' maps commute); `group` (every map is a permutation);
    `solvable` (None where it does not apply); `degree` (the fewest points the group permutes
    faithfully: Thm. 3 of Siems et al. 2025 counts these); `states` (of the automaton)."""

    name: str
    cycles: frozenset[int]
    abelian: bool
    group: bool
    solvable: bool | None
    degree: int | None
    states: int


@dataclass(frozen=True)
class Prediction:
    verdict: str  # CAN, CANNOT or UNKNOWN
    why: str  # the statement it rests on, cited by author and year


# ---- the task's algebra --------------------------------------------------------------------------
def _derived_subgroup(table: torch.Tensor, elements: list[int]) -> list[int]:
    """The subgroup generated by the commutators of `elements` (a subgroup given by its indices)."""
    inverse = (table == 0).long().argmax(dim=1)
    gens = {int(table[table[inverse[a], inverse[b]], table[a, b]]) for a in elements for b in elements}
    closure, frontier = set(gens) | {0}, list(gens)
    while frontier:
        new = {int(table[a, b]) for a in frontier for b in gens} - closure
        closure |= new
        frontier = list(new)
    return sorted(closure)


def _degree(name: str) -> int:
    """The fewest points a group of `name` (Z_m, S_n, A_n and their products) permutes faithfully:
    n for S_n and A_n, the sum of m's prime-power parts for Z_m, the sum over a product's factors
    (an upper bound for products)."""
    total = 0
    for token in name.split("x"):
        kind, size = token[0], int(token[1:])
        if kind != "Z":
            total += size
            continue
        p, m = 2, size
        while m > 1:
            power = 1
            while m % p == 0:
                m //= p
                power *= p
            total += power if power > 1 else 0
            p += 1
    return total


@cache
def _group_structure(name: str) -> Structure:
    from statetrack.tasks.groups import get_group

    group = get_group(name)
    table = group.table
    abelian = bool(torch.equal(table, table.T))
    series = list(range(group.order))
    while len(series) > 1:
        below = _derived_subgroup(table, series)
        if len(below) == len(series):
            break
        series = below
    cycles = frozenset(int(k) for k in group.element_orders().tolist())
    return Structure(group.name, cycles, abelian, True, len(series) == 1, _degree(group.name), group.order)


def _automaton_structure(transitions: torch.Tensor, name: str) -> Structure:
    """The algebra of an automaton with `transitions[q, s]` = delta(q, s)."""
    n, symbols = transitions.shape
    maps = [transitions[:, s] for s in range(symbols)]
    cycles = set()
    for m in maps:  # the cycles of each symbol's functional graph: repeating it walks them
        for q in range(n):
            seen: dict[int, int] = {}
            state = q
            while state not in seen:
                seen[state] = len(seen)
                state = int(m[state])
            cycles.add(len(seen) - seen[state])
    abelian = all(torch.equal(a[b], b[a]) for a in maps for b in maps)
    bijective = all(len(set(m.tolist())) == n for m in maps)
    return Structure(name, frozenset(cycles), abelian, bijective, None, None, n)


def structure(task) -> Structure | None:
    """The algebra of a built task, or None for a task the table's rules do not cover."""
    name = getattr(task, "name", None)
    if name == "word_problem":
        return _group_structure(task.group)
    if name == "parity":
        return _group_structure("Z2")
    if name == "modadd":
        return _group_structure(f"Z{task.m}")
    if name == "fsm":
        return _automaton_structure(task.transitions, f"fsm(states={task.states})")
    return None


# ---- the model's transition class ----------------------------------------------------------------
def transition_class(model: dict) -> str | None:
    """The transition class of a resolved model spec (`statetrack.models.zoo.resolve`), or None
    where no work states one (the model's layer may declare `transition_class` itself)."""
    name = model.get("name")
    positive = model.get("eig_range", "[0,1]") == "[0,1]"
    if name in ("rnn", "lstm", "gru", "nru", "slstm"):
        return "nonlinear"
    if name == "bilinear":
        structure_ = model.get("structure", "full")
        if model.get("additive", "none") != "none":
            return None
        return {"full": "dense", "rotation": "diagonal-complex", "diagonal": "diagonal-real"}.get(structure_)
    if name in ("mamba", "mamba2"):
        return "diagonal-positive" if positive else "diagonal-real"
    if name in ("gla", "mlstm"):
        return "diagonal-positive"
    if name in ("mamba3", "ids4"):
        return "diagonal-complex-affine"
    if name == "s4d":
        return "diagonal-complex-affine" if model.get("input_dependent") else "time-invariant"
    if name in ("deltanet", "gated_deltanet", "kda") or (
        name in ("deltaproduct", "gated_deltaproduct") and model.get("n_h") == 1
    ):
        return "householder-positive" if positive else "householder-real"
    if name in ("deltaproduct", "gated_deltaproduct"):
        # two generalized Householders in [0, 1]: a product of two symmetric positive semi-definite
        # matrices, whose eigenvalues are real and >= 0; three or more: no statement
        if positive:
            return "householder-positive" if model.get("n_h") == 2 else None
        return "householder-products"
    if name == "rwkv7":
        # diag(w) - kappa (iclr * kappa)^T is similar to a symmetric matrix (iclr > 0): real eigenvalues;
        # its [0, 1] range can still reach negative ones (a small decay beside a large removal)
        return "real-spectrum-signed" if not positive else "real-spectrum"
    if name == "fixedpoint" and model.get("reflections") == 1:
        # A_t = (Lambda_t + D_t Q_t)^-1 Lambda_t with one symmetric reflection Q_t: similar to a
        # symmetric matrix, real eigenvalues; -1 is reached along the reflection (lambda_t = 1/3)
        return "real-spectrum-signed"
    if name == "pdssm":
        return "automaton"
    if name == "transformer":
        return "attention"
    from statetrack.layers.registry import MODELS

    entry = MODELS.get(name) if isinstance(name, str) else None
    declared = getattr(entry.mixer, "transition_class", None) if entry is not None else None
    return declared if declared in TRANSITION_CLASSES else None


# ---- the prediction --------------------------------------------------------------------------------
THM1 = "Grazzi et al. 2025, Thm. 1 (positive real eigenvalues: under a constant input the output settles)"
THM2 = "Grazzi et al. 2025, Thm. 2 (real eigenvalues cannot count modulo m, m not a power of two)"
THM3 = "Siems et al. 2025, Thm. 3 (k - 1 Householders permute k elements in one layer)"
TWO_LAYERS = 'Grazzi et al. 2025 ("addition modulo m (and more) can be done with 2 layers")'
ABELIAN = "Ebrahimi & Memisevic 2025 (one eigenbasis: any abelian group, only commutative structure)"
DENSE = "Ebrahimi & Memisevic 2025 (a full bilinear transition simulates any automaton)"
NONLINEAR = "Grazzi et al. 2025, after Merrill et al. 2024 (nonlinear RNNs track states in one layer)"
ATTENTION = (
    "Grazzi et al. 2025, after Hahn 2020, Merrill & Sabharwal 2023 and Merrill et al. 2024 (Transformers cannot)"
)
NON_SOLVABLE = (
    "Merrill et al. 2024, as Anonymous 2025 and Grazzi et al. 2025 cite it "
    "(diagonal SSMs: no non-solvable group, if TC0 != NC1)"
)
ROTATIONS = "Siems et al. 2025 (two reflections make a rotation; Z_m and A5 are rotation groups)"
PDSSM = "Terzić et al. 2025 (one layer emulates any automaton of state_size states)"


def _odd_cycle(s: Structure) -> bool:
    """A cycle length that is not a power of two: counting modulo it needs non-real eigenvalues."""
    return any(c > 1 and c & (c - 1) for c in s.cycles)


def predict(model: dict, task, layers: int = 1) -> Prediction:
    """What `layers` layers of `model` (a resolved spec) can represent on `task` (a built task)."""
    s = structure(task)
    kind = transition_class(model)
    if s is None:
        return Prediction(UNKNOWN, "no rule covers this task")
    if kind is None:
        return Prediction(UNKNOWN, "no work states what this transition represents")
    cycles = any(c > 1 for c in s.cycles)
    if kind == "nonlinear":
        return Prediction(CAN, NONLINEAR)
    if kind == "dense":
        return Prediction(CAN, DENSE)
    if kind == "attention":
        return Prediction(CANNOT, ATTENTION)
    if kind in ("diagonal-positive", "householder-positive"):
        return Prediction(CANNOT, THM1) if cycles else Prediction(UNKNOWN, "no cycle to track")
    if kind == "diagonal-real":
        if _odd_cycle(s):
            return Prediction(CANNOT, THM2 + "; products of real diagonals stay real at any depth")
        if not s.abelian:
            return Prediction(CANNOT, ABELIAN)
        return Prediction(CAN, "a sign flip per input (Grazzi et al. 2025)") if s.group else Prediction(UNKNOWN, "")
    if kind in ("householder-real", "real-spectrum", "real-spectrum-signed"):
        if _odd_cycle(s):
            if layers >= 2 and kind == "householder-real" and s.group and s.abelian:
                return Prediction(CAN, TWO_LAYERS)
            if layers >= 2:
                return Prediction(UNKNOWN, "Thm. 2 of Grazzi et al. 2025 is for one layer of these")
            return Prediction(CANNOT, THM2)
        if s.group and s.degree is not None and s.degree <= 2 and kind != "real-spectrum":
            return Prediction(CAN, "an eigenvalue -1 per input, a sign flip (Grazzi et al. 2025)")
        return Prediction(UNKNOWN, "real eigenvalues, some negative: no statement")
    if kind == "householder-products":
        n_h = int(model.get("n_h", 2))
        if s.group and s.degree is not None and s.degree <= n_h + 1:
            return Prediction(CAN, THM3)
        if s.group and n_h >= 2 and (s.abelian or s.name == "A5"):
            return Prediction(
                CAN, "Siems et al. 2025 (two reflections make a rotation; Z_m and A5 are rotation groups)"
            )
        return Prediction(UNKNOWN, "Thm. 3 of Siems et al. 2025 covers permutations only")
    if kind in ("diagonal-complex-affine", "time-invariant") and not s.abelian:
        if s.solvable is False:
            return Prediction(CANNOT, NON_SOLVABLE)
        return Prediction(UNKNOWN, "the input term breaks commutativity: no statement for a non-abelian task")
    if kind in ("diagonal-complex", "diagonal-complex-affine", "time-invariant"):
        if not s.abelian:
            return Prediction(CANNOT, ABELIAN)
        if kind == "time-invariant":
            return Prediction(UNKNOWN, "the transition ignores the input")
        return Prediction(CAN, ABELIAN) if s.group else Prediction(UNKNOWN, "")
    if kind == "automaton":
        size = int(model.get("state_size", 16))
        return (
            Prediction(CAN, PDSSM)
            if s.states <= size
            else Prediction(UNKNOWN, f"{s.states} states > state_size {size}")
        )
    return Prediction(UNKNOWN, "")
