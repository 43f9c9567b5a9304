"""Datasets on disk for users of other frameworks (`statetrack tasks export`).

Group word problems (CSV) follow Merrill et al. 2024: one file `{group}={k}.csv` per length k (their
file names, so their code reads them), columns `seed,input,target`, the input and target fields
space-separated element indices (our canonical indexing, `statetrack.tasks.groups`). Every other
task (and word problems as JSONL) is written generically, one file `{task}_len{length}.csv|jsonl`
per length:

- CSV columns `input,target,mask`: space-separated token ids, class ids and 0/1 flags.
- JSONL objects {"input": [...], "target": [...], "mask": [...]} plus "soft_target" (nested
  lists [T, ...]) for tasks with belief targets.

Beside them `{task}.meta.json` decodes them without statetrack: the task, its parameters, `vocab`
(the symbol of each token id), `answers` (the symbol of each class id), `files` ({length: file})
and, for a group word problem, `group`: each element index's element (`elements`: a permutation
in one-line notation for S_n and A_n, a residue for Z_m, a tuple of factors for a product), the
product convention and the Cayley table (`table[a][b]` = the index of a * b). Each length has its
own generator, seeded from (seed, length), so a file does not change when other lengths are added.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch

from statetrack.errors import StatetrackError
from statetrack.limits import check_export_size
from statetrack.paths import check_outputs, open_for_write, write_text
from statetrack.tasks.base import Batch, Task
from statetrack.tasks.word_problems import WordProblem

CHUNK = 1024


def _generator(seed: int, length: int) -> torch.Generator:
    return torch.Generator().manual_seed(1_000_003 * seed + length)


def _batches(task: Task, length: int, samples: int, seed: int):
    g = _generator(seed, length)
    for start in range(0, samples, CHUNK):
        yield task.sample(min(CHUNK, samples - start), length, g)


def _ids(row) -> str:
    return " ".join(map(str, row))


def _file_name(task: Task, length: int, fmt: str) -> str:
    if task.name == "word_problem" and fmt == "csv":
        assert isinstance(task, WordProblem)  # the task registered as word_problem
        return f"{task.group}={length}.csv"  # Merrill et al.'s names
    return f"{task.name}_len{length}.{fmt}"


def export_task(
    task: Task, lengths: list[int], samples: int, out_dir: str, fmt: str = "csv", seed: int = 0
) -> list[Path]:
    """Write `samples` examples of `task` at each length to `out_dir`; returns the files written.

    fmt: "csv" or "jsonl". Word problems in CSV use the `{group}={k}.csv` / `seed,input,target`
    format of Merrill et al.; everything else the generic format described in this module.
    """
    if fmt not in ("csv", "jsonl"):
        raise StatetrackError(f"unknown export format {fmt!r}; expected one of: csv, jsonl")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise StatetrackError(f"samples must be an integer >= 1, got {samples!r}")
    if not lengths:
        raise StatetrackError("lengths must name at least one length")
    for length in lengths:
        task.check_length(length)
    check_export_size(samples, lengths, out_dir)
    out = Path(out_dir)
    word_problem = task.name == "word_problem"
    meta = out / f"{task.name}.meta.json"
    targets = {length: out / _file_name(task, length, fmt) for length in lengths}
    check_outputs([meta, *targets.values()], "export file")  # a FIFO or a folder among them: nothing written
    out.mkdir(parents=True, exist_ok=True)
    paths = [meta]
    files = {}
    for length in lengths:
        path = targets[length]
        if word_problem and fmt == "csv":
            with open_for_write(path, newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["seed", "input", "target"])
                for batch in _batches(task, length, samples, seed):
                    for x, y in zip(batch.inputs.tolist(), batch.targets.tolist()):
                        writer.writerow([seed, _ids(x), _ids(y)])
        elif fmt == "csv":
            with open_for_write(path, newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["input", "target", "mask"])
                for batch in _batches(task, length, samples, seed):
                    for x, y, m in zip(batch.inputs.tolist(), batch.targets.tolist(), batch.mask.int().tolist()):
                        writer.writerow([_ids(x), _ids(y), _ids(m)])
        else:
            with open_for_write(path) as f:
                for batch in _batches(task, length, samples, seed):
                    soft = None if batch.soft_targets is None else batch.soft_targets.tolist()
                    for i, (x, y, m) in enumerate(
                        zip(batch.inputs.tolist(), batch.targets.tolist(), batch.mask.int().tolist())
                    ):
                        row = {"input": x, "target": y, "mask": m}
                        if soft is not None:
                            row["soft_target"] = soft[i]
                        f.write(json.dumps(row) + "\n")
        paths.append(path)
        files[length] = path.name
    info = {
        "task": task.name,
        "params": task.params,
        "vocab": task.vocab,
        "answers": task.answers,
        "seed": seed,
        "format": fmt,
        "files": files,
        "decode": "input ids index vocab, target ids index answers, mask 1 where a target is supervised",
    }
    group = getattr(task, "group_object", None)
    if group is not None:
        info["group"] = {
            "name": group.name,
            "order": len(group),
            "elements": [_plain(e) for e in group.elements],
            "product": "a * b applies a first, then b: (a * b)(i) = b(a(i)) for permutations; "
            "each target is the product of the inputs so far",
            "table": group.cayley_table().tolist(),
        }
    write_text(meta, json.dumps(info, indent=1))
    return paths


def _plain(element):
    """A group element as JSON: an int, or a list (of ints, or of factors)."""
    return [_plain(e) for e in element] if isinstance(element, (tuple, list)) else int(element)


def _rows(path: Path, header: list[str]):
    with path.open(newline="") as f:
        reader = csv.reader(f)
        first = next(reader, None)
        if first != header:
            raise StatetrackError(f"{path}: expected the header {','.join(header)}, got {first}")
        for line, row in enumerate(reader, 2):
            if len(row) != len(header):
                raise StatetrackError(f"{path}:{line}: expected {len(header)} columns, got {len(row)}")
            try:
                yield [list(map(int, field.split())) for field in row]
            except ValueError:
                raise StatetrackError(f"{path}:{line}: expected space-separated integers") from None


def _stack(path: Path, rows: list[list[int]], what: str) -> torch.Tensor:
    if not rows:
        raise StatetrackError(f"{path}: no rows")
    if len({len(r) for r in rows}) != 1:
        raise StatetrackError(f"{path}: {what} rows have different lengths")
    return torch.tensor(rows, dtype=torch.long)


def import_word_problem_csv(path: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Read a `{group}={k}.csv` file (columns seed,input,target) -> (inputs [N, k], targets [N, k]).

    Works for files written by `export_task` and by Merrill et al.'s generator (whose element
    indexing is their own; the targets in the file are consistent with its inputs).
    """
    path = Path(path)
    rows = list(_rows(path, ["seed", "input", "target"]))
    return _stack(path, [r[1] for r in rows], "input"), _stack(path, [r[2] for r in rows], "target")


def import_task_csv(path: str | Path) -> Batch:
    """Read a generic `{task}={length}.csv` file (columns input,target,mask) back into a Batch."""
    path = Path(path)
    rows = list(_rows(path, ["input", "target", "mask"]))
    return Batch(
        _stack(path, [r[0] for r in rows], "input"),
        _stack(path, [r[1] for r in rows], "target"),
        _stack(path, [r[2] for r in rows], "mask").bool(),
    )
