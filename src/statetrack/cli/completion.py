"""`statetrack completion SHELL`: the shell's completion script of this command line
(statetrack.completion)."""

from __future__ import annotations

from statetrack.cli.common import Arg, Command


def cmd_completion(args) -> int:
    from statetrack.cli.program import build_parser  # the parser holds this command: built when it runs
    from statetrack.completion import completion_script

    print(completion_script(build_parser(), args.shell), end="")
    return 0


COMPLETION = Command(
    "completion",
    "print the shell's completion script: commands, options, and the names of experiments, tasks "
    "and models (bash: statetrack completion bash > ~/.local/share/bash-completion/completions/statetrack)",
    cmd_completion,
    (Arg("shell", choices=["bash", "zsh", "tcsh"], help="the shell the script is for"),),
)
