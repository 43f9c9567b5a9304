"""Command-line interface: `statetrack run | reproduce | book | table | docs | tasks | models | experiments |
schema | completion | report | results | export | analyze | construct`.

One module per command, its handler (`cmd_*`) beside its declaration (a `Command` of the table in
`statetrack.cli.common`); `statetrack.cli.program` puts them in one table, `STATETRACK`, builds the
parser from it and runs `main`. Handlers import what they use when they run, so the command line
starts fast. Bad input (unknown names, bad values, malformed specs) prints one line naming what is
valid and exits with status 2.
"""

from statetrack.cli.program import build_parser, main

__all__ = ["build_parser", "main"]
