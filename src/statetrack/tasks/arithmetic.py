"""Parity, modular addition and modular arithmetic without brackets.

The format of Ebrahimi & Memisevic 2025 (`[BOS] ... [EOI] answer`): parity, modadd, modarith (left to
right). The forms of Grazzi et al. 2025: parity_lm (language-model parity) and modarith_precedence
(* before + and -).
"""

from __future__ import annotations

import torch

from statetrack import limits
from statetrack.tasks.base import PAD, Batch, FinalAnswerTask, Task
from statetrack.tasks.registry import register_task


def _integers(m: int) -> list[str]:
    return [str(i) for i in range(m)]


@register_task("parity")
class Parity(FinalAnswerTask):
    """`[BOS] b_1 ... b_n [EOI]` -> (sum_i b_i) mod 2."""

    summary = "bits; answer = number of ones mod 2 (format of Ebrahimi & Memisevic 2025)"

    def __init__(self):
        self._init_vocab(["0", "1"], ["0", "1"])

    def _draw(self, batch_size, length, g):
        bits = torch.randint(0, 2, (batch_size, length), generator=g)
        return bits, bits.sum(dim=1) % 2


@register_task("modadd")
class ModularAddition(FinalAnswerTask):
    """`[BOS] a_1 ... a_n [EOI]` -> (sum_i a_i) mod m, each a_i in [0, m) a single token."""

    summary = "integers in [0, m); answer = sum mod m (Ebrahimi & Memisevic 2025)"

    def __init__(self, m: int = 20):
        self.m = self.check_int(self.name, "m", m, 2, limits.MAX_CLASSES)
        self._init_vocab(_integers(m), _integers(m))

    def _draw(self, batch_size, length, g):
        values = torch.randint(0, self.m, (batch_size, length), generator=g)
        return values, values.sum(dim=1) % self.m


@register_task("modarith")
class ModularArithmetic(FinalAnswerTask):
    """`[BOS] a_1 o_1 a_2 ... o_{n-1} a_n [EOI]`, o in {+, -, *}, evaluated left to right mod m.

    `length` counts the operands a_i (Ebrahimi & Memisevic 2025, App. B, samples n operands and
    interleaves n - 1 operators), so an example has 2n - 1 task tokens. Example (m = 20):
    `[BOS] 3 * 9 - 17 + 6 + 12 [EOI] 8`.
    """

    summary = (
        "integers and + - * in [0, m), evaluated left to right mod m (Ebrahimi & Memisevic 2025); length = operands"
    )
    operators = ("+", "-", "*")

    def __init__(self, m: int = 20):
        self.m = self.check_int(self.name, "m", m, 2, limits.MAX_CLASSES)
        self._init_vocab(_integers(m) + list(self.operators), _integers(m))

    def _draw(self, batch_size, length, g):
        operands = torch.randint(0, self.m, (batch_size, length), generator=g)
        ops = torch.randint(0, len(self.operators), (batch_size, length - 1), generator=g)
        value = operands[:, 0].clone()
        for i in range(length - 1):
            a, op = operands[:, i + 1], ops[:, i]
            value = torch.where(op == 0, value + a, torch.where(op == 1, value - a, value * a)) % self.m
        symbols = torch.empty(batch_size, 2 * length - 1, dtype=torch.long)
        symbols[:, 0::2] = operands
        symbols[:, 1::2] = ops + self.m  # operator symbols follow the m integers
        return symbols, value


@register_task("parity_lm")
class ParityLM(Task):
    """Parity in the language-model form of Beck et al. 2024 and Grazzi et al. 2025.

    Bits are tokens 1 ("0") and 2 ("1"); token 0 is padding. The sequence is the n = length - 1
    bits followed by the answer token (the parity, written with the same bit tokens), so
    `length` counts the answer token, as in the papers' train lengths 3..40. Next-token
    prediction, loss only where the answer is predicted: at the last bit (position length - 2),
    the target is the parity class. The answer token is part of the input (teacher forcing) but
    nothing is predicted from it.
    """

    summary = "parity in LM form (Grazzi et al. 2025): bits as tokens 1/2, answer token at the end; length includes it"
    min_length = 2

    def __init__(self):
        self.vocab = [PAD, "0", "1"]
        self.answers = ["0", "1"]

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        self.check_length(length)
        bits = torch.randint(0, 2, (batch_size, length - 1), generator=generator)
        parity = bits.sum(dim=1) % 2
        inputs = torch.cat([bits, parity[:, None]], dim=1) + 1
        targets = torch.zeros_like(inputs)
        targets[:, -2] = parity
        mask = torch.zeros_like(inputs, dtype=torch.bool)
        mask[:, -2] = True
        return Batch(inputs, targets, mask)


def evaluate_with_precedence(operands: torch.Tensor, operators: torch.Tensor, m: int) -> torch.Tensor:
    """Value mod m of a_1 o_1 a_2 ... a_n with * binding tighter than + and - ([B, n], [B, n-1]).

    Scans left to right keeping (sum of finished terms, current signed term): `*` extends the
    term, `+`/`-` close it and start a new one with the given sign. Operator ids: 0 +, 1 -, 2 *.
    """
    total = torch.zeros_like(operands[:, 0])
    term = operands[:, 0] % m
    for i in range(operators.shape[1]):
        a, op = operands[:, i + 1], operators[:, i]
        closes = op != 2
        total = torch.where(closes, (total + term) % m, total)
        term = torch.where(op == 2, term * a, torch.where(op == 0, a, -a)) % m
    return (total + term) % m


@register_task("modarith_precedence")
class ModularArithmeticPrecedence(FinalAnswerTask):
    """`[BOS] a_1 o_1 a_2 ... a_n [EOI]` with o in {+, -, *}, usual precedence (* first), mod m.

    The Chomsky-hierarchy / xLSTM form of modular arithmetic without brackets (Deletang et al. 2023;
    Beck et al. 2024; Grazzi et al. 2025; m = 5).
    `length` counts the operands, as in `modarith`; an example has 2n - 1 task tokens.
    """

    summary = (
        "integers and + - * mod m with operator precedence (* before + -), m = 5 (Grazzi et al. 2025); "
        "length = operands"
    )
    operators = ("+", "-", "*")

    def __init__(self, m: int = 5):
        self.m = self.check_int(self.name, "m", m, 2, limits.MAX_CLASSES)
        self._init_vocab(_integers(m) + list(self.operators), _integers(m))

    def _draw(self, batch_size, length, g):
        operands = torch.randint(0, self.m, (batch_size, length), generator=g)
        ops = torch.randint(0, len(self.operators), (batch_size, length - 1), generator=g)
        symbols = torch.empty(batch_size, 2 * length - 1, dtype=torch.long)
        symbols[:, 0::2] = operands
        symbols[:, 1::2] = ops + self.m
        return symbols, evaluate_with_precedence(operands, ops, self.m)
