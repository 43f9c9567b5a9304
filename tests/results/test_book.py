"""The reproduction book: snapshots exported from a store, the pages generated from them, the
committed book equal to its generation, and `statetrack reproduce` end to end on a tiny grid."""

import json
import sqlite3
from pathlib import Path

import pytest
import torch

from statetrack import paths
from statetrack.cli import main
from statetrack.experiments import runner
from statetrack.experiments import spec as spec_module
from statetrack.experiments.runner import RunOptions
from statetrack.experiments.spec import resolve
from statetrack.results import book
from statetrack.results.selection import final_loss
from statetrack.schema import REASONS
from statetrack.store import Store

ROOT = Path(__file__).resolve().parents[2]
# the demo's models as it names them, the LSTM at the others' 20 steps too (its own recipe trains it up to 4000)
TINY_MODELS = ("models=[{name: deltanet, eig_range: '[-1,1]', num_heads: 1}, {name: deltanet, eig_range: '[0,1]', "
               "num_heads: 1}, {name: lstm, lrs: [3.0e-3], train: {steps: 20}}]")
TINY = ["train.steps=20", TINY_MODELS, "seeds=[0,1,2]", "eval.samples=16", "eval.lengths=[40,64,128,256,1000]"]


def test_a_model_added_to_the_package_changes_no_page_of_the_book(added_model):
    """The book (its pages, claims.md and the README's book blocks) as `statetrack book --check` reads
    it is its generation from the committed snapshots, with a model added to the package that no
    snapshot has measured."""
    differ = book.write_book(ROOT / "docs", ROOT / "README.md", check=True)
    assert differ == [], f"run `statetrack docs --write` from the repository root: {', '.join(map(str, differ))} differ"


@pytest.fixture(scope="module")
def committed():
    """The committed snapshots and each one scored (once for the tests that read them)."""
    snapshots = book.read_snapshots()
    return snapshots, book.scored_snapshots(snapshots)


def test_every_shipped_experiment_has_its_page_and_every_claim_its_row(committed):
    from statetrack.experiments.spec import shipped_specs

    snapshots, scores = committed
    pages = book.book_pages(snapshots, scores)
    assert set(pages) == {"claims.md"} | {f"experiments/{name}.md" for name in shipped_specs()}
    header, body, counts = book.claims_rows(snapshots, "quick", scores)
    assert sum(counts.values()) == len(body) and {row[0] for row in body} == {
        f"[`{n}`](experiments/{n}.md)" for n in shipped_specs()
    }
    # the rules are stated once, on the claims page; each experiment's page links to them
    assert pages["claims.md"].count("## How a verdict is read") == 1
    for name in shipped_specs():
        page = pages[f"experiments/{name}.md"]
        assert "seed rule decides" not in page and f"../claims.md#{book.RULES_ANCHOR}" in page


def _fit_figures(snapshot: dict, entry: dict, claim: dict, length: int) -> dict:
    """{seed: figure at `length`} of the runs behind `entry`, read off the snapshot's rows, on the
    task they trained on (or the spec's fit variant) and on the claim's measure."""
    task = entry["run_task"] + (f" [{claim['fit_variant']}]" if claim["fit_variant"] else "")
    key = {"scaled": "scaled_accuracy", "sequence": "sequence_accuracy"}.get(claim["measure"])
    if claim["measure"].startswith("metric:"):  # an analysis figure: fit is read on scaled accuracy
        key = "scaled_accuracy"
    elif key is None:  # extrapolation: the selection's metric
        key = entry["selection"]["metric"]
    return {r["seed"]: r[key] for r in snapshot["results"] if (r["task"], r["model"], r["lr"], r["length"])
            == (task, entry["model"], entry["lr"], length) and r.get("dataset_size") == entry["dataset_size"]}


