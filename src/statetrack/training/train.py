"""Trainer: AdamW, gradient clipping, per-batch lengths, early stopping, checkpoints, progress;
fresh batches every step, or epochs over a fixed training set (`dataset_size`)."""

from __future__ import annotations

import copy
import math
import os
import time
import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm

from statetrack import diagnostics, limits
from statetrack.errors import StatetrackError
from statetrack.paths import replace_atomically
from statetrack.schema import TrainConfig, lr_factor, parse_device  # the training settings: a section of the spec
from statetrack.tasks import Batch, Task
from statetrack.training.evaluate import count_right, logits_only, scaled_accuracy


def draw_lengths(lengths: range, size: int, generator: torch.Generator) -> torch.Tensor:
    """`size` training lengths drawn uniformly from `lengths` (min_length, min_length + step, ..,
    max_length; `train.length_step`)."""
    if lengths.step == 1:
        return torch.randint(lengths.start, lengths.stop, (size,), generator=generator)
    return lengths.start + lengths.step * torch.randint(0, len(lengths), (size,), generator=generator)


def training_lengths(low: int, high: int, step: int = 1) -> range:
    """The training lengths low, low + step, .., high as a range."""
    return range(low, high + 1, step)


def curriculum_tasks(task: Task, config: TrainConfig) -> list[Task]:
    """The task of each curriculum stage: `task` with the stage's parameters changed. They must read
    and answer with the same tokens (one model trains through all of them), and each stage's
    lengths must be ones its task can make."""
    tasks = []
    for number, stage in enumerate(config.stages(), 1):
        try:
            staged = type(task)(**{**task.params, **stage["task"]}) if stage["task"] else task
            staged.check_length(stage["min_length"])
        except (TypeError, StatetrackError) as error:
            where = f"train.curriculum[{number - 1}]" if config.curriculum is not None else "train.min_length"
            raise StatetrackError(f"{where}: {error}") from None
        if (staged.vocab, staged.answers) != (task.vocab, task.answers):
            raise StatetrackError(
                f"train.curriculum[{number - 1}]: {stage['task']} changes the task's tokens or answers"
            )
        tasks.append(staged)
    return tasks


class FixedTrainingSet:
    """`size` examples drawn once from `task` with `generator`, served in epochs.

    Each example's length is drawn uniformly from `lengths`, the training lengths as a range
    (`training_lengths`, `draw_lengths`); tasks sample one length per batch, so the examples are kept
    in buckets by length. Each epoch every bucket is shuffled and split into batches of at most
    `batch_size` (sizes differing by at most one) and the epoch's batches
    come in a shuffled order: every example is seen once per epoch, and a bucket comes up in
    proportion to its number of batches (about its size / batch_size). With `balanced`, the answers
    (the target at each example's last supervised position) are spread over the classes as evenly as
    `size` allows, as Ebrahimi & Memisevic 2025's two parity examples, one odd and one even. Epoch
    e's order is fixed by (the set's shuffle seed, e), so a step's batch depends on the step alone
    and a run resumed from a checkpoint sees the batches of an uninterrupted one.
    """

    def __init__(
        self,
        task: Task,
        size: int,
        lengths: range,
        batch_size: int,
        generator: torch.Generator,
        device: torch.device | str = "cpu",
        balanced: bool = False,
    ):
        drawn = draw_lengths(lengths, size, generator)
        answers = (
            (torch.arange(size) % task.num_classes)[torch.randperm(size, generator=generator)] if balanced else None
        )
        self.lengths = torch.unique(drawn).tolist()  # the task's length of each bucket
        self.buckets = []
        for length in self.lengths:
            if answers is None:
                bucket = task.sample(int((drawn == length).sum()), length, generator)
            else:
                bucket = _draw_answers(task, length, answers[drawn == length], generator)
            self.buckets.append(bucket.to(device))
        self.shuffle_seed = int(torch.randint(2**62, (1,), generator=generator))
        self.splits = [math.ceil(len(b.inputs) / batch_size) for b in self.buckets]
        self.batches_per_epoch = sum(self.splits)
        self._epoch = -1
        self._plan: list[tuple[int, torch.Tensor]] = []  # the current epoch's (`epoch_plan`)

    def __len__(self) -> int:
        return sum(len(b.inputs) for b in self.buckets)

    def epoch_plan(self, epoch: int) -> list[tuple[int, torch.Tensor]]:
        """Epoch `epoch`'s batches in order: (bucket, indices into the bucket)."""
        g = torch.Generator().manual_seed(self.shuffle_seed + epoch)
        batches = []
        for bucket, (examples, parts) in enumerate(zip(self.buckets, self.splits)):
            order = torch.randperm(len(examples.inputs), generator=g)
            batches += [(bucket, index) for index in torch.tensor_split(order, parts)]
        return [batches[j] for j in torch.randperm(len(batches), generator=g).tolist()]

    def batch(self, step: int) -> Batch:
        """The batch of training step `step` (counted from 0)."""
        epoch, position = divmod(step, self.batches_per_epoch)
        if epoch != self._epoch:
            self._epoch, self._plan = epoch, self.epoch_plan(epoch)
        bucket, index = self._plan[position]
        b = self.buckets[bucket]
        return b.rows(index.to(b.inputs.device))


