"""CLI: the end-to-end path on a tiny spec, the results schema, and spec-file errors (the table of bad invocations is test_cli_errors.py)."""

import json

from cli_helpers import run_cli
from statetrack.store import Store


def test_run_report_and_results_json(tiny_spec, tmp_path, capsys):
    spec = str(tiny_spec(seeds="[0]"))
    results = str(tmp_path / "r")
    code, out, _ = run_cli(capsys, "run", spec, "--results-dir", results, "--no-progress", "--workers", "1", "train.steps=10",
                           "--name", "tiny")
    assert code == 0
    assert "DeltaNet [-1,1]" in out and "LSTM" in out  # the result table at the end of run
    for name in ("report.md", "report.html", "accuracy_vs_length.png"):
        assert (tmp_path / "r" / "tiny" / name).is_file()
    html = (tmp_path / "r" / "tiny" / "report.html").read_text()
    assert "data:image/png;base64," in html and "DeltaNet [-1,1]" in html
    code, out, _ = run_cli(capsys, "results", "tiny", "--json", "--results-dir", results)
    rows = json.loads(out)
    assert code == 0 and len(rows) == 4
    assert set(rows[0]) == {"run_id", "model", "task", "task_params", "seed", "lr", "length", "accuracy", "scaled_accuracy",
                           "sequence_accuracy", "diverged", "predicted_classes"}
    assert {r["model"] for r in rows} == {"DeltaNet [-1,1]", "LSTM"}
    assert {r["length"] for r in rows} == {5, 9}
    code, out, _ = run_cli(capsys, "report", "tiny", "--results-dir", results)
    assert code == 0 and "report.html" in out
    code, out, _ = run_cli(capsys, "report", "--all", "--results-dir", results)
    index = tmp_path / "r" / "index.html"
    assert code == 0 and str(index) in out
    assert '<a href="tiny/report.html">tiny</a>' in index.read_text()


def test_listing_commands(capsys):
    for argv in (["tasks"], ["models"], ["experiments"], ["tasks", "show", "modadd", "m=7", "--lengths", "4"]):
        code, out, _ = run_cli(capsys, *argv)
        assert code == 0 and out
    assert "demo" in run_cli(capsys, "experiments")[1]
    assert "[BOS]" in run_cli(capsys, "tasks", "show", "parity")[1]


def test_spec_file_errors(tmp_path, capsys):
    bad_model = tmp_path / "bad_model.yaml"
    bad_model.write_text("task: {name: parity}\nmodels: [{name: transformerz}]\nlrs: [1e-3]\nseeds: [0]\neval: {lengths: [5]}\n")
    code, _, err = run_cli(capsys, "run", str(bad_model), "--results-dir", str(tmp_path))
    assert code == 2 and "unknown model 'transformerz'; expected one of: " in err and "deltanet" in err
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("task: [unclosed\n")
    code, _, err = run_cli(capsys, "run", str(bad_yaml), "--results-dir", str(tmp_path))
    assert code == 2 and "not valid YAML" in err
    bad_key = tmp_path / "bad_key.yaml"
    bad_key.write_text("task: {name: parity}\nmodel: [lstm]\nlrs: [1e-3]\nseeds: [0]\neval: {lengths: [5]}\n")
    code, _, err = run_cli(capsys, "run", str(bad_key), "--results-dir", str(tmp_path))
    assert code == 2 and "unknown key 'model'" in err


def test_run_ends_with_the_claims_verdict(tiny_spec, tmp_path, capsys):
    path = tiny_spec(seeds="[0]")
    path.write_text(path.read_text() + (
        "paper:\n  source: A et al. 2099\n  metric: scaled accuracy\n  claims:\n"
        "    - {text: the LSTM learns, model: LSTM, at_least: 2.0}\n"))
    code, out, _ = run_cli(capsys, "run", str(path), "--results-dir", str(tmp_path / "r"), "--no-progress", "--workers", "1",
                           "train.steps=5")
    # five steps fit nothing: the claim beyond the training lengths is undecided, not failed
    assert code == 0 and "did it reproduce? 0/1 claims ✓, 1 inconclusive (the claims of A et al. 2099, in the report)" in out


