"""fla-core's kernels behind our delta-rule ops (statetrack.ops.fla_kernels).

On the CPU: what each op hands fla (the gate, the scale, DeltaProduct's micro-steps and read-out) is
checked by standing fla's own naive recurrences in for its kernels, against our references; and no op
on a CPU imports fla or triton. On a GPU (marked `cuda`): fla's kernels themselves, in float32,
against our references in float64 on the CPU, forward, final state and every input gradient, with
eigenvalues in [0, 1] and in [-1, 1].
"""

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from ops_helpers import TOL, assert_same, load_fla_naive
from statetrack import ops
from statetrack.ops import fla_kernels

# (op, reference, keyword arguments beyond the tensors) for every case the dispatch serves
CASES = {
    "delta_rule": (ops.delta_rule, ops.delta_rule_reference, {}),
    "gated_delta_rule": (ops.delta_rule, ops.delta_rule_reference, {}),
    "delta_product_1": (ops.delta_product, ops.delta_product_reference, {"num_householder": 1}),
    "delta_product_2": (ops.delta_product, ops.delta_product_reference, {"num_householder": 2}),
    "gated_delta_product_3": (ops.delta_product, ops.delta_product_reference, {"num_householder": 3}),
    "kda": (ops.kda, ops.kda_reference, {"scale": 0.7}),
    "dplr": (ops.dplr, ops.dplr_reference, {"scale": 1.0}),  # RWKV-7's read-out scale
}


def inputs(case: str, eig: float, dtype=torch.float64, T: int = 21, B: int = 2, H: int = 2, Dk: int = 16, Dv: int = 8):
    """Random inputs for `case`, beta in (0, eig) (eig 2: eigenvalues down to -1), with an initial state."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, dtype=dtype, generator=gen)

    def randn(*shape):
        return torch.randn(*shape, dtype=dtype, generator=gen)

    n_h = CASES[case][2].get("num_householder", 1)
    Tk = T * n_h
    x = {"q": randn(B, T, H, Dk), "k": F.normalize(randn(B, Tk, H, Dk), dim=-1), "v": randn(B, Tk, H, Dv)}
    if case == "dplr":  # RWKV-7's a = -kappa, b = kappa iclr
        kappa = x["k"]
        x.update(k=randn(B, T, H, Dk), a=-kappa, b=kappa * eig * rand(B, T, H, Dk), gk=-0.6 * rand(B, T, H, Dk))
    else:
        x["beta"] = eig * rand(B, Tk, H)
        if case == "kda":
            x["g"] = -rand(B, T, H, Dk)
        elif case.startswith("gated"):
            x["g"] = -rand(B, T, H)
    x["initial_state"] = randn(B, H, Dk, Dv)
    return {n: t.requires_grad_() for n, t in x.items()}


def call(case: str):
    op, reference, kwargs = CASES[case]
    return (lambda **a: op(**a, **kwargs)), (lambda **a: reference(**a, **kwargs))


@pytest.fixture
def naive_kernels(monkeypatch):
    """fla's naive recurrences (same keywords as its chunked kernels) stood in for the kernels, and
    the dispatch turned on for CPU tensors; returns the calls counted per kernel."""
    gdr = load_fla_naive("gated_delta_rule/naive.py")
    kda = load_fla_naive("kda/naive.py")
    dplr = load_fla_naive("generalized_delta_rule/dplr/naive.py")
    calls = {"gated_delta_rule": 0, "kda": 0, "dplr": 0}

    def counted(name, fn):
        def run(**kw):
            calls[name] += 1
            return fn(**kw)

        return run

    def dplr_form(q, k, v, a, b, gk, scale, initial_state, output_final_state):
        # fla's naive DPLR runs head-first and scales q by Dk^-1/2: undo that, keep `scale`
        to = lambda t: t.transpose(1, 2)  # noqa: E731
        q = q * scale * q.shape[-1] ** 0.5
        o, S = dplr.dplr_recurrence(to(q), to(k), to(v), to(a), to(b), to(gk), initial_state, output_final_state)
        return to(o), S

    fake = SimpleNamespace(
        gated_delta_rule=counted("gated_delta_rule", gdr.naive_recurrent_gated_delta_rule),
        kda=counted("kda", kda.naive_recurrent_kda),
        dplr=counted("dplr", lambda **kw: dplr_form(**kw)),
    )
    monkeypatch.setattr(fla_kernels, "ready", lambda x: True)
    monkeypatch.setattr(fla_kernels, "kernels", lambda: fake)
    return calls


@pytest.mark.parametrize("eig", [1.0, 2.0], ids=["eig[0,1]", "eig[-1,1]"])
@pytest.mark.parametrize("case", list(CASES))
def test_what_each_op_hands_fla_equals_the_reference(case, eig, naive_kernels):
    fast, reference = call(case)
    assert_same(fast, reference, inputs(case, eig, torch.float32), TOL[torch.float32])
    kernel = {"kda": "kda", "dplr": "dplr"}.get(case, "gated_delta_rule")
    assert naive_kernels[kernel] >= 1 and sum(naive_kernels.values()) == naive_kernels[kernel]


def test_no_op_on_a_cpu_imports_fla_or_triton():
    """In a fresh interpreter: every dispatched op, and a model made of each, runs on the CPU and
    leaves fla and triton unimported."""
    script = textwrap.dedent(
        """
        import sys, torch
        from statetrack.models import zoo
        for name in ("deltanet", "gated_deltanet", "deltaproduct", "gated_deltaproduct", "kda", "rwkv7"):
            model = zoo.build_model({"name": name, "d_model": 16}, 4, 2)
            model(torch.randint(0, 4, (2, 9)))[0].sum().backward()
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("fla", "triton"))
        assert not loaded, loaded
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_cpu_tensors_never_go_to_fla():
    x = torch.zeros(1, 2, 1, 4)
    assert not fla_kernels.ready(x) and not fla_kernels.ready(x.half())


