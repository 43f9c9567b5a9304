"""Experiment names are safe folder names wherever they enter, and every report, checkpoint and
TensorBoard path resolves inside its root folder (symbolic links followed)."""

import pytest

from statetrack.errors import StatetrackError
from statetrack.loggers import tensorboard_dir
from statetrack.experiments.spec import RunSpec, load_spec, overrides_name, shipped_specs
from statetrack.experiments.worker import checkpoint_path
from statetrack.paths import NAME_MAX, check_name, under
from statetrack.report import write_report
from statetrack.store import Store

BAD_NAMES = ["", ".", "..", "../x", "../../escape", "/tmp/x", "a/b", "a\\b", ".hidden", "x" * (NAME_MAX + 1), "sp ace",
             "naïve", "a\nb", None, 12, ["a"]]


def test_every_shipped_experiment_name_is_allowed():
    for name in shipped_specs():
        assert check_name(name) == name
    assert check_name("x" * NAME_MAX) and check_name("v1.2_final-b")


def test_overrides_name_an_experiment_of_their_own():
    assert overrides_name("demo", ["seeds=[0]", "train.steps=50"]) == "demo_seeds-0_train.steps-50"
    assert overrides_name("demo", ["models=[{name: lstm}]", "lrs=[1e-3, 3e-3]", "x=a/../b"]) == \
        "demo_models-name-lstm_lrs-1e-3-3e-3_x-a-..-b"
    long = [overrides_name("demo", [f"eval.lengths=[{', '.join(map(str, range(40)))}, {last}]"]) for last in (998, 999)]
    assert long[0] != long[1] and all(len(n) == NAME_MAX and check_name(n) for n in long)
    assert long[0][:-9] == long[1][:-9]  # the same start, then a hash of the whole
    assert load_spec("demo")["name"] == "demo"
    assert load_spec("demo", overrides=["seeds=[0]"])["name"] == "demo_seeds-0"
    assert load_spec("demo", overrides=["seeds=[0]"], name="mine")["name"] == "mine"


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_unsafe_names_are_one_line_errors(name):
    with pytest.raises(StatetrackError, match="is not allowed: a name is 1 to 100 ASCII letters") as error:
        check_name(name)
    assert "\n" not in str(error.value)


def test_under_keeps_paths_inside_their_root(tmp_path):
    root = tmp_path / "results"
    assert under(root, "demo", "report.html") == root / "demo" / "report.html"
    for parts in (("..", "x"), ("demo", "..", "..", "x"), (str(tmp_path / "elsewhere"),), ("",), (".",)):
        with pytest.raises(StatetrackError, match="outside the folder"):
            under(root, *parts)


def test_a_folder_linked_out_of_the_results_folder_is_refused(tmp_path):
    """results/demo a symbolic link to a folder elsewhere (a shared results folder): nothing is written there."""
    (tmp_path / "results").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "results" / "demo").symlink_to(tmp_path / "elsewhere")
    store = Store(tmp_path / "s.db")
    store.set_plan("demo", {"name": "demo"}, [])
    with pytest.raises(StatetrackError, match="resolves to .*elsewhere, outside the folder"):
        write_report("demo", store, tmp_path / "results")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def _run(experiment: str) -> RunSpec:
    return RunSpec(experiment, {"name": "lstm"}, {"name": "parity"}, {}, {}, 0, 0.01)


@pytest.mark.parametrize("experiment", ["../x", "/abs"])
def test_checkpoint_and_tensorboard_paths_stay_under_their_roots(tmp_path, experiment):
    """The library's own guard, for runs made without a spec (whose names are checked on loading)."""
    assert checkpoint_path(tmp_path, "demo", "abc") == tmp_path / "demo" / "checkpoints" / "abc.pt"
    assert tensorboard_dir(tmp_path, _run("demo")).parent == tmp_path / "demo"
    with pytest.raises(StatetrackError, match="outside the folder"):
        checkpoint_path(tmp_path, experiment, "abc")
    with pytest.raises(StatetrackError, match="outside the folder"):
        checkpoint_path(tmp_path, "demo", "../../../abc")
    with pytest.raises(StatetrackError, match="outside the folder"):
        tensorboard_dir(tmp_path, _run(experiment))


def test_a_store_takes_no_unsafe_name(tmp_path):
    store = Store(tmp_path / "s.db")
    with pytest.raises(StatetrackError, match="'../x' is not allowed"):
        store.set_plan("../x", {}, [])
    with pytest.raises(StatetrackError, match="'../x' is not allowed"):
        store.start_run("r1", "../x", "LSTM", "parity", 0, 0.01, {}, "abc")
    assert store.experiments() == []
