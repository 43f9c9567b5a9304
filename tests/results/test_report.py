"""The report answers "did it reproduce?": a spec's `paper:` (the paper's figures and claims) checked
and set beside the measured figures with a verdict per claim, the index's verdicts column, and the
readability fixes (no "± 0" for one seed, text columns left-aligned, distinguishable curves)."""

import math
import textwrap

import pytest
import yaml
from claims_data import MEASURED, PAPER

from statetrack.errors import StatetrackError
from statetrack.experiments import expand, load_spec
from statetrack.experiments.spec import by_settings, paper_of, shipped_specs
from statetrack.results.plots import curve_style, log_axis
from statetrack.results.report import write_index, write_report
from statetrack.results.scoring import score_store
from statetrack.results.selection import summarize
from statetrack.results.tables import markdown_table, table_rows
from statetrack.store import Outcome, Plan, RunClaim, Store


def _store(tmp_path, paper=PAPER, seeds=(0, 1)) -> Store:
    store = Store(tmp_path / "statetrack.db")
    planned = []
    for model in ("DeltaNet [-1,1]", "DeltaNet [0,1]", "LSTM"):
        for seed in seeds:
            run_id = f"{model}-{seed}"
            planned.append({"id": run_id, "model": model, "task": "parity", "lr": 0.01, "seed": seed})
            scaled = MEASURED.get((model, seed))
            if scaled is None:
                continue
            config = {"experiment": "parity", "model": {"name": model}, "task": {"name": "parity"},
                      "train": {"lr": 0.01, "seed": seed, "min_length": 3, "max_length": 40}, "eval": {"lengths": [40, 256, 1000]}}
            store.start_run(RunClaim(run_id, "parity", model, "parity", seed, 0.01, config, "abc"))
            evals = [{"length": n, "accuracy": (1 + v) / 2, "scaled_accuracy": v, "samples": 64} for n, v in scaled.items()]
            store.finish_run(run_id, Outcome(evals, [{"step": 10, "loss": 0.7, "accuracy": 0.5}, {"step": 20, "loss": 0.01, "accuracy": 1.0}], 20, 100, 1.0, 0.1))
    spec = {"name": "parity", "scale": "quick", "description": "parity, synthetic", "selection": {"seeds": "mean"}}
    store.set_plan(Plan("parity", {**spec, **({"paper": paper} if paper else {})}, planned))
    return store


def test_report_sets_the_papers_figures_beside_ours_with_verdicts(tmp_path):
    out = write_report(score_store(_store(tmp_path), "parity", run_data=True), tmp_path)
    md = (out / "report.md").read_text()
    # verdicts first, then the accuracy plot, then the figures
    assert md.index("## Claims: did it reproduce?") < md.index("![accuracy_vs_length]") < md.index("## Paper vs measured") < md.index("## Headline")
    assert "Did it reproduce? 2/6 claims ✓, 1 ✗, 2 not measured, 1 not run at this scale" in md
    figures = md.split("## Paper vs measured")[1].split("\n## ")[0]
    # measured: mean over seeds (the selection) of the mean over lengths 40..256
    assert "| parity | DeltaNet [-1,1] | 1.000 | 0.965 |" in figures and "| parity | DeltaNet [0,1] | 0.017 | 0.025 |" in figures
    assert "| parity | DeltaNet [-1,1] | 1.000 | 0.965 | 0.950..0.980 (2 seeds) |" in figures  # each seed's mean over 40..256
    assert "| - | Transformer | fails | not run |" in figures  # named by the paper, not planned: listed, never dropped
    claims = md.split("## Claims: did it reproduce?")[1].split("\n## ")[0]
    # per seed, the worst length of the range: seed 0 0.96, seed 1 0.90
    assert "| DeltaNet [-1,1] extrapolates | scaled acc. at each length in 40..256 >= 0.9, in most seeds | 2 of 2 seeds, 0.930 | ✓ |" in claims
    # seed 1 of DeltaNet [0,1] has not finished: 1 of 2 is no majority yet
    assert ("| DeltaNet [0,1] does not | scaled acc. at each length in 40..256 < 0.2, in most seeds | "
            "1 of 2 seeds, 0.050 (1 of 2 seeds not measured) | not measured |") in claims
    assert "| DeltaNet [-1,1] holds at 1000 | scaled acc. at 1000 >= 0.9, in most seeds | 0 of 2 seeds, 0.400 | ✗ |" in claims
    assert ("| the negative range helps | scaled acc. mean over 40..256 > DeltaNet [0,1]'s, in most seeds | "
            "2 of 2 seeds, 0.965 vs 0.025 | ✓ |") in claims
    assert "| the LSTM extrapolates too | scaled acc. at each length in 40..256 >= 0.9, in most seeds | not run yet: LSTM | not measured |" in claims
    assert ("| the Transformer fails | scaled acc. at each length in 40..256 < 0.5, in most seeds | not in this run: Transformer "
            "| not run at this scale |") in claims
    page = (out / "report.html").read_text()
    assert '<td class="pass">✓</td>' in page and '<td class="fail">✗</td>' in page and "<h2>Paper vs measured</h2>" in page