def _last_answer(batch: Batch) -> torch.Tensor:
    """The target at each example's last supervised position [B]."""
    last = batch.mask.shape[1] - 1 - batch.mask.flip(1).int().argmax(1)
    return batch.targets.gather(1, last[:, None])[:, 0]


def _draw_answers(
    task: Task, length: int, answers: torch.Tensor, generator: torch.Generator, tries: int = 200
) -> Batch:
    """Examples of `length` whose answers are `answers` (one each), drawn by rejection."""
    need = answers.tolist()
    picked: list[Batch] = []
    for _ in range(tries):
        pool = task.sample(max(64, 8 * len(need)), length, generator)
        got = _last_answer(pool).tolist()
        for i, answer in enumerate(got):
            if answer in need:
                need.remove(answer)
                picked.append(pool.rows(slice(i, i + 1)))
        if not need:

            def joined(key: str) -> torch.Tensor:
                return torch.cat([getattr(b, key) for b in picked])

            soft = None if picked[0].soft_targets is None else joined("soft_targets")
            return Batch(joined("inputs"), joined("targets"), joined("mask"), soft)
    raise StatetrackError(
        f"dataset_balanced: task {task.name!r} gave no example with answer {task.answers[need[0]]!r} "
        f"at length {length} in {tries} tries; drop dataset_balanced for this task"
    )


