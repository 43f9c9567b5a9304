"""The fused fixed-point iteration (one compiled pass) equals its definition, its stopping rule's
change is per sequence, and the layer's solver takes the same iterations with it as with the
PyTorch form."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import TOL, assert_same, rel_error
from statetrack import diagnostics
from statetrack.layers.fixedpoint import Bedouin, FixedPointRNN
from statetrack.ops import (
    bedouin_iteration,
    bedouin_iteration_nograd,
    bedouin_iteration_reference,
    fixed_point_iteration,
    fixed_point_iteration_nograd,
    fixed_point_iteration_reference,
    native,
)
from statetrack.ops.fixed_point import relative_change

needs_compiler = pytest.mark.skipif(native.compiler() is None, reason="no C compiler for the native loop")


def change_per_sequence(new, old):
    """The stopping rule's max |new - old| / max |new|, one sequence at a time."""
    return torch.stack([(n - o).abs().max() / n.abs().max() for n, o in zip(new, old)])


def assert_change(change, new, old, rtol):
    assert change.shape == (new.shape[0],)
    torch.testing.assert_close(change, change_per_sequence(new, old), rtol=rtol, atol=0)


def instance(B=3, T=11, d=6, r=2, dtype=torch.float64, seed=0, state=True):
    g = torch.Generator().manual_seed(seed)
    lam = torch.rand(B, T, d, generator=g, dtype=dtype)
    lam[0, :, 0] = -0.5  # the op takes any lam; the layer's lie in (0, 1)
    return dict(
        lam=lam,
        scale=torch.rand(B, T, d, generator=g, dtype=dtype),
        b=torch.randn(B, T, d, generator=g, dtype=dtype),
        u=F.normalize(torch.randn(B, T, r, d, generator=g, dtype=dtype), dim=-1),
        alpha=torch.rand(B, T, r, generator=g, dtype=dtype),
        h_prev=torch.randn(B, T, d, generator=g, dtype=dtype),
        initial_state=torch.randn(B, d, generator=g, dtype=dtype) if state else None,
    )


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("r", [1, 2, 4])
@pytest.mark.parametrize("state", [True, False])
def test_fused_iteration_equals_the_definition(dtype, r, state):
    x = instance(r=r, dtype=dtype, state=state)
    assert native.supports(x["b"]), "a C compiler is present but the native library did not build"
    h, last, change = fixed_point_iteration_nograd(**x)
    h_ref, last_ref = fixed_point_iteration_reference(**x)
    assert rel_error(h, h_ref) < TOL[dtype] and rel_error(last, last_ref) < TOL[dtype]
    assert_change(change, h_ref, x["h_prev"], 10 * TOL[dtype])


def bedouin_instance(B=3, T=9, E=6, N=4, r=2, dtype=torch.float64, seed=0, state=True):
    g = torch.Generator().manual_seed(seed)
    return dict(
        lam=torch.rand(B, T, E, N, generator=g, dtype=dtype),
        delta=torch.rand(B, T, E, generator=g, dtype=dtype),
        x=torch.randn(B, T, E, generator=g, dtype=dtype),
        y_prev=torch.randn(B, T, E, generator=g, dtype=dtype),
        u=F.normalize(torch.randn(B, T, r, E, generator=g, dtype=dtype), dim=-1),
        alpha=torch.rand(B, T, r, generator=g, dtype=dtype),
        Bbar=F.normalize(torch.randn(B, T, N, generator=g, dtype=dtype), dim=-1),
        Cbar=F.normalize(torch.randn(B, T, N, generator=g, dtype=dtype), dim=-1),
        initial_state=torch.randn(B, E, N, generator=g, dtype=dtype) if state else None,
    )


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("r", [1, 3])
@pytest.mark.parametrize("state", [True, False])
def test_fused_bedouin_iteration_equals_the_definition(dtype, r, state):
    x = bedouin_instance(r=r, dtype=dtype, state=state)
    before = None if x["initial_state"] is None else x["initial_state"].clone()
    y, last, change = bedouin_iteration_nograd(**x)
    y_ref, last_ref = bedouin_iteration_reference(**x)
    assert rel_error(y, y_ref) < TOL[dtype] and rel_error(last, last_ref) < TOL[dtype]
    assert_change(change, y_ref, x["y_prev"], 10 * TOL[dtype])
    if before is not None:
        assert torch.equal(x["initial_state"], before), "the initial state must not be written"


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("r", [1, 2, 4])
@pytest.mark.parametrize("state", [True, False])
def test_compiled_iteration_and_its_backward_equal_the_definition(dtype, r, state):
    """Forward, last state and the gradient of every input (lam with negative entries included)."""
    x = {k: (v.requires_grad_() if v is not None else None) for k, v in instance(r=r, dtype=dtype, state=state).items()}
    assert_same(fixed_point_iteration, fixed_point_iteration_reference, x, TOL[dtype])


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("r", [1, 3])
@pytest.mark.parametrize("state", [True, False])
def test_compiled_bedouin_iteration_and_its_backward_equal_the_definition(dtype, r, state):
    """Forward, last state and the gradient of every input, lam with negative entries included."""
    x = bedouin_instance(r=r, dtype=dtype, state=state)
    x["lam"][1, :, 2] *= -1
    x = {k: (v.requires_grad_() if v is not None else None) for k, v in x.items()}
    assert_same(bedouin_iteration, bedouin_iteration_reference, x, TOL[dtype])