def test_the_report_marks_a_run_still_learning_when_its_budget_ended(tmp_path):
    """A run that used its whole budget with its loss still falling is "done, still learning" in
    the runs table, and the status line counts it; one that stopped early is not marked."""
    store = Store(tmp_path / "statetrack.db")
    falling = [{"step": s, "loss": 2.0 * math.exp(-s / 400), "accuracy": 0.5} for s in range(50, 1001, 50)]
    planned = []
    for run_id, steps in (("budget", 1000), ("early", 1000)):
        config = {"experiment": "parity", "model": {"name": "LSTM"}, "task": {"name": "parity"},
                  "train": {"lr": 0.01, "seed": 0, "steps": 1000}, "eval": {"lengths": [40]}}
        store.start_run(RunClaim(run_id, "parity", "LSTM", "parity", 0 if run_id == "budget" else 1, 0.01, config, "abc"))
        curve = falling if run_id == "budget" else falling[:10]
        store.finish_run(run_id, Outcome([{"length": 40, "accuracy": 0.6, "scaled_accuracy": 0.2, "samples": 64}], curve, curve[-1]["step"], 100, 1.0, 0.1))
        planned.append({"id": run_id, "model": "LSTM", "task": "parity", "lr": 0.01, "seed": 0 if run_id == "budget" else 1,
                        "steps": steps, "train_length": 40, "lengths": [40]})
    store.set_plan(Plan("parity", {"name": "parity", "scale": "quick"}, planned))
    md = (write_report(score_store(store, "parity", run_data=True), tmp_path) / "report.md").read_text()
    assert "2 of 2 runs done at scale quick (1 still learning when their budget ended" in md
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| budget") or line.startswith("| early")}
    assert "done, still learning" in rows["budget"] and "still learning" not in rows["early"]
    # the fit table: the figure at the longest training length, no seed at the fit threshold 0.9, the
    # median steps trained (1000 and 500) of the budget, one of the two runs still learning
    fit = md.split("## Fit")[1].split("\n## ")[0]
    assert "fit threshold 0.9" in fit
    assert [cell.strip() for cell in fit.splitlines()[-1].strip("|").split("|")] == [
        "parity", "LSTM", "0.01", "0.200 (0.200 to 0.200) at 40", "0 of 2", "750 of 1000", "1 of 2", "-"]


def test_the_fit_table_flags_a_run_that_collapsed_to_one_class():
    """Seed 0 predicted one class at its training length without fitting it: collapsed; seed 1
    predicted several and seed 2 predicted one but fitted (a task whose answers there are one class)."""
    from statetrack.results.scoring import fit_table, score
    from statetrack.results.tables import fit_rows

    rows = [{"model": "LSTM", "task": "parity", "seed": s, "lr": 0.01, "length": 40, "scaled_accuracy": v,
             "accuracy": (1 + v) / 2, "predicted_classes": classes}
            for s, v, classes in ((0, 0.0, 1.0), (1, 0.3, 2.0), (2, 1.0, 1.0))]
    plan = Plan("parity", {"name": "parity", "scale": "quick"},
                [{"id": f"r{s}", "model": "LSTM", "task": "parity", "lr": 0.01, "seed": s, "steps": 100,
                  "train_length": 40, "lengths": [40]} for s in (0, 1, 2)])
    runs = [{"id": f"r{s}", "status": "done", "steps": 100} for s in (0, 1, 2)]
    [fit] = fit_table(score("parity", plan, runs, rows), None)
    assert fit["collapsed"] == [0]
    assert fit_rows([fit])[1][1][0][-1] == "1 of 3"
    # runs evaluated before the count was recorded: not known
    [old] = fit_table(score("parity", plan, runs, [{k: v for k, v in r.items() if k != "predicted_classes"} for r in rows]), None)
    assert old["collapsed"] is None and fit_rows([old])[1][1][0][-1] == "-"


