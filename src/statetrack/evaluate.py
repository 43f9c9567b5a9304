"""Length-generalization evaluation: every model of an experiment sees the same inputs at each length,
fed in chunks to recurrent models; the score itself is defined in `statetrack.scoring`."""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from statetrack import diagnostics
from statetrack.scoring import scaled_accuracy
from statetrack.tasks import Batch, Task


def masked_loss_and_accuracy(logits: torch.Tensor, batch: Batch):
    """Cross-entropy and accuracy over the supervised (masked) positions only."""
    selected = logits[batch.mask]  # [N, C]
    targets = batch.targets[batch.mask]
    loss = torch.nn.functional.cross_entropy(selected, targets)
    accuracy = (selected.argmax(-1) == targets).float().mean()
    return loss, accuracy


@torch.no_grad()
def predict(model, inputs: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """Predicted class ids [B, T]. With `chunk_size`, the input is fed in chunks carrying the
    model state, so memory stays constant in the length (recurrent models only)."""
    if chunk_size is None or inputs.shape[1] <= chunk_size:
        return model(inputs)[0].argmax(-1)
    state = None
    predictions = torch.empty(inputs.shape, dtype=torch.long, device=inputs.device)  # one buffer: memory flat in T
    for start in range(0, inputs.shape[1], chunk_size):
        logits, state = model(inputs[:, start : start + chunk_size], state)
        predictions[:, start : start + chunk_size] = logits.argmax(-1)
    return predictions


def eval_generator(seed: int, length: int) -> torch.Generator:
    """The evaluation set at `length` is fixed by (seed, length): every model sees the same inputs."""
    return torch.Generator().manual_seed(1_000_003 * seed + length)


@torch.no_grad()
def evaluate_lengths(
    model,
    task: Task,
    lengths: list[int],
    samples: int = 512,
    batch_size: int = 256,
    seed: int = 0,
    chunk_size: int | None = 1024,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> list[dict]:
    """Scores of `model` on `samples` fresh examples at each length, one row per length:

    `accuracy` over the supervised positions, its `scaled_accuracy`, `sequence_accuracy` (the
    fraction of examples whose supervised positions are all right: string accuracy for copying,
    Jelassi et al. 2024; every prefix product right for a word problem), and `metrics`, the median
    and maximum over the batches of what the model's layers record (statetrack.diagnostics; e.g.
    fixed-point iterations), empty for most models.
    """
    model.eval()
    results = []
    diagnostics.drain(model)  # nothing recorded before this call counts
    for length in tqdm(lengths, desc="evaluate", disable=not progress, leave=False):
        g = eval_generator(seed, length)
        correct = total = whole = examples = 0
        records: dict[str, list[float]] = {}
        for start in range(0, samples, batch_size):
            batch = task.sample(min(batch_size, samples - start), length, g).to(device)
            predicted = predict(model, batch.inputs, chunk_size)
            right = (predicted == batch.targets) | ~batch.mask
            correct += (right & batch.mask).sum().item()
            total += batch.mask.sum().item()
            supervised = batch.mask.any(dim=1)
            whole += (right.all(dim=1) & supervised).sum().item()
            examples += supervised.sum().item()
            diagnostics.merge(records, diagnostics.drain(model))
        accuracy = correct / total
        results.append({
            "length": length, "accuracy": accuracy, "scaled_accuracy": scaled_accuracy(accuracy, task.chance), "samples": samples,
            "sequence_accuracy": whole / examples, "metrics": diagnostics.summarize(records),
        })
    return results