def test_a_run_with_overrides_is_an_experiment_of_its_own_and_leaves_the_shipped_report_as_it_was(tmp_path, capsys):
    from statetrack.experiments.spec import overrides_name

    results = tmp_path / "r"
    # the models without the LSTM's own budget, which train.steps does not reach (a model's own train: wins)
    models = "models=[{name: deltanet, eig_range: '[-1,1]', num_heads: 1}, {name: lstm}]"
    tiny = ["eval.samples=16", "eval.lengths=[40,64]", models, "--workers", "1", "--no-progress", "--results-dir", str(results)]
    assert run_cli(capsys, "run", "demo", "--name", "demo", "seeds=[0]", "train.steps=5", *tiny)[0] == 0  # "demo" itself, on purpose
    report = run_cli(capsys, "report", "demo", "--results-dir", str(results))
    pages = {name: (results / "demo" / name).read_bytes() for name in ("report.md", "report.html")}
    code, out, _ = run_cli(capsys, "run", "demo", "seeds=[0]", "train.steps=50", *tiny)
    name = overrides_name("demo", ["seeds=[0]", "train.steps=50", "eval.samples=16", "eval.lengths=[40,64]", models])
    assert name.startswith("demo_seeds-0_train.steps-50_eval.samples-16_eval.lengths-40-64_models-")
    assert code == 0 and f"experiment {name}: named after the overrides (--name NAME chooses the name)" in out
    assert run_cli(capsys, "report", "demo", "--results-dir", str(results)) == report
    assert {name: (results / "demo" / name).read_bytes() for name in pages} == pages
    store = Store(results / "statetrack.db", read_only=True)
    assert {r["steps"] for r in store.runs("demo")} == {5} and {r["steps"] for r in store.runs(name)} == {50}
    assert len(json.loads(run_cli(capsys, "results", name, "--json", "--results-dir", str(results))[1])) == 2 * 2
    assert "2 runs, 2 already done" in run_cli(capsys, "run", "demo", "seeds=[0]", "train.steps=50", *tiny)[1]  # the same name: resumed


def test_version_prints_the_package_version(capsys):
    import statetrack

    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out == f"statetrack {statetrack.__version__}\n"


def test_output_to_a_file_or_pipe_is_written_line_by_line():
    """A long run's log (`statetrack reproduce ... > log`) shows each line as it is printed, not a
    block later: a watcher reading it sees a new round start when it starts."""
    import subprocess
    import sys

    code = "import sys; from statetrack.cli import main; main(['tasks']); print('line_buffering', sys.stdout.line_buffering)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "line_buffering True"


def test_tasks_show_takes_lengths_and_prints_examples_at_each(capsys):
    code, out, _ = run_cli(capsys, "tasks", "show", "parity", "--lengths", "3", "5", "--count", "2")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("parity()")
    for length in (3, 5):
        at = lines.index(f"length {length}:")
        for example in lines[at + 1: at + 3]:
            bits = example.split("[BOS]")[1].split("[EOI]")[0].split()
            assert len(bits) == length and set(bits) <= {"0", "1"}
            assert example.endswith(f"->  {sum(map(int, bits)) % 2}")  # parity of the bits shown


