"""IDS4's recurrence (Merrill et al. 2024; zero-order hold, Gu et al. 2022): the compiled pass and
the PyTorch form with hand-written backwards equal the materialised definition
(`ids4_scan_reference`), forward and every gradient, with rotations past pi (transitions with
negative real parts), lengths past the compiled pass's checkpoints, and from a given complex state."""

import pytest
import torch

from ops_helpers import rel_error
from statetrack.ops import ids4_scan, ids4_scan_reference, native

needs_native = pytest.mark.skipif(not native.available(), reason="no C compiler for the compiled pass")
IMPLS = [pytest.param("native", marks=needs_native), "torch"]


def make(B, T, d, n, initial=True, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, dtype=dtype, generator=gen)
    inputs = {
        "dt": torch.nn.functional.softplus(rnd(B, T, d)),
        "phi": 3 * rnd(B, T, n),  # dt (A_im + phi) reaches past pi: a_t with negative real parts
        "lam_re": -(0.1 + rnd(d, n).abs()),
        "A_im": rnd(d, n),
        "B": rnd(d, n, 2),
        "C": rnd(d, n, 2),
        "u": rnd(B, T, d),
    }
    complex_dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    state = torch.randn(B, d, n, dtype=complex_dtype, generator=gen) if initial else None
    return {k: v.requires_grad_() for k, v in inputs.items()}, state


def outputs_and_grads(fn, inputs, state, seed=1):
    state = None if state is None else state.clone().requires_grad_()
    y, h = fn(**inputs, initial_state=state)
    gen = torch.Generator().manual_seed(seed)
    wy = torch.randn(y.shape, dtype=torch.float64, generator=gen).to(y.dtype)  # the same weights in either dtype
    wh = torch.randn(torch.view_as_real(h).shape, dtype=torch.float64, generator=gen).to(y.dtype)
    leaves = list(inputs.values()) + ([] if state is None else [state])
    grads = torch.autograd.grad((y * wy).sum() + (torch.view_as_real(h) * wh).sum(), leaves)
    return [y, h, *grads]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("initial", [True, False])
@pytest.mark.parametrize("T", [1, 13, 2 * native.IDS4_CHUNK + 5])
def test_matches_reference_float64(impl, initial, T):
    inputs, state = make(2, T, 4, 3, initial=initial)
    angle = inputs["dt"][..., None] * (inputs["A_im"] + inputs["phi"][:, :, None, :])
    assert (angle.abs() > torch.pi).any()
    fast = outputs_and_grads(lambda **v: ids4_scan(**v, impl=impl), inputs, state)
    ref = outputs_and_grads(ids4_scan_reference, inputs, state)
    for a, b in zip(fast, ref):
        assert rel_error(a, b) < 1e-11


@pytest.mark.parametrize("impl", IMPLS)
def test_float32_against_float64_reference(impl):
    inputs, state = make(2, 70, 4, 3)
    inputs32 = {k: v.detach().float().requires_grad_() for k, v in inputs.items()}
    fast = outputs_and_grads(lambda **v: ids4_scan(**v, impl=impl), inputs32, state.to(torch.complex64))
    ref = outputs_and_grads(ids4_scan_reference, inputs, state)
    for a, b in zip(fast, ref):
        assert rel_error(a, b) < 1e-4


def test_auto_takes_the_compiled_pass_where_it_applies(monkeypatch):
    inputs, state = make(1, 5, 2, 2)
    auto = ids4_scan(**inputs, initial_state=state)
    expected = ids4_scan(**inputs, initial_state=state, impl="native" if native.available() else "torch")
    assert all(torch.equal(a, b) for a, b in zip(auto, expected))
    monkeypatch.setattr(native, "supports_real", lambda *tensors: False)
    with pytest.raises(RuntimeError, match="impl='native' needs CPU tensors"):
        ids4_scan(**inputs, impl="native")


def test_bad_shapes_name_the_expected_shape():
    inputs, state = make(2, 5, 4, 3)
    with pytest.raises(ValueError, match=r"phi must be \[B, T, modes\] = \[2, 5, 3\]"):
        ids4_scan(**{**inputs, "phi": inputs["phi"][..., :2]})
    with pytest.raises(ValueError, match=r"initial_state must be \[B, d, modes\] = \[2, 4, 3\]"):
        ids4_scan(**inputs, initial_state=state[..., :2])
    with pytest.raises(ValueError, match="impl must be one of"):
        ids4_scan(**inputs, impl="cuda")
