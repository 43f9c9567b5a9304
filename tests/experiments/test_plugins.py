"""User code from a spec or the CLI: models and tasks registered outside the package work in the
driver, in pool workers and in Ray workers; bad imports and bad settings fail before training."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import statetrack
from statetrack import StatetrackError
from statetrack.cli import main
from statetrack.experiments import expand, load_spec
from statetrack.experiments.runner import RunOptions, run_experiment
from statetrack.experiments.spec import resolve
from statetrack.plugins import load_imports
from statetrack.store import Store
from statetrack.tasks import TASKS, FinalAnswerTask, make_task, task_parameters

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "custom_model"
FAST = ["train.steps=8", "train.checkpoint_every=4", "eval.lengths=[10, 20]", "eval.samples=16"]

USER_TASK = '''
import torch
import statetrack
from statetrack.tasks import FinalAnswerTask


@statetrack.register_task("user_last_bit")
class LastBit(FinalAnswerTask):
    """A user's task: the answer is the last input bit."""

    summary = "answer = the last bit (a test task defined outside the package)"

    def __init__(self):
        self._init_vocab(["0", "1"], ["0", "1"])

    def _draw(self, batch_size, length, g):
        bits = torch.randint(0, 2, (batch_size, length), generator=g)
        return bits, bits[:, -1]
