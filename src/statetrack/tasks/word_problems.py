"""Group word problems (Merrill et al. 2024; Siems et al. 2025; Anonymous 2025; Movahedi et al. 2025).

Inputs g_1 .. g_T are drawn uniformly from the group G, one token per element (token id =
canonical element index of `statetrack.tasks.groups`, identity = 0). The target at every
position t is the prefix product g_1 * g_2 * ... * g_t (seq2seq, dense supervision: the mask is
all True). For permutation groups the product applies g_1 first (sympy's convention).
"""

from __future__ import annotations

import torch

from statetrack.tasks.base import Batch, Task
from statetrack.tasks.groups import Group, get_group
from statetrack.tasks.registry import register_task


@register_task("word_problem")
class WordProblem(Task):
    """Seq2seq group word problem: inputs g_1..g_T uniform over G, target_t = g_1 * ... * g_t.

    `group` is a name such as `S5`, `A5`, `Z60`, `A4xZ5` (see `statetrack.tasks.groups`).
    Vocabulary and answer classes are both the group's elements (id = canonical index); there
    are no special tokens, so `length` is the sequence length T. Example (A5, T = 4): inputs
    `50 46 20 48` give the targets `g1, g1*g2, g1*g2*g3, g1*g2*g3*g4`.
    """

    summary = (
        "group word problem (Z_m, S_n, A_n, products like A4xZ5); "
        "target = prefix product at every position (Merrill et al. 2024)"
    )
    min_length = 1

    def __init__(self, group: str = "A5"):
        self.group_object: Group = get_group(group)
        self.group = self.group_object.name
        labels = [str(i) for i in range(self.group_object.order)]
        self.vocab = labels
        self.answers = labels

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        self.check_length(length)
        words = torch.randint(0, self.group_object.order, (batch_size, length), generator=generator)
        targets = self.group_object.prefix_products(words)
        return Batch(words, targets, torch.ones_like(words, dtype=torch.bool))

    def describe(self, batch: Batch, index: int = 0) -> str:
        inputs = " ".join(map(str, batch.inputs[index].tolist()))
        targets = " ".join(map(str, batch.targets[index].tolist()))
        return f"{self.group} input:  {inputs}\n{self.group} target: {targets}"