def test_no_verdict_on_extrapolation_success_or_comparison_rests_on_a_model_that_did_not_fit(committed):
    """Every ✓ and ✗ of the book, read against the snapshots' own rows: a claim beyond the training
    lengths, on an analysis metric, on an evaluation variant other than the one the fit is read on,
    or a comparison's winner, is decided by the seeds that reached the claim's fit threshold at the
    longest training length alone (the others could not have changed it); a claim that a model fits
    or fails at the training lengths, or cannot learn the task at all (fit 0), is exempt."""
    from statetrack.results.claims import FAIL, PASS

    snapshots, scores = committed
    checked = 0
    for key, snapshot in snapshots.items():
        scored = scores[key]
        train = scored.train_length
        for verdict in scored.verdicts:
            claim = verdict["claim"]
            if verdict["verdict"] not in (PASS, FAIL) or claim["fit"] <= 0 or claim["measure"].startswith("check:"):
                continue
            for result in verdict["results"]:
                if result["holds"] is None:  # undecided entries leave a claim ✗ only when another entry fails
                    assert verdict["verdict"] == FAIL and any(r["holds"] is False for r in verdict["results"])
                    continue
                if result["holds"] is False and any(t["holds"] is False for t in result["ties"].values()):
                    continue  # failed at a rate tied with the selected one (the tie rule: tests/results/test_claims.py)
                entry = next(e for e in scored.summary if (e["task"], e["model"], e["dataset_size"])
                             == (result["task"], result["model"], result["dataset_size"]))
                length = train[entry["run_task"]]
                beyond = claim["measure"] == "extrapolation" or max(n for n in entry["lengths"] if claim["lengths"] is None
                                                                     or (n == claim["lengths"] if isinstance(claim["lengths"], int)
                                                                         else claim["lengths"][0] <= n <= claim["lengths"][1])) > length
                other_variant = entry["variant"] not in ("", claim["fit_variant"] or "")
                if not (beyond or other_variant or claim["test"] == "beats" or claim["measure"].startswith("metric:")):
                    continue
                fits = _fit_figures(snapshot, entry, claim, length)
                fitted = [s for s, v in result["seeds"].items() if v is not None and fits.get(s) is not None
                          and fits[s] >= claim["fit"] - 1e-9]
                bound = result["rival"] if claim["test"] == "beats" else claim["bound"]
                passing = sum(1 for s in fitted if (result["seeds"][s] >= bound - 1e-9 if claim["test"] == "at_least"
                                                    else result["seeds"][s] < bound if claim["test"] == "below"
                                                    else result["seeds"][s] > bound))
                n, failing = len(result["seeds"]), len(fitted) - passing
                decided = {"majority": 2 * passing > n if result["holds"] else 2 * (n - failing) <= n,
                           "all": passing == n if result["holds"] else failing > 0,
                           "best": passing > 0 if result["holds"] else failing == n}[claim["seeds"]]
                where = f"{snapshot['experiment']}: {claim['text']!r}, {result['model']} on {result['task']}"
                assert decided, f"{where}: decided by seeds that did not fit ({fits})"
                checked += 1
    assert checked > 20  # the gate is exercised on the shipped snapshots, not vacuously


@pytest.fixture
def tiny_reproduce(monkeypatch, tmp_path):
    """`statetrack reproduce` on the shipped demo with a tiny grid (20 steps, 16 samples), in this process."""
    real = spec_module.resolve
    monkeypatch.setattr(spec_module, "resolve", lambda spec, scale, overrides, *a, **k: real(spec, scale, TINY, *a, **k))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(paths, "snapshot_folder", lambda: tmp_path / "snapshots")  # not the package's
    return lambda *extra: main(["reproduce", "demo", "--workers", "1", "--no-progress", "--book-dir", "book",
                                "--readme", "README.md", *extra])