def test_load_spec_records_what_the_overrides_left_out():
    from statetrack.experiments import load_spec

    spec = load_spec("demo", overrides=["models=[{name: lstm}]"])
    assert spec["left_out"] == ["DeltaNet [-1,1]", "DeltaNet [0,1]"]
    assert "left_out" not in load_spec("demo") and "left_out" not in load_spec("demo", overrides=["train.steps=5"])


def test_the_report_writes_vector_plots_and_latex_tables_on_request(tmp_path):
    out = write_report(score_store(_store(tmp_path), "parity", run_data=True), tmp_path, formats=("png", "svg", "pdf"))
    assert (out / "accuracy_vs_length.svg").read_text().lstrip().startswith("<?xml")
    assert (out / "accuracy_vs_length.pdf").read_bytes().startswith(b"%PDF")
    paper = (out / "paper_vs_measured.tex").read_text()
    # the same rows as the markdown table, escaped for LaTeX, the table's key as the caption
    assert paper.startswith("\\begin{table}[t]") and "\\begin{tabular}{lllll}" in paper  # paper and measured hold words too ("fails", "not run")
    assert "parity & DeltaNet [-1,1] & 1.000 & 0.965 & 0.950..0.980 (2 seeds) \\\\" in paper
    assert "\\caption{parity: Paper vs measured. Paper:" in paper and "_" not in paper.replace("\\_", "")
    headline = (out / "headline.tex").read_text()
    assert "\\toprule" in headline and "\\bottomrule" in headline and headline.count(" \\\\\n") >= 3
    # without formats, PNG only
    again = write_report(score_store(_store(tmp_path / "b"), "parity", run_data=True), tmp_path / "b")
    assert not list(again.glob("*.svg")) and (again / "headline.tex").is_file()


def test_index_shows_each_experiments_verdicts(tmp_path):
    store = _store(tmp_path)
    store.set_plan(Plan("nopaper", {"name": "nopaper", "scale": "quick"}, []))
    write_report(score_store(store, "parity", run_data=True), tmp_path)
    md = (write_index(store, tmp_path).parent / "index.md").read_text()
    assert "| experiment | scale | done | expected | failed | missing | claims |" in md
    assert "| 2/6 claims ✓, 1 ✗, 2 not measured, 1 not run at this scale |" in md
    assert "| [nopaper](nopaper/report.html) | quick | 0 | 0 | 0 | 0 | - |" in md
    # scored by the caller as its report was (the spec's paper as it is now): the index shows those verdicts
    only = score_store(store, "parity", paper={**PAPER, "claims": PAPER["claims"][:1]})
    assert "| 1/1 claims ✓ |" in (write_index(store, tmp_path, {"parity": only}).parent / "index.md").read_text()


def test_report_all_gives_the_index_the_verdicts_of_the_reports(tmp_path, capsys, monkeypatch):
    """`statetrack report --all` scores each experiment once, with its spec's `paper:` and
    `selection:` as they are now, and the index shows the verdicts its report shows."""
    import statetrack.experiments.spec as spec
    from cli_helpers import run_cli

    _store(tmp_path)
    now = {"paper": {**PAPER, "claims": PAPER["claims"][:1]}, "selection": {"seeds": "max"}}
    monkeypatch.setattr(spec, "spec_now", lambda name, scale=None: now)
    code, _, err = run_cli(capsys, "report", "--all", "--results-dir", str(tmp_path))
    assert code == 0, err
    index, page = (tmp_path / "index.md").read_text(), (tmp_path / "parity" / "report.md").read_text()
    assert "| 1/1 claims ✓ |" in index and "1/1 claims ✓" in page  # the plan's paper has six claims


