"""Bad input that a command used to find late or not at all: damaged store rows read by the CLI,
output paths that cannot be written (checked before anything trains or is written), and options
that were accepted unchecked. Each answer is one line and exit status 2 (a damaged row: a warning
naming it), never a traceback."""

import json
import os
import sqlite3
from pathlib import Path

import pytest

from cli_helpers import run_cli
from statetrack.errors import StatetrackError
from statetrack.store import Outcome, Plan, RunClaim, Store

RUN_ID = "0123456789abcdef"
CONFIG = {"experiment": "exp", "model": {"name": "lstm", "d_model": 8}, "task": {"name": "modadd", "m": 3},
          "train": {"max_length": 5}, "eval": {"lengths": [5]}}
PLAN = [{"id": RUN_ID, "model": "LSTM", "task": "modadd(m=3)", "lr": 0.01, "seed": 0}]


def _no_training(*args, **kwargs):
    raise AssertionError("a bad output path was found only after runs started")


@pytest.fixture
def store(tmp_path, monkeypatch):
    """RESULTS/statetrack.db with one finished run of experiment 'exp' and its plan (no checkpoint)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("statetrack.experiments.runner.make_backend", _no_training)
    path = tmp_path / "results" / "statetrack.db"
    db = Store(path)
    db.set_plan(Plan("exp", {"name": "exp"}, PLAN))
    db.start_run(RunClaim(RUN_ID, "exp", "LSTM", "modadd(m=3)", 0, 0.01, CONFIG, "abc"))
    db.finish_run(RUN_ID, Outcome([{"length": 5, "accuracy": 0.5, "scaled_accuracy": 0.2, "samples": 4}], [{"step": 1, "loss": 1.0, "accuracy": 0.5}], 2, 100, 0.1, 0.1))
    return path


def _sql(path: Path, statement: str, *values) -> None:
    db = sqlite3.connect(path)
    db.execute(statement, values)
    db.commit()
    db.close()


def _no_traceback(code, err, expected_code=2):
    assert code == expected_code, err
    assert "Traceback" not in err
    assert all(line.startswith(("statetrack: error: ", "statetrack: warning: ")) for line in err.strip().splitlines()), err


# ---- damaged rows ------------------------------------------------------------------------------------
def test_a_plan_whose_spec_is_not_a_mapping_is_named_by_report(store, capsys):
    _sql(store, "UPDATE plans SET spec = '[1, 2]'")
    code, _, err = run_cli(capsys, "report", "exp")
    _no_traceback(code, err)
    assert "skipped the plan of experiment 'exp': its spec is not a mapping" in err
    assert err.count("statetrack: warning:") == 1  # once, though two readers asked for the plan


def test_report_all_skips_a_damaged_plan_and_writes_the_index(store, capsys):
    _sql(store, "UPDATE plans SET runs = 'nonsense'")
    code, out, err = run_cli(capsys, "report", "--all")
    _no_traceback(code, err, 0)
    assert "skipped the plan of experiment 'exp': it is not JSON" in err
    assert (store.parent / "index.html").is_file() and not (store.parent / "exp" / "report.md").exists()


@pytest.mark.parametrize("config, message", [
    ({k: v for k, v in CONFIG.items() if k != "task"}, f"run {RUN_ID} in results/statetrack.db has a damaged row"),
    ({**CONFIG, "task": "modadd"}, "has a damaged row"),
    ({k: v for k, v in CONFIG.items() if k != "model"}, f"run {RUN_ID}: its stored configuration has no model"),
])
@pytest.mark.parametrize("analysis", ["spectrum", "rotations", "heads", "signs"])
def test_analyze_a_run_whose_configuration_is_damaged(store, capsys, config, message, analysis):
    _sql(store, "UPDATE runs SET config = ?", json.dumps(config))
    code, _, err = run_cli(capsys, "analyze", analysis, RUN_ID[:6])
    _no_traceback(code, err)
    if analysis != "signs":  # signs reads the bilinear parity runs of an experiment: none here
        assert message in err


def test_results_and_export_skip_a_run_without_its_task(store, capsys):
    _sql(store, "UPDATE runs SET config = ?", json.dumps({k: v for k, v in CONFIG.items() if k != "task"}))
    for argv in (["results", "exp", "--json"], ["export", "csv", "exp"]):
        code, out, err = run_cli(capsys, *argv)
        assert "Traceback" not in err and f"skipped 1 run(s) whose configuration is damaged ({RUN_ID})" in err
    assert json.loads(run_cli(capsys, "results", "exp", "--json")[1]) == []


# ---- output paths, checked before anything is written ----------------------------------------------------
@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("name: exp\ntask: {name: modadd, m: 3}\nmodels: [{name: lstm}]\nmodel_defaults: {d_model: 8}\n"
                    "lrs: [0.01]\nseeds: [0]\ntrain: {steps: 2, min_length: 2, max_length: 5}\neval: {lengths: [5]}\n")
    return path


def _checkpoint(results: Path) -> Path:
    from statetrack.experiments.spec import resolve

    (run,) = resolve(str(results.parent / "exp.yaml")).runs
    return results / "exp" / "checkpoints" / f"{run.id}.pt"


def test_a_folder_where_a_checkpoint_goes_is_refused_before_training(tmp_path, spec, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("statetrack.experiments.runner.make_backend", _no_training)
    checkpoint = _checkpoint(tmp_path / "results")
    checkpoint.mkdir(parents=True)
    code, _, err = run_cli(capsys, "run", str(spec), "--no-progress")
    _no_traceback(code, err)
    assert f"cannot write checkpoint {checkpoint.relative_to(tmp_path)}: it is a folder, not a regular file" in err
    assert not (tmp_path / "results" / "statetrack.db").exists()  # nothing written, not even the store


@pytest.mark.parametrize("name", ["report.md", "report.html", "training_curves.png", "my_metric_vs_length.png"])
def test_a_fifo_among_the_report_files_is_refused_before_training(tmp_path, spec, monkeypatch, capsys, name):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("statetrack.experiments.runner.make_backend", _no_training)
    (tmp_path / "results" / "exp").mkdir(parents=True)
    os.mkfifo(tmp_path / "results" / "exp" / name)
    code, _, err = run_cli(capsys, "run", str(spec), "--no-progress")
    _no_traceback(code, err)
    assert f"cannot write report file results/exp/{name}: it is a FIFO, not a regular file" in err


def test_report_checks_every_file_before_writing_one(store, capsys):
    folder = store.parent / "exp"
    folder.mkdir()
    os.mkfifo(folder / "training_curves.png")
    code, _, err = run_cli(capsys, "report", "exp")
    _no_traceback(code, err)
    assert "training_curves.png: it is a FIFO" in err
    assert sorted(p.name for p in folder.iterdir()) == ["training_curves.png"]  # report.md was not written first
    os.unlink(folder / "training_curves.png")
    (store.parent / "index.md").mkdir()
    code, _, err = run_cli(capsys, "report", "--all")
    _no_traceback(code, err)
    assert "cannot write index file results/index.md: it is a folder" in err
    assert sorted(p.name for p in folder.iterdir()) == []


def test_export_csv_with_a_fifo_target_writes_nothing(store, capsys):
    folder = store.parent / "exp" / "csv"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "evals.csv")
    code, _, err = run_cli(capsys, "export", "csv", "exp")
    _no_traceback(code, err)
    assert "cannot write export file results/exp/csv/evals.csv: it is a FIFO" in err
    assert sorted(p.name for p in folder.iterdir()) == ["evals.csv"]


def test_tasks_export_with_a_fifo_target_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    os.mkfifo(tmp_path / "out" / "parity_len16.csv")
    code, _, err = run_cli(capsys, "tasks", "export", "parity", "--lengths", "8", "16", "--samples", "2", "--out", "out")
    _no_traceback(code, err)
    assert "cannot write export file out/parity_len16.csv: it is a FIFO" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["parity_len16.csv"]


def test_a_failed_export_leaves_no_folder_behind(store, capsys, monkeypatch):
    import statetrack.training.loggers as loggers

    def failing(*args, **kwargs):
        raise RuntimeError("the tracker broke")

    monkeypatch.setattr(loggers, "check_log_to", lambda log_to: None)
    monkeypatch.setattr(loggers, "run_loggers", failing)
    monkeypatch.setenv("WANDB_DIR", str(store.parent.parent / "wandb-dir"))
    for kind, folder in (("wandb", store.parent.parent / "wandb-dir"), ("tensorboard", store.parent / "tb")):
        code, _, err = run_cli(capsys, "export", kind, "exp", *(["--out", str(folder)] if kind == "tensorboard" else []))
        _no_traceback(code, err)
        assert "the tracker broke" in err and not folder.exists(), kind


def test_a_read_only_results_folder_is_refused_before_training(tmp_path, spec, capsys):
    """As an unprivileged user (root writes anyway): the results folder's mode, not the first write, says no."""
    import shutil
    import subprocess
    import sys
    import tempfile

    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("root ignores file modes; needs setpriv")
    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o755)
        (folder / "exp.yaml").write_text(spec.read_text())
        (folder / "results").mkdir(mode=0o555)
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        env = {**os.environ, "HOME": str(folder), "MPLCONFIGDIR": str(folder)}
        probe = subprocess.run(prefix + [sys.executable, "-c", "import statetrack.cli"], capture_output=True, cwd=folder, env=env)
        if probe.returncode != 0:
            pytest.skip("the unprivileged user cannot import this checkout")
        done = subprocess.run(prefix + [sys.executable, "-m", "statetrack.cli", "run", "exp.yaml", "--no-progress"],
                              capture_output=True, text=True, cwd=folder, timeout=120, env=env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("statetrack: error: cannot write "), done.stderr
        assert "results is not writable" in done.stderr or "read-only" in done.stderr
        assert list((folder / "results").iterdir()) == []
    finally:
        shutil.rmtree(folder)


# ---- options ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, expected", [
    (["construct", "parity", "--normalize-every", "0"], "--normalize-every: must be an integer from 1"),
    (["run", "{tmp}/folder_import.yaml", "--dry-run"], "imports: '{tmp}/plugins' is a folder, not a .py file"),
    (["run", "{tmp}/fifo_import.yaml", "--dry-run"], "imports: '{tmp}/fifo.py' is not a regular file"),
])
def test_an_option_is_checked(tmp_path, monkeypatch, capsys, argv, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "plugins").mkdir()
    os.mkfifo(tmp_path / "fifo.py")
    body = "task: {name: parity}\nmodels: [{name: lstm}]\nlrs: [0.01]\nseeds: [0]\ntrain: {steps: 2}\neval: {lengths: [5]}\n"
    (tmp_path / "folder_import.yaml").write_text("imports: [plugins/]\n" + body)
    (tmp_path / "fifo_import.yaml").write_text("imports: [fifo.py]\n" + body)
    code, out, err = run_cli(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2 and err.strip().splitlines() == [err.strip()], err
    assert expected.replace("{tmp}", str(tmp_path)) in err


def test_a_store_held_locked_at_open_is_one_line_after_one_wait(tmp_path, monkeypatch):
    import time

    import statetrack.store as store_module
    from statetrack.errors import StatetrackError

    path = tmp_path / "s.db"
    Store(path).set_plan(Plan("x", {"name": "x"}, []))
    monkeypatch.setattr(store_module, "BUSY_SECONDS", 0.3)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA journal_mode=DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        with pytest.raises(StatetrackError, match="is locked by another process"):
            Store(path)
        assert time.monotonic() - started < 3  # one wait of BUSY_SECONDS, not one per retry
    finally:
        holder.rollback()
        holder.close()


# ---- checkpoints of another format ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["plain pickle", "truncated legacy"])
def test_a_checkpoint_of_another_format_is_statetracks_one_line_without_torchs_warning(store, capsys, kind):
    import pickle
    import warnings

    import numpy as np
    import torch

    from statetrack.training.train import UnreadableCheckpoint, read_checkpoint

    path = store.parent / "exp" / "checkpoints" / f"{RUN_ID}.pt"
    path.parent.mkdir(parents=True)
    if kind == "plain pickle":  # torch warns of its pickle protocol before refusing it
        path.write_bytes(pickle.dumps({"model": np.ones(2)}, protocol=4))
    else:
        torch.save({"model": {"w": torch.ones(64)}}, path, _use_new_zipfile_serialization=False)
        path.write_bytes(path.read_bytes()[:300])
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        with pytest.raises(UnreadableCheckpoint, match=f"checkpoint {path} cannot be read: "):
            read_checkpoint(path)
    assert shown == []
    code, _, err = run_cli(capsys, "analyze", "spectrum", RUN_ID)
    _no_traceback(code, err)
    assert err.strip().splitlines() == [err.strip()] and "cannot be read" in err, err


@pytest.mark.parametrize("argv", [["run", "exp.yaml", "--dry-run"], ["run", "exp.yaml", "--no-progress"]])
def test_a_spec_file_the_user_cannot_read_is_one_line(spec, argv):
    """As an unprivileged user (root reads anyway): the file's mode says no, in statetrack's one line."""
    import shutil
    import subprocess
    import sys
    import tempfile

    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("root ignores file modes; needs setpriv")
    folder = Path(tempfile.mkdtemp())
    try:
        folder.chmod(0o755)
        (folder / "home").mkdir(mode=0o777)
        (folder / "home").chmod(0o777)
        (folder / "exp.yaml").write_text(spec.read_text())
        (folder / "exp.yaml").chmod(0o000)
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        env = {**os.environ, "HOME": str(folder / "home"), "MPLCONFIGDIR": str(folder / "home")}
        probe = subprocess.run(prefix + [sys.executable, "-c", "import statetrack.cli"], capture_output=True, cwd=folder, env=env)
        if probe.returncode != 0:
            pytest.skip("the unprivileged user cannot import this checkout")
        done = subprocess.run(prefix + [sys.executable, "-m", "statetrack.cli", *argv],
                              capture_output=True, text=True, cwd=folder, timeout=120, env=env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == ["statetrack: error: cannot read experiment file 'exp.yaml': Permission denied"], done.stderr
        assert sorted(p.name for p in folder.iterdir()) == ["exp.yaml", "home"]  # no results folder
    finally:
        shutil.rmtree(folder)


# ---- a user's mixer, checked before any store or run exists ---------------------------------------------
MIXER = '''
import torch
from torch import nn
import statetrack


@statetrack.register_model("{name}", display={display})
class Mixer(nn.Module):
    def __init__(self, d_model: int{params}):
        super().__init__()
        self.w = nn.Linear(d_model, d_model)

    def forward(self, x, state=None):
        {body}
'''
GOOD = "return torch.tanh(self.w(x)), state"
USER_MIXERS = {
    "raises": ({"body": "raise ValueError('my bug')"}, "raised ValueError: my bug; expected forward(x [B, T, d_model], state"),
    "wrong shape": ({"body": "return self.w(x)[..., :3], state"}, "returned y of shape [2, 3, 3]; expected [2, 3, "),
    "three outputs": ({"body": "return self.w(x), state, 1"}, "returned a tuple of 3; expected forward(x [B, T, d_model]"),
    "no state": ({"body": "return self.w(x)"}, "returned Tensor; expected forward(x [B, T, d_model], state=None)"),
    "non-finite": ({"body": "return self.w(x) / 0.0, state"}, "returned non-finite values (inf or nan) at its initial weights"),
    "integer output": ({"body": "return self.w(x).long(), state"}, "returned y of dtype torch.int64; expected torch.float32"),
    "another float": ({"body": "return self.w(x).double(), state"}, "returned y of dtype torch.float64; expected torch.float32"),
    "state refused": ({"body": "assert state is None, 'no state'\n        return self.w(x), x[:, -1]"},
                      "forward on the third token with the state of the first 2 raised AssertionError: no state"),
    "required parameter": ({"params": ", width"}, "parameter 'width' has no default; expected a default (a number"),
    "keyword arguments": ({"params": ", **options"}, "its constructor takes **options; expected every setting as a named"),
    "a function default": ({"params": ", act=torch.tanh"}, "parameter 'act' defaults to <built-in method tanh"),
    "display raises": ({"display": "lambda spec: 1 / 0"}, "its display raised ZeroDivisionError: division by zero"),
    "display not text": ({"display": "lambda spec: 42"}, "its display gave 42; expected a non-empty one-line string"),
    "display of two lines": ({"display": "'Mine\\nTwo'"}, "its display gave 'Mine\\nTwo'; expected a non-empty one-line"),
    "a preset's name": ({"name": "deltanet-neg"}, "'deltanet-neg' is a preset of statetrack (deltanet with eig_range [-1,1]); "
                                                  "expected a name of its own"),
}


def _user_mixer(tmp_path, name="mine", display="'Mine'", params="", body=GOOD) -> Path:
    path = tmp_path / "my_mixer.py"
    path.write_text(MIXER.format(name=name, display=display, params=params, body=body))
    return path


@pytest.mark.parametrize("case", sorted(USER_MIXERS))
@pytest.mark.parametrize("command", ["run --dry-run", "table --dry-run", "run"])
def test_a_misbehaving_user_mixer_is_one_line_before_any_store(tmp_path, tiny_spec, capsys, monkeypatch, registry,
                                                              case, command):
    monkeypatch.setattr("statetrack.experiments.runner.make_backend", _no_training)
    settings, message = USER_MIXERS[case]
    plugin = _user_mixer(tmp_path, **settings)
    name = settings.get("name", "mine")
    results = tmp_path / "results"
    if command.startswith("table"):
        argv = ["table", "--dry-run", "--results-dir", str(results), "--models", name]
    else:
        argv = ["run", str(tiny_spec()), f"models=[{name}]", "--results-dir", str(results), *command.split()[1:]]
    code, out, err = run_cli(capsys, "--import", str(plugin), *argv)
    _no_traceback(code, err)
    assert err.count("\n") == 1 and f"plugin {plugin}: model '{name}'" in err and message in err, err
    assert not results.exists()


def test_a_users_transition_class_is_checked_at_the_setting_used(tmp_path, tiny_spec, capsys, registry):
    plugin = tmp_path / "classes.py"
    plugin.write_text(MIXER.format(name="mine", display="'Mine'", params=", scale: float = 1.0", body=GOOD)
                      + "\n    @staticmethod\n    def transition_class(spec):\n        return {1.0: 'nonlinear'}[spec['scale']]\n")
    spec = str(tiny_spec())
    assert run_cli(capsys, "--import", str(plugin), "run", spec, "--dry-run", "models=[mine]")[0] == 0
    code, _, err = run_cli(capsys, "--import", str(plugin), "run", spec, "--dry-run", "models=[{name: mine, scale: 2.0}]")
    _no_traceback(code, err)
    assert f"plugin {plugin}: model 'mine' (scale=2.0): its transition_class fails: KeyError: 2.0" in err


@pytest.mark.parametrize("value", [".nan", ".inf", "[1, -.inf]"])
def test_a_users_setting_that_a_spec_cannot_record_is_one_line(tmp_path, tiny_spec, capsys, registry, value):
    plugin = _user_mixer(tmp_path, params=", scale=1.0")
    results = tmp_path / "results"
    code, _, err = run_cli(capsys, "--import", str(plugin), "table", "--dry-run", "--results-dir", str(results),
                           "--models", f"{{name: mine, scale: {value}}}")
    _no_traceback(code, err)
    assert f"plugin {plugin}: model 'mine': setting scale=" in err and "cannot be recorded; expected a number" in err, err
    assert not results.exists()


def test_a_user_mixer_that_learns_nothing_is_no_error(tmp_path, tiny_spec, capsys, registry):
    """An output that no gradient reaches (a null mixer, an ablation) trains: the residual carries the input."""
    plugin = _user_mixer(tmp_path, body="return torch.zeros_like(x), state")
    code, out, err = run_cli(capsys, "--import", str(plugin), "run", str(tiny_spec()), "--dry-run", "models=[mine]")
    assert code == 0 and "dry run: nothing trained" in out, err


@pytest.mark.parametrize("entry", ["{name: [a]}", "{name: 3}", "{name: null}"])
def test_a_model_name_that_is_not_text_is_one_line(capsys, entry):
    code, _, err = run_cli(capsys, "table", "--dry-run", "--models", entry)
    _no_traceback(code, err)
    assert "unknown model" in err and "expected one of: bedouin, bilinear" in err


# ---- sizes: every model's widest projection, before anything is allocated ----------------------------------
@pytest.mark.parametrize("model, setting", [
    ("{name: pdssm, state_size: 2048}", "state_size 2048"),
    ("{name: mamba3, expand: 4096}", "expand 4096"),
    ("{name: rwkv7, num_heads: 200000, head_dim: 1}", "num_heads 200000, head_dim 1"),
])
@pytest.mark.parametrize("command", ["table", "run"])
def test_a_wide_layer_is_refused_by_its_memory_before_anything_is_allocated(tmp_path, tiny_spec, capsys, monkeypatch,
                                                                            model, setting, command):
    from statetrack import limits

    monkeypatch.delenv(limits.LIFT, raising=False)
    monkeypatch.setattr(limits, "available_memory", lambda: 2**28)  # 256 MiB
    monkeypatch.setattr("statetrack.experiments.runner.make_backend", _no_training)
    results = tmp_path / "results"
    if command == "table":
        argv = ["table", "--dry-run", "--results-dir", str(results), "--models", model]
    else:
        argv = ["run", str(tiny_spec()), f"models=[{model}]", "--results-dir", str(results)]
    code, _, err = run_cli(capsys, *argv)
    _no_traceback(code, err)
    name = model.split(",")[0].removeprefix("{name: ")
    assert f"with model '{name}' at d_model " in err and setting in err, err  # the model and its setting named
    assert "of memory, more than the 0.25 GiB available" in err, err
    assert not results.exists()


# ---- the table command: options that contradict, outputs, committed files ----------------------------
TABLE_FAST = ["train.steps=2", "train.val_every=1", "eval.samples=8", "tasks=[{name: word_problem, group: Z2}]"]


@pytest.mark.parametrize("argv, expected", [
    (["--full-budget", "--models", "lstm"], "table: --models and --full-budget measure different things"),
    (["--zoo", "--full-budget"], "table: --zoo and --full-budget measure different things"),
    (["--zoo", "--models", "lstm"], "table: --models and --zoo measure different things"),
    (["train.steps=3"], "table: train.steps=3 changes the settings of the rows --models trains"),
    (["--full-budget", "train.steps=3"], "table --full-budget measures the table as its spec sets it: train.steps=3"),
    (["--zoo", "--dry-run", "seeds=[0]"], "table --zoo measures the table as its spec sets it: seeds=[0]"),
    (["lrs=[0.1]", "--models", "lstm"], "table: lrs=[0.1] is not yours to set here; the pilot tries its rates"),
    (["models=[gru]", "--models", "lstm"], "table: models=[gru] is not yours to set here; give the models with --models"),
    (["--write", "--models", "lstm"], "table --write draws the page from the committed snapshots and trains nothing; "
                                      "drop --models"),
    (["--check", "--dry-run"], "table --check draws the page from the committed snapshots and trains nothing; drop --dry-run"),
    (["--write", "--check"], "table: --write writes the page, --check compares it and writes nothing: give one"),
    (["seeds=[]", *TABLE_FAST, "--models", "lstm"], "seeds must be a non-empty list, got []"),
])
def test_table_options_that_contradict_are_one_line_before_anything_trains(tmp_path, capsys, monkeypatch, argv, expected):
    monkeypatch.setattr("statetrack.experiments.runner.make_backend", _no_training)
    results = tmp_path / "results"
    code, out, err = run_cli(capsys, "table", "--results-dir", str(results), *argv)
    _no_traceback(code, err)
    assert expected in err and err.count("\n") == 1, err
    assert not results.exists()


@pytest.mark.parametrize("lengths", ["eval.lengths=[4]", "eval.lengths=[8, 32]", "eval={lengths: [3, 8]}"])
def test_the_table_refuses_evaluation_lengths_without_the_training_length(tmp_path, capsys, lengths):
    """A cell's fit is read at the longest training length: lengths that leave it out would read
    every cell "did not fit" without measuring it."""
    results = tmp_path / "results"
    argv = ["table", "--dry-run", "--results-dir", str(results), "train.min_length=2", "train.max_length=2"]
    code, _, err = run_cli(capsys, *argv, lengths, "--models", "lstm")
    _no_traceback(code, err)
    assert "leave out the longest training length 2, where a cell's fit is read; add it (and 8 and 32" in err, err
    code, out, err = run_cli(capsys, *argv, "eval.lengths=[2]", "--models", "lstm")
    assert code == 0 and "dry run" in out, err  # 4x and 16x then read "–", not measured
    assert not results.exists()


def _plant_table(results: Path, thing: str, outside: Path) -> None:
    results.mkdir(parents=True)
    if thing == "link to a folder outside":
        (results / "table").symlink_to(outside)
    elif thing == "a folder at cells.json":
        (results / "table" / "cells.json").mkdir(parents=True)
    else:
        (results / "table").mkdir()
        (results / "table" / "state-table.png").symlink_to(outside / "keep.txt")


@pytest.mark.parametrize("thing, expected", [
    ("link to a folder outside", "outside the folder"),
    ("a folder at cells.json", "cannot write table file"),
    ("a link at the picture", "state-table.png resolves to"),
])
def test_the_tables_outputs_are_checked_before_the_pilot_trains(tmp_path, capsys, monkeypatch, thing, expected):
    monkeypatch.setattr("statetrack.experiments.runner.make_backend", _no_training)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    results = tmp_path / "results"
    _plant_table(results, thing, outside)
    code, _, err = run_cli(capsys, "table", "--results-dir", str(results), *TABLE_FAST, "--models", "lstm")
    _no_traceback(code, err)
    assert expected in err, err
    assert not (results / "statetrack.db").exists() and sorted(p.name for p in outside.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize("command", [["table", "--dry-run", "--models", "lstm"], ["run", "demo", "--dry-run"],
                                     ["report", "--all"]])
def test_an_empty_results_folder_is_refused(capsys, command):
    code, _, err = run_cli(capsys, *command[:1], "--results-dir", "", *command[1:])
    _no_traceback(code, err)
    assert "--results-dir: must name a path, got ''" in err, err


def test_the_page_is_written_only_in_the_checkout_whose_package_runs(tmp_path, capsys, monkeypatch):
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path)
    for flag in ("--write", "--check"):
        code, _, err = run_cli(capsys, "table", flag)
        _no_traceback(code, err)
        assert "is written in the statetrack checkout at" in err and f"not from {tmp_path}" in err, err
    assert list((tmp_path / "docs").iterdir()) == []


@pytest.mark.parametrize("command", [["table", "--write"], ["docs", "--write"]])
def test_the_page_is_not_written_through_a_link_out_of_the_checkout(tmp_path, capsys, monkeypatch, command):
    from statetrack import docs
    from statetrack.results import statetable

    root, outside = tmp_path / "checkout", tmp_path / "outside"
    outside.mkdir()
    root.mkdir()
    (root / "docs").symlink_to(outside)
    (root / "README.md").write_text("")
    monkeypatch.setattr(statetable, "page_root", lambda: root)
    monkeypatch.setattr(docs, "checkout", lambda _: root)
    monkeypatch.setattr(docs, "wanted_files", lambda _: {root / "docs" / "tasks.md": "generated"})
    code, _, err = run_cli(capsys, *command)
    _no_traceback(code, err)
    assert f"{root / 'docs'}" in err and "outside the folder" in err and "nothing is written there" in err, err
    assert list(outside.iterdir()) == []


COMMITTED = '{"plan": [{"id": "an earlier measurement"}], "runs": [], "parts": []}\n'


@pytest.fixture
def committed_table(tmp_path, monkeypatch, tiny_spec):
    """The table's committed snapshots in a folder of their own (the package's left alone), and a
    full-budget measurement that is the tiny spec's two runs: `table --full-budget` of a few seconds."""
    import shutil

    from statetrack.experiments.spec import resolve
    from statetrack.results import statetable as st

    folder = tmp_path / "package-snapshots"
    folder.mkdir()
    shutil.copy(st.snapshot_file(), folder / st.snapshot_file().name)
    (folder / st.snapshot_file(st.FULL_BUDGET).name).write_text(COMMITTED)
    monkeypatch.setattr(st, "snapshot_file", lambda name=st.TABLE: folder / f"{name}.quick.json")
    experiment = resolve(str(tiny_spec(steps=2)), overrides=["seeds=[0]", "models=[lstm]"], name=st.FULL_BUDGET)
    monkeypatch.setattr(st, "full_budget_experiment", lambda: experiment)
    return folder


def test_an_interrupted_full_budget_leaves_the_committed_snapshot_and_a_finished_one_replaces_it(
    committed_table, tmp_path, capsys, monkeypatch
):
    from statetrack.cli import table as command
    from statetrack.results import statetable as st

    committed = st.snapshot_file(st.FULL_BUDGET)
    results = tmp_path / "results"
    argv = ["table", "--full-budget", "--results-dir", str(results), "--workers", "1", "--no-progress"]
    real = command.run_and_report

    def interrupted(*args, **kwargs):
        real(*args, **kwargs)  # every run trained, then Ctrl-C before the command ends
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "run_and_report", interrupted)
    code, _, err = run_cli(capsys, *argv)
    assert code == 130 and err.count("\n") == 1, err
    measured = st.measured_snapshot_file(results, st.FULL_BUDGET)
    assert committed.read_text() == COMMITTED and measured.is_file()
    assert sorted(p.name for p in committed_table.iterdir()) == sorted([committed.name, st.snapshot_file().name])
    monkeypatch.setattr(command, "run_and_report", real)
    code, out, err = run_cli(capsys, *argv)
    assert code == 0 and f"installed: {committed}" in out, err
    assert committed.read_bytes() == measured.read_bytes() and st.not_done(st.load_snapshot(committed)) == 0


def test_sigterm_outside_training_ends_the_command_as_ctrl_c_does(committed_table, tmp_path, capsys, monkeypatch):
    """SIGTERM while the command plans, checks or reports (no run training, so no pool's handler):
    one line and status 143, the committed snapshot as it was, SIGTERM's own handling back after."""
    import os
    import signal

    from statetrack.cli import table as command
    from statetrack.results import statetable as st

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the command")

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(command, "run_and_report", terminated)
    code, _, err = run_cli(capsys, "table", "--full-budget", "--results-dir", str(tmp_path / "results"))
    assert code == 143 and err.count("\n") == 1 and err.startswith("statetrack: interrupted"), err
    assert st.snapshot_file(st.FULL_BUDGET).read_text() == COMMITTED
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_snapshot_with_runs_not_done_is_not_installed(tmp_path, monkeypatch):
    from statetrack.results import statetable as st

    monkeypatch.setattr(st, "snapshot_file", lambda name=st.TABLE: tmp_path / "package" / f"{name}.quick.json")
    (tmp_path / "package").mkdir()
    measured = st.measured_snapshot_file(tmp_path / "results", "x")
    measured.parent.mkdir(parents=True)
    plan = [{"id": "a"}, {"id": "b"}]
    measured.write_text(json.dumps({"plan": plan, "runs": [{"id": "a", "status": "done"}, {"id": "b", "status": "failed"}]}))
    with pytest.raises(StatetrackError, match="1 runs of x are not done .* left as they were"):
        st.install_snapshots(tmp_path / "results", ["x"])
    assert not st.snapshot_file("x").exists()
    # once whole, it is installed and the snapshot it replaces (another measurement's) removed
    stale = st.snapshot_file("stale")
    stale.write_text("{}")
    measured.write_text(json.dumps({"plan": plan, "runs": [{"id": i, "status": "done"} for i in "ab"]}))
    assert st.install_snapshots(tmp_path / "results", ["x"], drop=("stale",)) == [st.snapshot_file("x")]
    assert st.snapshot_file("x").read_bytes() == measured.read_bytes() and not stale.exists()


FAILS_IN_TRAINING = '''
import torch
from torch import nn
import statetrack


@statetrack.register_model("fails", display="Fails")
class Fails(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.w = nn.Linear(d_model, d_model)

    def forward(self, x, state=None):
        if x.shape[0] > 4:  # a batch of training's size, not the checks' few sequences
            raise RuntimeError("CUDA out of memory (simulated)")
        return self.w(x), state
'''


def test_a_pilot_whose_every_run_failed_says_so(tmp_path, capsys):
    plugin = tmp_path / "fails.py"
    plugin.write_text(FAILS_IN_TRAINING)
    results = tmp_path / "results"
    code, out, err = run_cli(capsys, "--import", str(plugin), "table", "--results-dir", str(results), "--workers", "1",
                             "--no-progress", *TABLE_FAST, "train.batch_size=8", "--models", "fails")
    _no_traceback(code, err)
    assert "table: every pilot run of Fails failed (3 runs), so no learning rate can be chosen; the first: " in err, err
    assert "CUDA out of memory (simulated)" in err and "run it to the end first" not in err
