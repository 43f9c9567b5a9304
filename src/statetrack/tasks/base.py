"""Task base class and the `Batch` every task produces.

A task is a pure, seeded generator: `sample(batch_size, length, generator)` draws every random
number from the `torch.Generator` it is given, so the same generator state gives the same batch.
`length` counts the task's symbols (for arithmetic: operands), never the special tokens.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import ClassVar

import torch

from statetrack import limits

PAD, BOS, EOI = "[PAD]", "[BOS]", "[EOI]"
_TOKENS: dict[tuple, int] = {}  # Task.tokens by (task class, its parameters, length)
TOKENS_SAMPLED = 512  # Task.tokens draws an example up to twice this length, and extrapolates beyond
SPECIALS = (PAD, BOS, EOI)


@dataclass(frozen=True)
class Batch:
    """One batch: `inputs` [B, T] token ids, `targets` [B, T] class ids, `mask` [B, T] supervised.

    `soft_targets` (optional, default None) is a float tensor [B, T, ...] of exact target
    distributions for tasks whose answer is a belief (PFSA-SR, Siems et al. 2026): its first two
    dimensions match `inputs`. Tasks without it leave it None; callers that only use
    (inputs, targets, mask) are unaffected.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    soft_targets: torch.Tensor | None = None

    def __post_init__(self):
        if self.inputs.dim() != 2:
            raise ValueError(f"Batch.inputs must be [B, T], got shape {tuple(self.inputs.shape)}")
        for name in ("targets", "mask"):
            if getattr(self, name).shape != self.inputs.shape:
                raise ValueError(
                    f"Batch.{name} must have the inputs' shape {tuple(self.inputs.shape)}, "
                    f"got {tuple(getattr(self, name).shape)}"
                )
        if self.soft_targets is not None and self.soft_targets.shape[:2] != self.inputs.shape:
            raise ValueError(
                f"Batch.soft_targets must be [B, T, ...] with [B, T] = {tuple(self.inputs.shape)}, "
                f"got {tuple(self.soft_targets.shape)}"
            )

    def to(self, device) -> Batch:
        soft = None if self.soft_targets is None else self.soft_targets.to(device)
        return Batch(self.inputs.to(device), self.targets.to(device), self.mask.to(device), soft)

    def rows(self, index) -> Batch:
        """The examples `index` (an index tensor or a slice of the first axis)."""
        soft = None if self.soft_targets is None else self.soft_targets[index]
        return Batch(self.inputs[index], self.targets[index], self.mask[index], soft)

    def split(self, parts: int) -> list[Batch]:
        """The examples in `parts` consecutive groups whose sizes differ by at most one (some empty when
        there are fewer examples than parts)."""
        return [self.rows(index) for index in torch.arange(self.inputs.shape[0]).tensor_split(parts)]


