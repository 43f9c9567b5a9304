"""The command line's table (`statetrack.cli.program.STATETRACK`): every command it declares has a
handler beside its declaration, is listed in its parent's help, takes the shared options it names and
no others, and refuses a bad command line with one line."""

import argparse
import importlib
import pkgutil

import pytest

from cli_helpers import run_cli
from statetrack import cli
from statetrack.cli.common import BOOK, RUN_OPTIONS, STORE, Command, UsageError
from statetrack.cli.program import STATETRACK, build_parser


def _commands(command=STATETRACK, path=(), handler=None):
    """(words after `statetrack`, the table's command, its handler: its own or the nearest above it),
    for every command and action under `command`."""
    for action in command.actions:
        words, func = (*path, action.name), action.func or handler
        yield words, action, func
        yield from _commands(action, words, func)


COMMANDS = list(_commands())
IDS = [" ".join(words) for words, _, _ in COMMANDS]


def _declaring_modules():
    """The command modules of `statetrack.cli` by the commands and actions each declares (every
    module but the program, whose table gathers them all)."""
    declared = {}
    for info in pkgutil.iter_modules(cli.__path__):
        if info.name in ("program", "__main__"):
            continue
        module = importlib.import_module(f"statetrack.cli.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Command):
                for command in (value, *(action for _, action, _ in _commands(value))):
                    declared[id(command)] = module
    return declared


DECLARED = _declaring_modules()


def _parser(words):
    """The built parser of the command `words`."""
    parser = build_parser()
    for word in words:
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = subparsers.choices[word]
    return parser


def _option_strings(parser):
    return {flag for action in parser._actions for flag in action.option_strings}


def test_the_table_declares_every_command_and_action():
    assert [a.name for a in STATETRACK.actions] == [
        "run",
        "reproduce",
        "book",
        "table",
        "docs",
        "tasks",
        "models",
        "experiments",
        "schema",
        "completion",
        "report",
        "results",
        "export",
        "analyze",
        "construct",
    ]
    assert {"tasks list", "tasks show", "tasks export", "analyze spectrum", "analyze shortcut"} <= set(IDS)


def test_each_analysis_has_its_own_handler():
    analyze = next(a for a in STATETRACK.actions if a.name == "analyze")
    handlers = [action.func for action in analyze.actions]
    assert None not in handlers and len(set(handlers)) == len(handlers) == 6


@pytest.mark.parametrize(("words", "command", "handler"), COMMANDS, ids=IDS)
def test_every_command_has_a_handler_and_its_parser_sets_it(words, command, handler):
    if command.actions and not command.optional_action:
        return  # an action is required: its actions' handlers run
    assert callable(handler) and handler.__name__.startswith("cmd_")
    if command.func is not None:  # a handler lives beside the command it handles
        module = DECLARED[id(command)]
        assert handler.__module__ == module.__name__ and getattr(module, handler.__name__) is handler
    defaults = [_parser(words[:i]).get_default("func") for i in range(len(words) + 1)]
    assert [f for f in defaults if f is not None][-1] is handler


@pytest.mark.parametrize(
    "words", [(), *[words for words, command, _ in COMMANDS if command.actions]], ids=lambda w: " ".join(w) or "-"
)
def test_help_lists_exactly_the_commands_the_table_declares(capsys, words):
    command = STATETRACK
    for word in words:
        command = next(a for a in command.actions if a.name == word)
    code, out, _ = run_cli(capsys, *words, "--help")
    assert code == 0
    listing = out.split("positional arguments:\n")[1].split("\n\n")[0].splitlines()
    assert listing[0].strip() == command.dest.upper()
    listed = [line.split()[0] for line in listing[1:] if line.startswith("    ") and not line.startswith("     ")]
    assert listed == [a.name for a in command.actions]


@pytest.mark.parametrize(
    ("group", "flags"),
    [
        (STORE, {"--results-dir", "--store"}),
        (RUN_OPTIONS, {"--scale", "--backend", "--workers"}),
        (BOOK, {"--book-dir", "--readme"}),
    ],
    ids=["store", "run options", "book"],
)
def test_shared_options_are_on_exactly_the_commands_that_name_them(group, flags):
    takes = {" ".join(words) for words, command, _ in COMMANDS if group in command.args}
    assert takes  # the group is used
    for (words, command, _), name in zip(COMMANDS, IDS):
        on = flags & _option_strings(_parser(words))
        if name in takes:
            assert on == flags, name
        else:
            # `--scale` of `experiments` and `--results-dir` of `analyze belief`
            # are options of their own, not the group's: the group's other flags are absent
            assert on != flags, name
    assert (
        takes
        == {
            STORE.name: {
                "run",
                "reproduce",
                "table",
                "report",
                "results",
                "export",
                "analyze spectrum",
                "analyze rotations",
                "analyze signs",
                "analyze heads",
            },
            RUN_OPTIONS.name: {"run", "reproduce", "table"},
            BOOK.name: {"reproduce", "book"},
        }[group.name]
    )


@pytest.mark.parametrize("words", [words for words, _, _ in COMMANDS], ids=IDS)
def test_a_bad_command_line_is_one_line(capsys, words):
    with pytest.raises(UsageError) as error:
        build_parser().parse_args([*words, "--no-such-option"])
    assert "\n" not in str(error.value) and "(see `statetrack" in str(error.value)
    code, out, err = run_cli(capsys, *words, "--no-such-option")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("statetrack: error: "), err


def test_key_value_pairs_after_options_do_not_reach_the_next_command(monkeypatch, capsys):
    """Pairs argparse leaves over (after an option) join that command's list, never the table's
    shared default: a second command in the same process sees only its own."""
    from statetrack.errors import StatetrackError
    from statetrack.experiments import spec

    seen = []

    def resolve(name, scale, overrides, *rest):
        seen.append(list(overrides))
        raise StatetrackError("resolved")

    monkeypatch.setattr(spec, "resolve", resolve)
    assert cli.main(["run", "demo", "--dry-run", "train.steps=12"]) == 2
    assert cli.main(["run", "demo", "--dry-run"]) == 2
    assert cli.main(["run", "demo", "seeds=[0]", "--dry-run", "train.steps=3"]) == 2
    assert seen == [["train.steps=12"], [], ["seeds=[0]", "train.steps=3"]]
    assert capsys.readouterr().err.count("resolved") == 3