def test_experiments_one_line_each_with_planned_runs_and_last_wall_time(tmp_path, capsys, monkeypatch):
    from statetrack import paths
    from statetrack.experiments.spec import expand, load_spec, shipped_specs

    snapshot = {"experiment": "demo", "scale": "quick", "parts": [{"seconds": 60.0}, {"seconds": 24.4}]}
    (tmp_path / "demo.quick.json").write_text(json.dumps(snapshot))
    monkeypatch.setattr(paths, "snapshot_folder", lambda: tmp_path)  # as if the package held this one snapshot
    code, out, _ = run_cli(capsys, "experiments")
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.split() and line.split()[0] in shipped_specs()}
    assert code == 0 and set(lines) == set(shipped_specs())
    assert lines["demo"][1] == str(len(expand(load_spec("demo")))) and lines["demo"][2:6] == ["1", "min", "24", "s"]
    assert lines["negeig-parity"][2] == "-"  # no snapshot of it
    code, out, _ = run_cli(capsys, "experiments", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and rows["demo"]["wall_seconds"] == 84.4 and rows["negeig-parity"]["wall_seconds"] is None
    assert rows["demo"]["description"] == " ".join(shipped_specs()["demo"].split()) and rows["demo"]["scale"] == "quick"


def test_experiments_counts_the_runs_expand_makes_for_every_shipped_spec():
    from statetrack.experiments.spec import expand, load_spec, shipped_specs
    from statetrack.results.overview import planned_runs

    for name in shipped_specs():
        assert planned_runs(name) == len(expand(load_spec(name))), name


def test_experiments_read_the_packages_snapshots(capsys):
    """The committed snapshots live in the package, so an installed package shows their wall times too."""
    from statetrack.experiments.spec import shipped_specs
    from statetrack.paths import snapshot_file
    from statetrack.results.book import duration

    lines = run_cli(capsys, "experiments")[1].splitlines()
    for name in shipped_specs():
        path = snapshot_file(name, "quick")
        line, = [line for line in lines if line.startswith(f"{name} ")]
        if path.exists():  # read here from the file itself
            assert duration(sum(part["seconds"] for part in json.loads(path.read_text())["parts"])) in line, line
        else:
            assert line.split()[2] == "-", line
    assert "in the package" in lines[-1]


def test_models_and_tasks_json(capsys):
    from statetrack.models import zoo
    from statetrack.tasks import TASKS, make_task

    code, out, _ = run_cli(capsys, "models", "--json")
    models = json.loads(out)
    assert code == 0 and [m["name"] for m in models] == list(zoo.MODELS)
    assert all(set(m) == {"name", "display_name", "summary", "recurrent", "parameters", "stack_defaults", "presets"} for m in models)
    stacks = {m["name"]: m["stack_defaults"] for m in models}
    assert stacks["bilinear"] == {"d_model": 64, "num_layers": 1, "mlp": False, "stack": "residual"} and stacks["deltanet"]["mlp"] is True
    assert "stack defaults of its own (its published form): mlp=False" in run_cli(capsys, "models", "bilinear")[1]
    deltanet, = json.loads(run_cli(capsys, "models", "--json", "deltanet-neg")[1])  # a preset: its model
    assert deltanet["name"] == "deltanet" and deltanet["parameters"]["eig_range"] == "[0,1]"
    assert deltanet["presets"]["deltanet-neg"] == {"name": "deltanet", "eig_range": "[-1,1]"}
    code, _, err = run_cli(capsys, "models", "--json", "--params", "3e6")
    assert code == 2 and "--json" in err
    code, out, _ = run_cli(capsys, "tasks", "--json")
    tasks = json.loads(out)
    assert code == 0 and json.loads(run_cli(capsys, "tasks", "list", "--json")[1]) == tasks
    assert sorted(t["name"] for t in tasks) == sorted(TASKS)
    for entry in tasks:  # the listed parameters, at their defaults, are a valid setting of each task
        assert set(make_task(entry["name"], **entry["parameters"]).params) == set(entry["parameters"]), entry["name"]


def test_output_closed_early_is_not_an_error(monkeypatch):
    import io
    import sys

    from statetrack.cli import main

    class ClosedPipe(io.StringIO):  # stdout piped into `head`, which has exited
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    written = []

    class Stderr(io.StringIO):
        def write(self, text):
            written.append(text)

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    monkeypatch.setattr(sys, "stderr", Stderr())
    assert main(["tasks", "--json"]) == 0 and written == []


def test_completion_scripts_complete_commands_options_and_names(tmp_path, capsys):
    import shutil
    import subprocess

    code, script, _ = run_cli(capsys, "completion", "bash")
    assert code == 0
    (tmp_path / "statetrack.bash").write_text(script)
    # bash itself completes a few command lines with the script sourced
    probe = """source "$1"
try() { COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
        COMPREPLY=(); _shtab_statetrack; echo "${COMPREPLY[*]}"; }
try statetrack comp
try statetrack run de
try statetrack tasks show parity_
try statetrack tasks show parity --len
try statetrack models deltanet-
try statetrack --vers
"""
    out = subprocess.run(["bash", "-c", probe, "probe", str(tmp_path / "statetrack.bash")], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["completion", "deltaproduct-groups demo", "parity_lm", "--lengths", "deltanet-neg deltanet-pos", "--version"]
    for shell in ("zsh", "tcsh"):
        code, script, _ = run_cli(capsys, "completion", shell)
        assert code == 0 and "deltaproduct-groups" in script and "lengths" in script  # tcsh lists options without "--"
        if shutil.which(shell) and shell == "zsh":
            (tmp_path / "statetrack.zsh").write_text(script)
            subprocess.run(["zsh", "-n", str(tmp_path / "statetrack.zsh")], check=True)  # parses
