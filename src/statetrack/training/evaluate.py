"""Length-generalization evaluation: every model of an experiment sees the same inputs at each length,
fed in chunks to recurrent models, each row scored by `scaled_accuracy` = (acc - chance) / (1 - chance)
(0 at chance, 1 when perfect; Ebrahimi & Memisevic 2025, Grazzi et al. 2025). A run's score under
the selection rule is `statetrack.schema.run_score`; how a grid of runs becomes one figure,
`statetrack.results.selection`."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from statetrack import diagnostics, limits
from statetrack.errors import StatetrackError
from statetrack.models.model import SequenceModel
from statetrack.tasks import Batch, Task

# Per-position accuracy is kept for inputs of at most this many tokens (a longer one would store a
# list as long as the input in every evaluation row).
MAX_POSITIONS = 4096


@dataclass(frozen=True)
class Sampling:
    """The test examples `evaluate_lengths` draws and how it feeds them to a model: `samples` fresh
    examples per length from the test seed `seed` (every model of an experiment sees the same ones),
    `batch_size` examples per forward pass, each input fed `chunk_size` positions at a time with the
    model's state carried across (None: the whole input at once; chunks keep a recurrent model's
    memory constant in the length). The settings a spec's `eval:` section gives beside its lengths."""

    samples: int = 512
    batch_size: int = 256
    seed: int = 0
    chunk_size: int | None = 1024

    def __post_init__(self):
        for name in ("samples", "batch_size"):
            limits.check_int(getattr(self, name), name, 1)
        if self.chunk_size is not None:
            limits.check_int(self.chunk_size, "chunk_size (or None: the whole input at once)", 1)
        limits.check_int(self.seed, "seed", 0)

    @classmethod
    def of(cls, eval_section: dict, chunked: bool = True) -> Sampling:
        """The sampling of a spec's (or a run's) `eval:` section; `chunked` False for a model that
        takes the whole input at once (a Transformer: it has no state to carry)."""
        chunk_size = eval_section.get("chunk_size", cls.chunk_size) if chunked else None
        return cls(
            samples=eval_section.get("samples", cls.samples),
            batch_size=eval_section.get("batch_size", cls.batch_size),
            seed=eval_section.get("seed", cls.seed),
            chunk_size=chunk_size,
        )


# CPU inputs of at most this many sequences are predicted on one thread (see `predict`).
SERIAL_BATCH = 8


@torch.no_grad()
def predict(model, inputs: torch.Tensor, chunk_size: int | None = None, probabilities: bool = False) -> torch.Tensor:
    """Predicted class ids [B, T], or with `probabilities` the softmax over classes [B, T, C]. With
    `chunk_size`, the input is fed in chunks carrying the model state, so memory stays constant in
    the length (recurrent models only).

    A CPU input of at most SERIAL_BATCH sequences runs on one torch thread (the thread count is
    restored after): a recurrence steps through time with little work per step, so a second thread
    saves little, while on a machine shared with other jobs every hand-off between threads waits for
    a core (docs/performance-layers.md, "Long inputs")."""
    read = (lambda logits: logits.float().softmax(-1)) if probabilities else (lambda logits: logits.argmax(-1))
    threads = torch.get_num_threads()
    serial = inputs.device.type == "cpu" and inputs.shape[0] <= SERIAL_BATCH and threads > 1
    if serial:
        torch.set_num_threads(1)
    try:
        predictions = None  # one buffer: memory flat in T
        for start, logits in chunked_logits(model, inputs, chunk_size):
            chunk = read(logits)
            if chunk.shape[1] == inputs.shape[1]:  # the whole input at once
                return chunk
            if predictions is None:
                predictions = chunk.new_empty(inputs.shape + chunk.shape[2:])
            predictions[:, start : start + chunk.shape[1]] = chunk
        assert predictions is not None  # the input is longer than chunk_size: at least one chunk
        return predictions
    finally:
        if serial:
            torch.set_num_threads(threads)


def chunked_logits(model, inputs: torch.Tensor, chunk_size: int | None = None):
    """(start, logits [B, t, C]) for each chunk of `inputs` [B, T] in turn, the model's state carried
    from one chunk to the next: the whole input as one chunk without `chunk_size` or when it fits.
    This is how evaluation feeds a recurrent model; every sequence's logits must not depend on the
    chunk size (tests/layers/test_invariance.py)."""
    if chunk_size is None or inputs.shape[1] <= chunk_size:
        yield 0, logits_only(model, inputs)
        return
    state = None
    for start in range(0, inputs.shape[1], chunk_size):
        logits, state = model(inputs[:, start : start + chunk_size], state)
        yield start, logits


def logits_only(model, inputs: torch.Tensor) -> torch.Tensor:
    """The logits of `model` on `inputs` for a caller that reads nothing else: a SequenceModel lets go
    of each layer's state as the next layer runs (`keep_state=False`: the key-value caches of an
    18-layer Transformer on 32 traces of 5,621 tokens are 12 GiB); any other module is called as it is."""
    if isinstance(model, SequenceModel):
        return model(inputs, keep_state=False)[0]
    return model(inputs)[0]


