"""What every command module of the command line shares: the table's types (`Arg`, `Group`, `OneOf`,
`Command`), the parser whose errors are one line, the option groups several commands take, and the
helpers their handlers call (the store, the run options, `run_and_report`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statetrack import limits
from statetrack.errors import StatetrackError
from statetrack.options import RunOptions
from statetrack.paths import store_file
from statetrack.schema import SCALES

int_type = limits.argparse_int


# ---- the table's types ---------------------------------------------------------------------------
class UsageError(StatetrackError):
    """A command line argparse cannot read (unknown option, bad choice, missing argument)."""


class Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (the command, the problem, where to find help) instead of
    the usage block; subcommands' parsers are of this class too."""

    def error(self, message: str):
        command = self.prog.partition(" ")[2]  # "run", "tasks show", or "" for the top level
        raise UsageError(f"{command + ': ' if command else ''}{message} (see `{self.prog} --help`)")


@dataclass(frozen=True, init=False)
class Arg:
    """One argument of a command: the flags (or the positional's name) and the keywords that
    `ArgumentParser.add_argument` takes."""

    flags: tuple[str, ...]
    options: dict[str, Any]

    def __init__(self, *flags: str, **options: Any) -> None:
        object.__setattr__(self, "flags", flags)
        object.__setattr__(self, "options", options)


@dataclass(frozen=True)
class Group:
    """Options declared once and taken by every command that lists the group among its arguments;
    `add` puts on the options another module declares, after `args`."""

    name: str
    args: tuple[Arg, ...] = ()
    add: Callable[[argparse.ArgumentParser], None] | None = None


@dataclass(frozen=True)
class OneOf:
    """Options of which a command line gives one at most (an argparse mutually exclusive group)."""

    args: tuple[Arg, ...]


@dataclass(frozen=True)
class Command:
    """A command, or one action of a command: its name, its help line, its handler (None where the
    command above it handles it), its arguments in the order its help lists them, and its actions,
    chosen by the word stored in `dest` (required unless `optional_action`); `common`: arguments
    every one of its actions takes, before their own."""

    name: str
    help: str
    func: Callable[..., int] | None = None
    args: tuple[Arg | Group | OneOf, ...] = ()
    actions: tuple[Command, ...] = ()
    dest: str = "action"
    optional_action: bool = False
    common: tuple[Group, ...] = ()


# ---- arguments several commands take -------------------------------------------------------------
IMPORT_HELP = (
    "import a module or .py file that registers models or tasks before anything else "
    "(repeatable; `run` also imports it in every worker)"
)
# every command takes --import too; its own dest, so a subcommand's default cannot hide the top-level one
IMPORT = Group("import", (Arg("--import", dest="imports", action="append", metavar="MODULE", help=IMPORT_HELP),))


def named_path(text: str) -> str:
    """An argparse type for a path that names something: an empty one (which would be the working
    directory) is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must name a path, got {text!r} (an empty one is the working directory)")
    return text


STORE = Group(
    "store",
    (
        Arg(
            "--results-dir",
            default="results",
            type=named_path,
            help="folder for reports and checkpoints (default: results)",
        ),
        Arg("--store", default=None, type=named_path, help="SQLite results file (default: RESULTS_DIR/statetrack.db)"),
    ),
)
# how runs are carried out, shared by `run` and `reproduce`: the scale, and each field of `RunOptions` as its flag
RUN_OPTIONS = Group(
    "run options",
    (Arg("--scale", default="quick", choices=SCALES, help="quick: CPU minutes; paper: the papers' sizes"),),
    add=RunOptions.add_arguments,
)
BOOK = Group(
    "book",
    (
        Arg(
            "--book-dir",
            default="docs",
            metavar="DIR",
            help="where the book's pages are written (DIR/experiments/, DIR/claims.md; the snapshots they are "
            "generated from live in the package) (default: docs)",
        ),
        Arg(
            "--readme",
            default="README.md",
            metavar="FILE",
            help="the README whose generated blocks are rewritten, where it exists (default: README.md)",
        ),
    ),
)


def parameters_arg(help: str) -> Arg:
    """The key=value parameters after a task's (or a machine's) name."""
    return Arg("params", nargs="*", default=[], metavar="param=value", help=help)


# ---- helpers of the handlers ---------------------------------------------------------------------
def parse_params(pairs: list[str]) -> dict:
    """`m=5 group=S5` -> {'m': 5, 'group': 'S5'} (values parsed as YAML scalars/lists)."""
    from statetrack.experiments.spec import parse_override

    out = {}
    for pair in pairs:
        path, value = parse_override(pair)
        out[".".join(path)] = value
    return out


def command_imports(args) -> list[str]:
    """The --import modules given before and after the command name, in order."""
    return (getattr(args, "top_imports", None) or []) + (getattr(args, "imports", None) or [])


def store_path(args) -> Path:
    return Path(args.store) if args.store else store_file(args.results_dir)


def open_store(args, read_only: bool = True):
    """The results store of --store / --results-dir; read-only (it must exist, and nothing is written)
    unless the command trains."""
    from statetrack.store import Store

    return Store(store_path(args), read_only=read_only)


def run_options(args) -> RunOptions:
    return RunOptions.from_arguments(args)


def run_and_report(args, experiment, options, after=None):
    """What `run` and `reproduce` do per experiment: train what the store lacks of it, call `after`
    (when given) however that ended, score the stored runs once under the plan it stored and write the report; returns
    (the `Scored`, the report's folder)."""
    from statetrack.experiments.runner import run_experiment
    from statetrack.results.report import write_report
    from statetrack.results.scoring import score_store

    try:
        plan = run_experiment(experiment, args.results_dir, options, store_path=args.store)
    finally:
        if after is not None:
            after()
    scored = score_store(open_store(args), experiment.name, plan=plan, run_data=True)
    return scored, write_report(scored, args.results_dir)


def known_experiment(store, experiment: str) -> None:
    if experiment not in store.experiments():
        known = store.experiments()
        raise StatetrackError(
            f"no results for experiment {experiment!r} in {store.path}; "
            f"experiments with results: {', '.join(known) or 'none'}"
        )


def print_json(rows: list[dict]) -> int:
    print(json.dumps(rows, indent=1, default=repr))
    return 0
