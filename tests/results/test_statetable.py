"""The state-tracking table: theory's predictions per transition class and task, the cells' reading
against them, the committed page equal to its generation, and a user's model placed in the table
with one command (a model that learns nothing reads "did not fit" in every cell)."""

import json
import re
import shutil
from pathlib import Path

import pytest

from statetrack import theory
from statetrack.cli import main
from statetrack.layers.registry import MODELS
from statetrack.models import zoo
from statetrack.results import statetable as st
from statetrack.tasks import make_task

ROOT = Path(__file__).resolve().parents[2]
LADDER = {
    "Z2": make_task("word_problem", group="Z2"),
    "Z3": make_task("word_problem", group="Z3"),
    "Z5": make_task("word_problem", group="Z5"),
    "S3": make_task("word_problem", group="S3"),
    "A5": make_task("word_problem", group="A5"),
    "fsm": make_task("fsm", states=6, supervise="all"),
}


def test_the_ladders_algebra():
    z3, s3, a5, fsm = (theory.structure(LADDER[k]) for k in ("Z3", "S3", "A5", "fsm"))
    assert z3.abelian and z3.cycles == {1, 3} and z3.degree == 3 and z3.solvable
    assert not s3.abelian and s3.solvable and s3.cycles == {1, 2, 3} and s3.degree == 3
    assert not a5.abelian and a5.solvable is False and a5.cycles == {1, 2, 3, 5} and a5.degree == 5
    # machine 0: symbol 1 swaps states 0 and 5, symbol 3 cycles 2 -> 3 -> 5 -> 2; its maps are not permutations
    assert not fsm.group and not fsm.abelian and {2, 3} <= fsm.cycles and fsm.states == 6
    assert theory.structure(make_task("parity")).name == "Z2" and theory.structure(make_task("modadd", m=6)).degree == 5
    assert theory.structure(make_task("copy")) is None


# (transition class, its parameters, task, layers, verdict): one case per rule, each against the
# statement it applies; which models have each class, their layer files declare (tests/models/test_transition_classes.py)
CASES = [
    ("householder-positive", {}, "Z2", 1, theory.CANNOT),  # Thm. 1
    ("diagonal-positive", {}, "fsm", 2, theory.CANNOT),  # Thm. 1 at every layer
    ("householder-real", {}, "Z2", 1, theory.CAN),
    ("householder-real", {}, "Z3", 1, theory.CANNOT),  # Thm. 2, one layer
    ("householder-real", {}, "Z5", 2, theory.CAN),  # two layers count modulo m
    ("householder-real", {}, "S3", 2, theory.UNKNOWN),
    ("diagonal-real", {}, "Z2", 1, theory.CAN),
    ("diagonal-real", {}, "Z3", 2, theory.CANNOT),  # real diagonals at any depth
    ("householder-products", {"n_h": 2}, "S3", 1, theory.CAN),  # Thm. 3
    ("householder-products", {"n_h": 2}, "A5", 1, theory.CAN),  # rotations of R^3
    ("householder-products", {"n_h": 2}, "fsm", 1, theory.UNKNOWN),
    ("diagonal-complex", {}, "Z5", 1, theory.CAN),
    ("diagonal-complex", {}, "S3", 1, theory.CANNOT),  # commutative only
    ("dense", {}, "fsm", 1, theory.CAN),
    (None, {}, "Z2", 1, theory.UNKNOWN),  # no class declared
    ("diagonal-complex-affine", {}, "Z3", 1, theory.CAN),
    ("diagonal-complex-affine", {}, "A5", 1, theory.CANNOT),  # no non-solvable group
    ("diagonal-complex-affine", {}, "S3", 1, theory.UNKNOWN),
    ("time-invariant", {}, "Z3", 1, theory.UNKNOWN),
    ("nonlinear", {}, "A5", 1, theory.CAN),
    ("attention", {}, "Z2", 1, theory.CANNOT),
    ("automaton", {"state_size": 16}, "fsm", 1, theory.CAN),
    ("automaton", {"state_size": 16}, "A5", 1, theory.UNKNOWN),  # 60 states > state_size 16
    ("real-spectrum-signed", {}, "Z3", 1, theory.CANNOT),  # a real spectrum
    ("real-spectrum", {}, "Z2", 1, theory.UNKNOWN),
    ("real-spectrum-signed", {}, "Z2", 1, theory.CAN),
    ("generalized-delta-signed", {}, "Z2", 1, theory.CAN),  # a swap per token (Peng et al. 2025)
    ("generalized-delta-signed", {}, "S3", 1, theory.CANNOT),  # real eigenvalues, 3-cycles
    ("generalized-delta", {}, "Z2", 1, theory.UNKNOWN),  # no eigenvalue -1 for the swap
    ("attention-householder-real", {}, "Z2", 1, theory.UNKNOWN),  # Thm. 2.1 of PaTH: an identity test of swaps
    ("attention-householder-positive", {}, "Z2", 1, theory.UNKNOWN),
    ("attention-delta-rule", {}, "S3", 1, theory.UNKNOWN),  # DeltaFormer's Thm. 1: a kernel rounding to 0
]