cuda = pytest.mark.skipif(
    not (torch.cuda.is_available() and fla_kernels._installed()), reason="needs a CUDA GPU with fla-core and triton"
)


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("eig", [1.0, 2.0], ids=["eig[0,1]", "eig[-1,1]"])
@pytest.mark.parametrize("T", [21, 100])
@pytest.mark.parametrize("case", list(CASES))
def test_fla_kernels_on_cuda_equal_the_reference(case, T, eig):
    """fla's kernel in float32 on the GPU (tf32 products inside) against the float64 reference on the CPU."""
    fast, reference = call(case)
    x = inputs(case, eig, torch.float64, T=T)
    on_gpu = {n: t.detach().float().cuda().requires_grad_() for n, t in x.items()}
    assert fla_kernels.ready(on_gpu["q"])
    gen = torch.Generator().manual_seed(1)
    o_r, S_r = reference(**x)
    w_o, w_s = torch.randn(o_r.shape, generator=gen, dtype=torch.float64), torch.randn(S_r.shape, generator=gen, dtype=torch.float64)
    grads_r = torch.autograd.grad((o_r * w_o).sum() + (S_r * w_s).sum(), list(x.values()))
    o, S = fast(**on_gpu)
    grads = torch.autograd.grad((o * w_o.float().cuda()).sum() + (S * w_s.float().cuda()).sum(), list(on_gpu.values()))
    errors = {"o": (o, o_r), "state": (S, S_r), **{f"d{n}": (g, g_r) for n, g, g_r in zip(x, grads, grads_r)}}
    rel = {k: float((a.double().cpu() - b).norm() / b.norm()) for k, (a, b) in errors.items()}
    bad = {k: e for k, e in rel.items() if not e <= 5e-3}
    assert not bad, f"relative errors above 5e-3: {bad}"


@pytest.mark.cuda
@cuda
def test_float64_and_wide_heads_keep_our_forms_on_cuda():
    x = torch.zeros(1, 2, 1, 4, device="cuda")
    assert fla_kernels.ready(x) and not fla_kernels.ready(x.double())
    assert not fla_kernels.ready(torch.zeros(1, 2, 1, fla_kernels.MAX_HEAD_DIM + 1, device="cuda"))


@pytest.mark.cuda
@cuda
def test_statetrack_fla_0_keeps_our_forms_on_cuda(monkeypatch):
    monkeypatch.setenv(fla_kernels.ENV, "0")
    x = {n: t.detach().float().cuda() for n, t in inputs("gated_delta_rule", 2.0).items()}
    assert not fla_kernels.ready(x["q"])
    monkeypatch.setattr(fla_kernels, "kernels", lambda: pytest.fail("fla was called with STATETRACK_FLA=0"))
    ops.delta_rule(**x)