def test_one_seed_prints_no_spread_and_text_columns_are_left_aligned(tmp_path):
    store = _store(tmp_path, seeds=(0,))
    md = (write_report(score_store(store, "parity", run_data=True), tmp_path) / "report.md").read_text()
    assert "## Scaled accuracy, mean ± std over seeds" not in md and "## Per seed" not in md  # one seed: the headline is all
    headline = md.split("## Headline")[1].split("\n## ")[0]
    cells = "\n".join(line for line in headline.splitlines() if line.startswith("|"))
    assert "±" not in cells and "| DeltaNet [-1,1] | 0.820 | 1.000 | 0.960 | 0.500 |" in cells
    assert "| :--- | ---: | ---: | ---: | ---: |" in headline and "task parity; lr 0.01" in headline  # one task, one lr: named once
    runs = md.split("## Runs")[1]
    assert "| run | model | task | lr | seed | status |" in runs and "| :--- | :--- | :--- | ---: | ---: | :--- |" in runs
    assert all(f"| {r['id']} | " in runs for r in store.runs("parity"))  # the ids `statetrack analyze` and `load_run` take
    _, body = table_rows(summarize(store.results("parity")), "mean")
    assert not any("±" in cell for row in body for cell in row)
    assert markdown_table(["claim", "n"], [["a claim", "3"]]).splitlines()[1] == "| :--- | ---: |"


@pytest.mark.parametrize("paper, message", [
    ("Grazzi", "paper must be a mapping of settings, got 'Grazzi'"),
    ({"figures": {}}, "paper.source is required"),
    ({"source": "x", "table": 1}, "paper: unknown key 'table'; expected one of: source, metric, measure"),
    ({"source": "x", "measure": "best"}, "paper.measure must be one of: scaled, sequence, extrapolation, metric:NAME"),
    ({"source": "x", "lengths": [256, 40]}, "paper.lengths must be a test length or [shortest, longest], got [256, 40]"),
    ({"source": "x", "figures": {"LSTM": [1]}}, "the figure of 'LSTM' must be a number or a short text"),
    ({"source": "x", "figures": {"GRU": 1.0}}, "paper.figures: unknown model 'GRU'; expected one of: DeltaNet [-1,1], LSTM"),
    ({"source": "x", "figures": {"copy": {"LSTM": 1.0}}}, "paper.figures: unknown task 'copy'; expected one of: modadd(m=3)"),
    ({"source": "x", "claims": [{"text": "t", "model": "LSTM"}]}, "paper.claims[0]: needs exactly one of at_least, below, beats, got 0"),
    ({"source": "x", "claims": [{"text": "t", "model": "LSTM", "at_least": "high"}]}, "claims[0].at_least must be a number, got 'high'"),
    ({"source": "x", "claims": [{"model": "LSTM", "below": 0.5}]}, "paper.claims[0].text is required"),
    ({"source": "x", "claims": [{"text": "t", "at_least": 0.5}]}, "paper.claims[0].model is required"),
    ({"source": "x", "claims": [{"text": "t", "model": "Mamba", "below": 0.5}]},
     "paper.claims[0]: unknown model 'Mamba'; expected one of: DeltaNet [-1,1], LSTM"),
    ({"source": "x", "claims": [{"text": "t", "model": "LSTM", "beats": "GRU"}]}, "paper.claims[0]: unknown model 'GRU'"),
    ({"source": "x", "claims": [{"text": "t", "model": "LSTM (d_model=16)", "below": 0.5}]},
     "paper.claims[0]: unknown model 'LSTM (d_model=16)'"),  # the spec's one LSTM has d_model 8
    ({"source": "x", "measure": "metric:tv_distance", "claims": [{"text": "t", "model": "LSTM", "beats": "LSTM"}]},
     "beats compares accuracies (higher is better); with a metric or a check give at_least or below"),
    ({"source": "x", "claims": [{"text": "t", "model": "LSTM", "task": "parity", "below": 0.5}]},
     "paper.claims[0]: unknown task 'parity'; expected one of: modadd(m=3)"),
])
def test_a_bad_paper_section_is_a_one_line_error(tiny_spec, paper, message):
    path = tiny_spec()
    spec = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**spec, "paper": paper}))
    with pytest.raises(StatetrackError) as error:
        load_spec(str(path))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_paper_section_names_a_model_by_its_settings(tiny_spec):
    """The spec's one LSTM (d_model 8) is labelled "LSTM"; a claim may name it "LSTM (d_model=8)"."""
    path = tiny_spec()
    spec = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**spec, "paper": {"source": "x", "claims": [
        {"text": "t", "model": "LSTM (d_model=8)", "below": 0.5}]}}))
    loaded = load_spec(str(path))
    assert by_settings(paper_of(loaded), loaded)["claims"][0]["models"] == ["LSTM"]


