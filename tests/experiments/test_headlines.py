"""The works' headline cells: each a cell of its experiment's paper scale (the same runs), selected by
`reproduce --scale paper --headlines` with seeds in rounds over the cells, and shown in the book
beside the paper's figure, measured or "not measured yet" (fabricated snapshots, in tmp folders)."""

import json
from pathlib import Path

import pytest

from statetrack import paths
from statetrack.cli import main
from statetrack.errors import StatetrackError
from statetrack.experiments import spec as spec_module
from statetrack.experiments.headlines import cell_overrides, cell_rounds, headlines, held_seeds, paper_scaled
from statetrack.experiments.spec import resolve, spec_at
from statetrack.results import book

PACKAGE_SNAPSHOTS = Path(book.__file__).resolve().parents[1] / "experiments" / "snapshots"


def test_each_work_has_one_headline_cell_of_one_model_on_one_task():
    cells = headlines()
    works = {h["source"].split(",")[0] for h in cells.values()}
    assert len(cells) == 5 and len(works) == 5  # one cell per work, no work twice
    assert set(cells) <= set(paper_scaled()) and len(paper_scaled()) == 17
    for name, headline in cells.items():  # each names one model (and task) of its paper scale
        overrides = cell_overrides(name, headline, [0])
        assert len(json.loads(overrides[0].removeprefix("models="))) == 1 and "seeds=[0]" in overrides
        tasks = [o for o in overrides if o.startswith("tasks=")]
        assert [len(json.loads(o.removeprefix("tasks="))) for o in tasks] in ([], [1])


def test_a_cell_trains_the_very_runs_of_the_paper_scale():
    """Under the experiment's own name, the cell's runs are the full paper scale's runs of its model:
    measuring the cell measures part of the paper scale, nothing beside it."""
    name, headline = "negeig-parity", headlines(["negeig-parity"])["negeig-parity"]
    full = {run.id: run for run in resolve(name, "paper").runs}
    cell = resolve(name, "paper", cell_overrides(name, headline), name=name)
    assert cell.name == name and len(cell.runs) == len(spec_at(name, "paper")[0]["seeds"]) == 3
    assert {run.id for run in cell.runs} <= set(full)
    assert {run.model_name for run in cell.runs} == {"DeltaNet [-1,1]"}
    assert "left_out" in cell.spec  # the claims on the other models read "not in this run"


def test_a_cell_takes_its_own_rates_and_the_largest_scale_that_fits():
    name, headline = "memory-state-tracking", headlines(["memory-state-tracking"])["memory-state-tracking"]
    cell = resolve(name, "paper", cell_overrides(name, headline, [0, 1]), name=name)
    assert {(run.model_name, run.task_name, run.lr, run.seed) for run in cell.runs} == {
        ("LSTM", "word_problem(group=Z60)", 1e-4, 0),
        ("LSTM", "word_problem(group=Z60)", 1e-4, 1),
    }
    assert headline["largest_fit"]["settings"] == {"train.steps": 14000}
    assert {run.settings.steps for run in cell.runs} == {14000}


def test_a_headline_names_a_model_of_the_spec_or_is_one_line(tmp_path):
    text = (PACKAGE_SNAPSHOTS.parent / "specs" / "negeig-parity.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("    model: DeltaNet [-1,1]\n", "    model: DeltaNot\n", 1))
    with pytest.raises(StatetrackError, match=r"paper\.headline: unknown model 'DeltaNot'; expected one of: "):
        spec_module.load_spec(str(bad), "paper")


def test_seeds_go_round_the_cells_and_a_plan_only_grows():
    cells = headlines(["negeig-parity", "memory-state-tracking"])  # 3 and 5 seeds
    order = [(name[:3], seeds) for name, seeds in cell_rounds(cells, {})]
    assert order == [
        ("mem", [0]),
        ("neg", [0]),
        ("mem", [0, 1]),
        ("neg", [0, 1]),
        ("mem", [0, 1, 2]),
        ("neg", [0, 1, 2]),
        ("mem", [0, 1, 2, 3]),
        ("mem", [0, 1, 2, 3, 4]),
    ]
    # a cell whose snapshot plans two seeds already joins at the second round, never planning fewer
    joined = [seeds for name, seeds in cell_rounds(cells, {"negeig-parity": {0, 1}}) if name == "negeig-parity"]
    assert joined == [[0, 1], [0, 1, 2]]


def test_a_snapshot_that_holds_more_than_the_cell_is_left_alone():
    name, headline = "negeig-parity", headlines(["negeig-parity"])["negeig-parity"]
    cell = [
        {"id": run.id, "seed": run.seed}
        for run in resolve(name, "paper", cell_overrides(name, headline, [0]), name=name).runs
    ]
    assert held_seeds(name, headline, cell) == {0}
    assert held_seeds(name, headline, cell + [{"id": "a-run-of-another-model", "seed": 0}]) is None


def test_headlines_refuse_another_scale_and_an_experiment_without_one(capsys):
    assert main(["reproduce", "--headlines"]) == 2
    err = capsys.readouterr().err
    assert "the headline cells are of the paper scale; give --scale paper, not 'quick'" in err and err.count("\n") == 1
    assert main(["reproduce", "--scale", "paper", "--headlines", "demo"]) == 2
    err = capsys.readouterr().err
    assert "experiment 'demo' has no headline cell; experiments with one: bilinear-table1, " in err
    assert err.count("\n") == 1


def test_the_dry_run_prints_each_cell_once_with_its_cost_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "--scale", "paper", "--headlines", "--dry-run", "negeig-parity"]) == 0
    out = capsys.readouterr().out
    assert out.count("== [") == 1 and "== [1/1] negeig-parity: headline cell DeltaNet [-1,1], seeds 0, 1, 2" in out
    assert "# 3 planned runs, 3 to train; training arithmetic" in out and "TFLOP" in out
    assert "nothing trained, nothing written" in out and not any(tmp_path.iterdir())