def masked_loss_and_accuracy(logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy and accuracy over the supervised (masked) positions only."""
    selected = logits[batch.mask]  # [N, C]
    targets = batch.targets[batch.mask]
    loss = torch.nn.functional.cross_entropy(selected, targets)
    accuracy = (selected.argmax(-1) == targets).float().mean()
    return loss, accuracy


class Task:
    """Base of every task: vocabulary, answer classes, chance level, sampling, readable examples.

    Subclasses are registered with `@register_task(name)` (which sets `name`), set `summary` and
    `min_length`, fill `self.vocab` (token strings; index = id) and `self.answers` (class labels;
    index = class id) in `__init__`, and implement `sample`. Keyword arguments of `__init__` are
    the task's parameters.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    min_length: int = 1  # the class's, or an instance's own where it depends on the parameters
    # What per-position accuracy is counted along: "token" (the input position) or "supervised"
    # (the k-th supervised position of each example, e.g. the k-th reveal of a REPL trace).
    position_unit: ClassVar[str] = "token"
    # How the report names one unit of `position_unit` (an axis label).
    position_label: ClassVar[str] = "input position"

    vocab: list[str]
    answers: list[str]

    # ---- what every task exposes -------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def num_classes(self) -> int:
        return len(self.answers)

    @property
    def chance(self) -> float:
        """Chance accuracy: 1 / number of possible answers."""
        return 1.0 / self.num_classes

    @property
    def params(self) -> dict:
        """The task's parameters (the keyword arguments of its constructor) and their values."""
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {p: getattr(self, p) for p in names}

    def token_id(self, token: str) -> int:
        return self.vocab.index(token)

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        raise NotImplementedError

    def tokens(self, length: int) -> int:
        """Tokens in one input at `length`, special tokens included (a REPL trace's whole text, both
        halves of a copy): what a batch's memory grows with, where `length` counts the task's symbols.
        Read off one example drawn at that length, once per task and length; beyond twice
        TOKENS_SAMPLED (or the task's shortest length), extrapolated along the line through two
        lengths up to there, so that sizing a long input allocates nothing of its size."""
        low = max(TOKENS_SAMPLED, self.min_length)
        if length <= 2 * low:
            return self._tokens(length)
        near, far = self._tokens(low), self._tokens(2 * low)
        return far + -(-(far - near) * (length - 2 * low) // low)  # rounded up

    def _tokens(self, length: int) -> int:
        key = (type(self), repr(self), length)
        if key not in _TOKENS:
            _TOKENS[key] = int(self.sample(1, length, torch.Generator().manual_seed(0)).inputs.shape[1])
        return _TOKENS[key]

    # ---- what a task may redefine: its loss and its extra evaluation metrics -------------------
    def loss(self, logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(training loss, accuracy) of `logits` [B, T, C] on `batch`: by default the cross-entropy
        and the accuracy over the supervised positions. Both are means over the supervised positions
        (the trainer's micro-batches, `train.accumulate`, weigh them by their share of those)."""
        return masked_loss_and_accuracy(logits, batch)

    def metrics(self, probabilities: torch.Tensor, batch: Batch) -> dict[str, float]:
        """Extra evaluation metrics of the predicted distributions [B, T, C] on `batch`, each a mean over
        the supervised positions (evaluation averages them over batches, weighted by those positions).
        None by default; a task that defines some sets `has_metrics`."""
        return {}

    has_metrics: ClassVar[bool] = False

    def describe(self, batch: Batch, index: int = 0) -> str:
        """Readable text of example `index`: the input tokens, then each supervised answer."""
        tokens = [self.vocab[i] for i in batch.inputs[index].tolist()]
        mask = batch.mask[index].tolist()
        answers = [self.answers[c] for c, m in zip(batch.targets[index].tolist(), mask) if m]
        return " ".join(tokens) + "  ->  " + " ".join(answers)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.name}({args})"

    # ---- helpers for subclasses --------------------------------------------------------------
    def check_length(self, length: int) -> None:
        limits.check_int(length, f"task {self.name!r}: length", self.min_length, limits.MAX_LENGTH)

    @staticmethod
    def check_int(task: str, name: str, value, minimum: int, maximum: int = limits.MAX_INT) -> int:
        """`value` of parameter `name` when an integer in minimum..maximum (`statetrack.limits`)."""
        return limits.check_int(value, f"task {task!r}: {name}", minimum, maximum)


class FinalAnswerTask(Task):
    """The format of Ebrahimi & Memisevic 2025: `[BOS] s_1 ... s_n [EOI]`, one answer predicted at
    [EOI], loss only there.

    Subclasses list their symbols in `symbols` and implement `_draw(batch_size, length, g)`
    returning symbol indices [B, n'] (n' may differ from `length`, e.g. operators interleaved)
    and answer class ids [B].
    """

    symbols: list[str]

    def _init_vocab(self, symbols: list[str], answers: list[str]) -> None:
        self.symbols = list(symbols)
        self.vocab = list(SPECIALS) + self.symbols
        self.answers = list(answers)

    def _draw(self, batch_size: int, length: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        self.check_length(length)
        symbols, answers = self._draw(batch_size, length, generator)
        offset = len(SPECIALS)
        bos = torch.full((batch_size, 1), SPECIALS.index(BOS), dtype=torch.long)
        eoi = torch.full((batch_size, 1), SPECIALS.index(EOI), dtype=torch.long)
        inputs = torch.cat([bos, symbols + offset, eoi], dim=1)
        targets = torch.zeros_like(inputs)
        targets[:, -1] = answers
        mask = torch.zeros_like(inputs, dtype=torch.bool)
        mask[:, -1] = True
        return Batch(inputs, targets, mask)

    def decode_symbols(self, batch: Batch, index: int = 0) -> list[str]:
        """The task symbols of example `index` (specials removed), for oracles and display."""
        return [self.vocab[i] for i in batch.inputs[index].tolist() if self.vocab[i] not in SPECIALS]
