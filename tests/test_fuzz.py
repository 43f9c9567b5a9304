"""A fuzzer for the input contract: whatever a user types (spec files, key=value overrides, task
parameters, command-line options), statetrack either accepts it or answers with one line on stderr
and exit status 2, never a traceback, never a write outside the results folder, never a hang.

Each property runs twice: a quick profile (fixed examples, in `make test`) and a long one behind the
`fuzz` marker (`make test-fuzz`; FUZZ_EXAMPLES per property, default 2000, new examples each time).
The links property plants a symbolic link at each path a command writes in a results folder and
checks that the file or folder it points to outside is never written.
The outputs property plants a folder, a FIFO or a read-only file there instead: refused in one line
with nothing written before it, or written; never a hang. The options property gives the validated
options any value (paths to existing things of every kind among them), and the sizes property any
size under a small available memory (`limits.available_memory` patched).
The table property gives `statetrack table` any models, overrides (evaluation lengths among them)
and options, and the plugins property any user's mixer (a forward that raises or returns another
shape, arity, dtype or non-finite values, settings a spec cannot record, a display or transition
class of the wrong kind, a taken name) with any setting, nan among them: refused in one line before
any store, or planned.
Nothing here trains but the links property's one two-step run: overrides are checked the way `run` checks them before its first run
(`load_spec` and `expand`), and CLI invocations are ones that stop before training.
"""

import contextlib
import os
import shutil
import signal
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_helpers import run_cli
from statetrack import limits, yamlio
from statetrack.errors import StatetrackError
from statetrack.experiments.spec import expand, load_spec
from statetrack.store import Outcome, Plan, RunClaim

HEALTH = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
QUICK = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=HEALTH)
LONG = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 2000)), deadline=None, suppress_health_check=HEALTH)


def profiles(strategies: tuple, prop, quick: int | None = None):
    """The quick (`quick` examples, default QUICK's) and the long (marked `fuzz`) test of property
    `prop` over `strategies`."""
    fast = QUICK if quick is None else settings(QUICK, max_examples=quick)
    return fast(given(*strategies)(prop)), pytest.mark.fuzz(LONG(given(*strategies)(prop)))

# numbers at and past every bound, unicode and control characters, YAML's own syntax
NUMBERS = st.one_of(st.integers(), st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, 2**63, 2**64, 10**100]),
                    st.floats(allow_nan=True, allow_infinity=True))
TEXT = st.one_of(st.text(max_size=30), st.text(alphabet=string.printable, max_size=30),
                 st.sampled_from(["", "~", "null", "[", "{", "&a", "*a", "!!binary aGk=", "!!python/name:os.system",
                                  "a\nb", "\x00", "é", "../..", "1e-3", "yes", "2025-01-01"]))
SCALARS = st.one_of(NUMBERS, TEXT, st.booleans(), st.none())
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(TEXT, inner, max_size=3)), max_leaves=8)
KEYS = st.one_of(
    st.sampled_from(["seeds", "lrs", "train.steps", "train.batch_size", "train.min_length", "train.max_length", "train.lr",
                     "train.schedule", "train.warmup", "train.seed", "train.device", "train.dataset_size", "train.curriculum",
                     "train.early_stop_accuracy", "eval.lengths", "eval.samples", "eval.chunk_size", "eval.variants",
                     "model_defaults.d_model", "model_defaults.num_layers", "model_defaults.mlp", "models", "task", "tasks",
                     "selection.lr", "selection.criterion", "paper.fit", "paper.claims", "name", "imports", "scales"]),
    st.text(min_size=1, max_size=12))


def _yaml(value) -> str:
    """`value` as YAML flow text (the form an override's value takes)."""
    import json

    try:
        return json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        return str(value)


def any_yaml_text_is_read_or_refused_in_one_line(text):
    try:
        yamlio.load(text)
    except StatetrackError as error:
        assert "\n" not in str(error)


def any_override_is_accepted_or_refused_in_one_line(key, value):
    """What `run` checks before its first run: the spec with the override, and every run it expands to."""
    try:
        expand(load_spec("demo", overrides=[f"{key}={value}"]))
    except StatetrackError as error:
        assert str(error).strip()


