"""Copying, copy memory, denoising and counting: layouts checked token by token."""

import pytest
import torch

from statetrack.errors import StatetrackError
from statetrack.tasks import make_task


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_copy_layout_and_teacher_forced_targets():
    task = make_task("copy")
    n = 7
    batch = task.sample(32, n, _gen())
    assert batch.inputs.shape == (32, 2 * n + 3)
    for i in range(32):
        text = [task.vocab[t] for t in batch.inputs[i].tolist()]
        assert text[0] == "$" and text[n + 1] == "|" and text[-1] == "."
        assert text[1 : n + 1] == text[n + 2 : 2 * n + 2]
        supervised = [p for p, m in enumerate(batch.mask[i].tolist()) if m]
        assert supervised == list(range(n + 1, 2 * n + 2))
        for p in supervised:  # next-token targets
            assert task.answers[batch.targets[i, p].item()] == text[p + 1]


@pytest.mark.parametrize("name", ["copy_memory", "denoise"])
@pytest.mark.parametrize("vary", ["blanks", "pattern"])
def test_delayed_recall(name, vary):
    task = make_task(name, vary=vary, pattern=4, blanks=6)
    length = 9
    s, t = (4, 9) if vary == "blanks" else (9, 6)
    batch = task.sample(32, length, _gen())
    assert batch.inputs.shape == (32, 2 * s + t + 1)
    for i in range(32):
        tokens = [task.vocab[x] for x in batch.inputs[i].tolist()]
        body, indicator, slots = tokens[: s + t], tokens[s + t], tokens[s + t + 1 :]
        assert indicator == ":" and slots == ["_"] * s
        digits = [x for x in body if x != "_"]
        assert len(digits) == s
        if name == "copy_memory":
            assert body[s:] == ["_"] * t
        answer = [task.answers[c] for c, m in zip(batch.targets[i].tolist(), batch.mask[i].tolist()) if m]
        assert answer == digits
        assert batch.mask[i, -s:].all() and not batch.mask[i, :-s].any()


def test_denoise_scatters():
    task = make_task("denoise", pattern=5, blanks=20)
    batch = task.sample(64, 20, _gen())
    first_blank_rows = (batch.inputs[:, :5] == task.vocab.index("_")).any(dim=1)
    assert first_blank_rows.float().mean() > 0.5  # digits are not all at the front


@pytest.mark.parametrize("preset", ["short", "medium", "long"])
def test_counting_signal(preset):
    task = make_task("counting", preset=preset)
    isi, lo, hi = task.isi, task.iti_min, task.iti_max
    batch = task.sample(16, task.paper_length, _gen())
    for i in range(16):
        signal = "".join(task.vocab[x] for x in batch.inputs[i].tolist())
        runs = [(c, len(r)) for c, r in _runs(signal)]
        assert runs[0][0] == "0"
        for c, n in runs[:-1]:  # all complete runs
            assert (n == isi) if c == "1" else (lo <= n <= hi)
        targets = batch.targets[i].tolist()
        assert targets[:-1] == [int(x) for x in signal[1:]] and batch.mask[i, :-1].all() and not batch.mask[i, -1]


def _runs(signal):
    start = 0
    for k in range(1, len(signal) + 1):
        if k == len(signal) or signal[k] != signal[start]:
            yield signal[start], signal[start:k]
            start = k


def test_counting_phase_alignment_sets():
    two = make_task("counting", pattern="two_isi")
    batch = two.sample(8, two.min_length, _gen())
    for row in batch.inputs.tolist():
        runs = [(c, len(r)) for c, r in _runs("".join(two.vocab[x] for x in row))]
        assert [c for c, _ in runs] == ["0", "1", "0", "1", "0"]
        assert runs[1][1] == runs[3][1] == 10 and runs[2][1] == two.long_iti > two.iti_max
    double = make_task("counting", pattern="double_isi", supervise="isi")
    batch = double.sample(8, 100, _gen())
    for row, mask in zip(batch.inputs.tolist(), batch.mask.tolist()):
        signal = "".join(double.vocab[x] for x in row)
        runs = [(c, len(r)) for c, r in _runs(signal)]
        assert [c for c, _ in runs] == ["0", "1", "0", "1", "0"] and runs[2][1] == double.gap < double.iti_min
        assert [m for m, s in zip(mask[:-1], signal[:-1]) if m] and all(s == "1" for m, s in zip(mask, signal) if m)
    with pytest.raises(StatetrackError, match="length must be"):
        two.sample(1, 50, _gen())
