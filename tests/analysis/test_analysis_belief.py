"""`statetrack analyze belief`: the unnormalised PFSA-SR recurrence underflows where the survival product says."""

import math
import re

import pytest
import torch

from cli_helpers import run_cli
from statetrack.analysis.belief import format_decay
from statetrack.checks.belief import NEVER, belief_decay, first_length
from statetrack.tasks import make_task


def halving_inputs(task, pairs: int) -> torch.Tensor:
    """n = 2, noise 1/2: `swap(0,1)? p[0]=0` repeated. The swap spreads the belief to (1/2, 1/2) and the
    reveal keeps half of it, so ||h||_1 = 2^-k after k pairs, exactly, in any binary float."""
    return torch.tensor([[task.token_id("swap(0,1)?"), task.token_id("p[0]=0")] * pairs])


def test_first_length_counts_tokens_and_marks_never():
    mask = torch.tensor([[False, False, True, True], [False, False, False, False], [True, False, False, False]])
    assert first_length(mask).tolist() == [3, NEVER, 1]


def test_halving_sequence_underflows_and_flushes_at_the_powers_of_two():
    task = make_task("pfsa", n=2, noise=0.5, reveal_prob=0.5)
    decay = belief_decay(task, halving_inputs(task, 1100))
    # log P after the k-th reveal (token 2k) is -k log 2; swaps keep the mass
    assert decay.log_product[0, 1::2].tolist() == pytest.approx([-k * math.log(2) for k in range(1, 1101)], rel=1e-12)
    assert decay.mean_log_survival == pytest.approx(-math.log(2) / 2, rel=1e-12)
    # below 2^-126 (float32) / 2^-1022 (float64) first after 127 / 1023 reveals
    for dtype, normal_exponent, subnormal_exponent in ((torch.float32, 126, 149), (torch.float64, 1022, 1074)):
        assert decay.predicted(dtype).tolist() == [2 * (normal_exponent + 1)]
        assert decay.observed(dtype).tolist() == [2 * (normal_exponent + 1)]
        assert decay.typical(dtype) == pytest.approx(2 * normal_exponent)
        # h = (2^-e, 0) at the smallest subnormal 2^-e; the next swap halves it to (2^-(e+1), 2^-(e+1)), rounded to 0
        assert decay.zero(dtype).tolist() == [2 * subnormal_exponent + 1]
    assert decay.errors["renormalised float32"].max().item() == 0.0  # beliefs (1/2, 1/2) and (1, 0) are exact


@pytest.fixture(scope="module")
def sampled():
    task = make_task("pfsa", n=4, noise=0.5, reveal_prob=0.3)
    batch = task.sample(16, 3200, torch.Generator().manual_seed(3))
    return belief_decay(task, batch.inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_predicted_underflow_length_is_the_observed_one_on_every_sequence(sampled, dtype):
    predicted, observed = sampled.predicted(dtype), sampled.observed(dtype)
    assert (observed != NEVER).all(), "every sequence must underflow for the comparison to mean something"
    assert predicted.tolist() == observed.tolist()
    # the smallest subnormal is the wrong threshold: the state leaves the normal range well before it
    info = torch.finfo(dtype)
    subnormal = first_length(sampled.log_product < math.log(info.tiny) + math.log(info.eps))
    assert (subnormal > observed + 10).all()
    # the flush to exactly 0 comes after the underflow, within the subnormal range's span of decay
    zero = sampled.zero(dtype)
    assert ((zero > observed) & (zero != NEVER)).all()
    # the closed-form length from the mean decay rate is typical of the sequences
    assert observed.double().median().item() == pytest.approx(sampled.typical(dtype), rel=0.05)


def test_linear_norm_is_the_survival_product_while_normal(sampled):
    norms = sampled.norms["float64"]
    normal = norms >= torch.finfo(torch.float64).tiny
    assert normal[:, :2000].all()
    assert (norms[normal].log() - sampled.log_product[normal]).abs().max().item() < 1e-10


def test_renormalised_tracker_stays_exact_while_the_linear_one_loses_the_belief(sampled):
    renormalised = sampled.errors["renormalised float32"]
    assert not renormalised.isnan().any() and renormalised.max().item() < 1e-6
    for dtype in ("float32", "float64"):
        linear = sampled.errors[f"linear {dtype}"]
        assert linear[:, -1].isnan().all()  # h = 0: h / ||h||_1 is no belief
        subnormal = (sampled.norms[dtype] > 0) & (sampled.norms[dtype] < torch.finfo(getattr(torch, dtype)).tiny)
        assert linear[subnormal].max().item() > 0.01  # precision lost before the flush


def test_cli_prints_the_table_and_writes_the_plot(tmp_path, capsys):
    code, out, err = run_cli(capsys, "analyze", "belief", "pfsa", "n=3", "--length", "500", "--samples", "4",
                             "--results-dir", str(tmp_path))
    assert code == 0, err
    row = next(re.split(r"\s{2,}", line) for line in out.splitlines() if line.startswith("float32"))
    assert row[5:8] == ["4/4", "4/4", "4/4"]  # underflowed, predicted = observed, |diff| <= 1
    assert "float64: no sequence underflows within 500 tokens" in out
    plot = tmp_path / "belief" / "belief_pfsa_n=3_noise=0.5_reveal_prob=0.3_belief=auto.png"
    assert f"plot: {plot}" in out and plot.stat().st_size > 0


@pytest.mark.parametrize("argv, message", [
    (["pfsa", "--length", "0"], "--length must be an integer >= 1, got 0"),
    (["pfsa", "--samples", "0"], "--samples must be an integer >= 1, got 0"),
    (["parity"], "task 'parity' has no belief recurrence to analyse; tasks with one: pfsa"),
    (["pfsa", "m=3"], "task 'pfsa' has no parameter 'm'"),
    (["nope"], "unknown task 'nope'"),
])
def test_cli_bad_input_is_one_line(tmp_path, capsys, argv, message):
    code, out, err = run_cli(capsys, "analyze", "belief", *argv, "--out", str(tmp_path / "plots"))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "plots").exists()


def test_flush_to_zero_is_detected_and_reported():
    task = make_task("pfsa", n=2, noise=0.5, reveal_prob=0.5)
    assert not belief_decay(task, halving_inputs(task, 2)).flush_to_zero
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    try:
        decay = belief_decay(task, halving_inputs(task, 200))
    finally:
        torch.set_flush_denormal(False)
    assert decay.flush_to_zero and "flushes subnormals to zero" in format_decay(decay)
    # h = (2^-126, 0) after 126 reveals; the next swap's halves (2^-127, 2^-127) are flushed, so the
    # state is 0 one token before the norm would have fallen below 2^-126 (the prediction)
    assert decay.zero(torch.float32).tolist() == decay.observed(torch.float32).tolist() == [253]
    assert decay.predicted(torch.float32).tolist() == [254]