def trace(model, batch: Batch, examples: int, chunk_size: int | None = None) -> list[dict]:
    """What the model does on the first `examples` examples of `batch`, position by position:
    {inputs, targets, mask, probabilities ([T][C], the softmax over answer classes)}; the report
    plots it against the input (e.g. the model's output against the signal on `counting`)."""
    n = min(examples, batch.inputs.shape[0])
    probs = predict(model, batch.inputs[:n], chunk_size, probabilities=True).cpu()
    return [
        {
            "inputs": batch.inputs[i].tolist(),
            "targets": batch.targets[i].tolist(),
            "mask": batch.mask[i].int().tolist(),
            "probabilities": [[round(p, 4) for p in row] for row in probs[i].tolist()],
        }
        for i in range(n)
    ]


def eval_generator(seed: int, length: int) -> torch.Generator:
    """The evaluation set at `length` is fixed by (seed, length): every model sees the same inputs."""
    return torch.Generator().manual_seed(1_000_003 * seed + length)


def _by_position(hits: torch.Tensor, mask: torch.Tensor, unit: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(right answers, supervised examples) per position [P] of one batch: per input position
    (`unit` "token"), or per k-th supervised position of each example ("supervised", e.g. per reveal);
    None beyond MAX_POSITIONS positions."""
    if unit == "token":
        if hits.shape[1] > MAX_POSITIONS:
            return None
        return hits.sum(0).cpu(), mask.sum(0).cpu()
    k = (mask.long().cumsum(1) - 1)[mask]  # the rank of each supervised position in its example
    size = int(k.max()) + 1 if k.numel() else 0
    if size > MAX_POSITIONS:
        return None
    return (
        torch.zeros(size, dtype=torch.long, device=k.device).index_add_(0, k, hits[mask].long()).cpu(),
        torch.bincount(k, minlength=size).cpu(),
    )


def _add_padded(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a + b for per-position counts that may differ in length (examples with more supervised positions)."""
    if a.shape[0] < b.shape[0]:
        a, b = b, a
    out = a.clone()
    out[: b.shape[0]] += b
    return out


# the metric every evaluation row has: distinct classes predicted at the supervised positions (1: collapsed)
PREDICTED_CLASSES = "predicted_classes"


class LengthScores(list):
    """`evaluate_lengths`' rows, one dict per length, printed as a table: accuracy, scaled accuracy,
    sequence accuracy and the model's metrics per length (the rows hold the rest, the count of
    classes predicted among them)."""

    def __str__(self) -> str:
        metrics = list(
            dict.fromkeys(name for row in self for name in row.get("metrics", {}) if name != PREDICTED_CLASSES)
        )
        header = ["length", "accuracy", "scaled accuracy", "sequence accuracy", *metrics]
        body = [
            [
                str(r["length"]),
                *(f"{r[k]:.3f}" for k in ("accuracy", "scaled_accuracy", "sequence_accuracy")),
                *(f"{r['metrics'][m]:.4g}" if m in r.get("metrics", {}) else "-" for m in metrics),
            ]
            for r in self
        ]
        widths = [max([len(h)] + [len(line[i]) for line in body]) for i, h in enumerate(header)]
        return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths)) for line in [header, *body])

    __repr__ = __str__


@torch.no_grad()
def evaluate_lengths(
    model,
    task: Task,
    lengths: list[int],
    sampling: Sampling = Sampling(),
    *,
    progress: bool = False,
    traces: int = 0,
    positions: bool = False,
) -> LengthScores:
    """Scores of `model` on `sampling.samples` fresh examples at each length (`Sampling`: the test
    seed, the batch size and the chunks the inputs are fed in), on the device its parameters are on,
    one row per length (a list of dicts that prints as a table, `LengthScores`):

    `accuracy` over the supervised positions, its `scaled_accuracy`, `sequence_accuracy` (the
    fraction of examples whose supervised positions are all right: string accuracy for copying,
    Jelassi et al. 2024; every prefix product right for a word problem), and `metrics`, the median
    and maximum over the sequences of what the model's layers record (statetrack.diagnostics; e.g.
    fixed-point iterations), and `predicted_classes` (PREDICTED_CLASSES): how many distinct classes
    the model predicted at the supervised positions, 1 for a model that collapsed to one answer.

    With `positions`, `position_accuracy`: accuracy at each input position over the examples
    supervised there (None where none is), for inputs of at most MAX_POSITIONS tokens; dense tasks
    (word problems, copy memory) show where along the input a model stops being right. A task whose `position_unit` is
    "supervised" counts positions as the k-th supervised one instead (a REPL trace's k-th reveal).
    A task with its own metrics (`Task.metrics`, e.g. the total-variation distance to the exact
    belief on `pfsa`) adds them to `metrics`, averaged over the supervised positions. With `traces` > 0, `traces`
    holds that many examples' per-position outputs (see `trace`).
    """
    if not isinstance(sampling, Sampling):
        raise StatetrackError(
            "sampling must be a Sampling(samples=..., batch_size=..., seed=..., chunk_size=...), "
            f"got {limits.shown(sampling)}"
        )
    samples, batch_size = sampling.samples, sampling.batch_size
    limits.check_int(traces, "traces", 0)
    if not lengths or not isinstance(lengths, (list, tuple)):
        raise StatetrackError(f"lengths must be a non-empty list of integers, got {limits.shown(lengths)}")
    for length in lengths:
        task.check_length(length)
    held = min(samples, batch_size)  # one batch is held at a time
    limits.check_tokens(held, task.tokens(max(lengths)), f"evaluating samples {samples} in batches of batch_size")
    device = next(iter(model.parameters()), torch.empty(0)).device
    model.eval()
    results = LengthScores()
    diagnostics.drain(model)  # nothing recorded before this call counts
    for length in tqdm(lengths, desc="evaluate", disable=not progress, leave=False):
        results.append(_length_row(model, task, length, sampling, device, traces, positions))
    return results


