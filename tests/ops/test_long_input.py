"""Long-input evaluation: the inference forms equal the training forms they replace.

The compiled loops of the nonlinear cells (sLSTM, NRU; `ops.nonlinear`) against their PyTorch
references, whole and fed in chunks, in float64 and float32; the layers' inference path (no
gradient) against their training path; the fallback without a compiler; mLSTM's parallel form in
pieces against one pass; the carried state of every recurrent model holding no more memory than its
own size; `predict` on one thread for small batches; and the benchmark running end to end. Speed is
measured by benchmarks/long_input.py, not here.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ops_helpers import TOL, rel_error
from statetrack.models import zoo
from statetrack.ops import native
from statetrack.ops.nonlinear import (
    nru_recurrence,
    nru_recurrence_reference,
    slstm_recurrence,
    slstm_recurrence_reference,
)
from statetrack.training import evaluate
from statetrack.training.evaluate import predict

compiled = pytest.mark.skipif(native.compiler() is None, reason="no C compiler for the compiled loops")
DTYPES = [torch.float64, torch.float32]


def slstm_inputs(dtype, B=3, T=40, H=2, D=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    pre = torch.randn(B, T, 4, H, D, generator=g, dtype=dtype)
    R = torch.randn(H, D, 4 * D, generator=g, dtype=dtype) / D**0.5
    h, c = (torch.randn(B, H, D, generator=g, dtype=dtype) for _ in range(2))
    n = torch.rand(B, H, D, generator=g, dtype=dtype) + 0.5
    m = torch.randn(B, H, D, generator=g, dtype=dtype)
    return pre, R, (h, c, n, m)


def nru_inputs(dtype, hidden, memory, heads, B=3, T=40, seed=0, scale=0.3):
    """Pre-activations and weights at a scale where some units are off (ReLU) and nothing overflows
    (without normalisation the memory can grow quadratically per step: a smaller `scale`)."""
    g = torch.Generator().manual_seed(seed)
    outputs = hidden + 2 * heads * (1 + memory)
    pre = torch.randn(B, T, outputs, generator=g, dtype=dtype) * 0.5 + 0.1
    W = torch.randn(hidden + memory, outputs, generator=g, dtype=dtype) * scale / (hidden + memory) ** 0.5
    state = (torch.rand(B, hidden, generator=g, dtype=dtype), torch.randn(B, memory, generator=g, dtype=dtype))
    return pre, W, state


def assert_same(got, want, dtype):
    (out, state), (out_ref, state_ref) = got, want
    errors = {"outputs": rel_error(out, out_ref)} | {f"state[{i}]": rel_error(s, r) for i, (s, r) in enumerate(zip(state, state_ref))}
    assert max(errors.values()) < TOL[dtype], errors


def in_chunks(op, pre, state, size, *args):
    """op over `pre` fed `size` steps at a time, the state carried: (outputs, final state)."""
    outs = []
    for start in range(0, pre.shape[1], size):
        out, state = op(pre[:, start : start + size], *args, initial_state=state)
        outs.append(out)
    return torch.cat(outs, 1), state


@compiled
@pytest.mark.parametrize("dtype", DTYPES)
def test_slstm_compiled_loop_equals_reference_whole_and_in_chunks(dtype):
    pre, R, state = slstm_inputs(dtype)
    want = slstm_recurrence_reference(pre, R, state)
    assert torch.isfinite(want[0]).all()
    assert_same(slstm_recurrence(pre, R, state), want, dtype)
    assert_same(in_chunks(slstm_recurrence, pre, state, 7, R), want, dtype)
    assert_same(slstm_recurrence(pre, R), slstm_recurrence_reference(pre, R), dtype)  # from the zero state


@compiled
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden,memory,heads,normalize", [(6, 5, 1, True), (4, 7, 3, True), (6, 5, 2, False)])
def test_nru_compiled_loop_equals_reference_whole_and_in_chunks(dtype, hidden, memory, heads, normalize):
    pre, W, state = nru_inputs(dtype, hidden, memory, heads, scale=0.3 if normalize else 0.1)
    want = nru_recurrence_reference(pre, W, hidden, heads, normalize, state)
    assert torch.isfinite(want[0]).all() and torch.isfinite(want[1][1]).all()
    off = (want[0] == 0).float().mean()
    assert 0 < off < 1, "both sides of the ReLU must be exercised"
    assert_same(nru_recurrence(pre, W, hidden, heads, normalize, state), want, dtype)
    assert_same(in_chunks(nru_recurrence, pre, state, 9, W, hidden, heads, normalize), want, dtype)


@compiled
def test_compiled_loops_leave_the_given_state_untouched():
    pre, R, state = slstm_inputs(torch.float64)
    before = [s.clone() for s in state]
    slstm_recurrence(pre, R, state)
    assert all(torch.equal(s, b) for s, b in zip(state, before))


def test_with_gradients_or_without_a_compiler_the_reference_runs(monkeypatch):
    """Training needs the differentiable loop: the op takes the reference whenever a gradient is
    recorded (its output has a graph), and also when the compiled loops are disabled."""
    pre, R, state = slstm_inputs(torch.float64)
    pre.requires_grad_()
    out, _ = slstm_recurrence(pre, R, state)
    assert out.grad_fn is not None
    pre_n, W, state_n = nru_inputs(torch.float64, 6, 5, 2)
    monkeypatch.setenv("STATETRACK_NATIVE", "0")
    assert not native.available()
    with torch.no_grad():
        assert_same(slstm_recurrence(pre, R, state), slstm_recurrence_reference(pre, R, state), torch.float64)
        assert_same(nru_recurrence(pre_n, W, 6, 2, True, state_n), nru_recurrence_reference(pre_n, W, 6, 2, True, state_n), torch.float64)


def test_ops_name_the_expected_shapes():
    pre, R, state = slstm_inputs(torch.float64)
    with pytest.raises(ValueError, match=r"R must be \[H, D, 4 D\]"):
        slstm_recurrence(pre, R[:, :, :4], state)
    with pytest.raises(ValueError, match=r"each \[B, H, D\]"):
        slstm_recurrence(pre, R, state[:3])
    pre, W, state = nru_inputs(torch.float64, 6, 5, 2)
    with pytest.raises(ValueError, match=r"O = hidden \+ 2 heads \(1 \+ memory\)"):
        nru_recurrence(pre, W, 6, 3, True, state)


@compiled
@pytest.mark.parametrize("spec", [{"name": "slstm", "num_heads": 2}, {"name": "nru", "memory": 12, "heads": 2}])
def test_layers_inference_path_equals_training_path_in_chunks(spec):
    """A whole model in float64: logits and carried state of chunked evaluation without gradients (the
    compiled loop) equal those of one forward pass with gradients on (the reference loop)."""
    torch.manual_seed(0)
    model = zoo.build_model({**spec, "d_model": 8}, 3, 2).double().eval()
    tokens = torch.randint(0, 3, (2, 50), generator=torch.Generator().manual_seed(1))
    want, want_state = model(tokens)
    assert want.grad_fn is not None
    with torch.no_grad():
        state, parts = None, []
        for start in range(0, tokens.shape[1], 16):
            logits, state = model(tokens[:, start : start + 16], state)
            parts.append(logits)
    assert rel_error(torch.cat(parts, 1), want) < 1e-12
    for got, ref in zip(state[0], want_state[0]):
        assert rel_error(got, ref) < 1e-12
    assert torch.equal(predict(model, tokens, chunk_size=16), want.argmax(-1))


def test_mlstm_in_pieces_equals_one_parallel_pass():
    """mLSTM runs long inputs through its parallel form in pieces of `piece` tokens, the state
    carried: outputs, state and gradients equal one pass over the whole input (float64)."""
    torch.manual_seed(0)
    whole = zoo.get_entry("mlstm").mixer(8).double()
    pieces = zoo.get_entry("mlstm").mixer(8).double()
    pieces.load_state_dict(whole.state_dict())
    whole.piece, pieces.piece = 1000, 16
    x = torch.randn(2, 100, 8, dtype=torch.float64, requires_grad=True)
    y, state = whole(x)
    y_p, state_p = pieces(x)
    assert rel_error(y_p, y) < 1e-12 and all(rel_error(a, b) < 1e-12 for a, b in zip(state_p, state))
    (grad,) = torch.autograd.grad(y.square().sum(), x)
    (grad_p,) = torch.autograd.grad(y_p.square().sum(), x)
    assert rel_error(grad_p, grad) < 1e-12


def _leaves(state):
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, (list, tuple)):
        for item in state:
            yield from _leaves(item)


@pytest.mark.parametrize("name", sorted(name for name, entry in zoo.MODELS.items() if entry.recurrent))
def test_carried_state_holds_only_its_own_memory(name):
    """The state carried between chunks is what memory stays constant in: no tensor of it may be a
    view into a larger buffer (the chunk's inputs or all its states), which would keep that alive."""
    torch.manual_seed(0)
    model = zoo.build_model({"name": name, "d_model": 8}, 2, 2).eval()
    with torch.no_grad():
        _, state = model(torch.randint(0, 2, (1, 100)))
    for t in _leaves(state):
        assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), f"{name}: state {tuple(t.shape)} is a view"


