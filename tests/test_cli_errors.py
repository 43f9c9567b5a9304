"""Every bad invocation of the command line: exit status 2, one line on stderr naming the bad value and
what was expected, no traceback, and nothing written (the working folder is byte-for-byte as before)."""

import hashlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run_cli
from statetrack.store import Outcome, Plan, RunClaim, Store

# (argv, what the one line must contain). In argv, {tmp} is the test's working folder, {store} an
# existing store holding no experiment, {text} a text file that is not a store; the other stores and
# files are made by `workdir` (see there).
NOT_ALLOWED = "is not allowed: a name is 1 to 100 ASCII letters, digits, '.', '_' or '-', not starting with '.'"
FOREIGN = "is not a statetrack results store but an SQLite database of another application"
BAD = [
    # a NUL character, which no path or name may hold (only a caller in Python can pass one)
    (["tasks", "export", "parity", "--lengths", "5", "--samples", "4", "--out", "\x00"], "holds a NUL character"),
    (["run", "demo", "--results-dir", "{tmp}/a\x00b"], "holds a NUL character"),
    # run: experiments, overrides and spec values
    (["run", "nope"], "unknown experiment 'nope'; expected one of: "),
    (["run", "missing.yaml"], "experiment file 'missing.yaml' does not exist"),
    (["run", "demo", "train.steps"], "not of the form key=value"),
    (["run", "demo", "=5"], "not of the form key=value"),
    (["run", "demo", "train.bogus=1"], "train: unknown key 'bogus'; expected one of: steps, batch_size"),
    (["run", "demo", "train.steps=abc"], "train.steps"),
    (["run", "demo", "train.steps=-5"], "train.steps"),
    (["run", "demo", "train.batch_size=0"], "train.batch_size"),
    (["run", "demo", "train.lr=fast"], "train.lr"),
    (["run", "demo", "train.min_length=50"], "1 <= min_length <= max_length"),
    (["run", "demo", "train.schedule=exponential"], "schedule"),
    (["run", "demo", "eval.lengths=[0]"], "eval.lengths must be a non-empty list of integers >= 1, got [0]"),
    (["run", "demo", "eval.lengths=abc"], "eval.lengths"),
    (["run", "demo", "eval.samples=0"], "eval.samples"),
    (["run", "demo", "seeds=[]"], "seeds must be a non-empty list, got []"),
    (["run", "demo", "seeds=[a]"], "seeds"),
    (["run", "demo", "lrs=[-1]"], "lrs"),
    (["run", "demo", "lrs=abc"], "lrs"),
    (["run", "demo", "model_defaults.d_model=0"], "d_model"),
    (["run", "demo", "model_defaults.num_layers=0"], "num_layers"),
    (["run", "demo", "models=[{name: deltanet, eig_range: '[2,3]'}]"], "eig_range"),
    (["run", "demo", "models=[{name: deltanet, num_heads: 0}]"], "num_heads"),
    (["run", "demo", "models=[{name: nosuch}]"], "unknown model 'nosuch'"),
    (["run", "demo", "task={name: modadd, m: 1}"], "m must be an integer >= 2"),
    (["run", "demo", "selection.lr=best"], "unknown selection.lr 'best'; expected one of: best_mean, best_max"),
    (["run", "demo", "train=5"], "train"),
    # run: options
    (["run", "demo", "--scale", "huge"], "--scale: invalid choice: 'huge'"),
    (["run", "demo", "--backend", "spark"], "--backend: invalid choice: 'spark'"),
    (["run", "demo", "--device", "tpu"], "unknown device 'tpu'; expected one of: auto, cpu, cuda"),
    (["run", "demo", "--device", "cuda:7"], "--device cuda:7: this machine has"),
    (["run", "demo", "--workers", "0"], "--workers"),
    (["run", "demo", "--workers", "two"], "--workers: invalid int value: 'two'"),
    (["run", "demo", "--address", "auto"], "--address joins a Ray cluster; use it with --backend ray"),
    (["run", "demo", "--gpus-per-run", "1"], "--gpus-per-run"),
    (["run", "demo", "--lease", "0"], "--lease must be a number of seconds > 0"),
    (["run", "demo", "--lease", "inf"], "--lease must be a number of seconds > 0 and at most 604800 (a week), got inf"),
    (["run", "demo", "--backend", "ray", "--gpus-per-run", "nan"], "--gpus-per-run must be a number from 0 to 1024, got nan"),
    (["run", "demo", "--backend", "ray", "--gpus-per-run", "inf"], "--gpus-per-run must be a number from 0 to 1024, got inf"),
    (["run", "demo", "train.device=meta"], "train.device must be a device: auto, cpu, cuda or cuda:N, got 'meta'"),
    (["run", "demo", "--device", "mps"], "unknown device 'mps'; expected one of: auto, cpu, cuda, cuda:N"),
    (["run", "demo", "seeds=0"], "seeds must be a list such as [0] (on the command line, quoted: 'seeds=[0]'), got 0"),
    (["run", "demo", "lrs=[1e38]"], "lrs[0] must be a number in (0, 10], got '1e38'"),
    (["run", "demo", "lrs=[1.0e+300]"], "lrs[0] must be a number in (0, 10], got 1e+300"),
    (["run", "demo", "train.weight_decay=1.0e+39"], "train.weight_decay must be a number >= 0, at most 3.403e+38 (float32's largest), got 1e+39"),
    (["run", "demo", "--tensorboard", ""], "--tensorboard needs a value; got an empty one"),
    (["report", "demo", "--all"], "report takes an EXPERIMENT name or --all, not both"),
    (["results", "demo", "--store", "{tmp}/line\nbreak.db"], "no results store at {tmp}/line\\nbreak.db"),
    (["run", "demo", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["run", "demo", "--store", "{text}"], "is not a statetrack results store"),
    (["run", "demo", "--results-dir", "{text}"], "{text}"),
    (["run", "demo", "--import", "no_such_module_xyz"], "no_such_module_xyz"),
    (["run"], "the following arguments are required: EXPERIMENT|FILE.yaml"),
    # run: spec files and values Python cannot read, the user's code, folders and devices
    (["run", "{tmp}/latin1.yaml"], "experiment file '{tmp}/latin1.yaml' is not UTF-8 text: byte 0xe9 at offset 29"),
    (["run", "{tmp}/huge.yaml"], "is not valid YAML: Exceeds the limit (4300 digits) for integer string conversion"),
    (["run", "demo", "train.steps=" + "9" * 5000], "(5000 characters): Exceeds the limit (4300 digits)"),
    # every integer bounded (statetrack.limits): 64 bits, class counts, lengths, layers, widths, memory
    (["run", "demo", "seeds=[" + "9" * 20 + "]"], "seeds[0] must be an integer >= 0, at most 9223372036854775807 (64 bits)"),
    (["run", "demo", "model_defaults.num_layers=100000000"], "num_layers must be an integer from 1 to 1,024, got 100000000"),
    (["run", "demo", "model_defaults.d_model=100000000"], "d_model must be an integer from 1 to 65,536"),
    (["tasks", "show", "parity", "--seed", "9" * 20], "--seed: must be an integer from 0 to 9,223,372,036,854,775,807"),
    (["tasks", "show", "parity", "--lengths", "1000000000000"], "--lengths: must be an integer <= 100,000,000"),
    (["tasks", "show", "parity", "--lengths", "10000000", "--count", "1000000"], "tasks show: 1,000,000 sequences of 10,000,000 tokens"),
    (["tasks", "show", "modadd", "m=" + "1" * 20], "task 'modadd': m must be an integer from 2 to 1,000,000"),
    (["tasks", "show", "fsm", "machine_seed=" + "9" * 20], "machine_seed must be an integer from 0 to 9,223,372,036,854,775,807, got 99999999999999999999"),
    (["tasks", "show", "word_problem", "group=S1000000"], "group 'S1000000' has order above 1000"),
    (["tasks", "show", "word_problem", "group=" + "Z2x" * 30 + "Z2"], "has order above 1000"),
    (["analyze", "spectrum", "x", "--samples", "0"], "--samples must be an integer >= 1, got 0"),
    (["analyze", "spectrum", "x", "--length", "0"], "--length must be an integer >= 1, got 0"),
    (["construct", "parity", "--lengths", "100000000", "--samples", "100000", "--batch-size", "100000"], "construct: 100,000 sequences"),
    (["models", "--width", "99999999"], "--width: must be an integer <= 65,536"),
    (["models", "--params", "1e30"], "models: --params 1e30 per layer x 1 layer(s) (1e+30 parameters) would take about"),
    (["construct", "modadd", "m=100000"], "construct: modadd(m=100000) with 100,000 states and 100,003 symbols (full) would take"),
    (["construct", "fsm", "states=100000", "--structure", "block"], "task 'fsm': states 100,000 (a 100,000 x 100,000 table) would take about 149 GiB"),
    (["run", "demo", "models=[lstm]", "train.dataset_size=10000000000"], "train.dataset_size 10000000000 at train.max_length 40 (42 tokens) would take about"),
    # strict YAML (statetrack.yamlio): duplicate keys, alias bombs, deep nesting, values a spec cannot hold
    (["run", "{tmp}/twice.yaml"], "is not valid YAML: key 'train' is given twice in one mapping (lines 2 and 4); keep one"),
    (["run", "{tmp}/bomb.yaml"], "is not valid YAML: line 6: expands to more than 100,000 values"),
    (["run", "{tmp}/deep.yaml"], "is not valid YAML: nested more than 64 levels deep"),
    (["run", "{tmp}/binary.yaml"], "is not valid YAML: description: a YAML bytes value is not allowed here"),
    (["run", "demo", "seeds=!!set {1, 2}"], "cannot parse value '!!set {1, 2}': the value: a YAML set value is not allowed"),
    (["run", "demo", "train={steps: 1, steps: 2}"], "key 'steps' is given twice in one mapping"),
    (["run", "demo", "seeds=[" + "1" * 4400 + "]"], "Exceeds the limit (4300 digits)"),
    (["run", "{tmp}/exits.yaml"], "experiment 'exits': imports: importing {tmp}/exits.py failed (line 2): it called sys.exit(3)"),
    (["run", "{tmp}/exits.yaml", "train.steps=-1"], "train.steps must be an integer >= 1, got -1"),  # checked before its imports run
    (["run", "{tmp}/exits.yaml", "lrs=[]"], "lrs must be a non-empty list, got []"),
    (["run", "demo", "--import", "{tmp}/exits.py"], "--import: importing {tmp}/exits.py failed (line 2): it called sys.exit(3)"),
    (["--import", "{tmp}/exits.py", "models"], "it called sys.exit(3)"),
    (["run", "demo", "--tensorboard", "{text}/tb"], "cannot write --tensorboard folder {text}/tb: {text} is a file, not a folder"),
    *([] if os.geteuid() == 0 else [(["run", "demo", "--tensorboard", "{tmp}/locked/tb"], "{tmp}/locked is not writable")]),
    (["run", "demo", "train.device=tpu"], "train.device must be a device: auto, cpu, cuda or cuda:N, got 'tpu'"),
    (["run", "demo", "train.device=[cpu]"], "train.device must be a device: auto, cpu, cuda or cuda:N, got ['cpu']"),
    (["run", "demo", "train.device=cuda:7", "--device", "cpu"], "sets train.device cuda:7, but --device is cpu; drop one of them"),
    (["run", "demo", "train.device=cuda:99"], "train.device cuda:99: this machine has"),
    # sizes beyond an estimate of memory or time (lifted by STATETRACK_NO_SIZE_LIMIT=1), Ray's address
    (["run", "demo", "eval.samples=1000000000000"], "eval.samples 1000000000000 at eval.lengths up to 1000 (1,002 tokens) with model "),
    (["run", "demo", "eval.lengths=[100000000]"], "evaluating eval.samples 512 in batches of eval.batch_size 256 at eval.lengths up to 100000000"),
    (["run", "demo", "eval.samples=100000000", "eval.batch_size=100000000"], "of memory, more than the"),
    (["run", "demo", "train.batch_size=100000000"], "train.batch_size 100000000 in one pass (train.accumulate splits it) at train.max_length 40 (42 tokens)"),
    (["run", "demo", "model_defaults.d_model=300000"], "d_model must be an integer from 1 to 65,536, got 300000"),
    (["run", "demo", "models=[{name: lstm, d_model: 60000}]"], "set STATETRACK_NO_SIZE_LIMIT=1 to go ahead anyway"),
    (["run", "demo", "--backend", "ray", "--address", "127.0.0.1:{closed_port}"],
     "cannot reach the Ray cluster at --address 127.0.0.1:{closed_port}: connection refused"),
    (["run", "demo", "--backend", "ray", "--address", "127.0.0.1:port"], "expected auto, HOST:PORT or ray://HOST:PORT"),
    (["tasks", "export", "parity", "--lengths", "8", "--samples", "10000000000", "--out", "x"],
     "--samples 10000000000 at --lengths up to 8 is an estimated 298 GiB of files"),
    (["tasks", "export", "parity", "--lengths", "1000000", "--samples", "100000", "--out", "x"], "STATETRACK_NO_SIZE_LIMIT=1"),
    # tasks
    (["tasks", "frob"], "invalid choice: 'frob'"),
    (["tasks", "show", "nope"], "unknown task 'nope'; expected one of: "),
    (["tasks", "show", "modadd", "m=1"], "m must be an integer >= 2"),
    (["tasks", "show", "modadd", "bogus=1"], "bogus"),
    (["tasks", "show", "parity", "--lengths", "0"], "length must be an integer >= 1"),
    (["tasks", "show", "parity", "--lengths", "abc"], "--lengths: invalid int value: 'abc'"),
    (["tasks", "show", "parity", "--count", "0"], "--count"),
    (["tasks", "export", "parity", "--lengths", "8", "--samples", "4", "--out", "{text}/sub"], "{text}"),
    (["tasks", "export", "parity", "--lengths", "0", "--samples", "4", "--out", "x"], "length"),
    (["tasks", "export", "parity", "--lengths", "8", "--samples", "0", "--out", "x"], "--samples"),
    (["tasks", "export", "parity"], "the following arguments are required"),
    # models
    (["models", "nosuchmodel"], "unknown model 'nosuchmodel'; expected one of: "),
    (["models", "--num-layers", "2"], "--num-layers go with --params"),
    (["models", "--params", "abc"], "--params"),
    (["models", "--params", "0"], "--params"),
    (["models", "--params", "many"], "--params must be a positive number of parameters per layer"),
    (["models", "--set", "mlp=false"], "--set and --num-layers go with --params BUDGET or --width N"),
    (["models", "--params", "3e6", "--set", "d_model=8"], "--set d_model: the width comes from --params"),
    (["models", "nope", "--width", "8"], "unknown model 'nope'"),
    (["models", "--width", "0"], "--width must be >= 1"),
    (["models", "--params", "1e5", "nosuchmodel"], "unknown model 'nosuchmodel'"),
    (["models", "deltanet", "lstm", "--width", "8", "--set", "num_heads=0"], "deltanet: model 'deltanet': num_heads must be an integer >= 1, got 0"),
    (["models", "--params", "1e5", "--set", "bogus=1"], "none of the listed models has a parameter 'bogus'"),
    (["models", "--params", "1e5", "--width", "8"], "not allowed with argument"),
    # results, report, analyze: the store must exist and is never written
    (["results", "demo", "--store", "/missing/dir/x.db"], "no results store at /missing/dir/x.db"),
    (["results", "demo", "--results-dir", "{tmp}"], "no results store at"),
    (["results", "demo", "--store", "{text}"], "is not a statetrack results store"),
    (["results", "never-ran", "--store", "{store}"], "no results for experiment 'never-ran'"),
    (["results"], "the following arguments are required: EXPERIMENT"),
    (["report", "--store", "{store}"], "report needs an EXPERIMENT name or --all"),
    (["report", "never-ran", "--store", "{store}"], "no results for experiment 'never-ran'"),
    (["report", "--all", "--store", "/missing/x.db"], "no results store at /missing/x.db"),
    (["analyze", "spectrum", "abc123", "--store", "{store}"], "abc123"),
    (["analyze", "rotations", "abc123", "--store", "/missing/x.db"], "no results store at /missing/x.db"),
    (["analyze", "eigen", "x"], "invalid choice: 'eigen'"),
    # construct
    (["construct", "nosuch"], "unknown task for an exact construction 'nosuch'"),
    (["construct", "parity", "--structure", "nope"], "unknown structure 'nope'"),
    (["construct", "parity", "--samples", "0"], "--samples must be >= 1"),
    (["construct", "modadd", "m=1"], "m must be an integer >= 2"),
    (["construct", "parity", "--lengths", "0"], "length must be an integer >= 1"),
    # experiment names: from a spec, an override, a command's argument or a store, never a path
    (["run", "{escape}", "--results-dir", "a/b/results"], f"experiment name '../../escape' {NOT_ALLOWED}"),
    (["run", "demo", "--name", "../../escape", "--results-dir", "a/b/results"], f"experiment name '../../escape' {NOT_ALLOWED}"),
    (["run", "demo", "--name", "{tmp}/absolute"], f"experiment name '{{tmp}}/absolute' {NOT_ALLOWED}"),
    (["run", "demo", "--name", ""], f"experiment name '' {NOT_ALLOWED}"),
    (["run", "demo", "name=x"], "override 'name=x': the experiment's name is no override; give it with --name NAME"),
    (["run", "demo", "--name", ".hidden"], f"experiment name '.hidden' {NOT_ALLOWED}"),
    (["run", "demo", "--name", "..", "--results-dir", "a/b/results"], f"experiment name '..' {NOT_ALLOWED}"),
    (["run", "demo", "--name", "a/b"], f"experiment name 'a/b' {NOT_ALLOWED}"),
    (["run", "demo", "--name", "a\\b"], NOT_ALLOWED),
    (["run", "demo", "--name", "x" * 101], NOT_ALLOWED),
    (["run", "demo", "--name", "sp ace"], f"experiment name 'sp ace' {NOT_ALLOWED}"),
    (["run", "{tmp}/my spec.yaml"], "set `name:` in the spec, or give --name NAME"),
    (["report", "../../x", "--store", "{store}"], f"experiment name '../../x' {NOT_ALLOWED}"),
    (["report", "{tmp}/absolute", "--store", "{store}"], NOT_ALLOWED),
    (["report", "--all", "--store", "{escaping}"], f"results store {{escaping}} holds an experiment whose name '../../x' {NOT_ALLOWED}"),
    (["report", "--all", "--results-dir", "a/b/results", "--store", "{escaping}"], "'../../x'"),
    (["report", "fine", "--store", "{escaping}"], "'../../x'"),
    (["results", "../../x", "--store", "{store}"], f"experiment name '../../x' {NOT_ALLOWED}"),
    (["results", "", "--store", "{store}"], f"experiment name '' {NOT_ALLOWED}"),
    (["results", "..", "--store", "{store}"], f"experiment name '..' {NOT_ALLOWED}"),
    (["results", "fine", "--store", "{escaping}"], "'../../x'"),
    (["analyze", "spectrum", "../../x", "--store", "{store}"], f"RUN (a run id or an experiment name) '../../x' {NOT_ALLOWED}"),
    (["analyze", "heads", "abc", "--store", "{escaping}"], "'../../x'"),
    # stores: another application's database, a newer schema, damaged pages, a read-only file
    (["run", "demo", "--store", "{foreign}"], FOREIGN),
    (["run", "demo", "--store", "{foreign_id}"], FOREIGN + " (application id 1234)"),
    (["results", "demo", "--store", "{foreign}"], FOREIGN),
    (["report", "--all", "--store", "{foreign}"], FOREIGN),
    (["analyze", "spectrum", "abc", "--store", "{foreign_id}"], FOREIGN),
    (["run", "demo", "--store", "{newer}"], "has schema version 99, written by a newer statetrack"),
    (["results", "demo", "--store", "{newer}"], "has schema version 99"),
    (["run", "demo", "--store", "{damaged}"], "results store {damaged} is damaged"),
    (["results", "demo", "--store", "{damaged}"], "is damaged"),
    (["report", "--all", "--store", "{damaged}"], "is damaged"),
    (["run", "demo", "--store", "{header_only}"], "is damaged"),
    (["results", "demo", "--store", "{header_only}"], "is damaged"),
    *([] if os.geteuid() == 0 else [(["run", "demo", "--store", "{read_only}"], "cannot write results store {read_only}: the file is read-only")]),
    # analyses of a run whose checkpoint is damaged
    (["analyze", "spectrum", "0123456789abcdef", "--store", "{trained}"], "run 0123456789abcdef: checkpoint "),
    (["analyze", "spectrum", "trained", "--model", "LSTM", "--store", "{trained}"], "cannot be read"),
    (["analyze", "rotations", "0123", "--store", "{trained}"], "cannot be read"),
    (["analyze", "signs", "0123", "--store", "{trained}"], "cannot be read"),
    (["analyze", "heads", "0123", "--store", "{trained}"], "cannot be read"),
    # the command itself
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    ([], "the following arguments are required: COMMAND"),
    (["--import", "no_such_module_xyz", "experiments"], "no_such_module_xyz"),
]


def _snapshot(folder: Path) -> dict:
    """Every file and folder under `folder` with its size, modification time and the hash of its bytes."""
    return {str(p.relative_to(folder)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns,
                                         None if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in folder.rglob("*")}


def _no_training(*args, **kwargs):
    raise AssertionError("a bad invocation got as far as starting runs")


TINY = "task: {name: modadd, m: 3}\nmodels: [{name: lstm}]\nmodel_defaults: {d_model: 8}\nlrs: [0.01]\nseeds: [0]\n" \
       "train: {steps: 2, min_length: 2, max_length: 5}\neval: {lengths: [5]}\n"
RUN_ID = "0123456789abcdef"


def _sql(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path)
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """The working folder of a bad invocation, with the files its argv names."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STATETRACK_NO_SIZE_LIMIT", raising=False)
    monkeypatch.setattr("statetrack.experiments.runner.make_backend", _no_training)
    Store(tmp_path / "empty.db")
    (tmp_path / "notes.txt").write_text("not a database\n")
    (tmp_path / "escape.yaml").write_text('name: "../../escape"\n' + TINY)  # writes a/escape/ beside a/b/results
    (tmp_path / "my spec.yaml").write_text(TINY)  # named after a file name that is no experiment name
    (tmp_path / "latin1.yaml").write_bytes("name: latin1\ndescription: caf\u00e9\n".encode("latin-1") + TINY.encode())
    (tmp_path / "huge.yaml").write_text("name: huge\n" + TINY.replace("seeds: [0]", f"seeds: [{'7' * 5000}]"))
    (tmp_path / "twice.yaml").write_text("name: twice\ntrain: {steps: 5}\nseeds: [0]\ntrain: {steps: 6}\n")
    (tmp_path / "bomb.yaml").write_text("name: bomb\n" + "".join(
        f"{key}: &{key} [{', '.join([f'*{prev}' if prev else 'x'] * 10)}]\n"
        for key, prev in zip("abcdef", [None, *"abcde"])))
    (tmp_path / "deep.yaml").write_text("name: deep\ndescription: " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "binary.yaml").write_text("name: binary\ndescription: !!binary aGVsbG8=\n" + TINY)
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")  # a module that ends the program it is imported in
    (tmp_path / "exits.yaml").write_text("name: exits\nimports: [exits.py]\n" + TINY)
    (tmp_path / "locked").mkdir(mode=0o555)
    # a store whose plan and run name an experiment "../../x" (a store someone sent)
    Store(tmp_path / "escaping.db").set_plan(Plan("fine", {"name": "fine"}, []))
    _sql(tmp_path / "escaping.db", "INSERT INTO plans (experiment, spec, runs) VALUES ('../../x', '{}', '[]')",
         "INSERT INTO runs (id, experiment, model, task, seed, lr, config, status) VALUES ('abc', '../../x', 'm', 't', 0, 0.1, '{}', 'done')")
    # another application's databases: one with a `runs` table of its own, one with its application id
    _sql(tmp_path / "foreign.db", "CREATE TABLE runs (id INTEGER PRIMARY KEY, distance REAL)", "INSERT INTO runs VALUES (1, 5.0)")
    _sql(tmp_path / "foreign_id.db", "PRAGMA application_id = 1234", "CREATE TABLE notes (text TEXT)")
    Store(tmp_path / "newer.db")
    _sql(tmp_path / "newer.db", "PRAGMA user_version = 99")
    # damaged pages: a store whose pages after the first two are overwritten
    store = Store(tmp_path / "damaged.db")
    store.set_plan(Plan("big", {"name": "big", "description": "x" * 20000}, [{"id": str(i)} for i in range(500)]))
    data = bytearray((tmp_path / "damaged.db").read_bytes())
    data[8192:] = b"\x5a" * (len(data) - 8192)
    (tmp_path / "damaged.db").write_bytes(bytes(data))
    (tmp_path / "header_only.db").write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    Store(tmp_path / "read_only.db")
    (tmp_path / "read_only.db").chmod(0o444)
    # a finished run whose checkpoint is damaged
    config = {"experiment": "trained", "model": {"name": "lstm", "d_model": 8}, "task": {"name": "modadd", "m": 3},
              "train": {"max_length": 5}, "eval": {"lengths": [5]}}
    store = Store(tmp_path / "trained.db")
    store.start_run(RunClaim(RUN_ID, "trained", "LSTM", "modadd(m=3)", 0, 0.01, config, "abc"))
    store.finish_run(RUN_ID, Outcome([{"length": 5, "accuracy": 0.5, "scaled_accuracy": 0.2, "samples": 4}], [], 2, 100, 0.1, 0.1))
    checkpoint = tmp_path / "results" / "trained" / "checkpoints" / f"{RUN_ID}.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"PK\x03\x04 half a zip archive")
    return tmp_path


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (one the system just handed out and took back)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


CLOSED_PORT = _closed_port()


def _fill(argv: list[str], folder: Path) -> list[str]:
    values = {"{closed_port}": str(CLOSED_PORT), "{tmp}": str(folder), "{store}": str(folder / "empty.db"), "{text}": str(folder / "notes.txt"),
              "{escape}": str(folder / "escape.yaml"), "{read_only}": str(folder / "read_only.db"),
              **{f"{{{name}}}": str(folder / f"{name}.db")
                 for name in ("escaping", "foreign", "foreign_id", "newer", "damaged", "header_only", "trained")}}
    out = []
    for arg in argv:
        for key, value in values.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return out


def test_the_table_is_long_enough():
    assert len(BAD) >= 120


@pytest.mark.parametrize("argv, expected", BAD, ids=[(" ".join(a) or "(nothing)")[:100] for a, _ in BAD])
def test_bad_invocation(argv, expected, workdir, capsys):
    before = _snapshot(workdir)
    code, out, err = run_cli(capsys, *_fill(argv, workdir))
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("statetrack: error: "), err
    assert "Traceback" not in err
    assert _fill([expected], workdir)[0] in lines[0]
    assert _snapshot(workdir) == before, "a bad invocation wrote files"


def test_a_missing_store_is_not_created(workdir, capsys):
    code, _, err = run_cli(capsys, "results", "demo", "--store", str(workdir / "sub" / "x.db"))
    assert code == 2 and "no results store at" in err
    assert not (workdir / "sub").exists()


def test_reading_leaves_the_store_untouched(tiny_spec, tmp_path, monkeypatch, capsys):
    """results and report open the store read-only: no -wal/-shm files, the same bytes."""
    monkeypatch.chdir(tmp_path)
    workdir = tmp_path
    spec = str(tiny_spec(seeds="[0]"))
    assert run_cli(capsys, "run", spec, "--no-progress", "--workers", "1", "train.steps=5", "--name", "tiny")[0] == 0
    db = workdir / "results" / "statetrack.db"
    state = lambda: (db.read_bytes(), db.stat().st_mtime_ns, sorted(p.name for p in db.parent.glob("statetrack.db*")))  # noqa: E731
    before = state()
    for argv in (["results", "tiny"], ["results", "tiny", "--json"], ["report", "tiny"], ["report", "--all"]):
        assert run_cli(capsys, *argv)[0] == 0
    assert state() == before


@pytest.mark.skipif(shutil.which("setpriv") is None and os.geteuid() == 0, reason="root ignores file modes; needs setpriv")
@pytest.mark.parametrize("folder_mode", [0o755, 0o777], ids=["read-only folder", "writable folder"])
def test_a_read_only_store_is_one_line(tmp_path, folder_mode):
    """`run` on a store file it cannot write: exit 2, one line, and no -wal or -shm file beside it even
    where the folder is writable (as root, the command runs as `nobody`)."""
    import tempfile

    folder, home = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())  # tmp_path is private to root
    try:
        folder.chmod(folder_mode)
        home.chmod(0o777)
        Store(folder / "ro.db")
        (folder / "ro.db").chmod(0o444)
        before = _snapshot(folder)
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        env = {**os.environ, "HOME": str(home)}
        probe = subprocess.run(prefix + [sys.executable, "-c", "import statetrack.cli"], capture_output=True, cwd=folder, env=env)
        if probe.returncode != 0:  # a checkout in a private folder (mktemp -d): `nobody` cannot read it
            pytest.skip("the unprivileged user cannot import this checkout")
        argv = prefix + [sys.executable, "-m", "statetrack.cli", "run", "demo", "--store", str(folder / "ro.db"),
                         "--results-dir", str(folder / "r"), "--no-progress"]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=folder, timeout=120, env=env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines() == [f"statetrack: error: cannot write results store {folder / 'ro.db'}: "
                                                    "the file is read-only"]
        assert _snapshot(folder) == before
    finally:
        shutil.rmtree(folder)
        shutil.rmtree(home)
