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
    # the meta file decodes the export without statetrack: elements, and the Cayley table that gives every target
    meta = json.loads((tmp_path / "word_problem.meta.json").read_text())
    assert meta["files"] == {"3": "A4xZ5=3.csv", "5": "A4xZ5=5.csv"} and meta["group"]["order"] == 60
    table, rows = meta["group"]["table"], [[list(map(int, r[1].split())), list(map(int, r[2].split()))] for r in rows[1:]]
    for word, prefix in rows:
        product = word[0]
        assert prefix[0] == product
        for element, expected in zip(word[1:], prefix[1:]):
            product = table[product][element]
            assert product == expected
    s3 = json.loads(export_task(make_task("word_problem", group="S3"), [2], 2, str(tmp_path / "s3"))[0].read_text())["group"]
    assert s3["elements"] == [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]
    a, b = 1, 3  # (0 2 1) then (1 2 0): i -> b[a[i]]
    assert s3["elements"][s3["table"][a][b]] == [s3["elements"][b][s3["elements"][a][i]] for i in range(3)]
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
    assert path.name == "repl_len4.csv" and json.loads(meta.read_text())["vocab"] == task.vocab
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