COMMANDS = st.sampled_from([
    ["tasks", "show", "{task}", "{param}", "--lengths", "{int}", "--count", "{int}", "--seed", "{int}"],
    ["tasks", "show", "word_problem", "group={text}"],
    ["construct", "{task}", "{param}", "--lengths", "{int}", "--samples", "{int}"],
    ["models", "{text}", "--width", "{int}"],
    ["models", "deltanet", "--width", "8", "--set", "{param}"],
    ["results", "{text}", "--results-dir", "{tmp}"],
    ["report", "{text}", "--results-dir", "{tmp}"],
    ["analyze", "spectrum", "{text}", "--samples", "{int}", "--results-dir", "{tmp}"],
    ["analyze", "shortcut", "{param}", "--window", "{int}"],
    ["run", "{text}", "--results-dir", "{tmp}"],
    ["export", "csv", "{text}", "--results-dir", "{tmp}"],
])
TASKS = st.sampled_from(["parity", "modadd", "fsm", "word_problem", "copy", "counting", "nosuch", ""])
PARAMS = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["m", "states", "group", "n", "machine_seed", "symbols", "x", ""]),
                   st.one_of(NUMBERS.map(str), TEXT))
INTS = st.one_of(NUMBERS.map(str), TEXT)


def cli_answers_bad_input_in_one_line_and_writes_nothing_outside(tmp_path_factory, capsys, argv, task, param, number, text):
    tmp = tmp_path_factory.mktemp("fuzz")
    outside = set(os.listdir(tmp.parent))
    filled = [part.replace("{task}", task).replace("{param}", param).replace("{int}", number).replace("{text}", text)
                  .replace("{tmp}", str(tmp)) for part in argv]
    if filled[0] == "run" and filled[1] in ("demo",) or (filled[0] == "run" and os.path.isfile(filled[1])):
        return  # a valid experiment would train
    code, _, err = run_cli(capsys, *filled)
    assert "Traceback" not in err
    assert code in (0, 2), (filled, code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("statetrack: error: "), (filled, err)
    assert set(os.listdir(tmp.parent)) - outside <= {tmp.name}, filled


test_yaml_quick, test_yaml_long = profiles(
    (st.one_of(TEXT, st.text(max_size=200), VALUES.map(_yaml)),), any_yaml_text_is_read_or_refused_in_one_line)
test_overrides_quick, test_overrides_long = profiles(
    (KEYS, st.one_of(VALUES.map(_yaml), TEXT)), any_override_is_accepted_or_refused_in_one_line)
test_cli_quick, test_cli_long = profiles(
    (COMMANDS, TASKS, PARAMS, INTS, TEXT), cli_answers_bad_input_in_one_line_and_writes_nothing_outside)


@pytest.fixture(scope="module")
def trained_results(tmp_path_factory):
    """A results folder with one finished experiment ('tiny': the demo for two steps), made once."""
    import contextlib
    import io

    from statetrack.cli import main

    results = tmp_path_factory.mktemp("trained") / "r"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", "demo", "--name", "tiny", "--results-dir", str(results), "--no-progress", "--workers", "1",
                     "train.steps=2", "seeds=[0]", "eval.lengths=[4, 8]", "eval.samples=8"])
    assert code == 0
    return results


# every path under the results folder that a command below writes, and the commands
LINKED = st.sampled_from(["tiny", "tiny/report.md", "tiny/report.html", "tiny/accuracy_vs_length.png",
                          "tiny/training_curves.png", "tiny/csv", "tiny/csv/evals.csv", "tiny/csv/runs.csv", "index.html",
                          "index.md", "statetrack.db-wal", "statetrack.db-journal"])
READERS = st.sampled_from([["report", "tiny"], ["report", "--all"], ["export", "csv", "tiny"], ["results", "tiny"]])
TARGETS = st.sampled_from(["file", "folder", "missing"])



def _cleared(trained: Path, results: Path, relative: str) -> Path:
    """A copy of the `trained` results folder at `results`, with nothing at `relative` under it
    (its parent folder made): the path a property puts something at. Returns that path."""
    shutil.copytree(trained, results, symlinks=True)
    path = results / relative
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path