@pytest.mark.parametrize("kind, params, task, layers, verdict", CASES)
def test_theory_per_transition_class(kind, params, task, layers, verdict):
    prediction = theory.predict_class(kind, params, LADDER[task], layers)
    assert prediction.verdict == verdict, prediction
    if verdict != theory.UNKNOWN or kind and kind.startswith(("attention-", "generalized-")):
        assert " 20" in prediction.why  # a statement cited by author and year


def test_every_rule_is_tested_and_every_registered_model_has_a_prediction_on_every_rung():
    assert {kind for kind, *_ in CASES} == {*theory.TRANSITION_CLASSES, None}
    for name in MODELS:
        spec = zoo.resolve(name)
        for task in LADDER.values():
            assert theory.predict(spec, task).verdict in (theory.CAN, theory.CANNOT, theory.UNKNOWN)


def _cell(verdict, fitted, held16, seeds=3):
    held = {4: list(range(held16)), 16: list(range(held16))}
    return st.Cell("m", "t", 1, theory.Prediction(verdict, "x"), list(range(seeds)), list(range(fitted)), held, 0.0, 1e-3)


def test_a_cell_against_theory():
    assert _cell(theory.CAN, 3, 2).agreement == st.AGREES
    assert _cell(theory.CAN, 3, 1).agreement == st.SHORTCUT  # fits, does not extrapolate
    assert _cell(theory.CAN, 1, 1).agreement == st.NOT_LEARNED
    assert _cell(theory.CANNOT, 3, 1).agreement == st.AGREES  # fitting the training lengths is no contradiction
    assert _cell(theory.CANNOT, 3, 2).agreement == st.CONTRADICTS
    assert _cell(theory.UNKNOWN, 3, 3).agreement == st.MEASURED
    assert _cell(theory.CAN, 3, 2).text == "3·2·2" and _cell(theory.CAN, 0, 0).text == "did not fit"


def test_the_headline_reading_is_4x_and_a_cannot_cell_holding_either_ratio_contradicts():
    def cell(verdict, held4, held16, fitted=3):
        return st.Cell("m", "t", 1, theory.Prediction(verdict, "x"), [0, 1, 2], list(range(fitted)),
                       {4: held4, 16: held16}, 0.0, 1e-3)

    assert cell(theory.CAN, [0, 1], []).agreement == st.AGREES  # 4x is the reading; 16x is beside it
    assert cell(theory.CAN, [0], [0]).agreement == st.SHORTCUT
    assert cell(theory.CANNOT, [], [0, 1]).agreement == st.CONTRADICTS
    assert cell(theory.CANNOT, [0], [0]).agreement == st.AGREES
    unread = cell(theory.CAN, None, None)
    assert unread.agreement == st.UNREAD and unread.text == "3·–·–" and not unread.extrapolates