# ---- the book ------------------------------------------------------------------------------------
def _as_paper(tmp_path: Path, name: str, edit=lambda snapshot: None) -> dict:
    """The committed quick snapshot of `name` relabelled as its paper scale's, in `tmp_path`: a
    fabricated paper-scale measurement, read back as the book reads snapshots."""
    snapshot = json.loads((PACKAGE_SNAPSHOTS / f"{name}.quick.json").read_text())
    snapshot["scale"] = "paper"
    edit(snapshot)
    (tmp_path / f"{name}.paper.json").write_text(json.dumps(snapshot))
    return book.read_snapshots(tmp_path)


def _row(snapshots: dict, name: str) -> dict:
    header, body = book.headlines_table(book.headline_cells(snapshots, book.scored_snapshots(snapshots)))
    rows = [dict(zip(header, row)) for row in body if f"[`{name}`]" in row[1]]
    assert len(rows) == 1
    return rows[0]


def test_the_book_shows_every_cell_not_measured_yet_and_counts_none():
    section = "\n".join(book.headlines_section({}, {}))
    assert "0 of 5 cells measured" in section and section.count("| not measured yet | 0 of ") == 5
    assert book.suite_line({}, "paper").startswith("0 of 17 experiments with a paper-scale figure")
    assert book.suite_line({}, "quick").startswith("0 of 18 experiments measured at the quick scale")


def test_a_measured_cell_shows_its_figure_seeds_wall_time_machine_and_revision(tmp_path):
    def two_seeds_done(snapshot):  # the DeltaNet [-1,1] run of seed 2 still running
        for run in snapshot["runs"]:
            if run["model"] == "DeltaNet [-1,1]" and run["seed"] == 2:
                run["status"] = "running"

    snapshots = _as_paper(tmp_path, "negeig-parity", two_seeds_done)
    row = _row(snapshots, "negeig-parity")
    assert row["paper"].startswith('1.000 ("') and row["seeds"] == "2 of 3"
    scored = book.scored(snapshots[("negeig-parity", "paper")])
    from statetrack.results.claims import paper_figures

    [expected] = [
        r for r in paper_figures(scored.paper, scored.summary, scored.planned) if r["model"] == "DeltaNet [-1,1]"
    ]
    assert row["measured"] == f"{expected['measured']:.3f}"
    assert (
        row["wall time"] == "2 min 40 s" and "2 CPU cores (AVX512)" in row["machine"] and row["revision"] == "27eea19"
    )
    scores = book.scored_snapshots(snapshots)
    assert book.suite_line(snapshots, "paper").startswith("1 of 17 experiments with a paper-scale figure")
    assert "1 of 5 cells measured" in "\n".join(book.headlines_section(snapshots, scores))
    hours = book.paper_hours_block(snapshots, scores)
    [line] = [line for line in hours.splitlines() if "negeig-parity" in line]
    assert "| 2 of 3 | 2 min 40 s | 0.1 |" in line  # 160.2 s on 2 workers: 0.09 core-hours


def test_a_snapshot_without_a_finished_run_is_no_paper_scale_figure(tmp_path):
    def none_done(snapshot):
        for run in snapshot["runs"]:
            run["status"] = "running"

    snapshots = _as_paper(tmp_path, "negeig-parity", none_done)
    assert book.suite_line(snapshots, "paper").startswith("0 of 17 experiments with a paper-scale figure")
    assert _row(snapshots, "negeig-parity")["seeds"] == "0 of 3"