def a_link_in_the_results_folder_is_never_written_through(trained_results, tmp_path_factory, capsys, linked, argv, target):

    base = tmp_path_factory.mktemp("linked")
    results = base / "r"
    outside = base / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    aim = {"file": outside / "keep.txt", "folder": outside, "missing": outside / "new"}[target]
    path = _cleared(trained_results, results, linked)
    path.symlink_to(aim)
    filled = list(argv)
    code, _, err = run_cli(capsys, *filled, "--results-dir", str(results))
    assert "Traceback" not in err
    assert code in (0, 2), (linked, filled, code, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("statetrack: error: "), (linked, filled, err)
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"] and (outside / "keep.txt").read_text() == "keep", \
        (linked, filled)


test_links_quick, test_links_long = profiles((LINKED, READERS, TARGETS), a_link_in_the_results_folder_is_never_written_through,
                                            quick=20)  # each example writes a report with its plots


# damaged stores: any value in any decoded column of a finished run's rows, read by every reader
COLUMNS = st.sampled_from(["runs.config", "runs.lr", "runs.seed", "runs.model", "plans.spec", "plans.runs", "plans.scale",
                           "evals.metrics", "evals.accuracy", "evals.position_accuracy", "evals.sequence_accuracy",
                           "curves.loss", "curves.metrics", "traces.data"])
STORE_READERS = st.sampled_from([["report", "exp"], ["report", "--all"], ["results", "exp"], ["results", "exp", "--json"],
                                 ["export", "csv", "exp"], ["analyze", "spectrum", "0123"], ["analyze", "signs", "exp"]])


def a_damaged_row_is_skipped_or_refused_in_one_line(tmp_path_factory, capsys, column, value, argv):
    import json
    import sqlite3

    from statetrack.store import Store

    results = tmp_path_factory.mktemp("damaged") / "r"
    store = Store(results / "statetrack.db")
    run_id = "0123456789abcdef"
    store.set_plan(Plan("exp", {"name": "exp"}, [{"id": run_id, "model": "LSTM", "task": "modadd(m=3)", "lr": 0.01, "seed": 0}]))
    store.start_run(RunClaim(run_id, "exp", "LSTM", "modadd(m=3)", 0, 0.01, {"model": {"name": "lstm", "d_model": 8},
                    "task": {"name": "modadd", "m": 3}, "train": {"max_length": 5}, "eval": {"lengths": [5]}}, "abc"))
    store.finish_run(run_id, Outcome([{"length": 5, "accuracy": 0.5, "scaled_accuracy": 0.2, "samples": 4, "position_accuracy": [1.0],
                               "traces": [{"inputs": [1, 2], "targets": [0, 1], "mask": [0, 1],
                                           "probabilities": [[0.5, 0.5], [0.2, 0.8]]}]}], [{"step": 1, "loss": 1.0, "accuracy": 0.5}], 2, 100, 0.1, 0.1))
    table, name = column.split(".")
    db = sqlite3.connect(results / "statetrack.db")
    db.execute(f"UPDATE {table} SET {name} = ?", (value if isinstance(value, str) else json.dumps(value, allow_nan=True),))
    db.commit()
    db.close()
    code, _, err = run_cli(capsys, *argv, "--results-dir", str(results))
    assert "Traceback" not in err, (column, value, argv, err)
    assert code in (0, 2), (column, value, argv, code, err)
    assert all(line.startswith(("statetrack: error: ", "statetrack: warning: ")) for line in err.strip().splitlines()), err
    assert sum(line.startswith("statetrack: error: ") for line in err.splitlines()) == (code == 2)


test_damaged_quick, test_damaged_long = profiles(
    (COLUMNS, st.one_of(VALUES, TEXT), STORE_READERS), a_damaged_row_is_skipped_or_refused_in_one_line, quick=30)


@contextlib.contextmanager
def no_hang(seconds: int = 120):
    """A command that blocks (opening a FIFO to write, say) fails the property instead of hanging it."""

    def hung(*_):
        raise AssertionError(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _snapshot(folder) -> dict:
    """Every path under `folder`: its kind, and a regular file's bytes and modification time."""
    import hashlib
    import stat

    out = {}
    for path in sorted(folder.rglob("*")):
        mode = path.lstat().st_mode
        if stat.S_ISREG(mode):
            out[str(path)] = (hashlib.sha256(path.read_bytes()).hexdigest(), path.lstat().st_mtime_ns)
        else:
            out[str(path)] = stat.S_IFMT(mode)
    return out


# output paths: a folder, a FIFO or a read-only file where a command writes, in a copy of a finished experiment
OUTPUTS = st.sampled_from(["tiny/report.md", "tiny/report.html", "tiny/accuracy_vs_length.png", "tiny/training_curves.png",
                           "tiny/csv/evals.csv", "tiny/csv/runs.csv", "tiny/csv/curves.csv", "index.html", "index.md",
                           "statetrack.db", "statetrack.db-wal", "statetrack.db-shm", "statetrack.db-journal"])
WRITERS = st.sampled_from([["report", "tiny"], ["report", "--all"], ["export", "csv", "tiny"], ["results", "tiny"],
                           ["run", "demo", "--name", "tiny", "--no-progress", "--workers", "1", "train.steps=2", "seeds=[0]",
                            "eval.lengths=[4, 8]", "eval.samples=8"]])
THINGS = st.sampled_from(["folder", "fifo", "read-only file"])


def a_bad_output_path_is_refused_before_anything_is_written(trained_results, tmp_path_factory, capsys, monkeypatch,
                                                            output, argv, thing):

    def no_training(*args, **kwargs):
        raise AssertionError("a run of a finished experiment started training")

    results = tmp_path_factory.mktemp("outputs") / "r"
    path = _cleared(trained_results, results, output)
    if thing == "folder":
        path.mkdir()
    elif thing == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("")
        path.chmod(0o444)
    before = _snapshot(results)
    # one example's patch, undone before the next (the fixture's monkeypatch lasts the whole property)
    with no_hang(300), monkeypatch.context() as patch:  # a hang, not a slow report: drawing every plot can pass 120 s
        if output != "statetrack.db":  # an empty store in its place holds no finished experiment: a run of it trains
            patch.setattr("statetrack.experiments.runner.make_backend", no_training)
        code, _, err = run_cli(capsys, *argv, "--results-dir", str(results))
    assert "Traceback" not in err, (output, argv, thing, err)
    assert code in (0, 2), (output, argv, thing, code, err)
    if code == 2:
        errors = [line for line in err.strip().splitlines() if not line.startswith("statetrack: warning: ")]
        assert len(errors) == 1 and errors[0].startswith("statetrack: error: "), (output, argv, thing, err)
        assert _snapshot(results) == before, (output, argv, thing, "a partial write")  # nothing written before it


test_outputs_quick, test_outputs_long = profiles(
    (OUTPUTS, WRITERS, THINGS), a_bad_output_path_is_refused_before_anything_is_written, quick=25)


# options: any value of the options that are validated, including paths to existing things of every kind
OPTIONS = st.sampled_from([
    ["construct", "parity", "--lengths", "5", "--samples", "4", "--normalize-every", "{value}"],
    ["construct", "modadd", "m=3", "--lengths", "5", "--samples", "{value}"],
    ["tasks", "export", "parity", "--lengths", "5", "--samples", "4", "--out", "{value}"],
    ["tasks", "export", "parity", "--lengths", "5", "--samples", "{value}", "--out", "{tmp}/out"],
    ["run", "demo", "--dry-run", "--workers", "{value}", "--results-dir", "{tmp}/r"],
    ["run", "demo", "--dry-run", "--device", "{value}", "--results-dir", "{tmp}/r"],
    ["run", "demo", "--dry-run", "--gpus-per-run", "{value}", "--results-dir", "{tmp}/r"],
    ["run", "demo", "--dry-run", "--store", "{value}", "--results-dir", "{tmp}/r"],
    ["report", "--all", "--results-dir", "{value}"],
    ["results", "demo", "--store", "{value}"],
    ["export", "csv", "demo", "--out", "{value}", "--results-dir", "{tmp}/r"],
    ["models", "lstm", "--params", "{value}"],
    ["models", "lstm", "--width", "{value}"],
    ["tasks", "show", "parity", "--lengths", "{value}", "--count", "2"],
])
PLACES = st.sampled_from(["{tmp}/file", "{tmp}/folder", "{tmp}/fifo", "{tmp}/missing", "{tmp}/missing/deeper", "{tmp}/db",
                          "/dev/null", "", "-1", "0", "1e400", "nan"])


def an_option_is_validated_in_one_line(tmp_path_factory, capsys, monkeypatch, argv, value):
    import sqlite3

    tmp = tmp_path_factory.mktemp("options")
    monkeypatch.chdir(tmp)  # a relative value (--out 735320) is a path in here
    # exports over a megabyte refused: --samples 19745872 is a valid export that takes minutes to write
    monkeypatch.setattr(limits, "MAX_EXPORT_BYTES", 2**20)
    monkeypatch.delenv(limits.LIFT, raising=False)
    (tmp / "file").write_text("x")
    (tmp / "folder").mkdir()
    os.mkfifo(tmp / "fifo")
    sqlite3.connect(tmp / "db").execute("CREATE TABLE t (x)").connection.close()
    outside = set(os.listdir(tmp.parent))
    filled = [part.replace("{value}", value).replace("{tmp}", str(tmp)) for part in argv]
    try:
        huge = int(value) > 10**5
    except ValueError:
        huge = False
    if argv[0] == "construct" and "--samples" in argv and huge:
        return  # a valid count of samples: evaluating 2147483648 of them takes hours, work and not a hang
    with no_hang():
        code, _, err = run_cli(capsys, *filled)
    assert "Traceback" not in err, (filled, err)
    assert code in (0, 2), (filled, code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("statetrack: error: "), (filled, err)
    assert set(os.listdir(tmp.parent)) - outside <= {tmp.name}, filled
    assert stat_kind(tmp / "fifo") == "fifo" and (tmp / "file").read_text() == "x", filled


def stat_kind(path) -> str:
    import stat

    return "fifo" if stat.S_ISFIFO(path.lstat().st_mode) else "other"


test_options_quick, test_options_long = profiles(
    (OPTIONS, st.one_of(PLACES, INTS)), an_option_is_validated_in_one_line, quick=40)


# sizes against memory: any size under a small memory, refused in one line before anything is allocated
SIZED_KEYS = st.sampled_from(["train.dataset_size", "train.val_samples", "eval.samples", "eval.batch_size",
                              "train.batch_size", "train.max_length", "eval.lengths", "model_defaults.d_model",
                              "model_defaults.num_layers"])
SIZES = st.one_of(st.integers(1, 10**12), st.sampled_from([2**31, 2**40, 10**9, 10**15]))
MEMORY = st.integers(2**20, 2**28)  # at most 256 MiB: what is accepted stays small enough to build here
SIZED_COMMANDS = st.sampled_from([
    ["construct", "modadd", "m={size}", "--lengths", "5", "--samples", "4"],
    ["construct", "fsm", "states={size}", "--lengths", "5", "--samples", "4", "--structure", "full"],
    ["models", "lstm", "--params", "{size}"],
    ["tasks", "show", "parity", "--lengths", "{size}", "--count", "2"],
    ["analyze", "shortcut", "group=S5", "--samples", "{size}"],
])


def a_size_is_checked_against_memory_before_anything_is_allocated(monkeypatch, capsys, key, size, memory, argv):

    monkeypatch.delenv(limits.LIFT, raising=False)
    monkeypatch.setattr(limits, "available_memory", lambda: memory)
    value = f"[{size}]" if key == "eval.lengths" else str(size)
    try:
        expand(load_spec("demo", overrides=[f"{key}={value}"]))
    except StatetrackError as error:
        assert "\n" not in str(error)
    filled = [part.replace("{size}", str(size)) for part in argv]
    with no_hang(300):
        code, _, err = run_cli(capsys, *filled)
    assert "Traceback" not in err and "MemoryError" not in err, (filled, memory, err)
    assert code in (0, 2), (filled, memory, code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("statetrack: error: "), (filled, err)


test_sizes_quick, test_sizes_long = profiles(
    (SIZED_KEYS, SIZES, MEMORY, SIZED_COMMANDS), a_size_is_checked_against_memory_before_anything_is_allocated, quick=30)


# the table command and a user's mixer: any plugin, any setting of it, refused in one line before any store
TABLE_COMMANDS = st.sampled_from([
    ["table", "--dry-run", "--results-dir", "{tmp}", "--models", "{text}"],
    ["table", "--dry-run", "--results-dir", "{tmp}", "{param}", "--models", "{text}"],
    ["table", "--results-dir", "{tmp}", "{param}"],
    ["table", "--full-budget", "--results-dir", "{tmp}", "{param}"],
    ["table", "--zoo", "--results-dir", "{tmp}", "--models", "{text}"],
    ["table", "--write", "--models", "{text}"],
    ["table", "--dry-run", "--results-dir", "{tmp}", "train.min_length=3", "train.max_length=3", "eval.lengths=[{int}]",
     "--models", "lstm"],
])
BODIES = st.sampled_from([
    "return torch.tanh(self.w(x)), state",
    "raise ValueError('bug')",
    "return self.w(x)[..., :1], state",
    "return self.w(x), state, 1",
    "return self.w(x)",
    "return self.w(x) / 0.0, state",
    "return [self.w(x), state]",
    "return None",
    "return self.w(x).sum(), state",
    "return self.w(x), (x if state is None else state.unknown)",
    "return torch.zeros_like(x), state",
    "return self.w(x).long(), state",
    "return self.w(x).double(), state",
])
PARAMETERS = st.sampled_from(["", ", width", ", **options", ", *rest", ", act=torch.tanh", ", n: int = 3", ", eps=float('inf')",
                              ", names=('a', 'b')", ", cfg={'a': [1, 2]}", ", cls=nn.Linear", ", scale: float = 1.0"])
DISPLAYS = st.sampled_from(["'Mine'", "'Mine {n}'", "'Mine {missing}'", "lambda spec: 1 / 0", "lambda spec: 42", "lambda spec: ''",
                            "lambda spec: spec['name'].upper()", "3", "'Mine\\nTwo'"])
CLASSES = st.sampled_from(["", "    transition_class = 'nonlinear'\n", "    transition_class = ['dense']\n",
                           "    @staticmethod\n    def transition_class(spec):\n        return 'nonlinaer'\n",
                           "    @staticmethod\n    def transition_class(spec):\n        return 'nonlinear'\n",
                           "    @staticmethod\n    def transition_class(spec):\n        return {3: 'dense'}[spec.get('n')]\n"])
NAMES = st.sampled_from(["mine", "deltanet-neg", "lstm", "mamba-pos", "my mixer", ""])
PLUGIN = '''
import torch
from torch import nn
import statetrack


@statetrack.register_model({name!r}, display={display})
class Mixer(nn.Module):
{transition_class}
    def __init__(self, d_model: int{parameters}):
        super().__init__()
        self.w = nn.Linear(d_model, d_model)

    def forward(self, x, state=None):
        {body}
'''


def a_users_mixer_is_checked_in_one_line_before_any_store(tmp_path_factory, capsys, name, body, parameters, display,
                                                          transition_class, setting):
    from statetrack.layers import MODELS

    tmp = tmp_path_factory.mktemp("plugin")
    plugin = tmp / "mixer.py"
    plugin.write_text(PLUGIN.format(name=name, display=display, transition_class=transition_class,
                                    parameters=parameters, body=body))
    entry = f"{{name: {name}, {setting}}}" if setting else name
    saved = dict(MODELS)
    try:
        with no_hang(300):
            code, _, err = run_cli(capsys, "--import", str(plugin), "table", "--dry-run", "--results-dir", str(tmp / "r"),
                                   "--models", entry)
    finally:
        MODELS.clear()
        MODELS.update(saved)
    assert "Traceback" not in err, (name, body, parameters, display, transition_class, setting, err)
    assert code in (0, 2), (name, body, parameters, display, transition_class, setting, code, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("statetrack: error: "), err
    assert not (tmp / "r").exists()


test_table_cli_quick, test_table_cli_long = profiles(
    (TABLE_COMMANDS, TASKS, PARAMS, INTS, TEXT), cli_answers_bad_input_in_one_line_and_writes_nothing_outside, quick=15)
def _or_good(good, strategy):
    """`good` half the time, so that most examples get past the checks of registration to the pass."""
    return st.one_of(st.just(good), strategy)


test_plugins_quick, test_plugins_long = profiles(
    (_or_good("mine", NAMES), _or_good("return torch.tanh(self.w(x)), state", BODIES), _or_good(", n: int = 3", PARAMETERS), _or_good("'Mine'", DISPLAYS),
     _or_good("", CLASSES),
     st.one_of(st.just(""), st.builds(lambda k, v: f"{k}: {v}", st.sampled_from(["n", "scale", "eps", "d_model"]),
                                      st.one_of(VALUES.map(_yaml), st.sampled_from([".nan", "-.inf", "[1, .nan]"]))))),
    a_users_mixer_is_checked_in_one_line_before_any_store, quick=12)