def test_a_cell_is_read_only_at_lengths_that_were_evaluated():
    def seed(scaled):
        return {"scaled": scaled, "sequence": {}, "measured": {}}

    entry = {"per_seed": {0: seed({2: 1.0, 8: 0.95}), 1: seed({2: 1.0, 8: 0.5}), 2: seed({2: 0.1})}}
    fitted, held, extrapolation = st._reading(entry, 2)
    assert fitted == [0, 1] and held == {4: [0], 16: None}
    assert extrapolation == pytest.approx((0.95 + 0.5) / 3)


def test_undecided_cells_train_again_with_a_larger_budget_whatever_theory_says():
    scored = st.scored_snapshot(st.load_snapshot(st.snapshot_file()))
    first = st.cells(scored)
    undecided = {(c.model, c.task) for c in first if not c.decided}
    assert undecided and len(undecided) < len(first)
    assert {c.prediction.verdict for c in first if not c.decided} >= {theory.CAN, theory.CANNOT}
    larger = st.larger_budget_experiment(scored)
    label = {p["id"]: (p["model"], p["task"]) for p in scored.plan.runs}
    steps = scored.spec["train"]["steps"] * st.GROWTH
    assert all(r.train["steps"] == steps and r.train.get("early_stop_fit") is None for r in larger.runs)
    trained = {(r.model_name, r.task_name) for r in larger.runs}
    assert trained == undecided or {label.get(r.id) for r in larger.runs} == undecided
    per_cell = len(larger.runs) / len(undecided)
    assert per_cell >= len(scored.spec["seeds"])  # every seed (and every tied rate) of the cell
    # the table reads the larger budget, keeping the first reading beside it
    grown = st.Cell(first[0].model, first[0].task, 1, first[0].prediction, [0, 1, 2], [0, 1, 2],
                    {4: [0, 1, 2], 16: [0]}, 1.0, 1e-3)
    read = st.read_larger_budget(first, [grown])
    assert read[0] is grown and grown.first_reading == first[0].text and read[1:] == first[1:]


def test_the_pilot_picks_each_cells_rate_by_its_final_training_loss():
    """Per cell, the rate whose seed-0 run ends with the lowest training loss, every rate within LOSS_TIE
    (relative) of it tied; a run with no finite loss counts as the highest; the table trains each cell's
    chosen rates only (three seeds each)."""
    from types import SimpleNamespace

    from statetrack.results.selection import final_loss

    pilot = st.pilot_experiment([{"name": "lstm"}], overrides=FAST)
    z2, fsm = "word_problem(group=Z2)", "fsm(states=6, supervise=all)"
    loss = {(z2, 5.0e-4): 0.5, (z2, 1.0e-3): 0.1015, (z2, 2.0e-3): 0.1, (fsm, 5.0e-4): 0.2, (fsm, 1.0e-3): None,
            (fsm, 2.0e-3): 0.23}
    losses = {r.id: loss[(r.task_name, r.lr)] for r in pilot.runs}
    scored = SimpleNamespace(plan=SimpleNamespace(runs=[r.plan_entry() for r in pilot.runs]),
                             runs=[{"id": r.id, "status": "done", "final_loss": losses[r.id]} for r in pilot.runs])
    choice = st.pilot_choice(scored, st.run_losses(scored))
    assert choice[("LSTM", z2)]["chosen"] == [1.0e-3, 2.0e-3] and choice[("LSTM", fsm)]["chosen"] == [5.0e-4]
    table = st.table_experiment(scored, pilot, "t", overrides=FAST)
    assert sorted((r.task_name, r.lr) for r in table.runs if r.seed == 0) == [(fsm, 5.0e-4), (z2, 1.0e-3), (z2, 2.0e-3)]
    assert len(table.runs) == 3 * 3
    # a cell whose every pilot run failed trains at each rate (its failures then show in the table)
    scored.runs = [{**r, "status": "failed"} if r["id"] in {x.id for x in pilot.runs if x.task_name == fsm} else r
                   for r in scored.runs]
    table = st.table_experiment(scored, pilot, "t", overrides=FAST)
    assert sorted(r.lr for r in table.runs if r.seed == 0 and r.task_name == fsm) == [5.0e-4, 1.0e-3, 2.0e-3]
    # read from a store's curves: the mean of the last three finite logged losses
    curves = {r.id: [{"loss": 9.0}, {"loss": float("nan")}, {"loss": 0.3}, {"loss": 0.1}, {"loss": 0.2}]
              for r in pilot.runs}
    assert all(v == pytest.approx(0.2) for v in st.run_losses(scored, curves.__getitem__).values())
    assert final_loss([{"loss": float("inf")}]) is None and final_loss([]) is None


