"""The run options: one list (`RunOptions`'s fields), from which `run` and `reproduce` take their flags."""

import time
from dataclasses import fields

import pytest

from statetrack.cli import build_parser
from statetrack.cli.common import UsageError
from statetrack.options import RunOptions


@pytest.mark.parametrize("command", ["run", "reproduce"])
def test_the_command_line_takes_every_run_option_and_its_defaults_are_the_dataclass_defaults(command):
    target = ["demo"] if command == "run" else []
    args = build_parser().parse_args([command, *target])
    assert RunOptions.from_arguments(args) == RunOptions()


def test_each_flag_sets_its_field():
    args = build_parser().parse_args(
        "run demo --device cpu --workers 3 --backend ray --address auto --gpus-per-run 0.5 --tensorboard tb "
        "--wandb proj --mlflow http://h:5000 --skip-failed --lease 9 --no-progress --stop-after 60".split()
    )
    options = RunOptions.from_arguments(args)
    assert options.deadline is not None and 0 < options.deadline - time.time() <= 60  # the command's start + 60 s
    assert options == RunOptions(
        device="cpu",
        workers=3,
        backend="ray",
        address="auto",
        gpus_per_run=0.5,
        tensorboard="tb",
        wandb="proj",
        mlflow="http://h:5000",
        retry_failed=False,
        lease=9.0,
        progress=False,
        deadline=options.deadline,
    )
    # every field was set away from its default by one flag: none is missing from the command line
    assert all(getattr(options, f.name) != f.default for f in fields(RunOptions))


def test_a_bad_value_is_refused_by_the_parser():
    with pytest.raises(UsageError, match=r"run: argument --backend: invalid choice: 'slurm'"):
        build_parser().parse_args(["run", "demo", "--backend", "slurm"])