'''


def _stores_rows(db) -> list[tuple]:
    store = Store(db)
    return sorted((r["model"], r["seed"], r["status"]) for r in store.runs(store.experiments()[0]))


def test_example_runs_from_its_yaml_on_two_workers(tmp_path):
    experiment = resolve(str(EXAMPLE / "parity.yaml"), overrides=FAST)
    run_experiment(experiment, tmp_path, RunOptions(workers=2, progress=False), log=lambda *_: None)
    spec, runs = experiment.spec, experiment.runs
    assert spec["imports"] == [str(EXAMPLE / "my_gru.py")]  # relative to the spec, made absolute
    assert {r.model_name for r in runs} == {"MyGRU", "DeltaNet [-1,1]"} and len(runs) == 4
    rows = _stores_rows(tmp_path / "statetrack.db")
    assert rows == [("DeltaNet [-1,1]", 0, "done"), ("DeltaNet [-1,1]", 1, "done"), ("MyGRU", 0, "done"), ("MyGRU", 1, "done")]
    assert len(Store(tmp_path / "statetrack.db").results(spec["name"])) == 8


def test_example_runs_on_the_local_ray_backend(tmp_path):
    pytest.importorskip("ray")
    experiment = resolve(str(EXAMPLE / "parity.yaml"), overrides=FAST + ["models=[my_gru]"])
    run_experiment(experiment, tmp_path, RunOptions(workers=2, backend="ray", progress=False), log=lambda *_: None)
    assert _stores_rows(tmp_path / "statetrack.db") == [("MyGRU", 0, "done"), ("MyGRU", 1, "done")]


def test_cli_import_lists_the_model_and_runs_a_user_task(tmp_path, capsys):
    assert main(["--import", str(EXAMPLE / "my_gru.py"), "models"]) == 0
    assert "my_gru" in capsys.readouterr().out
    (tmp_path / "user_tasks.py").write_text(USER_TASK)
    spec = tmp_path / "user.yaml"
    spec.write_text(textwrap.dedent("""
        task: {name: user_last_bit}
        models: [{name: my_gru, hidden: 8}]
        model_defaults: {d_model: 8}
        train: {steps: 6, batch_size: 8, min_length: 2, max_length: 4, early_stop_loss: null, device: cpu}
        eval: {lengths: [4], samples: 8}
        lrs: [1.0e-2]
        seeds: [0, 1]
    """))
    # the task comes from --import (relative to the working directory), the model from the spec's imports
    spec.write_text(spec.read_text() + f"imports: [{EXAMPLE / 'my_gru.py'}]\n")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code = main(["run", str(spec), "--import", "user_tasks.py", "--workers", "2", "--no-progress", "--results-dir", "r"])
    finally:
        os.chdir(cwd)
    assert code == 0
    assert _stores_rows(tmp_path / "r" / "statetrack.db") == [("MyGRU", 0, "done"), ("MyGRU", 1, "done")]
    assert main(["tasks", "--import", str(tmp_path / "user_tasks.py")]) == 0
    assert "user_last_bit" in capsys.readouterr().out


# ---- registering a task is registering a model -----------------------------------------------------
@pytest.fixture
def task_registry():
    """The task registry, restored afterwards: tasks registered by a test do not leak."""
    saved = dict(TASKS)
    yield TASKS
    TASKS.clear()
    TASKS.update(saved)


def test_a_task_registered_with_register_task_is_built_by_make_task(task_registry):
    @statetrack.register_task("user_sum_mod")
    class SumMod(FinalAnswerTask):
        """A user's task: the answer is the sum of the symbols mod m."""

        summary = "answer = sum mod m (a test task)"

        def __init__(self, m: int = 3):
            self.m = m
            self._init_vocab([str(i) for i in range(m)], [str(i) for i in range(m)])

        def _draw(self, batch_size, length, g):
            symbols = torch.randint(0, self.m, (batch_size, length), generator=g)
            return symbols, symbols.sum(1) % self.m

    assert statetrack.register_task is statetrack.tasks.register_task and "register_task" in statetrack.__all__
    task = make_task("user_sum_mod", m=5)
    assert type(task) is SumMod and task.name == "user_sum_mod" and repr(task) == "user_sum_mod(m=5)"
    assert task_parameters("user_sum_mod") == {"m": 3}
    batch = task.sample(16, 7, torch.Generator().manual_seed(0))
    for i in range(16):  # the answer at [EOI] against a Python sum of the decoded symbols
        expected = sum(int(s) for s in task.decode_symbols(batch, i)) % 5
        assert batch.mask[i].sum() == 1 and task.answers[batch.targets[i][batch.mask[i]].item()] == str(expected)
    with pytest.raises(StatetrackError, match="task 'user_sum_mod' has no parameter 'n'; its parameters: m"):
        make_task("user_sum_mod", n=3)
    statetrack.register_task("user_sum_mod")(SumMod)  # the same class again (a module imported twice) is no error
    assert TASKS["user_sum_mod"] is SumMod


def _form(message: str) -> str:
    """A registry message with the kind, the name and the classes taken out."""
    message = re.sub(r"^(model|task) name '[^']+' is taken by \S+; cannot register \S+ under it$",
                     "KIND name NAME is taken by OLD; cannot register NEW under it", message)
    return re.sub(r"^unknown (model|task) 'no_such_thing'; expected one of: .+$", "unknown KIND NAME; expected one of: KNOWN", message)


def test_a_taken_or_unknown_task_name_errors_as_a_model_name_does(task_registry, registry):
    from statetrack.models import zoo

    class OtherParity(FinalAnswerTask):
        pass

    class OtherDeltaNet(nn.Module):
        def __init__(self, d_model: int):
            super().__init__()

    with pytest.raises(StatetrackError) as task_error:
        statetrack.register_task("parity")(OtherParity)
    with pytest.raises(StatetrackError) as model_error:
        statetrack.register_model("deltanet", display="X")(OtherDeltaNet)
    assert re.fullmatch(r"task name 'parity' is taken by statetrack\.tasks\.arithmetic\.Parity; cannot register \S+OtherParity "
                        r"under it", str(task_error.value))
    assert _form(str(task_error.value)) == _form(str(model_error.value)) == "KIND name NAME is taken by OLD; cannot register NEW under it"
    assert TASKS["parity"].__name__ == "Parity" and OtherParity.name == ""  # nothing changed
    with pytest.raises(StatetrackError) as task_error:
        make_task("no_such_thing")
    with pytest.raises(StatetrackError) as model_error:
        zoo.get_entry("no_such_thing")
    assert _form(str(task_error.value)) == _form(str(model_error.value)) == "unknown KIND NAME; expected one of: KNOWN"
    assert "parity, parity_lm" in str(task_error.value)


def test_register_task_refuses_what_is_not_a_task(task_registry):
    with pytest.raises(StatetrackError, match=r"register_task\('x'\) expects a statetrack.tasks.Task subclass, got <class 'int'>"):
        statetrack.register_task("x")(int)
    with pytest.raises(StatetrackError, match="register_task: the name must be a non-empty string, got ''"):
        statetrack.register_task("")

    class Named(FinalAnswerTask):
        name = "other"

    with pytest.raises(StatetrackError, match=r"register_task\('x'\): .*Named.name is 'other'; .*drop the attribute"):
        statetrack.register_task("x")(Named)
    assert "x" not in TASKS


@pytest.mark.parametrize("item, message", [
    ("no_such_module_xyz", "no module named 'no_such_module_xyz'"),
    ("./missing_file.py", "missing_file.py' does not exist"),
    ("./broken.py", r"importing .*broken.py failed \(line 2\): ZeroDivisionError: division by zero"),
])
def test_bad_imports_are_one_line_errors(tmp_path, capsys, item, message):
    (tmp_path / "broken.py").write_text("import os\nx = 1 / 0\n")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(StatetrackError, match=message):
            load_imports([item], origin="--import")
        assert main(["--import", item, "models"]) == 2
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("statetrack: error: --import")
    spec = tmp_path / "s.yaml"
    spec.write_text(f"imports: [{item}]\ntask: parity\nmodels: [lstm]\neval: {{lengths: [4]}}\nlrs: [0.01]\nseeds: [0]\n")
    with pytest.raises(StatetrackError, match="imports"):
        load_spec(str(spec))


def test_imports_must_be_a_list(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("imports: my_models\ntask: parity\nmodels: [lstm]\neval: {lengths: [4]}\nlrs: [0.01]\nseeds: [0]\n")
    with pytest.raises(StatetrackError, match="imports must be a list"):
        load_spec(str(spec))


# ---- everything fails before training ------------------------------------------------------------
BAD_SPECS = {
    "heads": ("{name: deltanet, num_heads: 5, d_model: 32}", "num_heads"),
    "eig_range": ("{name: mamba, eig_range: '[2,3]'}", "eig_range"),
    "user model": ("{name: my_gru, hidden: -3}", "my_gru"),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_model_settings_fail_before_anything_is_written(tmp_path, case):
    model, message = BAD_SPECS[case]
    spec = tmp_path / "bad.yaml"
    spec.write_text(textwrap.dedent(f"""
        imports: [{EXAMPLE / 'my_gru.py'}]
        task: parity
        models: [lstm, {model}]
        train: {{steps: 5}}
        eval: {{lengths: [8]}}
        lrs: [0.01]
        seeds: [0, 1]
    """))
    results = tmp_path / "results"
    command = [sys.executable, "-m", "statetrack.cli", "run", str(spec), "--results-dir", str(results), "--no-progress"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("statetrack: error:") and message in lines[0], out.stderr
    assert not results.exists()  # no store, no checkpoint: nothing trained, nothing written


def test_impossible_lengths_fail_at_expansion(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("task: {name: parity_lm}\nmodels: [lstm]\ntrain: {min_length: 1}\neval: {lengths: [4]}\nlrs: [0.01]\nseeds: [0]\n")
    with pytest.raises(StatetrackError, match="parity_lm.*length must be an integer >= 2, got 1"):
        expand(load_spec(str(spec)))


def test_the_backends_module_does_not_import_the_runner():
    code = "import sys, statetrack.experiments.backends; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True, check=True)
    modules = json.loads(out.stdout)
    assert "statetrack.experiments.backends" in modules and "statetrack.experiments.runner" not in modules