def test_a_budget_of_another_measurement_is_not_read_beside_the_table():
    """The full and larger budgets' snapshots are read only where they train the committed table's
    own cells again (its spec but for the budget), never beside a later measurement of the table."""
    import copy

    table = st.load_snapshot(st.snapshot_file())
    spec = st.scored_snapshot(table).spec
    again = {**copy.deepcopy(table), "spec": {**copy.deepcopy(spec), "name": st.LARGER_BUDGET}}
    again["spec"]["train"] = {**spec["train"], "steps": spec["train"]["steps"] * st.GROWTH, "early_stop_fit": None}
    assert st.trains_again(again, spec)
    other = copy.deepcopy(again)
    other["spec"]["train"]["max_length"] = spec["train"]["max_length"] * 2  # a protocol the table no longer has
    assert not st.trains_again(other, spec)
    first = st.committed_cells(table, larger=other)[0]  # the first budget (and its full-budget check) alone
    assert [c.first_reading for c in first] == [None] * len(first)  # `other` is not read
    read = st.committed_cells(table, larger=again)[0]
    assert [c.first_reading for c in read] == [c.text for c in first]  # every cell read from the larger budget


def test_a_users_row_of_a_committed_model_shows_beside_it():
    mine = [_cell(theory.CAN, 3, 3), st.Cell("DeltaNet [-1,1] (num_layers=2)", "t", 2, theory.Prediction(theory.CAN, "x"),
                                             [0], [0], {4: [0], 16: [0]}, 1.0, 1e-3)]
    renamed = [c.model for c in st.told_apart(mine, {("m", 1), ("DeltaNet [-1,1] (num_layers=2)", 2)})]
    assert renamed == ["m (this run)", "DeltaNet [-1,1] (this run) (num_layers=2)"]
    other = st.Cell("DeltaNet [-1,1]", "t", 1, theory.Prediction(theory.CAN, "x"), [0], [0], {4: [], 16: []}, 0.0, 1e-3)
    assert st.told_apart([other], {("DeltaNet [-1,1] (num_layers=1)", 1)})[0].model == "DeltaNet [-1,1] (this run)"
    assert st.model_title(renamed[1]) == "DeltaNet [-1,1] (this run)"


def test_every_disagreement_needs_the_notes_word():
    """A "cannot, but extrapolates" cell needs a note of its own; an optimisation finding, at least
    its kind's."""
    titles = {"t": "T"}
    contradicts, not_learned = _cell(theory.CANNOT, 3, 3), _cell(theory.CAN, 0, 0)
    notes = {"kinds": {st.NOT_LEARNED: "budget", st.CONTRADICTS: "generic"}}
    assert st.unexplained([contradicts, not_learned], titles, notes) == ["m | T"]
    assert st.unexplained([contradicts, not_learned], titles, {**notes, "cells": {"m | T": "a defect: ..."}}) == []
    assert st.unexplained([not_learned], titles, {}) == ["m | T"]