def test_the_paper_section_changes_no_run_id(tiny_spec):
    path = tiny_spec()
    before = [r.id for r in expand(load_spec(str(path)))]
    path.write_text(path.read_text() + textwrap.dedent("""
        paper:
          source: Grazzi et al. 2025
          figures: {LSTM: 0.5}
          claims: [{text: the LSTM fails, model: LSTM, below: 0.5}]
        """))
    spec = load_spec(str(path))
    assert spec["paper"]["source"] == "Grazzi et al. 2025"
    assert [r.id for r in expand(spec)] == before


@pytest.mark.parametrize("name", sorted(shipped_specs()))
def test_every_shipped_spec_states_the_papers_figures_and_claims(name):
    for scale in ("quick", "paper"):
        paper = paper_of(load_spec(name, scale))  # names checked against the spec's models and tasks at every scale
        assert paper["source"] and paper["claims"] and any(paper["figures"].values()), name


def test_curves_stay_distinguishable_and_loss_ticks_read_plainly():
    styles = [curve_style(i) for i in range(8)]
    assert len({(s["marker"], s["ls"]) for s in styles}) == 8 and all(s["markerfacecolor"] == "none" for s in styles)
    assert styles[0]["markersize"] > styles[1]["markersize"] > styles[2]["markersize"]  # one inside another shows
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_yscale("log")
    ax.plot([0, 1], [0.002, 3.0])
    log_axis(ax.yaxis, 0.002, 3.0)
    fig.canvas.draw()
    labels = {t.get_text() for t in ax.get_yticklabels()}
    plt.close(fig)
    assert {"0.01", "0.1", "1"} <= labels and not any("10^" in t or "$" in t for t in labels)


def test_models_with_the_same_figures_are_named_as_answering_alike():
    from statetrack.results.report import alike_lines

    rows = [{"model": m, "task": "parity", "seed": s, "lr": 0.01, "length": n, "scaled_accuracy": v, "accuracy": 0.5 + v / 2}
            for m, shift in (("LSTM", 0.0), ("DeltaNet [0,1]", 0.0), ("DeltaNet [-1,1]", 0.5)) for s in (0, 1)
            for n, v in ((40, 0.01 * s + shift), (256, -0.02 + shift))]
    lines = alike_lines(summarize(rows))
    assert len(lines) == 1 and lines[0].startswith("DeltaNet [0,1] and LSTM have the same figures at every length and seed")


def test_an_extrapolation_report_of_one_task_and_lr_names_them_once(tmp_path):
    """The check-mark table carries its count of text columns: dropping the one-valued task and lr
    columns keeps it right (a model column of text, then figures)."""
    store = _store(tmp_path)
    md = (write_report(score_store(store, "parity", selection={"criterion": "extrapolation"}, run_data=True), tmp_path) / "report.md").read_text()
    table = md.split("## Extrapolation")[1].split("\n## ")[0]
    lines = [line for line in table.splitlines() if line.startswith("|")]
    assert lines[0].startswith("| model |") and "task" not in lines[0] and lines[1].startswith("| :--- | ---: |")
    assert "task parity" in table


@pytest.mark.parametrize("models,tasks", [(3, 1), (45, 2)])
def test_position_plot_lays_out_any_number_of_models(tmp_path, models, tasks):
    """The per-position figure of a table's 45 rows fits its legend beside each panel (tight_layout
    warns, and the legend covers the curves, when it does not)."""
    import warnings

    from statetrack.results.plots import plot_position_accuracy

    series = [
        ({"task": f"task{t}", "model": f"Model {m}"}, 32, [0.5, 0.75, None, 1.0], "input position")
        for t in range(tasks)
        for m in range(models)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = plot_position_accuracy(series, tmp_path / "positions.png", {f"task{t}": 16 for t in range(tasks)})
    assert path.stat().st_size > 0
