"""Groups and word problems against sympy.combinatorics (independent oracle)."""

import itertools

import pytest
import torch
from sympy.combinatorics import Permutation

from statetrack.errors import StatetrackError
from statetrack.tasks import make_task
from statetrack.tasks.groups import canonical_group_name, element_order_counts, get_group


def test_orders_and_element_order_statistics():
    assert element_order_counts(get_group("S5")) == {1: 1, 2: 25, 3: 20, 4: 30, 5: 24, 6: 20}
    assert element_order_counts(get_group("A5")) == {1: 1, 2: 15, 3: 20, 5: 24}
    for name, order in [("S5", 120), ("A5", 60), ("A4xZ5", 60), ("Z60", 60), ("S3", 6), ("A4", 12), ("S3xZ2xZ2", 24)]:
        assert get_group(name).order == order


@pytest.mark.parametrize("name", ["S4", "A5", "S5"])
def test_permutation_products_match_sympy(name):
    group = get_group(name)
    perms = [Permutation(list(p)) for p in group.elements]
    index = {tuple(p.array_form): i for i, p in enumerate(perms)}
    assert perms[0].is_Identity
    g = torch.Generator().manual_seed(0)
    pairs = torch.randint(0, group.order, (400, 2), generator=g).tolist()
    for a, b in pairs:
        # sympy: p * q applies p first, then q -- the documented convention
        assert group.multiply(a, b) == index[tuple((perms[a] * perms[b]).array_form)]
        assert group.inverse(a) == index[tuple((~perms[a]).array_form)]
        assert group.element_order(a) == perms[a].order()
    if name == "A5":
        assert all(p.is_even for p in perms)


def test_cayley_table_is_a_group_table():
    for name in ["S4", "A4xZ5", "Z12", "S3xZ2xZ2"]:
        group = get_group(name)
        table = group.cayley_table()
        n = group.order
        assert torch.equal(table[0], torch.arange(n)) and torch.equal(table[:, 0], torch.arange(n))
        # Latin square, associativity
        assert all(len(set(row)) == n for row in table.tolist())
        assert all(len(set(col)) == n for col in table.T.tolist())
        idx = torch.arange(n)
        a, b, c = torch.meshgrid(idx, idx, idx, indexing="ij") if n <= 24 else [torch.randint(0, n, (5000,))] * 3
        assert torch.equal(table[table[a, b], c], table[a, table[b, c]])


def test_direct_product_and_cyclic_indexing():
    group = get_group("A4xZ5")
    a4, z5 = get_group("A4"), get_group("Z5")
    for x, y in itertools.product(range(0, 60, 7), range(0, 60, 11)):
        (ga, za), (gb, zb) = divmod(x, 5), divmod(y, 5)
        assert group.multiply(x, y) == a4.multiply(ga, gb) * 5 + z5.multiply(za, zb) == a4.multiply(ga, gb) * 5 + (za + zb) % 5
    assert get_group("Z60").multiply(59, 3) == 2


def test_group_names_and_errors():
    assert canonical_group_name("a4xz5") == "A4xZ5"
    for bad in ["Q8", "S", "Z1", "A2", "S5xfoo", "", "S9"]:
        with pytest.raises(StatetrackError) as info:
            get_group(bad)
        assert "\n" not in str(info.value)
    with pytest.raises(StatetrackError, match="expected Z<m>"):
        make_task("word_problem", group="Q8")


@pytest.mark.parametrize("name", ["S5", "A5", "A4xZ5", "Z60"])
def test_word_problem_prefix_products(name):
    task = make_task("word_problem", group=name)
    batch = task.sample(16, 33, torch.Generator().manual_seed(1))
    assert batch.mask.all()
    group = get_group(name)
    for x, y in zip(batch.inputs.tolist(), batch.targets.tolist()):
        acc = 0
        for g, target in zip(x, y):
            acc = group.multiply(acc, g)
            assert acc == target
    if name in ("S5", "A5"):
        perms = [Permutation(list(p)) for p in group.elements]
        index = {tuple(p.array_form): i for i, p in enumerate(perms)}
        x = batch.inputs[0].tolist()
        product = Permutation(list(range(5)))
        for t, g in enumerate(x):
            product = product * perms[g]
            assert index[tuple(product.array_form)] == batch.targets[0, t].item()