def test_the_committed_page_and_picture_equal_their_generation():
    """docs/state-table.md and docs/state-table.png are what `statetrack table --write` draws from
    the committed snapshots, and every cell where measurement and theory differ is explained."""
    differ = st.write_page(check=True, root=ROOT)
    assert differ == [], f"run `statetrack table --write` from the repository root: {differ} differ"
    cells, titles = st.committed_cells()
    notes = st.read_notes()
    assert len(notes["summary"].split()) <= 150
    missing = st.unexplained(cells, titles, notes)
    assert missing == [], f"explain these cells in {st.notes_file().name}: {missing}"
    # the six rungs, three seeds in each measured cell (a model added since reads "not measured yet")
    assert len(titles) == 6 and all(len(c.seeds) == 3 for c in cells if c.agreement != st.NOT_MEASURED)


def test_a_model_added_since_the_table_was_measured_reads_not_measured_yet(added_model, tmp_path, capsys):
    """A model added to the package after the committed snapshot: its rows read "not measured yet"
    in the terminal and on the page, theory's prediction beside each cell; writing the page again
    (no training) makes `statetrack table --check` pass, and no cell is left unexplained. A user's
    model registered from outside the package is in neither."""
    assert main(["table"]) == 0
    out = capsys.readouterr().out
    added = [line.split() for line in out.splitlines() if line.startswith("Added")]
    assert [row[:3] for row in added] == [["Added", "[0,1]", "1"], ["Added", "[-1,1]", "1"]]
    assert all(" ".join(row).count("not measured yet") == 6 for row in added)
    assert "Users" not in out and "'not measured yet': a model the committed table lacks" in out
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / st.PICTURE, tmp_path / st.PICTURE)  # it shows the measured cells: unchanged
    assert st.write_page(root=tmp_path) == [tmp_path / st.PAGE]
    assert st.write_page(check=True, root=tmp_path) == []
    page = (tmp_path / st.PAGE).read_text()
    assert "| Added [0,1] | 1 | not measured yet ✗ | not measured yet ✗ |" in page  # Thm. 1: cycles
    assert "| Added [-1,1] | 1 | not measured yet ✓ | not measured yet ✗ |" in page  # a sign flip; Thm. 2
    assert "12 cells not measured yet" in page and "Users" not in page
    cells, titles = st.committed_cells()
    assert st.unexplained(cells, titles, st.read_notes()) == []


ZEROS = '''
import torch
from torch import nn
import statetrack


@statetrack.register_model("zeros", display="Zeros")
class Zeros(nn.Module):
    """Outputs zeros: learns nothing."""

    def __init__(self, d_model: int):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x, state=None):
        return x * 0 * self.w, state
'''
# the table's ladder at two rungs, a tiny budget: the command's path, not its protocol
FAST = ["train.steps=30", "train.val_every=10", "eval.samples=16", "eval.lengths=[16, 64]",
        "tasks=[{name: word_problem, group: Z2}, {name: fsm, states: 6, supervise: all}]"]


def test_a_users_model_gets_its_row_with_one_command(tmp_path, capsys):
    plugin = tmp_path / "zeros.py"
    plugin.write_text(ZEROS)
    results = tmp_path / "results"
    argv = ["--import", str(plugin), "table", "--models", "zeros", "--results-dir", str(results), "--workers", "2",
            "--no-progress", *FAST]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # step 2's seed 0 at each chosen rate is the pilot's run (two tasks, three tied rates): not trained twice
    assert "6 runs are the pilot's" in out and re.search(r"\(quick\): 18 runs, 6 already done", out)
    assert "Zeros" in out and (results / "table" / "state-table.md").is_file() and (results / "table" / "state-table.png").is_file()
    rows = [r for r in json.loads((results / "table" / "cells.json").read_text()) if r["model"] == "Zeros"]
    assert len(rows) == 2 and all(r["fitted"] == [] and r["seeds"] == [0, 1, 2] for r in rows)  # did not fit anywhere
    assert all(isinstance(r["lr"], float) and isinstance(r["ties"], list) for r in rows)  # the rates each cell read
    zeros_line = next(line for line in out.splitlines() if line.startswith("Zeros"))
    assert zeros_line.count("did not fit") == 2
    assert {r["theory"] for r in rows} == {theory.UNKNOWN}  # a user's model declares no transition class
    # resumable: the same command trains nothing again
    assert main(argv) == 0
    counts = re.findall(r"(\d+) runs, (\d+) already done", capsys.readouterr().out)
    # the pilot, the table, and the larger budget of the cells it left undecided (every one: Zeros fits nothing)
    assert len(counts) == 3 and all(total == done for total, done in counts)
    # two tasks, three seeds, each of the three rates: Zeros' loss is the same at every rate, so they tie
    assert int(counts[2][0]) == 2 * 3 * 3


