"""Shared helpers of the ops and oracle tests: the one relative-error measure, fla's naive oracles by
file path, and layers with random float64 weights to feed to an independent implementation."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

TOL = {torch.float64: 1e-9, torch.float32: 1e-4, torch.complex128: 1e-9, torch.complex64: 1e-4}


def rel_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref|| / ||ref|| (Frobenius, complex-aware); 0 when both are empty or both zero."""
    if ref.numel() == 0:
        return 0.0
    x, ref = x.detach(), ref.detach()
    num = (x - ref).abs().double().norm()
    den = ref.abs().double().norm()
    return float(num / den) if den > 0 else float(num)


def outputs_and_grads(fn, inputs: dict, weights=None, generator=None):
    """Run fn(**inputs) -> (o, S); loss = Re(sum w_o o + sum w_s S) with fixed random weights.

    Returns (o, S, {name: grad}) for every input that requires grad, and the weights used.
    """
    o, S = fn(**inputs)
    if weights is None:
        weights = tuple(torch.randn(t.shape, dtype=t.dtype, generator=generator) for t in (o, S))
    loss = (o * weights[0]).sum() + (S * weights[1]).sum()
    names = [n for n, t in inputs.items() if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(loss.real, [inputs[n] for n in names]) if names else ()
    return o, S, dict(zip(names, grads)), weights


def assert_same(fast, reference, inputs: dict, tol: float, seed: int = 0):
    """Forward outputs, final state and every input gradient of `fast` match `reference` within tol."""
    gen = torch.Generator().manual_seed(seed)
    o_r, S_r, g_r, w = outputs_and_grads(reference, inputs, generator=gen)
    o_f, S_f, g_f, _ = outputs_and_grads(fast, inputs, weights=w)
    errors = {"o": rel_error(o_f, o_r), "state": rel_error(S_f, S_r)}
    errors.update({f"d{n}": rel_error(g_f[n], g_r[n]) for n in g_r})
    bad = {k: e for k, e in errors.items() if not e <= tol}
    assert not bad, f"relative errors above {tol}: {bad}"


def load_fla_naive(relative: str):
    """Load fla/ops/<relative> by file path (never `import fla`: its package imports triton); skip if absent."""
    pytest.importorskip("einops")
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("fla-core is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "ops" / relative
    if not path.exists():
        pytest.skip(f"fla-core has no {path}")
    module_spec = importlib.util.spec_from_file_location("fla_naive_" + relative.replace("/", "_")[:-3], path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def randomised(layer: torch.nn.Module, seed: int = 0, std: float = 0.5) -> torch.nn.Module:
    """The layer in float64 with every parameter drawn at random (the init alone could hide a
    transposed or unused weight, e.g. RMSNorm weights of one)."""
    gen = torch.Generator().manual_seed(seed)
    layer = layer.double()
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(std * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return layer


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """RMSNorm over the last dimension; eps None is torch's default, the dtype's machine epsilon."""
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
