"""Both fast diagonal scans (fused native loop, two-level chunked) equal the loop."""

import ctypes
import sys

import pytest
import torch

from ops_helpers import TOL, assert_same, rel_error
from statetrack.ops import diagonal_scan, diagonal_scan_reference, native

NATIVE = pytest.param(
    "native", marks=pytest.mark.skipif(native.compiler() is None, reason="no C compiler for the native scan")
)
IMPLS = ["chunked", NATIVE]


def make(shape, kind, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    B, T = shape[:2]
    if kind == "positive":
        a = torch.rand(shape, dtype=dtype, generator=gen)
    elif kind == "negative":  # the [-1, 1] eigenvalue range, with exact zeros (resets) mixed in
        a = 2 * torch.rand(shape, dtype=dtype, generator=gen) - 1
        a = a * (torch.rand(shape, dtype=dtype, generator=gen) > 0.1)
    else:  # complex, |a| < 1 (S4D / IDS4, rotation models)
        r = torch.rand(shape, dtype=dtype, generator=gen)
        theta = 6.3 * torch.rand(shape, dtype=dtype, generator=gen)
        a = torch.polar(r, theta)
    cdtype = a.dtype
    b = torch.randn(shape, dtype=cdtype, generator=gen)
    h0 = torch.randn((B,) + tuple(shape[2:]), dtype=cdtype, generator=gen)
    return {"a": a.requires_grad_(), "b": b.requires_grad_(), "initial_state": h0.requires_grad_()}


@pytest.mark.parametrize("kind", ["positive", "negative", "complex"])
@pytest.mark.parametrize("T", [1, 2, 9, 30, 101])
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_chunked_equals_reference_float64(T, kind, chunk_size):
    x = make((2, T, 3, 4), kind)
    scan = lambda **a: diagonal_scan(**a, chunk_size=chunk_size, impl="chunked")  # noqa: E731
    assert_same(scan, diagonal_scan_reference, x, TOL[torch.float64])


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler for the native scan")
@pytest.mark.parametrize("kind", ["positive", "negative", "complex"])
@pytest.mark.parametrize("T", [1, 2, 9, 101])
def test_native_equals_reference_float64(T, kind):
    x = make((2, T, 3, 4), kind)
    assert_same(lambda **a: diagonal_scan(**a, impl="native"), diagonal_scan_reference, x, TOL[torch.float64])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", ["negative", "complex"])
def test_fast_equals_reference_float32(kind, impl):
    x = make((3, 257, 8, 4), kind, dtype=torch.float32)
    assert_same(lambda **a: diagonal_scan(**a, impl=impl), diagonal_scan_reference, x, TOL[torch.float32])


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler for the native scan")
def test_native_is_what_auto_uses_on_cpu_when_a_compiler_exists():
    assert native.available(), "a C compiler is present but the native scan did not build"
    x = make((2, 7, 3), "negative")
    h_auto, _ = diagonal_scan(x["a"], x["b"])
    h_native, _ = diagonal_scan(x["a"], x["b"], impl="native")
    assert torch.equal(h_auto, h_native)


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler for the native scan")
@pytest.mark.parametrize("batch", [1, 3])  # 1: threads split the state lanes; 3: whole batch rows
@pytest.mark.parametrize("kind", ["negative", "complex"])
def test_native_split_over_threads_equals_reference(batch, kind):
    x = make((batch, 70, 40, 33), kind)  # 1320 lanes (not a multiple of 16), enough work to split
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert_same(lambda **a: diagonal_scan(**a, impl="native"), diagonal_scan_reference, x, TOL[torch.float64])
    finally:
        torch.set_num_threads(threads)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_native_library_shares_torchs_openmp_runtime():
    if not native.available() or not native.uses_openmp():
        pytest.skip("the native library was built without OpenMP (one thread)")
    runtimes = {line.split()[-1] for line in open("/proc/self/maps") if "gomp" in line or "libomp" in line}
    assert len(runtimes) == 1, f"a second OpenMP runtime was loaded: {sorted(runtimes)}"


def test_native_build_falls_back_to_one_thread_without_openmp(tmp_path, monkeypatch):
    if native.compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setattr(native, "OPENMP", "-fno-such-openmp-flag")  # a compiler without OpenMP rejects it
    library = ctypes.CDLL(str(native.build(tmp_path)))
    assert library.native_openmp() == 0


def test_native_off_falls_back_and_impl_native_says_why(monkeypatch):
    monkeypatch.setenv("STATETRACK_NATIVE", "0")
    x = make((2, 9, 3), "negative")
    h, _ = diagonal_scan(x["a"], x["b"])  # auto: the chunked form
    assert rel_error(h, diagonal_scan_reference(x["a"], x["b"])[0]) <= 1e-13
    with pytest.raises(RuntimeError, match="STATETRACK_NATIVE=off"):
        diagonal_scan(x["a"], x["b"], impl="native")
    with pytest.raises(ValueError, match="impl must be one of auto, native, chunked"):
        diagonal_scan(x["a"], x["b"], impl="fast")


def test_native_build_is_cached_by_source_hash(tmp_path):
    if native.compiler() is None:
        pytest.skip("no C compiler")
    first = native.build(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert native.build(tmp_path) == first and first.stat().st_mtime_ns == mtime  # not rebuilt


def test_real_gate_with_complex_input_promotes():
    x = make((2, 20, 3), "positive")
    b = torch.randn(2, 20, 3, dtype=torch.complex128)
    h, S = diagonal_scan(x["a"], b)
    h_ref, S_ref = diagonal_scan_reference(x["a"], b)
    assert h.dtype == torch.complex128 and rel_error(h, h_ref) <= 1e-12


@pytest.mark.parametrize("impl", IMPLS)
def test_state_carried_across_calls_equals_one_call(impl):
    x = make((2, 50, 5), "negative")
    h_all, S_all = diagonal_scan(**x, impl=impl)
    S, pieces = x["initial_state"], []
    for lo, hi in [(0, 1), (1, 17), (17, 50)]:
        h, S = diagonal_scan(x["a"][:, lo:hi], x["b"][:, lo:hi], initial_state=S, impl=impl)
        pieces.append(h)
    assert rel_error(torch.cat(pieces, 1), h_all) <= 1e-13 and rel_error(S, S_all) <= 1e-13


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_sequence_and_no_initial_state(impl):
    h, S = diagonal_scan(torch.rand(2, 0, 3), torch.rand(2, 0, 3), impl=impl)
    assert h.shape == (2, 0, 3) and torch.equal(S, torch.zeros(2, 3))
    h, S = diagonal_scan(torch.rand(0, 4, 3), torch.rand(0, 4, 3), impl=impl)
    assert h.shape == (0, 4, 3) and S.shape == (0, 3)
    x = make((1, 12, 2), "positive")
    h, S = diagonal_scan(x["a"], x["b"], output_final_state=False, impl=impl)
    assert S is None and rel_error(h, diagonal_scan_reference(x["a"], x["b"])[0]) <= 1e-13


def test_bad_shapes_name_the_expected_shape():
    with pytest.raises(ValueError, match="equal shape"):
        diagonal_scan(torch.rand(2, 5, 3), torch.rand(2, 5, 4))
    with pytest.raises(ValueError, match=r"initial_state must be \[B, ...\]"):
        diagonal_scan(torch.rand(2, 5, 3), torch.rand(2, 5, 3), torch.rand(2, 4))


@pytest.mark.parametrize("impl", ["auto", "chunked"])
def test_lazily_conjugated_complex_inputs_are_read_as_conjugated(impl):
    """`t.conj()` is a view that only flags the conjugation; the scan must see the conjugated
    values (the native loop reads memory, so the flag has to be resolved first), in forward and
    backward."""
    g = torch.Generator().manual_seed(0)
    c = lambda *shape: torch.complex(torch.randn(*shape, dtype=torch.float64, generator=g),  # noqa: E731
                                     torch.randn(*shape, dtype=torch.float64, generator=g))
    a, b, h0 = 0.7 * c(2, 9, 3), c(2, 9, 3), c(2, 3)
    lazy = {"a": a.conj(), "b": b.conj(), "initial_state": h0.conj()}
    resolved = {k: v.resolve_conj() for k, v in lazy.items()}
    assert all(v.is_conj() for v in lazy.values())
    h, final = diagonal_scan(**lazy, impl=impl)
    h_ref, final_ref = diagonal_scan_reference(**resolved)
    assert rel_error(h, h_ref) <= TOL[torch.complex128] and rel_error(final, final_ref) <= TOL[torch.complex128]
    inputs = {k: v.clone().requires_grad_() for k, v in resolved.items()}
    assert_same(lambda **x: diagonal_scan(**x, impl=impl), diagonal_scan_reference, inputs, TOL[torch.complex128])
