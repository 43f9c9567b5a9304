"""CLI: the end-to-end path on a tiny spec, the results schema, and spec-file errors (the table of bad invocations is test_cli_errors.py)."""

import json

from cli_helpers import run_cli


def test_run_report_and_results_json(tiny_spec, tmp_path, capsys):
    spec = str(tiny_spec(seeds="[0]"))
    results = str(tmp_path / "r")
    code, out, _ = run_cli(capsys, "run", spec, "--results-dir", results, "--no-progress", "--workers", "1", "train.steps=10")
    assert code == 0
    assert "DeltaNet [-1,1]" in out and "LSTM" in out  # the result table at the end of run
    for name in ("report.md", "report.html", "accuracy_vs_length.png"):
        assert (tmp_path / "r" / "tiny" / name).is_file()
    html = (tmp_path / "r" / "tiny" / "report.html").read_text()
    assert "data:image/png;base64," in html and "DeltaNet [-1,1]" in html
    code, out, _ = run_cli(capsys, "results", "tiny", "--json", "--results-dir", results)
    rows = json.loads(out)
    assert code == 0 and len(rows) == 4
    assert set(rows[0]) == {"model", "task", "task_params", "seed", "lr", "length", "accuracy", "scaled_accuracy", "sequence_accuracy",
                           "diverged"}
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
    assert code == 0 and "did it reproduce? 0/1 claims ✓, 1 ✗ (the claims of A et al. 2099, in the report)" in out


def test_version_prints_the_package_version(capsys):
    import statetrack

    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out == f"statetrack {statetrack.__version__}\n"


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