def test_a_cell_measured_at_the_largest_scale_that_fits_is_named_so(tmp_path, monkeypatch):
    cells = headlines(["negeig-parity"])
    cells["negeig-parity"]["largest_fit"] = {"settings": {"train.steps": 2000}, "reason": "a test's"}
    monkeypatch.setattr(book, "headlines", lambda: cells)
    row = _row(_as_paper(tmp_path, "negeig-parity"), "negeig-parity")  # the quick spec trains 2000 steps
    assert row["measured"].endswith(" (the largest scale that fits)")
    assert "the largest scale that fits one machine: train.steps 2000 (the paper scale's 20000)" in row["cell"]


def test_a_cells_note_on_a_figure_short_of_the_papers_is_set_under_the_table(monkeypatch):
    cells = {name: c | {"note": None} for name, c in headlines().items()}
    monkeypatch.setattr(book, "headlines", lambda: cells)
    assert "falls short of the paper's" not in "\n".join(book.headlines_section({}, {}))
    cells["negeig-parity"]["note"] = "a test's reason, with the budgets tried"
    section = "\n".join(book.headlines_section({}, {}))
    assert "| not measured yet |" in section.split("Where a measured figure falls short of the paper's:")[0]
    assert "\n- [`negeig-parity`](experiments/negeig-parity.md): a test's reason, with the budgets tried" in section


@pytest.mark.slow  # three rounds, each trained, reported and recorded, then the book: minutes on 2 loaded cores
def test_reproduce_headlines_trains_the_cells_seeds_in_rounds_into_the_experiments_snapshot(monkeypatch, tmp_path):
    """End to end on a tiny version of the negeig-parity cell (8 wide, 20 steps): three rounds, one
    seed each, adding up in its paper-scale snapshot, and the book counting it."""
    real = spec_module.resolve
    tiny = ["model_defaults.d_model=8", "train.steps=20", "train.batch_size=8", "train.warmup=0", "eval.samples=16"]
    monkeypatch.setattr(spec_module, "resolve", lambda n, s, o=(), *a, **k: real(n, s, [*o, *tiny], *a, **k))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(paths, "snapshot_folder", lambda: tmp_path / "snapshots")
    command = ["reproduce", "--scale", "paper", "--headlines", "negeig-parity", "--workers", "1", "--no-progress"]
    assert main([*command, "--book-dir", "book", "--readme", "README.md"]) == 0
    snapshot = json.loads((tmp_path / "snapshots/negeig-parity.paper.json").read_text())
    assert sorted(p["seed"] for p in snapshot["plan"]) == [0, 1, 2] and [p["runs"] for p in snapshot["parts"]] == [
        1,
        1,
        1,
    ]
    claims = (tmp_path / "book/claims.md").read_text().split("## paper scale")[1]
    assert "1 of 17 experiments with a paper-scale figure" in claims and "| 3 of 3 |" in claims


def test_a_slice_whose_run_goes_on_next_session_keeps_its_time(tmp_path):
    """A part in which a run started (or resumed) and paused at the deadline, none finishing, still
    adds its wall time: a cell's run spans sessions."""
    import time

    from statetrack.store import RunClaim, Store

    name, headline = "negeig-parity", headlines(["negeig-parity"])["negeig-parity"]
    cell = resolve(name, "paper", cell_overrides(name, headline, [0]), name=name)
    store = Store(tmp_path / "statetrack.db")
    store.set_plan(cell.plan())
    started = time.time() - 5
    [run] = cell.runs
    claim = RunClaim(run.id, name, run.model_name, run.task_name, run.seed, run.lr, run.config, "abc1234")
    assert store.start_run(claim)
    path = book.record_part(store, name, started, 1, path=tmp_path / "negeig-parity.paper.json")
    [part] = json.loads(path.read_text())["parts"]
    assert part["runs"] == 0 and part["paused"] == 1 and part["seconds"] >= 5
    book.record_part(store, name, time.time(), 1, path=path)  # a part that trained nothing adds nothing
    assert len(json.loads(path.read_text())["parts"]) == 1


def test_a_seed_with_some_of_its_runs_done_reads_as_measured_in_part(tmp_path):
    def a_second_rate_running(snapshot):  # every seed but 0 still running; seed 0 gains a second rate, not done
        entries = [e for e in snapshot["plan"] if e["model"] == "DeltaNet [-1,1]"]
        for run in snapshot["runs"]:
            if run["model"] == "DeltaNet [-1,1]" and run["seed"] != 0:
                run["status"] = "running"
        [first] = [e for e in entries if e["seed"] == 0]
        snapshot["plan"].append(first | {"id": "second-rate", "lr": 2 * first["lr"]})
        snapshot["runs"].append({"id": "second-rate", "model": "DeltaNet [-1,1]", "seed": 0, "status": "running"})

    snapshots = _as_paper(tmp_path, "negeig-parity", a_second_rate_running)
    assert _row(snapshots, "negeig-parity")["seeds"] == "0 of 3 (1 of 4 runs)"
    section = "\n".join(book.headlines_section(snapshots, book.scored_snapshots(snapshots)))
    assert "0 of 5 cells measured (1 more in part" in section