def resolve_device(device: str) -> torch.device:
    """'auto' picks CUDA when present, else CPU; else 'cpu', 'cuda' or 'cuda:N' (other torch devices are refused)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    parsed = parse_device(device)
    if parsed is None:
        raise StatetrackError(f"unknown device {device!r}; expected one of: auto, cpu, cuda, cuda:N")
    return parsed


class Diverged(FloatingPointError):
    """The training loss became non-finite (nan or inf) at `step` (the optimizer steps taken before
    it); `loss` is that value. A sweep scores such a run as chance (experiments/worker.py)."""

    def __init__(self, step: int, loss: float):
        super().__init__(f"training loss became {loss} at step {step}")
        self.step, self.loss = step, loss


class Paused(Exception):
    """Training reached its deadline at `step`, before its last step, with its checkpoint saved: the
    run resumes from there when trained again (`Trainer.fit`'s `deadline`)."""

    def __init__(self, step: int):
        super().__init__(f"paused at step {step} (its deadline), checkpoint saved")
        self.step = step


def now() -> float:
    """The wall clock a deadline is read on (`time.time()`)."""
    return time.time()


class UnreadableCheckpoint(StatetrackError):
    """A checkpoint file that cannot be loaded (damaged, truncated, not a checkpoint) or does not fit the model."""


CHECKPOINT_KEYS = ("model", "optimizer", "scheduler", "generator", "step", "curve", "stopped_early", "seconds")


def read_checkpoint(path: Path, map_location="cpu", model=None) -> dict:
    """The dict a Trainer saved at `path` (tensors and plain data only: `weights_only`); given `model`,
    its weights are checked to have that model's names and shapes. UnreadableCheckpoint otherwise;
    a file the system cannot open (permissions) raises its OSError."""
    open(path, "rb").close()  # the system's own errors (permissions, a folder) as they are
    try:
        # torch warns of what it finds in a file of another format (a pickle protocol, a legacy layout)
        # before it fails: the one line below says it, so its warnings are not shown
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            saved = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # torch reports a damaged file as RuntimeError, UnpicklingError, EOFError, OSError, ...
        if "Weights only load failed" in str(error):  # torch's advice (weights_only=False) is not for this file
            detail = "torch's weights-only loader refuses it (it is no checkpoint statetrack wrote, or a damaged one)"
        else:
            detail = " ".join(str(error).split()[:40]) or type(error).__name__
        raise UnreadableCheckpoint(f"checkpoint {path} cannot be read: {detail}") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("model"), dict):
        raise UnreadableCheckpoint(f"checkpoint {path} holds no model weights")
    if model is not None:
        expected, weights = model.state_dict(), saved["model"]
        if set(weights) != set(expected) or any(
            not torch.is_tensor(weights[k]) or weights[k].shape != v.shape for k, v in expected.items()
        ):
            raise UnreadableCheckpoint(
                f"checkpoint {path} does not hold this model's weights (their names or shapes differ)"
            )
    return saved