def _length_row(
    model, task: Task, length: int, sampling: Sampling, device: torch.device, traces: int, positions: bool
) -> dict:
    """`evaluate_lengths`' row at one length: the model's answers on `sampling.samples` examples of the
    test generator of (seed, length), counted batch by batch."""
    samples, batch_size, chunk_size = sampling.samples, sampling.batch_size, sampling.chunk_size
    g = eval_generator(sampling.seed, length)
    correct: float = 0  # counts, summed from .item() (int | float to the checker)
    total: float = 0
    whole: float = 0
    examples: float = 0
    per_position: tuple[torch.Tensor, torch.Tensor] | None = None  # (right answers, supervised) per position
    records: dict[str, list[float]] = {}
    task_sums: dict[str, float] = {}
    classes: set[int] = set()  # the classes predicted at the supervised positions
    row: dict = {}
    for start in range(0, samples, batch_size):
        batch = task.sample(min(batch_size, samples - start), length, g).to(device)
        if traces and start == 0:
            row["traces"] = trace(model, batch, traces, chunk_size)
            diagnostics.drain(model)
        if task.has_metrics:  # the task's own metrics read the predicted distributions
            probabilities = predict(model, batch.inputs, chunk_size, probabilities=True)
            predicted = probabilities.argmax(-1)
            weight = batch.mask.sum().item()
            for name, mean in task.metrics(probabilities, batch).items():
                task_sums[name] = task_sums.get(name, 0.0) + mean * weight
        else:
            predicted = predict(model, batch.inputs, chunk_size)
        classes.update(predicted[batch.mask].unique().tolist())
        hits, counts = count_right(predicted, batch)
        correct, total = correct + counts["correct"], total + counts["total"]
        whole, examples = whole + counts["whole"], examples + counts["examples"]
        counted = _by_position(hits, batch.mask, task.position_unit) if positions else None
        if counted is not None:
            per_position = (
                counted
                if per_position is None
                else (_add_padded(per_position[0], counted[0]), _add_padded(per_position[1], counted[1]))
            )
        diagnostics.merge(records, diagnostics.drain(model))
    accuracy = correct / total
    metrics = {
        **diagnostics.summarize(records),
        **{name: value / total for name, value in task_sums.items()},
        PREDICTED_CLASSES: float(len(classes)),
    }
    row = {
        "length": length,
        "accuracy": accuracy,
        "scaled_accuracy": scaled_accuracy(accuracy, task.chance),
        "samples": samples,
        "sequence_accuracy": whole / examples,
        "metrics": metrics,
        **row,
    }
    if per_position is not None:
        row["position_accuracy"] = [
            None if n == 0 else h / n for h, n in zip(per_position[0].tolist(), per_position[1].tolist())
        ]
    return row


def count_right(predicted: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, dict[str, int]]:
    """(right answers at the supervised positions [B, T], counts) of predicted class ids [B, T] on
    `batch`: correct and total supervised positions (accuracy = correct / total), and whole and
    examples, the supervised examples right at every supervised position and all of them (sequence
    accuracy = whole / examples). Evaluation and the trainer's validation both count with it."""
    right = (predicted == batch.targets) | ~batch.mask
    supervised = batch.mask.any(dim=1)
    counts = {
        "correct": int((right & batch.mask).sum().item()),
        "total": int(batch.mask.sum().item()),
        "whole": int((right.all(dim=1) & supervised).sum().item()),
        "examples": int(supervised.sum().item()),
    }
    return right & batch.mask, counts


def scaled_accuracy(accuracy: float, chance: float) -> float:
    """(acc - chance) / (1 - chance): 0 at chance, 1 when perfect."""
    return (accuracy - chance) / (1.0 - chance)