def test_reproduce_runs_into_one_store_and_writes_snapshot_book_and_readme(tiny_reproduce, tmp_path):
    (tmp_path / "README.md").write_text("# x\n<!-- generated:demo -->\nstale\n<!-- /generated:demo -->\nkept\n")
    assert tiny_reproduce() == 0
    snapshot = json.loads((tmp_path / "snapshots/demo.quick.json").read_text())
    assert snapshot["scale"] == "quick" and len(snapshot["plan"]) == 9 and len(snapshot["runs"]) == 9
    assert {r["length"] for r in snapshot["results"]} == {40, 64, 128, 256, 1000}
    assert [p["runs"] for p in snapshot["parts"]] == [9] and snapshot["parts"][0]["seconds"] > 0
    machine = snapshot["parts"][0]["machine"]
    assert machine["torch"] and machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    demo = (tmp_path / "book/experiments/demo.md").read_text().split("## quick scale")[1].split("\n## ")[0]
    assert "statetrack reproduce --scale quick demo" in demo and "9 of 9 runs done" in demo
    assert "seeds 0, 1, 2" in demo and "20 steps" in demo and "evaluated at 40, 64, 128, 256, 1000" in demo
    assert " of 3 seeds" in demo and "### Claims: did it reproduce?" in demo
    readme = (tmp_path / "README.md").read_text()
    assert "stale" not in readme and "did it reproduce?" in readme and readme.endswith("<!-- /generated:demo -->\nkept\n")
    assert "| [`demo`](experiments/demo.md) |" in (tmp_path / "book/claims.md").read_text()
    # resumed: nothing left to train, so no part is added and the book is unchanged
    assert tiny_reproduce() == 0
    assert [p["runs"] for p in json.loads((tmp_path / "snapshots/demo.quick.json").read_text())["parts"]] == [9]
    assert book.write_book(tmp_path / "book", tmp_path / "README.md", check=True) == []


SNAPSHOT = Path("snapshots/demo.quick.json")  # under the test's folder, not the package's