class Trainer:
    """Trains `model` on `task`. Saves a checkpoint every `checkpoint_every` steps and at the end;
    a run restarted with the same checkpoint path continues where it stopped. A checkpoint that
    cannot be read is moved aside (`<name>.corrupt`, with a warning) and the run starts again.
    `revision`: the code's revision (`statetrack.experiments.runner.git_revision`); `revisions` lists
    every one the run trained at, in order, carried in its checkpoint across resumptions.
    `loggers` (statetrack.training.loggers) get each point of the training curve as it is written."""

    def __init__(
        self,
        model,
        task: Task,
        config: TrainConfig,
        checkpoint_path: str | Path | None = None,
        progress: bool = True,
        loggers: Sequence = (),
        revision: str | None = None,
    ):
        config = TrainConfig(**config.model_dump())  # checked again: a caller may have changed a setting since
        self.plan, self.tasks = config.stages(), curriculum_tasks(task, config)  # one stage without a curriculum
        # the validation batch, held whole (`statetrack run` sized it with the model already: limits.run_sizes)
        longest = max(task.tokens(stage["max_length"]) for task, stage in zip(self.tasks, self.plan))
        limits.check_tokens(config.val_samples, longest, "train.val_samples")
        self.model, self.task, self.config = model, task, config
        self.device = resolve_device(config.device)
        self.model.to(self.device)
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path else None
        self.progress = progress
        self.loggers = list(loggers)  # statetrack.training.loggers.Logger: each curve point as it is written
        # foreach: each update op once over every parameter rather than once per tensor; on CPU torch would
        # otherwise loop over the tensors in Python, with the same numbers (docs/performance-training.md)
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=config.lr, betas=tuple(config.betas), weight_decay=config.weight_decay, foreach=True
        )
        trainer = weakref.ref(self)  # the scheduler holds no Trainer: nothing cycles, so a finished run frees at once

        def factor(step: int) -> float:
            return trainer()._lr_factor(step)  # type: ignore[union-attr]  # the scheduler lives only in its Trainer

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor)
        self.generator = torch.Generator().manual_seed(config.seed)
        # drawn from the fresh generator, so a resumed run (whose generator state then comes from the
        # checkpoint) re-draws exactly the same set
        self.training_set = (
            None
            if config.dataset_size is None
            else FixedTrainingSet(
                task,
                config.dataset_size,
                training_lengths(config.min_length, config.max_length, config.length_step),
                config.batch_size,
                self.generator,
                self.device,
                balanced=config.dataset_balanced,
            )
        )
        self.step = 0
        # one row per log: step, loss, accuracy (training window means), epochs (fixed set), and `metrics`:
        # median and max over the window of what the layers record (statetrack.diagnostics; e.g.
        # iterations per sequence)
        self.curve: list[dict] = []
        self.stopped_early = False
        self.fits_in_a_row = 0  # validations in a row that fit (train.early_stop_window)
        self.seconds = 0.0
        self.revision = revision
        self.revisions: list[str] = []  # the revisions this run trained at (a checkpoint's, then this one)

    def _lr_factor(self, step: int) -> float:
        """The learning rate over its peak at `step` (`statetrack.schema.lr_factor`)."""
        c = self.config
        return lr_factor(step, c.steps, c.warmup, c.schedule, c.min_lr_ratio)

    # ---- checkpoints ---------------------------------------------------------------------------
    def save(self, path: Path | None = None) -> None:
        path = path or self.checkpoint_path
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with replace_atomically(path, binary=True) as f:  # a kill never leaves half a checkpoint
            torch.save(
                {
                    "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "generator": self.generator.get_state(),
                    "step": self.step,
                    "curve": self.curve,
                    "stopped_early": self.stopped_early,
                    "fits_in_a_row": self.fits_in_a_row,
                    "seconds": self.seconds,
                    "revisions": self.revisions,
                },
                f,
            )

    def load(self, path: Path) -> None:
        """Continue from the checkpoint at `path`; UnreadableCheckpoint when it cannot be read or does
        not fit (the trainer may then hold part of it: `_resume` puts the fresh state back)."""
        saved = read_checkpoint(path, self.device, self.model)
        missing = [k for k in CHECKPOINT_KEYS if k not in saved]
        if missing:
            raise UnreadableCheckpoint(f"checkpoint {path} lacks {', '.join(missing)}")
        try:
            self.model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(saved["optimizer"])
            self.scheduler.load_state_dict(saved["scheduler"])
            # the data generator is a CPU one; map_location put its state on the run's device
            self.generator.set_state(
                saved["generator"].cpu() if isinstance(saved["generator"], torch.Tensor) else saved["generator"]
            )
            self.step, self.curve = int(saved["step"]), list(saved["curve"])
            self.stopped_early, self.seconds = bool(saved["stopped_early"]), float(saved["seconds"])
            self.fits_in_a_row = int(saved.get("fits_in_a_row", 0))  # a checkpoint written before it: none
            self.revisions = [str(r) for r in saved.get("revisions", [])]  # one written before them: unrecorded
        except (KeyError, ValueError, TypeError, RuntimeError) as error:
            detail = " ".join(str(error).split()[:40])
            raise UnreadableCheckpoint(f"checkpoint {path} does not fit this run: {detail}") from None

    def _resume(self, path: Path) -> None:
        """Load the checkpoint at `path`; one that cannot be read is renamed `<name>.corrupt`, with a
        warning, and training starts from step 0 with the state this trainer was built with."""
        fresh = copy.deepcopy(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
            }
        )
        generator = self.generator.get_state()
        try:
            self.load(path)
        except UnreadableCheckpoint as error:
            self.model.load_state_dict(fresh["model"])
            self.optimizer.load_state_dict(fresh["optimizer"])
            self.scheduler.load_state_dict(fresh["scheduler"])
            self.generator.set_state(generator)
            self.step, self.curve, self.stopped_early, self.seconds = 0, [], False, 0.0
            self.fits_in_a_row, self.revisions = 0, []
            aside = path.with_name(path.name + ".corrupt")
            os.replace(path, aside)
            warnings.warn(f"{error}; moved to {aside}, the run starts again from step 0", RuntimeWarning, stacklevel=3)

    # ---- training ------------------------------------------------------------------------------
    @property
    def epochs(self) -> float | None:
        """Passes over the fixed training set so far (None when every batch is fresh)."""
        return None if self.training_set is None else self.step / self.training_set.batches_per_epoch

    @property
    def stage(self) -> int:
        """The curriculum stage the next step trains in (0 without a curriculum; the last one once done)."""
        return next((i for i, st in enumerate(self.plan) if self.step < st["end"]), len(self.plan) - 1)

    def _next_batch(self) -> Batch:
        if self.training_set is not None:
            return self.training_set.batch(self.step)
        stage = self.plan[self.stage]
        lengths = training_lengths(stage["min_length"], stage["max_length"], self.config.length_step)
        length = int(draw_lengths(lengths, 1, self.generator))
        return self.tasks[self.stage].sample(self.config.batch_size, length, self.generator).to(self.device)

    def _curve_point(self, loss: float, accuracy: float, records: dict[str, list[float]], stage: int) -> dict:
        point: dict[str, object] = {"step": self.step, "loss": loss, "accuracy": accuracy}
        if records:
            point["metrics"] = diagnostics.summarize(records)
        if self.config.curriculum is not None:
            point["stage"] = stage
        return point if self.training_set is None else {**point, "epochs": self.epochs}

    def _add_point(self, point: dict) -> None:
        self.curve.append(point)
        for logger in self.loggers:
            logger.log_point(point)

    def _validation(self) -> dict[str, float]:
        """{loss, accuracy (over the supervised positions), scaled (its scaled accuracy), sequence
        (sequence accuracy)} on a fixed batch of held-out examples at the longest length of the
        current stage, counted as evaluation counts (`count_right`)."""
        g = torch.Generator().manual_seed(self.config.seed + 7919)
        task, stage = self.tasks[self.stage], self.plan[self.stage]
        batch = task.sample(self.config.val_samples, stage["max_length"], g).to(self.device)
        self.model.eval()
        with torch.no_grad():
            logits = logits_only(self.model, batch.inputs)
            loss, accuracy = task.loss(logits, batch)
            counts = count_right(logits.argmax(-1), batch)[1]
        diagnostics.drain(self.model)  # validation is not a training batch
        self.model.train()
        right = counts["correct"] / max(1, counts["total"])
        return {
            "loss": loss.item(),
            "accuracy": accuracy.item(),
            "scaled": scaled_accuracy(right, task.chance),
            "sequence": counts["whole"] / max(1, counts["examples"]),
        }

    def _fits(self, validation: dict[str, float]) -> bool:
        """Whether a validation says to stop: the loss below `early_stop_loss`, the accuracy at
        `early_stop_accuracy`, or the figure of `early_stop_measure` at `early_stop_fit` with the loss
        below `early_stop_fit_loss` where that is set (the run has fit, and converged on, its training
        lengths). With `early_stop_window` the run stops once that many validations in a row say so."""
        c = self.config
        converged = c.early_stop_fit_loss is None or validation["loss"] < c.early_stop_fit_loss
        return (
            (c.early_stop_loss is not None and validation["loss"] < c.early_stop_loss)
            or (c.early_stop_accuracy is not None and validation["accuracy"] >= c.early_stop_accuracy)
            or (c.early_stop_fit is not None and validation[c.early_stop_measure] >= c.early_stop_fit and converged)
        )

    def _gradients(self, batch: Batch, stage: int, records: dict[str, list[float]]) -> tuple[float, float]:
        """(loss, accuracy) of `batch`, its loss's gradient added to the parameters' `.grad`, in
        `train.accumulate` micro-batches of its examples, one forward and backward each: each
        micro-batch's loss and accuracy (means over its supervised positions, `Task.loss`) weighted by
        its share of the batch's supervised positions, so that their sums are the whole batch's and
        only one micro-batch's activations are held at a time. What the layers record goes to
        `records`. A non-finite loss is returned before its backward pass."""
        parts, total = [batch], 0
        if self.config.accumulate > 1:
            total = int(batch.mask.sum())
            if total:  # micro-batches without a supervised position add nothing
                parts = [part for part in batch.split(self.config.accumulate) if part.mask.any()]
        loss_sum, accuracy_sum = 0.0, 0.0
        for part in parts:
            loss, accuracy = self.tasks[stage].loss(self.model(part.inputs)[0], part)
            diagnostics.merge(records, diagnostics.drain(self.model))
            if not torch.isfinite(loss):
                return loss.item(), accuracy.item()
            share = int(part.mask.sum()) / total if len(parts) > 1 else 1.0
            (loss * share if share != 1.0 else loss).backward()
            loss_sum, accuracy_sum = loss_sum + share * loss.item(), accuracy_sum + share * accuracy.item()
        return loss_sum, accuracy_sum

    def fit(self, deadline: float | None = None) -> Trainer:
        """Train to `steps` (or until early stopping), resuming from the checkpoint when there is one.
        Raises `Diverged` when a batch's loss is non-finite, before that batch updates the model, and
        `Paused` at the first end of a logging window at or after `deadline` (a `time.time()`) with
        steps still to go, after saving the checkpoint: a run trained again from it ends as one never
        paused."""
        c = self.config
        if self.checkpoint_path and self.checkpoint_path.exists():
            self._resume(self.checkpoint_path)
        if self.revision and self.revision != "unknown" and self.revisions[-1:] != [self.revision]:
            self.revisions.append(self.revision)
        self.model.train()
        start = time.perf_counter() - self.seconds
        window_records: dict[str, list[float]]  # what the layers recorded over the logging window
        window_loss, window_acc, window_n, window_records = 0.0, 0.0, 0, {}
        diagnostics.drain(self.model)
        bar = tqdm(total=c.steps, initial=self.step, desc="train", disable=not self.progress, leave=False)
        while self.step < c.steps and not self.stopped_early:
            stage = self.stage
            self.optimizer.zero_grad(set_to_none=True)
            loss, accuracy = self._gradients(self._next_batch(), stage, window_records)
            if not math.isfinite(loss):
                self.seconds = time.perf_counter() - start
                bar.close()
                raise Diverged(self.step, loss)
            if c.clip is not None:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.clip)
            self.optimizer.step()
            self.scheduler.step()
            self.step += 1
            window_loss, window_acc, window_n = window_loss + loss, window_acc + accuracy, window_n + 1
            # a stage's last step closes the logging window too, so no curve point mixes two stages
            if self.step % c.log_every == 0 or self.step == self.plan[stage]["end"]:
                self._add_point(self._curve_point(window_loss / window_n, window_acc / window_n, window_records, stage))
                bar.set_postfix(loss=f"{window_loss / window_n:.4f}", acc=f"{window_acc / window_n:.3f}")
                window_loss, window_acc, window_n, window_records = 0.0, 0.0, 0, {}
            # early stopping ends the run, so only in the last stage of a curriculum
            early_stop = any(v is not None for v in (c.early_stop_loss, c.early_stop_accuracy, c.early_stop_fit))
            if early_stop and self.step % c.val_every == 0 and stage == len(self.plan) - 1:
                self.fits_in_a_row = self.fits_in_a_row + 1 if self._fits(self._validation()) else 0
                self.stopped_early = self.fits_in_a_row >= (c.early_stop_window or 1)
            self.seconds = time.perf_counter() - start
            if self.step % c.checkpoint_every == 0:
                self.save()
            bar.update(1)
            # at the deadline, between logging windows (a resumed run then logs the curve of one never paused)
            if deadline is not None and not window_n and self.step < c.steps and not self.stopped_early:
                if now() >= deadline:
                    self.save()
                    bar.close()
                    raise Paused(self.step)
        bar.close()
        if window_n:
            self._add_point(
                self._curve_point(window_loss / window_n, window_acc / window_n, window_records, self.stage)
            )
        self.model.eval()
        self.save()
        return self
