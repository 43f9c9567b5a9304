"""Experiment names are safe folder names wherever they enter, and every report, checkpoint and
TensorBoard path resolves inside its root folder (symbolic links followed)."""

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from statetrack.errors import StatetrackError
from statetrack.experiments.spec import RunSpec, load_spec, overrides_name, shipped_specs
from statetrack.experiments.worker import checkpoint_path
from statetrack.paths import NAME_MAX, check_name, replace_atomically, under, write_text, write_text_atomically
from statetrack.results.report import write_report
from statetrack.results.scoring import score_store
from statetrack.store import Plan, RunClaim, Store
from statetrack.training.loggers import tensorboard_dir

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
    store.set_plan(Plan("demo", {"name": "demo"}, []))
    with pytest.raises(StatetrackError, match="resolves to .*elsewhere, outside the folder"):
        write_report(score_store(store, "demo", run_data=True), tmp_path / "results")
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
        store.set_plan(Plan("../x", {}, []))
    with pytest.raises(StatetrackError, match="'../x' is not allowed"):
        store.start_run(RunClaim("r1", "../x", "LSTM", "parity", 0, 0.01, {}, "abc"))
    assert store.experiments() == []


def _plant(path, target):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def test_open_for_write_refuses_links_fifos_and_devices(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    _plant(tmp_path / "link.txt", outside)
    with pytest.raises(StatetrackError, match="link.txt is a symbolic link; statetrack writes no file through a link"):
        write_text(tmp_path / "link.txt", "x")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(StatetrackError, match="fifo is a FIFO, not a regular file"):  # no reader: refused, not waited on
        write_text(tmp_path / "fifo", "x")
    with pytest.raises(StatetrackError, match="/dev/null is a device, not a regular file"):
        write_text("/dev/null", "x")
    assert outside.read_text() == "keep"
    assert write_text(tmp_path / "plain.txt", "new").read_text() == "new"


def test_every_writer_refuses_a_link_planted_at_its_file(tiny_spec, tmp_path, capsys):
    """A link at each file a command writes (report, plots, index, CSV export, task export, checkpoint):
    one-line error, exit 2, and the file the link points to is untouched."""
    from cli_helpers import run_cli
    from statetrack.training.train import Trainer

    results = tmp_path / "r"
    code, _, _ = run_cli(capsys, "run", str(tiny_spec(seeds="[0]")), "--results-dir", str(results), "--no-progress",
                         "--workers", "1", "train.steps=5", "--name", "tiny")
    assert code == 0
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    cases = [
        (results / "tiny" / "report.md", ["report", "tiny"]),
        (results / "tiny" / "report.html", ["report", "tiny"]),
        (results / "tiny" / "accuracy_vs_length.png", ["report", "tiny"]),
        (results / "index.html", ["report", "--all"]),
        (results / "tiny" / "csv" / "evals.csv", ["export", "csv", "tiny"]),
        (tmp_path / "tasks" / "parity_len5.csv", ["tasks", "export", "parity", "--lengths", "5", "--samples", "2",
                                               "--out", str(tmp_path / "tasks")]),
    ]
    for path, argv in cases:
        path.unlink(missing_ok=True)
        _plant(path, outside)
        if argv[0] != "tasks":
            argv = [*argv, "--results-dir", str(results)]
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1, (path, err)
        assert "is a symbolic link; statetrack writes no file through a link" in err, err
        assert outside.read_text() == "keep", path
        path.unlink()
    # the checkpoint's temporary file
    trainer = Trainer.__new__(Trainer)  # save() fails at the open, before it reads any state
    checkpoint = results / "tiny" / "checkpoints" / "x.pt"
    _plant(checkpoint.with_name(f".x.pt.{os.getpid()}.partial"), outside)
    with pytest.raises(StatetrackError, match="x.pt.[0-9]+.partial is a symbolic link"):
        Trainer.save(trainer, checkpoint)
    assert outside.read_text() == "keep"


def test_the_store_and_its_companions_are_never_written_through_a_link(tmp_path):
    """SQLite follows links: a link at the store or at its -wal/-shm/-journal file is refused before
    SQLite opens anything, and the file it points to is untouched."""
    outside = tmp_path / "outside.db"
    outside.write_bytes(b"")
    for name in ("s.db", "s.db-wal", "s.db-shm", "s.db-journal"):
        folder = tmp_path / name.replace(".", "_")
        _plant(folder / name, outside)
        with pytest.raises(StatetrackError, match=f"{name} is a symbolic link; statetrack writes no file through a link"):
            Store(folder / "s.db")
    assert outside.read_bytes() == b""


@pytest.mark.parametrize("where", ["results", "tensorboard"])
def test_run_refuses_a_linked_run_folder_before_writing_anything(tiny_spec, tmp_path, capsys, where):
    """The experiment's folder in the results folder (checkpoints) or in the TensorBoard folder a link
    to elsewhere: `run` says so in one line with exit 2 before it opens the store or trains a run."""
    from cli_helpers import run_cli

    outside = tmp_path / "outside"
    outside.mkdir()
    results, tensorboard = tmp_path / "r", tmp_path / "tb"
    _plant((results if where == "results" else tensorboard) / "tiny", outside)
    code, _, err = run_cli(capsys, "run", str(tiny_spec(seeds="[0]")), "--results-dir", str(results), "--no-progress",
                           "--workers", "1", "train.steps=5", "--name", "tiny", "--tensorboard", str(tensorboard))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "outside the folder" in err and "nothing is written there" in err, err
    assert list(outside.iterdir()) == []
    assert not (results / "statetrack.db").exists()


def _limited_cli(limit: int, *argv) -> subprocess.CompletedProcess:
    """`statetrack *argv` in a process that may write no file beyond `limit` bytes: a write past it
    fails as on a full disk (EFBIG; Python ignores SIGXFSZ)."""

    def limit_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "statetrack.cli", *argv], capture_output=True, text=True,
                          preexec_fn=limit_files, timeout=300)


