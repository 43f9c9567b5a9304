"""PFSA-SR beliefs against brute-force enumeration of every path of swap outcomes."""

import itertools
import math

import pytest
import torch

from statetrack.tasks import make_task


def _brute_force_beliefs(task, tokens):
    """Exact P(arrangement after token t | tokens 1..t) by enumerating every outcome path."""
    n, beliefs = task.n, []
    for t in range(len(tokens)):
        prefix = [task.decode_token(x) for x in tokens[: t + 1]]
        swaps = [k for k, d in enumerate(prefix) if d[0] == "swap"]
        belief = {}
        for outcome in itertools.product([True, False], repeat=len(swaps)):
            happened = dict(zip(swaps, outcome))
            weight = math.prod((1 - task.noise) if h else task.noise for h in outcome)
            q = list(range(n))
            consistent = True
            for k, (kind, a, b) in enumerate(prefix):
                if kind == "swap" and happened[k]:
                    q[a], q[b] = q[b], q[a]
                elif kind == "reveal" and q[a] != b:
                    consistent = False
                    break
            if consistent and weight > 0:
                belief[tuple(q)] = belief.get(tuple(q), 0.0) + weight
        total = sum(belief.values())
        beliefs.append({q: p / total for q, p in belief.items()})
    return beliefs


@pytest.mark.parametrize("n,noise,reveal_prob", [(3, 0.5, 0.3), (4, 0.3, 0.4), (3, 0.1, 0.6)])
def test_joint_beliefs_match_enumeration(n, noise, reveal_prob):
    task = make_task("pfsa", n=n, noise=noise, reveal_prob=reveal_prob)
    batch = task.sample(6, 10, torch.Generator().manual_seed(n))
    assert batch.soft_targets.shape == (6, 10, math.factorial(n)) and batch.mask.all()
    for i in range(6):
        tokens = batch.inputs[i].tolist()
        for t, belief in enumerate(_brute_force_beliefs(task, tokens)):
            expected = torch.tensor([belief.get(q, 0.0) for q in task.states], dtype=torch.float64)
            torch.testing.assert_close(batch.soft_targets[i, t].double(), expected, atol=1e-6, rtol=0)
            # the hidden arrangement is always possible under the belief
            assert batch.soft_targets[i, t, batch.targets[i, t]] > 0
            revealed = task.decode_token(tokens[t])
            if revealed[0] == "reveal":
                assert task.states[batch.targets[i, t]][revealed[1]] == revealed[2]


def test_marginal_beliefs_are_exact_and_doubly_stochastic():
    task = make_task("pfsa", n=4, belief="marginal", noise=0.4, reveal_prob=0.3)
    batch = task.sample(4, 9, torch.Generator().manual_seed(7))
    assert batch.soft_targets.shape == (4, 9, 4, 4)
    sums = batch.soft_targets.sum(-1), batch.soft_targets.sum(-2)
    for s in sums:
        torch.testing.assert_close(s, torch.ones_like(s))
    for i in range(4):
        for t, belief in enumerate(_brute_force_beliefs(task, batch.inputs[i].tolist())):
            expected = torch.zeros(4, 4, dtype=torch.float64)
            for q, p in belief.items():
                for position, element in enumerate(q):
                    expected[position, element] += p
            torch.testing.assert_close(batch.soft_targets[i, t].double(), expected, atol=1e-6, rtol=0)


def test_linear_recurrence_norm_is_product_of_survivals():
    task = make_task("pfsa", n=3, noise=0.5, reveal_prob=0.5)
    batch = task.sample(4, 200, torch.Generator().manual_seed(0))
    beliefs, survival = task.track(batch.inputs)
    linear, norms = task.track(batch.inputs, renormalise=False)
    torch.testing.assert_close(norms, survival.cumprod(dim=1))
    assert (norms[:, -1] < 1e-6).all()  # geometric decay under partial reveals
    ok = norms > 1e-200
    torch.testing.assert_close((linear / norms[..., None])[ok], beliefs[ok])
    underflow, _ = task.track(batch.inputs[:, :200].repeat(1, 3), renormalise=False, dtype=torch.float32)
    assert (underflow[:, -1].sum(-1) == 0).any()  # float32 underflows; the renormalised tracker does not
