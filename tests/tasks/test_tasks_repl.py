"""REPL traces executed by a real Python interpreter (`code.InteractiveConsole`), line by line."""

import code
import contextlib
import io

import pytest
import torch

from statetrack.tasks import make_task
from statetrack.tasks.repl import CURRICULUM


def _execute(trace: str) -> tuple[list[str], list[str]]:
    """Run the `>>>` lines of a trace; returns (printed lines, output lines written in the trace)."""
    console = code.InteractiveConsole()
    stdout = io.StringIO()
    expected = []
    with contextlib.redirect_stdout(stdout):
        for line in trace.splitlines():
            if line.startswith(">>> "):
                assert not console.push(line[4:]), f"incomplete statement: {line!r}"
            else:
                expected.append(line)
    return stdout.getvalue().splitlines(), expected


@pytest.mark.parametrize("moves", ["full", "swap"])
@pytest.mark.parametrize("n,spacing,commands", [(5, 1, 8), (5, 4, 32), (3, 2, 9), (12, 3, 7)])
def test_trace_prints_exactly_the_revealed_values(moves, n, spacing, commands):
    task = make_task("repl", n=n, spacing=spacing, moves=moves)
    batch = task.sample(6, commands, torch.Generator().manual_seed(n + spacing))
    for i in range(6):
        trace = task.text(batch, i)
        printed, expected = _execute(trace)
        assert printed == expected
        assert len(expected) == commands // spacing
        revealed = [task.answers[c] for c, m in zip(batch.targets[i].tolist(), batch.mask[i].tolist()) if m]
        assert revealed == expected
        # the supervised position is the newline just before each output line
        tokens = [task.vocab[t] for t in batch.inputs[i].tolist()]
        for p in batch.mask[i].nonzero().flatten().tolist():
            assert tokens[p] == "\n" and tokens[p - 1] == ")" and tokens[p + 1] in expected


def test_swap_moves_are_swaps_and_full_moves_permute():
    task = make_task("repl", n=5, moves="swap")
    lines = task.text(task.sample(1, 20, torch.Generator().manual_seed(0)), 0).splitlines()
    commands = [l for l in lines[1:] if " = " in l]
    assert all(len(c[4:].split(" = ")[0].split(", ")) == 2 for c in commands)
    task = make_task("repl", n=5, moves="full")
    lines = task.text(task.sample(1, 20, torch.Generator().manual_seed(0)), 0).splitlines()
    commands = [l for l in lines[1:] if " = " in l]
    assert all(sorted(c[4:].split(" = ")[1].split(", ")) == list("abcde") for c in commands)


def test_the_paper_scale_trains_through_the_papers_curriculum():
    from statetrack.experiments import load_spec
    from statetrack.training.train import TrainConfig

    spec = load_spec("repl-traces", scale="paper")
    stages = TrainConfig.from_dict({**spec["train"], "lr": 1e-3, "seed": 0}).stages()
    seen = [(stage["max_length"], {**spec["task"], **stage["task"]}["spacing"]) for stage in stages]
    assert seen == list(CURRICULUM) == [(8, 1), (16, 2), (32, 4), (64, 8)]
