"""Finite groups with canonical element indexing: Z_m, S_n, A_n and direct products.

Public API (`statetrack.tasks.groups`):

- `get_group(name)` parses `Z60`, `S5`, `A5`, `A4xZ5`, `S3xZ2xZ2` (case-insensitive) into a `Group`
  (orders up to `MAX_ORDER` = 1000, e.g. S6; larger names get a one-line error).
- `Group.multiply(a, b)`, `inverse(a)`, `element_order(a)`, `cayley_table()`, `order`,
  `elements` (each element as a tuple, see below), `prefix_products(words)`.

Canonical indexing (identity = 0 in every group):

- Z_m: element a in [0, m) has index a; the product is (a + b) mod m.
- S_n: permutations of (0, ..., n-1) in one-line notation p = (p(0), ..., p(n-1)), indexed in
  lexicographic order, so the identity (0, 1, ..., n-1) is index 0.
- A_n: the even permutations, indexed in lexicographic order among themselves.
- G x H: pairs (g, h) indexed as index(g) * |H| + index(h) (lexicographic), so (e, e) is 0.

Product convention for permutations: `a * b` applies a first, then b, i.e. (a * b)(i) = b(a(i)).
This is sympy's convention (`Permutation(a) * Permutation(b)`), which the tests use as the oracle.
A word g_1 g_2 ... g_t therefore means "apply g_1, then g_2, ..., then g_t".
"""

from __future__ import annotations

import itertools
import math
import re
from functools import cache

import torch

from statetrack.errors import StatetrackError

MAX_ORDER = 1000
"""Largest supported group order (S6 = 720 fits; A7 = 2520 would need a 50 MB table built slowly)."""

_VALID_FORMS = "Z<m> (m >= 2), S<n> (n >= 2), A<n> (n >= 3), or direct products joined by 'x' such as A4xZ5"


class Group:
    """A finite group given by its Cayley table over canonical indices (identity = 0).

    `table[a, b]` is the index of the product a * b. `elements[i]` is a readable representation
    of element i: an int for Z_m, a permutation tuple for S_n and A_n, a tuple of factor elements
    for direct products.
    """

    def __init__(self, name: str, elements: list, table: torch.Tensor):
        n = len(elements)
        if table.shape != (n, n):
            raise ValueError(f"group {name}: table must be [{n}, {n}], got {tuple(table.shape)}")
        self.name = name
        self.elements = elements
        self.table = table  # [N, N] long
        identity = torch.arange(n)
        if not (torch.equal(table[0], identity) and torch.equal(table[:, 0], identity)):
            raise ValueError(f"group {name}: index 0 must be the identity")
        # inverse[a] = the b with a * b = 0
        self.inverses = (table == 0).long().argmax(dim=1)
        self._orders: torch.Tensor | None = None
        self._index: dict | None = None

    # ---- the public API ----------------------------------------------------------------------
    @property
    def order(self) -> int:
        return len(self.elements)

    def __len__(self) -> int:
        return self.order

    def __repr__(self) -> str:
        return f"Group({self.name}, order={self.order})"

    def multiply(self, a: int, b: int) -> int:
        """Index of a * b (permutations: apply a first, then b)."""
        return int(self.table[a, b])

    def inverse(self, a: int) -> int:
        return int(self.inverses[a])

    def cayley_table(self) -> torch.Tensor:
        """[N, N] LongTensor: entry (a, b) is the index of a * b."""
        return self.table.clone()

    def element_orders(self) -> torch.Tensor:
        """[N] LongTensor: the order of each element (smallest k >= 1 with a^k = identity)."""
        if self._orders is None:
            n = self.order
            orders = torch.zeros(n, dtype=torch.long)
            power = torch.arange(n)
            for k in range(1, n + 1):
                newly = (power == 0) & (orders == 0)
                orders[newly] = k
                if bool((orders > 0).all()):
                    break
                power = self.table[power, torch.arange(n)]
            self._orders = orders
        return self._orders

    def element_order(self, a: int) -> int:
        return int(self.element_orders()[a])

    def index(self, element) -> int:
        """Canonical index of `element` (in the form of `elements`)."""
        if self._index is None or len(self._index) != self.order:
            self._index = {e: i for i, e in enumerate(self.elements)}
        if element not in self._index:
            raise StatetrackError(f"{element!r} is not an element of {self.name}")
        return self._index[element]

    def prefix_products(self, words: torch.Tensor) -> torch.Tensor:
        """[B, T] element indices -> [B, T] prefix products g_1 * ... * g_t.

        Hillis-Steele scan in log2(T) gathers from the table (products are associative).
        """
        if words.dim() != 2:
            raise ValueError(f"prefix_products expects [B, T] indices, got shape {tuple(words.shape)}")
        products = words.clone()
        n = self.order
        flat = self.table.reshape(-1)
        shift = 1
        while shift < products.shape[1]:
            left, right = products[:, :-shift], products[:, shift:]
            products = torch.cat([products[:, :shift], flat[left * n + right]], dim=1)
            shift *= 2
        return products


# ---- constructions -------------------------------------------------------------------------
def _cyclic(m: int) -> Group:
    a = torch.arange(m)
    return Group(f"Z{m}", list(range(m)), (a[:, None] + a[None, :]) % m)