class _ThreadProbe(torch.nn.Module):
    """Records torch's thread count at every call; logits from the token ids."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, tokens, state=None):
        self.seen.append(torch.get_num_threads())
        return torch.nn.functional.one_hot(tokens, 2).double(), state


def test_predict_runs_small_batches_on_one_thread_and_restores_the_count():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        probe = _ThreadProbe()
        tokens = torch.randint(0, 2, (1, 30))
        assert torch.equal(predict(probe, tokens, chunk_size=8), tokens)
        assert probe.seen == [1] * 4 and torch.get_num_threads() == 2
        probe.seen.clear()
        predict(probe, torch.randint(0, 2, (evaluate.SERIAL_BATCH + 1, 30)), chunk_size=8)
        assert probe.seen == [2] * 4 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_long_input_benchmark_prints_every_figure():
    """benchmarks/long_input.py runs end to end (figures unchecked): one row per (model, T)."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "long_input.py"
    out = subprocess.run([sys.executable, str(script), "--json", "--models", "lstm", "slstm", "--T", "300", "600",
                          "--chunk", "128", "--width", "8", "--threads", "1"], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    rows = json.loads(out)["rows"]
    assert sorted((r["model"], r["T"]) for r in rows) == [("lstm", 300), ("lstm", 600), ("slstm", 300), ("slstm", 600)]
    keys = {"seconds", "tokens_per_s", "peak_mb", "growth_mb", "tokens", "load_1min", "busy"}
    assert all(keys <= set(r) and r["tokens"] == r["T"] and r["seconds"] > 0 for r in rows)
