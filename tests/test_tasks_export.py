"""Export to disk and import back."""

import csv
import json

import pytest
import torch

from statetrack.errors import StatetrackError
from statetrack.tasks import make_task
from statetrack.tasks.export import export_task, import_task_csv, import_word_problem_csv
from statetrack.tasks.groups import get_group


def test_word_problem_csv_round_trip(tmp_path):
    task = make_task("word_problem", group="A4xZ5")
    paths = export_task(task, [3, 5], 20, str(tmp_path), seed=4)
    names = sorted(p.name for p in paths)
    assert names == ["A4xZ5=3.csv", "A4xZ5=5.csv", "word_problem.meta.json"]
    with open(tmp_path / "A4xZ5=5.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["seed", "input", "target"] and len(rows) == 21 and all(r[0] == "4" for r in rows[1:])
    inputs, targets = import_word_problem_csv(tmp_path / "A4xZ5=5.csv")
    assert inputs.shape == targets.shape == (20, 5)
    torch.testing.assert_close(get_group("A4xZ5").prefix_products(inputs), targets)
    # deterministic: the same call writes the same file
    again = export_task(task, [5], 20, str(tmp_path / "again"), seed=4)
    assert again[1].read_text() == (tmp_path / "A4xZ5=5.csv").read_text()


def test_import_reads_merrill_style_files(tmp_path):
    path = tmp_path / "S3=4.csv"
    path.write_text('seed,input,target\n123,5 4 2 4,5 1 4 3\n123,"5 0 2 2","5 5 3 5"\n')
    inputs, targets = import_word_problem_csv(path)
    assert inputs.tolist() == [[5, 4, 2, 4], [5, 0, 2, 2]] and targets.tolist()[1] == [5, 5, 3, 5]
    bad = tmp_path / "bad.csv"
    bad.write_text("input,target\n1,2\n")
    with pytest.raises(StatetrackError, match="header"):
        import_word_problem_csv(bad)


def test_generic_csv_and_jsonl(tmp_path):
    task = make_task("repl", n=3, spacing=2)
    [meta, path] = export_task(task, [4], 5, str(tmp_path))
    assert json.loads(meta.read_text())["vocab"] == task.vocab
    batch = import_task_csv(path)
    assert batch.inputs.shape[0] == 5 and batch.mask.sum() == 10
    reference = task.sample(5, 4, torch.Generator().manual_seed(4))
    assert torch.equal(batch.inputs, reference.inputs) and torch.equal(batch.targets, reference.targets)
    pfsa = make_task("pfsa", n=3)
    [_, path] = export_task(pfsa, [6], 3, str(tmp_path), fmt="jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 3 and len(rows[0]["soft_target"]) == 6 and len(rows[0]["soft_target"][0]) == 6
    with pytest.raises(StatetrackError, match="format"):
        export_task(pfsa, [6], 3, str(tmp_path), fmt="xml")
    with pytest.raises(StatetrackError, match="length"):
        export_task(pfsa, [0], 3, str(tmp_path))