def _is_even(p: tuple) -> bool:
    inversions = sum(1 for i in range(len(p)) for j in range(i + 1, len(p)) if p[i] > p[j])
    return inversions % 2 == 0


def _lex_rank(perms: torch.Tensor) -> torch.Tensor:
    """[N, n] permutations -> [N] rank in the lexicographic order of all n! permutations (Lehmer code)."""
    n = perms.shape[1]
    smaller_later = (perms[:, None, :] < perms[:, :, None]).triu(diagonal=1).sum(dim=2)  # [N, n]
    weights = torch.tensor([math.factorial(n - 1 - i) for i in range(n)], dtype=torch.long)
    return (smaller_later * weights).sum(dim=1)


def _permutations(name: str, n: int, even_only: bool) -> Group:
    perms = [p for p in itertools.permutations(range(n)) if not even_only or _is_even(p)]
    arr = torch.tensor(perms, dtype=torch.long)  # [N, n], lexicographic
    size = len(perms)
    # position of each S_n lexicographic rank among the listed permutations
    lookup = torch.full((math.factorial(n),), -1, dtype=torch.long)
    lookup[_lex_rank(arr)] = torch.arange(size)
    # (a * b)(i) = b(a(i)): composed[a, b, i] = arr[b, arr[a, i]]
    composed = torch.gather(arr[None, :, :].expand(size, -1, -1), 2, arr[:, None, :].expand(-1, size, -1))
    table = lookup[_lex_rank(composed.reshape(-1, n))].reshape(size, size)
    return Group(name, perms, table)


def _direct_product(factors: list[Group]) -> Group:
    """G_1 x ... x G_k with lexicographic indexing (last factor fastest); identity stays 0."""
    group = factors[0]
    for other in factors[1:]:
        n, k = group.order, other.order
        a = torch.arange(n * k)
        ga, ha = a // k, a % k
        table = group.table[ga[:, None], ga[None, :]] * k + other.table[ha[:, None], ha[None, :]]
        group = Group(f"{group.name}x{other.name}", list(range(n * k)), table)
    group.elements = list(itertools.product(*[f.elements for f in factors]))
    return group


def _parse_factor(token: str, full_name: str) -> tuple[str, int]:
    match = re.fullmatch(r"([ZSA])(\d{1,9})", token)
    if not match:
        raise StatetrackError(f"unknown group {_shown_name(full_name)}; expected {_VALID_FORMS}")
    kind, size = match.group(1), int(match.group(2))
    minimum = {"Z": 2, "S": 2, "A": 3}[kind]
    if size < minimum:
        raise StatetrackError(
            f"unknown group {_shown_name(full_name)}: {kind}{size} needs {kind}<n> with n >= {minimum}; "
            f"expected {_VALID_FORMS}"
        )
    return kind, size


def _factor_order(kind: str, size: int) -> int:
    """The order of Z<size>, S<size> or A<size>; for S and A of degree above 12 (orders far past
    MAX_ORDER) a bound, so that no huge factorial is computed."""
    if kind != "Z" and size > 12:
        return math.factorial(13)
    return size if kind == "Z" else math.factorial(size) // (2 if kind == "A" else 1)


def _shown_name(name: str, limit: int = 40) -> str:
    return repr(name) if len(name) <= limit else repr(name[:limit] + "...")


def canonical_group_name(name: str) -> str:
    """`a4xz5` -> `A4xZ5`; raises StatetrackError naming the valid forms for anything else."""
    if not isinstance(name, str) or not name.strip():
        raise StatetrackError(f"unknown group {name!r}; expected {_VALID_FORMS}")
    tokens = name.strip().upper().split("X")
    parsed = [_parse_factor(t, name) for t in tokens]
    order = 1
    for kind, size in parsed:  # stop once past the bound: a product of many factors is never formed
        order *= _factor_order(kind, size)
        if order > MAX_ORDER:
            raise StatetrackError(
                f"group {_shown_name(name)} has order above {MAX_ORDER}; at most {MAX_ORDER} is supported "
                "(Cayley table)"
            )
    return "x".join(f"{k}{s}" for k, s in parsed)


@cache
def _build(canonical: str) -> Group:
    factors = []
    for token in canonical.split("x"):
        kind, size = token[0], int(token[1:])
        if kind == "Z":
            factors.append(_cyclic(size))
        else:
            factors.append(_permutations(token, size, even_only=kind == "A"))
    group = factors[0] if len(factors) == 1 else _direct_product(factors)
    group.name = canonical
    return group


def get_group(name: str) -> Group:
    """The group named `name` (`Z60`, `S5`, `A5`, `A4xZ5`, ...); tables are built once and cached."""
    return _build(canonical_group_name(name))


def element_order_counts(group: Group) -> dict[int, int]:
    """{order: number of elements of that order}, e.g. S5 -> {1: 1, 2: 25, 3: 20, 4: 30, 5: 24, 6: 20}."""
    counts = torch.bincount(group.element_orders())
    return {k: int(c) for k, c in enumerate(counts.tolist()) if c}


__all__ = ["Group", "MAX_ORDER", "canonical_group_name", "element_order_counts", "get_group"]