@needs_compiler
@pytest.mark.parametrize("batch", [1, 5])
def test_fused_iteration_split_over_threads_equals_the_definition(batch):
    x = instance(B=batch, T=40, d=33, r=3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        h, _, change = fixed_point_iteration_nograd(**x)
    finally:
        torch.set_num_threads(before)
    assert rel_error(h, fixed_point_iteration_reference(**x)[0]) < TOL[torch.float64]
    assert_change(change, h, x["h_prev"], 1e-9)


@needs_compiler
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_iterate_never_reads_as_converged(bad):
    """Only the sequence with the non-finite value reads NaN (never below a tolerance); the others
    keep their change."""
    x = instance()
    x["b"][1, 4, 2] = bad
    for change in (fixed_point_iteration_nograd(**x)[2], relative_change(fixed_point_iteration_reference(**x)[0], x["h_prev"])):
        assert torch.isnan(change).tolist() == [False, True, False]
    x = bedouin_instance()
    x["x"][2, 3, 1] = bad
    assert torch.isnan(bedouin_iteration_nograd(**x)[2]).tolist() == [False, False, True]


def test_fused_iteration_without_the_compiled_library_is_the_reference(monkeypatch):
    monkeypatch.setenv("STATETRACK_NATIVE", "0")
    x = instance()
    h, last, change = fixed_point_iteration_nograd(**x)
    h_ref, last_ref = fixed_point_iteration_reference(**x)
    assert torch.equal(h, h_ref) and torch.equal(last, last_ref)
    assert torch.equal(change, relative_change(h_ref, x["h_prev"]))
    x = bedouin_instance()
    y, last, change = bedouin_iteration_nograd(**x)
    y_ref, last_ref = bedouin_iteration_reference(**x)
    assert torch.equal(y, y_ref) and torch.equal(last, last_ref)


LAYERS = {
    "fixedpoint": lambda: FixedPointRNN(8, reflections=2, max_iter=6, eval_max_iter=30, tol=1e-3),
    "bedouin": lambda: Bedouin(8, d_state=4, reflections=2, max_iter=6, eval_max_iter=30, tol=1e-3),
}


@needs_compiler
@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("training", [False, True])
def test_the_solver_takes_the_same_iterations_with_the_fused_pass(name, training, monkeypatch):
    """The layer with the compiled pass and with PyTorch only (STATETRACK_NATIVE=0): the same output,
    gradients and iteration counts (float64, reflections 2, a two-chunk state)."""
    torch.manual_seed(0)
    layer = LAYERS[name]().double().train(training)
    x = torch.randn(2, 9, 8, dtype=torch.float64)

    def run():
        diagnostics.drain(layer)
        inputs = x.clone().requires_grad_()
        y1, state = layer(inputs[:, :4])
        y2, _ = layer(inputs[:, 4:], state)
        y = torch.cat([y1, y2], dim=1)
        grads = torch.autograd.grad(y.square().sum(), [inputs, *layer.parameters()]) if training else ()
        return y.detach(), grads, diagnostics.drain(layer)["iterations"]

    fused = run()
    monkeypatch.setenv("STATETRACK_NATIVE", "0")
    plain = run()
    assert fused[2] == plain[2] and max(fused[2]) > 1
    assert rel_error(fused[0], plain[0]) < 1e-9
    for g_fused, g_plain in zip(fused[1], plain[1]):
        assert rel_error(g_fused, g_plain) < 1e-9