def test_a_write_that_fails_midway_is_one_line_and_leaves_no_partial_file(tiny_spec, tmp_path, capsys):
    """A report, a plot or the store written to a disk that fills up: exit 2, one line naming the file
    (or the store, whose earlier rows stay intact), and no half-written file left behind."""
    from cli_helpers import run_cli

    results = tmp_path / "r"
    argv = ["run", str(tiny_spec(seeds="[0]")), "--results-dir", str(results), "--no-progress", "--workers", "1",
            "train.steps=5", "--name", "tiny"]
    assert run_cli(capsys, *argv)[0] == 0
    for name in ("report.md", "report.html", "accuracy_vs_length.png", "training_curves.png"):
        (results / "tiny" / name).unlink()
    done = _limited_cli(2000, "report", "tiny", "--results-dir", str(results))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "File too large: " in done.stderr and str(results / "tiny") in done.stderr, done.stderr
    assert not Path(done.stderr.strip().split("File too large: ")[1]).exists()  # removed, not left half-written
    done = _limited_cli(20000, *argv[:-2], "--name", "other")  # the store grows past the limit while it trains
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"cannot write results store {results / 'statetrack.db'}" in done.stderr, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    code, out, _ = run_cli(capsys, "results", "tiny", "--results-dir", str(results))
    assert code == 0 and "LSTM" in out  # what was stored before is intact


def test_an_atomic_write_leaves_the_old_file_whole_when_it_stops(tmp_path):
    """An interrupted write (Ctrl-C, an error) leaves the file as it was and no partial file beside
    it; a finished one replaces it in one step; a link at the name is replaced, not written through."""
    path = tmp_path / "snapshot.json"
    path.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with replace_atomically(path) as f:
            f.write("half of the new")
            raise KeyboardInterrupt
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["snapshot.json"]
    write_text_atomically(path, "new")
    assert path.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["snapshot.json"]
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    path.unlink()
    path.symlink_to(outside)
    write_text_atomically(path, "new")
    assert outside.read_text() == "keep" and not path.is_symlink() and path.read_text() == "new"
