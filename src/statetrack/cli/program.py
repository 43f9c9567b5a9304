"""The program: the table of every command (`STATETRACK`), the parser built from it, and `main`, which
parses a command line, runs its handler and turns every error into one line and an exit status."""

from __future__ import annotations

import argparse
import io
import sys
import warnings

from statetrack.allocator import keep_freed_memory
from statetrack.cli.analyze import ANALYZE
from statetrack.cli.book import BOOK_COMMAND
from statetrack.cli.common import IMPORT, IMPORT_HELP, Arg, Command, Group, OneOf, Parser, UsageError, command_imports
from statetrack.cli.completion import COMPLETION
from statetrack.cli.construct import CONSTRUCT
from statetrack.cli.docs import DOCS
from statetrack.cli.experiments import EXPERIMENTS
from statetrack.cli.export import EXPORT
from statetrack.cli.models import MODELS
from statetrack.cli.report import REPORT
from statetrack.cli.reproduce import REPRODUCE
from statetrack.cli.results import RESULTS
from statetrack.cli.run import RUN
from statetrack.cli.schema import SCHEMA
from statetrack.cli.table import TABLE_COMMAND
from statetrack.cli.tasks import TASKS
from statetrack.errors import StatetrackError, Terminated, terminate_as_interrupt
from statetrack.plugins import load_imports
from statetrack.store import StoreDamaged
from statetrack.version import __version__

# the command line: the program (its help is the parser's description), its commands and their actions
STATETRACK = Command(
    "statetrack",
    "State tracking and length generalization in sequence models.",
    args=(
        Arg("--version", action="version", version=f"statetrack {__version__}"),
        Arg("--import", dest="top_imports", action="append", metavar="MODULE", help=IMPORT_HELP),
    ),
    actions=(
        RUN,
        REPRODUCE,
        BOOK_COMMAND,
        TABLE_COMMAND,
        DOCS,
        TASKS,
        MODELS,
        EXPERIMENTS,
        SCHEMA,
        COMPLETION,
        REPORT,
        RESULTS,
        EXPORT,
        ANALYZE,
        CONSTRUCT,
    ),
    dest="command",
    common=(IMPORT,),
)


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser, built from the table `STATETRACK`."""
    return _build(Parser(prog=STATETRACK.name, description=STATETRACK.help), STATETRACK)


def _build(
    parser: argparse.ArgumentParser, command: Command, common: tuple[Group, ...] = ()
) -> argparse.ArgumentParser:
    """`parser` with `command`'s arguments (after `common`, those its parent gives every action), its
    handler, and a parser of each of its actions, built the same way."""
    for item in (*common, *command.args):
        container = parser.add_mutually_exclusive_group() if isinstance(item, OneOf) else parser
        for arg in (item,) if isinstance(item, Arg) else item.args:
            container.add_argument(*arg.flags, **arg.options)
        if isinstance(item, Group) and item.add is not None:
            item.add(parser)
    if command.func is not None:
        parser.set_defaults(func=command.func)
    if command.actions:
        sub = parser.add_subparsers(
            dest=command.dest, required=not command.optional_action, metavar=command.dest.upper()
        )
        for action in command.actions:
            _build(sub.add_parser(action.name, help=action.help), action, command.common)
    return parser


def _one_line(text: str) -> str:
    """An error message as the one line it must be: line breaks and other control characters (a path
    may hold them) written as escapes."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


_show_warning = warnings.showwarning


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    """statetrack's own warnings (damaged store rows) as one line; others as Python shows them."""
    if issubclass(category, StoreDamaged):
        print(f"statetrack: warning: {message}", file=sys.stderr)
    else:
        _show_warning(message, category, filename, lineno, file, line)


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The parsed command line; key=value pairs may come after options (`run demo --scale paper
    seeds=[0]`): argparse leaves them over, and they belong to the command's own key=value list."""
    args, extra = parser.parse_known_args(argv)
    listed = next((key for key in ("overrides", "params") if hasattr(args, key)), None)
    if extra and (listed is None or any(item.startswith("-") or "=" not in item for item in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra and listed is not None:  # a new list: the table's default one stays empty for the next parse
        setattr(args, listed, [*getattr(args, listed), *extra])
    return args


def main(argv: list[str] | None = None) -> int:
    # a shell cannot pass one, but a caller in Python can, and the OS refuses it in any path
    nul = next((a for a in (sys.argv[1:] if argv is None else argv) if "\x00" in str(a)), None)
    if nul is not None:
        print(
            f"statetrack: error: argument {nul!r} holds a NUL character, which no name, path or value may",
            file=sys.stderr,
        )
        return 2
    try:
        args = _parse(build_parser(), argv)
    except UsageError as error:
        print(f"statetrack: error: {error}", file=sys.stderr)
        return 2
    keep_freed_memory()  # large tensors reuse heap memory (statetrack.allocator)
    warnings.showwarning = _one_line_warning
    if isinstance(sys.stdout, io.TextIOWrapper):  # a log file a long run writes to reads each line as it is printed
        sys.stdout.reconfigure(line_buffering=True)
    try:
        with terminate_as_interrupt():  # SIGTERM at any moment, as Ctrl-C: one line, the store left whole
            load_imports(command_imports(args), origin="--import")
            return args.func(args)
    except StatetrackError as error:
        print(f"statetrack: error: {_one_line(str(error))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed early: not an error (before OSError, its base class)
        sys.stderr.close()
        return 0
    except OSError as error:  # a folder or file the command cannot create, read or write
        where = f": {error.filename}" if error.filename else ""
        print(f"statetrack: error: {_one_line(f'{error.strerror or error}{where}')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:
        print(
            "statetrack: interrupted; finished runs are in the store, re-run the same command to resume",
            file=sys.stderr,
        )
        return 143 if isinstance(interrupt, Terminated) else 130  # SIGTERM, SIGINT