def test_a_step_cut_short_by_its_deadline_holds_the_next_step_back(tmp_path, capsys):
    """The table reads the pilot's rates and the larger budget reads the table's cells: a step that
    stopped at --stop-after plans nothing after it, so that the same command resumes it first."""
    from statetrack.store import Store

    plugin = tmp_path / "zeros_late.py"  # its own name: a process registers a name once
    plugin.write_text(ZEROS.replace('"zeros", display="Zeros"', '"zeros_late", display="Zeros late"'))
    results = tmp_path / "results"
    argv = ["--import", str(plugin), "table", "--models", "zeros_late", "--results-dir", str(results), "--workers",
            "1", "--no-progress", "--stop-after", "0.001", *FAST]
    assert main(argv) == 0
    assert "the pilot (step 1 of 3) stopped with 6 runs to train" in capsys.readouterr().out
    store = Store(results / "statetrack.db", read_only=True)
    assert len(store.experiments()) == 1  # the pilot's plan alone: no table planned from a part of it


def test_bad_table_requests_fail_naming_what_is_valid(capsys):
    assert main(["table", "--models", "no_such_model"]) == 2
    assert "no_such_model" in capsys.readouterr().err
    assert main(["table", "--zoo", "--models", "lstm"]) == 2
    assert main(["table", "--scale", "paper"]) == 2


def test_the_page_names_each_snapshots_revision_where_they_differ():
    same = {"git_rev": "abc1234"}
    pilot, full = "its pilot", "the full-budget check"
    assert st._revisions(same, {pilot: dict(same), full: dict(same)}) == "measured at abc1234"
    assert st._revisions(same, {pilot: {"git_rev": "def5678"}}) == "measured at abc1234 (its pilot at def5678)"
    assert (
        st._revisions(same, {pilot: None, full: {"git_rev": "x+dirty"}})
        == "measured at abc1234 (the full-budget check at x+dirty)"
    )


def test_the_page_says_how_many_runs_its_wall_time_covers():
    part = {"seconds": 120.0, "runs": 2}
    assert st._wall({"plan": [{}, {}], "parts": [part]}) == "2 min 00 s (2 runs)"
    assert st._wall({"plan": [{}, {}, {}], "parts": [part]}) == "2 min 00 s for 2 of its 3 runs"
    assert st._wall(None) == "0 s (0 runs)"
    # the workers each part trained with
    assert st._wall({"plan": [{}], "parts": [{**part, "runs": 1, "workers": 1}]}) == "2 min 00 s (1 runs, 1 worker)"
    two = [{**part, "runs": 1, "workers": 2}, {**part, "runs": 1, "workers": 1}]
    assert st._wall({"plan": [{}, {}], "parts": two}) == "4 min 00 s (2 runs, 1 or 2 workers)"


def test_the_early_stopping_section_says_whether_a_cell_rests_on_a_stopped_run():
    whole, stopped, checked = _cell(theory.CAN, 3, 2), _cell(theory.CAN, 3, 2), _cell(theory.CAN, 3, 2)
    stopped.stopped = [1]
    checked.stopped_reading = "3·1·0"

    def said(*cells_):
        return "\n".join(st._early_stopping_section(list(cells_), {"t": "t"}))

    assert "No run the table reads stopped before its budget" in said(whole)
    assert "1 cells rest on a run that stopped early" in said(whole, stopped)
    assert "1 of them read otherwise than their stopped runs" in said(whole, checked)