def test_an_interrupted_part_keeps_its_time_and_the_next_part_adds_up(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    runner.run_experiment(resolve("demo", "quick", TINY[:2] + ["seeds=[0]", "eval.samples=16"], name="demo"), options=RunOptions(workers=1, progress=False))
    store = Store(tmp_path / "results/statetrack.db")
    book.write_snapshot(store, "demo", {"seconds": 5.0, "runs": 2, "workers": 1}, path=SNAPSHOT)
    book.write_snapshot(store, "demo", {"seconds": 3.0, "runs": 1, "workers": 1}, path=SNAPSHOT)
    book.write_snapshot(store, "demo", {"seconds": 1.0, "runs": 0, "workers": 1}, path=SNAPSHOT)  # trained nothing: no part
    snapshot = json.loads((tmp_path / SNAPSHOT).read_text())
    assert book.wall_seconds(snapshot) == 8.0 and book.duration(8.0) == "8 s" and book.duration(3725) == "1 h 2 min"
    # the snapshot names the revisions its runs were trained at, the most runs' first
    trained_at = {r["git_rev"] for r in snapshot["runs"]}
    assert len(trained_at) == 1 and snapshot["git_rev"] == trained_at.pop()
    # and each run's final training loss (the state table's pilot chooses its rates by it)
    assert all(r["final_loss"] == final_loss(store.curves(r["id"])) > 0 for r in snapshot["runs"])
    with sqlite3.connect(tmp_path / "results/statetrack.db") as db:
        db.execute("UPDATE runs SET git_rev = 'abc1234' WHERE id = (SELECT min(id) FROM runs)")
    book.write_snapshot(store, "demo", path=SNAPSHOT)
    assert json.loads((tmp_path / SNAPSHOT).read_text())["git_rev"] == f"{snapshot['git_rev']} and abc1234"
    assert book.runs_revision([]) == "" and book.runs_revision([{"git_rev": "a"}, {"git_rev": "b"}, {"git_rev": "b"}]) == "b and a"
    # a run resumed at another revision names both; each counts once per run
    assert book.runs_revision([{"git_rev": "a and b"}, {"git_rev": "b"}, {"git_rev": "c and b and c"}]) == "b and a and c"
    # another plan (other seeds): the parts start afresh
    runner.run_experiment(resolve("demo", "quick", TINY[:2] + ["seeds=[1]", "eval.samples=16"], name="demo"), options=RunOptions(workers=1, progress=False))
    book.write_snapshot(store, "demo", {"seconds": 2.0, "runs": 3, "workers": 1}, path=SNAPSHOT)
    assert book.wall_seconds(json.loads((tmp_path / SNAPSHOT).read_text())) == 2.0
    # a plan that adds runs to it (another seed beside): the parts add up
    runner.run_experiment(resolve("demo", "quick", TINY[:2] + ["seeds=[1, 2]", "eval.samples=16"], name="demo"), options=RunOptions(workers=1, progress=False))
    book.write_snapshot(store, "demo", {"seconds": 4.0, "runs": 3, "workers": 1}, path=SNAPSHOT)
    assert book.wall_seconds(json.loads((tmp_path / SNAPSHOT).read_text())) == 6.0
    # the same plan measured again from the start (a fresh store): its time replaces the earlier parts'
    book.write_snapshot(store, "demo", {"seconds": 7.0, "runs": 6, "workers": 1}, path=SNAPSHOT)
    assert [p["seconds"] for p in json.loads((tmp_path / SNAPSHOT).read_text())["parts"]] == [7.0]


def test_a_claim_edited_in_the_spec_is_rescored_from_the_snapshot_without_a_run(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    runner.run_experiment(resolve("demo", "quick", TINY, name="demo"), options=RunOptions(workers=1, progress=False))
    book.write_snapshot(Store(tmp_path / "results/statetrack.db"), "demo", path=SNAPSHOT)
    before = book.book_pages(book.read_snapshots(SNAPSHOT.parent))["experiments/demo.md"]
    demo = book.spec_now("demo", "quick")
    demo["paper"]["claims"][0]["text"] = "an edited claim"
    monkeypatch.setattr(book, "spec_now", lambda name, scale=None: demo if name == "demo" else None)
    after = book.book_pages(book.read_snapshots(SNAPSHOT.parent))["experiments/demo.md"]
    assert "an edited claim" in after and "an edited claim" not in before


def test_reproduce_and_book_refuse_bad_input_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "no-such-experiment"]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'no-such-experiment'; expected shipped experiments: " in err and err.count("\n") == 1
    (tmp_path / "demo.quick.json").write_text("{not json")
    monkeypatch.setattr(paths, "snapshot_folder", lambda: tmp_path)
    assert main(["book"]) == 2
    err = capsys.readouterr().err
    assert "not a statetrack snapshot" in err and err.count("\n") == 1
    assert not (tmp_path / "docs/claims.md").exists()


def test_the_revision_is_dirty_for_changes_to_the_package_only(tmp_path):
    """A snapshot names the revision of the package's source: what reproduce writes (a snapshot, in
    the package's snapshot folder; the book, beside it) leaves it clean, so the second experiment of
    one reproduce is not "+dirty"; an uncommitted change to the package's code or specs is."""
    import subprocess

    from statetrack.experiments.runner import git_revision

    package, docs = tmp_path / "src" / "pkg", tmp_path / "docs"
    package.mkdir(parents=True)
    docs.mkdir()
    (package / "code.py").write_text("x = 1\n")
    (docs / "snapshot.json").write_text("{}\n")

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    clean = git_revision(package)
    assert clean != "unknown" and not clean.endswith("+dirty")
    (docs / "snapshot.json").write_text('{"measured": true}\n')
    assert git_revision(package) == clean
    # the committed snapshots live in the package; writing one leaves it clean, a spec does not
    snapshots, specs = package / "experiments" / "snapshots", package / "experiments" / "specs"
    snapshots.mkdir(parents=True)
    specs.mkdir(parents=True)
    (snapshots / "state-table.quick.json").write_text("{}\n")
    (specs / "demo.yaml").write_text("steps: 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "two")
    clean = git_revision(package)
    (snapshots / "state-table.quick.json").write_text('{"measured": true}\n')
    (snapshots / "demo.quick.json").write_text("{}\n")  # a new one, untracked
    assert git_revision(package) == clean
    (specs / "demo.yaml").write_text("steps: 2\n")
    assert git_revision(package) == clean + "+dirty"
    git("checkout", "--", ".")
    (package / "code.py").write_text("x = 2\n")
    assert git_revision(package) == clean + "+dirty"


def test_the_machine_names_the_vector_kernels_its_figures_repeat_on():
    info = {"cores": 2, "cpu_capability": "AVX2", "memory_gib": 24, "gpu": None, "torch": "2.13.0", "python": "3.11.7"}
    assert book.describe_machine(info) == "2 CPU cores (AVX2), 24 GiB, torch 2.13.0, Python 3.11.7"
    older = {k: v for k, v in info.items() if k != "cpu_capability"}  # a snapshot from before the field
    assert book.describe_machine(older) == "2 CPU cores, 24 GiB, torch 2.13.0, Python 3.11.7"


def test_probes_render_as_one_table_and_a_bad_probe_is_named():
    from statetrack.errors import StatetrackError
    from statetrack.experiments.spec import paper_of

    paper = paper_of({"name": "x", "paper": {"source": "s", "probes": [
        {"setting": "seeds 3..5", "command": "statetrack run demo 'seeds=[3,4,5]'", "figure": "2 of 3 exact to 256"},
        {"setting": "lr 3e-3", "command": "statetrack run demo 'lrs=[3.0e-3]'", "figure": "0 of 3", "verdict": "budget"}]}})
    assert book.probes_table(paper["probes"]).splitlines() == [
        "| probe | command | figure | verdict |",
        "| :--- | :--- | :--- | :--- |",
        "| seeds 3..5 | `statetrack run demo 'seeds=[3,4,5]'` | 2 of 3 exact to 256 | - |",
        "| lr 3e-3 | `statetrack run demo 'lrs=[3.0e-3]'` | 0 of 3 | budget |",
    ]
    with pytest.raises(StatetrackError, match="paper.probes.0"):
        paper_of({"name": "x", "paper": {"source": "s", "probes": [{"setting": "a", "figure": "b"}]}})


def test_notes_are_short_and_every_open_quick_claim_says_why(committed):
    """Each experiment's notes are a summary of at most 150 words (the probes are a table), and
    every claim that is ✗ or inconclusive at the quick scale has its one-line reason, which ends its
    row of the claims page."""
    from statetrack.results.claims import FAIL, INCONCLUSIVE

    snapshots, scores = committed
    for name in book.shipped_specs():
        paper = book._paper(name)
        assert len(paper["notes"].split()) <= 150, f"{name}: notes of {len(paper['notes'].split())} words"
    header, body, _ = book.claims_rows(snapshots, "quick", scores)
    verdict, reason = header.index("verdict"), header.index("reason")
    open_rows = [row for row in body if row[verdict] in (FAIL, INCONCLUSIVE)]
    assert open_rows and all(row[reason].startswith(REASONS) for row in open_rows), [
        row[:2] for row in open_rows if not row[reason].startswith(REASONS)
    ]
    assert all(row[reason] == "-" for row in body if row not in open_rows)


def test_a_reason_is_one_short_line_of_one_of_three_kinds():
    from statetrack.errors import StatetrackError
    from statetrack.experiments.spec import paper_of

    claim = {"text": "t", "model": "LSTM", "at_least": 0.9}
    good = paper_of({"name": "x", "paper": {"source": "s", "claims": [{**claim, "reason": "the budget: 1 of 3 fit"}]}})
    assert good["claims"][0]["reason"] == "the budget: 1 of 3 fit"
    for bad in ("the seeds were unlucky", "the budget: " + "word " * 40):
        with pytest.raises(StatetrackError, match="reason: one line of at most 40 words"):
            paper_of({"name": "x", "paper": {"source": "s", "claims": [{**claim, "reason": bad}]}})


def test_the_book_says_how_many_runs_stopped_early():
    plan = [{"id": "a", "steps": 100}, {"id": "b", "steps": 100}]
    runs = [{"id": "a", "status": "done", "steps": 100}, {"id": "b", "status": "done", "steps": 40}]
    snapshot = {"plan": plan, "runs": runs}
    assert book.stopped_line(snapshot).startswith("Early stopping: 1 of 2 runs stopped")
    assert book.stopped_line(snapshot).endswith("no probe turns the stop off yet.")
    other = [{"command": "statetrack run x 'seeds=[0]'"}, {"command": "statetrack run x train.early_stop_fit=0.99"}]
    assert book.stopped_line(snapshot, other).endswith("no probe turns the stop off yet.")
    full = other + [{"command": "statetrack run x train.early_stop_fit=null train.early_stop_loss=null"}]
    assert book.stopped_line(snapshot, full).endswith("the notes' probes compare runs with the stop turned off.")
    runs[1]["steps"] = 100
    assert "none of the 2 runs stopped" in book.stopped_line({"plan": plan, "runs": runs})
