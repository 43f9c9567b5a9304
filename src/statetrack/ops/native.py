"""Compiled CPU loops for the recurrences, built on first use with the system C compiler.

The diagonal scan does two flops per element: every PyTorch form of it is one pass over memory per
op, and the reference loop pays per-step dispatch and autograd overhead on small slices. The fused
loop in `diagonal_scan.c` reads a and b and writes h once (forward), and reads a, h, dh and writes
da, db once (backward), which is the memory traffic the recurrence needs and no more. The dense
vector scan of the small-block bilinear models (`dense_scan.c`) is the same idea for d x d
transitions: hundreds of 8 x 8 blocks per step, where PyTorch dispatches one batched product per
step for a few thousand multiply-adds. The chunkwise
delta rule inverts one small unit lower-triangular matrix per chunk; `triangular.c` does it by
forward substitution while the matrix is in L1, where PyTorch's batched forms (block doubling,
`solve_triangular`) spend their time on small strided copies or per-matrix calls. The nonlinear
cells (sLSTM, NRU) must step token by token; `nonlinear.c` runs their inference loop, where PyTorch
pays a dozen op dispatches per token for a few thousand multiply-adds. One iteration of the fixed-point
RNNs (`fixed_point.c`) is a Householder product per token and a diagonal scan (for Bedouin with a
matrix state and its read-out), a dozen PyTorch passes over memory fused into one, and so is its
backward. Mamba's selective scan (`selective_scan.c`) fuses its discretisation, the diagonal scan and
the read-out over the [B, T, E, N] state per (batch row, channel), so neither direction writes a
tensor of that size. The Panini recurrence (`panini.c`) keeps each small matrix state in L1 for the
whole sequence, its Sinkhorn sweeps included, where PyTorch pays a dozen dispatches per sweep, and
IDS4's zero-order hold, complex scan and read-out (`ids4_scan.c`) are one pass like Mamba's.

The C files ship with the package and are compiled once into one library in a cache folder
(`$STATETRACK_CACHE`, else `$XDG_CACHE_HOME/statetrack`, else `~/.cache/statetrack`), named by a hash
of the sources, the compiler and its flags; it is loaded with ctypes (which releases the GIL during
a call).

Threads: the library is built with `-fopenmp` and shares torch's OpenMP runtime (torch has loaded
libgomp.so.1 before us, so ours binds to that copy), so a call runs on the same thread pool as
torch's own ops, with `torch.get_num_threads()` threads. Threads of our own would compete with that
pool: after each parallel torch op its idle workers spin for a while, and a native call made then
competes with them for the cores. Sharing the runtime also shares its limit: in a
child forked after the parent ran parallel work, the first parallel call hangs, ours as torch's
(which is why the experiment runner spawns its workers). Where the compiler has no OpenMP the
library is built without it and runs on one thread.

Without a C compiler (or with `STATETRACK_NATIVE=0`) `load()` returns None and callers use their
PyTorch form; CUDA tensors always use the PyTorch form.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

SOURCES = [
    Path(__file__).with_name(name)
    for name in (
        "diagonal_scan.c",
        "dense_scan.c",
        "triangular.c",
        "nonlinear.c",
        "fixed_point.c",
        "selective_scan.c",
        "panini.c",
        "ids4_scan.c",
    )
]
FLAGS = ["-O3", "-std=c99", "-shared", "-fPIC"]
LIBS = ["-lm"]  # after the sources: expf, tanhf, ... of nonlinear.c
OPENMP = "-fopenmp"  # tried first; the build falls back to one thread without it
DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.complex64: "c64", torch.complex128: "c128"}
INVERSE_MAX_SIZE = 256  # MAX_C in triangular.c
PANINI_MAX_N = 32  # MAX_N in panini.c
IDS4_CHUNK = 64  # CHUNK in ids4_scan.c: steps between the forward's checkpoints
MIN_WORK_PER_THREAD = 1 << 16  # elements: below this a thread hand-off costs more than it saves

_lock = threading.Lock()
_library = None  # ctypes.CDLL, False after a failed build, None before the first try


def cache_dir() -> Path:
    if os.environ.get("STATETRACK_CACHE"):
        return Path(os.environ["STATETRACK_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "statetrack"


def compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")


def enabled() -> bool:
    return os.environ.get("STATETRACK_NATIVE", "1") not in ("0", "false", "no", "off")


def build(target_dir: Path | None = None) -> Path:
    """Compile the kernels (if not cached) and return the shared library's path; raises on failure.

    The OpenMP build is tried first; if the compiler cannot build it, the single-threaded one.
    """
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc or clang)")
    source = b"".join(path.read_bytes() for path in SOURCES)
    folder = target_dir or cache_dir()
    candidates = []  # (flags, path): the OpenMP build first
    for flags in (FLAGS + [OPENMP], FLAGS):
        key = hashlib.sha256(source + " ".join([cc] + flags + LIBS).encode()).hexdigest()[:16]
        candidates.append((flags, folder / f"statetrack_native_{key}.so"))
    for _, path in candidates:  # a cached build of either kind: no compiler call at all
        if path.exists():
            return path
    folder.mkdir(parents=True, exist_ok=True)
    errors = []
    for flags, path in candidates:
        with tempfile.TemporaryDirectory(dir=folder) as tmp:  # build aside, then rename: safe under concurrency
            out = Path(tmp) / path.name
            result = subprocess.run(
                [cc, *flags, *map(str, SOURCES), *LIBS, "-o", str(out)], capture_output=True, text=True
            )
            if result.returncode == 0:
                os.replace(out, path)
                return path
        errors.append(f"{' '.join(flags)}:\n{result.stderr}")
    raise RuntimeError(f"compiling {', '.join(path.name for path in SOURCES)} failed:\n" + "\n".join(errors))


def _declare(library):
    P, N = ctypes.c_void_p, ctypes.c_int64  # a pointer, an integer size
    for suffix in DTYPES.values():
        getattr(library, f"scan_{suffix}_forward").argtypes = [P, P, P, P, N, N, N, N]
        getattr(library, f"scan_{suffix}_backward").argtypes = [P, P, P, P, P, P, P, N, N, N, N]
    for suffix in ("f32", "f64"):
        getattr(library, f"dense_scan_{suffix}_forward").argtypes = [P, P, P, N, N, N, N]
        getattr(library, f"dense_scan_{suffix}_backward").argtypes = [P, P, P, P, P, N, N, N, N]
        getattr(library, f"unit_lower_inverse_{suffix}").argtypes = [P, P, N, N, N]
        getattr(library, f"slstm_{suffix}_forward").argtypes = [P, P, P, P, P, P, P, N, N, N, N, N]
        getattr(library, f"nru_{suffix}_forward").argtypes = [P, P, P, P, P, N, N, N, N, N, N, ctypes.c_double, N]
        getattr(library, f"fixed_point_{suffix}_iterate").argtypes = [P] * 9 + [N] * 5
        getattr(library, f"fixed_point_{suffix}_backward").argtypes = [P] * 16 + [N] * 5
        getattr(library, f"bedouin_{suffix}_iterate").argtypes = [P] * 12 + [N] * 6
        getattr(library, f"bedouin_{suffix}_backward").argtypes = [P] * 20 + [N] * 6
        getattr(library, f"panini_{suffix}_forward").argtypes = [P] * 8 + [N] * 4 + [ctypes.c_double, N]
        getattr(library, f"panini_{suffix}_backward").argtypes = [P] * 11 + [N] * 6
        getattr(library, f"ids4_{suffix}_forward").argtypes = [P] * 10 + [N] * 5
        getattr(library, f"ids4_{suffix}_backward").argtypes = [P] * 18 + [N] * 5
    for suffix, S in (("f32", ctypes.c_float), ("f64", ctypes.c_double)):
        getattr(library, f"selective_scan_{suffix}_forward").argtypes = [P] * 9 + [S] + [N] * 5
        getattr(library, f"selective_scan_{suffix}_backward").argtypes = [P] * 14 + [S] + [N] * 5
    return library


def load():
    """The compiled kernels (ctypes library), or None when disabled or no compiler could build them."""
    global _library
    if not enabled():
        return None
    if _library is None:
        with _lock:
            if _library is None:
                try:
                    _library = _declare(ctypes.CDLL(str(build())))
                except (OSError, RuntimeError):
                    _library = False
    return _library or None


def available() -> bool:
    return load() is not None


def supports(*tensors: torch.Tensor) -> bool:
    """True when the kernels can take these tensors: CPU, one supported dtype, library built."""
    dtype = tensors[0].dtype
    return dtype in DTYPES and all(t.device.type == "cpu" and t.dtype == dtype for t in tensors) and available()


def supports_real(*tensors: torch.Tensor) -> bool:
    """`supports`, for the kernels compiled in float32 and float64 alone."""
    return tensors[0].dtype in (torch.float32, torch.float64) and supports(*tensors)


def uses_openmp() -> bool:
    """True when the library was built with OpenMP (it then runs on torch's thread pool)."""
    library = load()
    return bool(library and library.native_openmp())


def threads(work: int) -> int:
    """Threads for a call touching `work` elements: torch's thread count, fewer for small calls."""
    return max(1, min(torch.get_num_threads(), work // MIN_WORK_PER_THREAD))


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def scan_forward(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    """h [B, T, F] for contiguous a, b [B, T, F] and h0 [B, F] of one supported dtype (CPU)."""
    B, T, F = b.shape
    h = torch.empty_like(b)
    if h.numel():
        kernel = getattr(load(), f"scan_{DTYPES[b.dtype]}_forward")
        kernel(_ptr(a), _ptr(b), _ptr(h0), _ptr(h), B, T, F, threads(h.numel()))
    return h


def scan_backward(a, h, h0, dh, dh_final):
    """(da, db, dh0) of the scan (module docstring of diagonal_scan.c), all contiguous, CPU."""
    B, T, F = h.shape
    da, db = torch.empty_like(h), torch.empty_like(h)
    carry = dh_final.clone(memory_format=torch.contiguous_format)
    if h.numel():
        kernel = getattr(load(), f"scan_{DTYPES[h.dtype]}_backward")
        kernel(_ptr(a), _ptr(h), _ptr(h0), _ptr(dh), _ptr(carry), _ptr(da), _ptr(db), B, T, F, threads(h.numel()))
    return da, db, carry


def dense_scan_forward(M: torch.Tensor, X: torch.Tensor | None, h0: torch.Tensor) -> torch.Tensor:
    """hs [N + 1, Z, D] of h_{n+1} = M_n h_n + X_n (`dense_scan.c`) for contiguous real M [N, Z, D, D],
    X [N, Z, D] or None and h0 [Z, D] of one dtype (CPU)."""
    N, Z, D, _ = M.shape
    hs = h0.new_empty(N + 1, Z, D)
    hs[0] = h0
    if M.numel():
        kernel = getattr(load(), f"dense_scan_{DTYPES[M.dtype]}_forward")
        kernel(_ptr(M), None if X is None else _ptr(X), _ptr(hs), N, Z, D, row_threads(Z, M.numel()))
    return hs


def dense_scan_backward(M: torch.Tensor, hs: torch.Tensor, grad_hs: torch.Tensor, want_M: bool):
    """(lam [N + 1, Z, D], dM [N, Z, D, D] or None) of the scan above: lam[n] = dL/dh_n in total
    (lam[0] is dL/dh0, lam[1:] dL/dX), dM_n = lam[n + 1] h_n^T; contiguous, CPU."""
    N, Z, D, _ = M.shape
    lam = torch.empty_like(hs)
    dM = torch.empty_like(M) if want_M else None
    kernel = getattr(load(), f"dense_scan_{DTYPES[M.dtype]}_backward")
    kernel(
        _ptr(M),
        _ptr(hs),
        _ptr(grad_hs),
        _ptr(lam),
        None if dM is None else _ptr(dM),
        N,
        Z,
        D,
        row_threads(Z, M.numel()),
    )
    return lam, dM


def unit_lower_inverse(A: torch.Tensor) -> torch.Tensor:
    """(I + strictly-lower(A))^-1 for contiguous real A [nb, c, c], c <= INVERSE_MAX_SIZE (CPU)."""
    nb, c = A.shape[0], A.shape[-1]
    out = torch.empty_like(A)
    if out.numel():
        kernel = getattr(load(), f"unit_lower_inverse_{DTYPES[A.dtype]}")
        kernel(_ptr(A), _ptr(out), nb, c, threads(out.numel()))
    return out


def row_threads(rows: int, work: int) -> int:
    """Threads for a call whose batch rows run independently: at most one per row (a sequential
    recurrence cannot be split along time), fewer for small calls."""
    return max(1, min(rows, threads(work)))


def slstm_forward(pre: torch.Tensor, R: torch.Tensor, state: tuple) -> torch.Tensor:
    """h [B, T, H, D] of the sLSTM loop (`nonlinear.c`) for contiguous real pre [B, T, 4, H, D] and
    R [H, D, 4 D], CPU; `state` (h, c, n, m), each contiguous [B, H, D], is advanced in place."""
    B, T, _, H, D = pre.shape
    out = pre.new_empty(B, T, H, D)
    if out.numel():
        kernel = getattr(load(), f"slstm_{DTYPES[pre.dtype]}_forward")
        kernel(_ptr(pre), _ptr(R), *map(_ptr, state), _ptr(out), B, T, H, D, row_threads(B, pre.numel()))
    return out


def nru_forward(
    pre: torch.Tensor, W: torch.Tensor, state: tuple, hidden: int, heads: int, normalize: bool, eps: float
) -> torch.Tensor:
    """h [B, T, hidden] of the NRU loop (`nonlinear.c`) for contiguous real pre [B, T, O] and W
    [hidden + memory, O], CPU; `state` (h [B, hidden], m [B, memory]), contiguous, is advanced in place."""
    B, T, _ = pre.shape
    memory = W.shape[0] - hidden
    out = pre.new_empty(B, T, hidden)
    if out.numel():
        kernel = getattr(load(), f"nru_{DTYPES[pre.dtype]}_forward")
        kernel(
            _ptr(pre),
            _ptr(W),
            *map(_ptr, state),
            _ptr(out),
            B,
            T,
            hidden,
            heads,
            memory,
            int(normalize),
            eps,
            row_threads(B, pre.numel()),
        )
    return out


def fixed_point_iterate(lam, scale, b, u, alpha, prev, h0):
    """(h [B, T, d], max |h - prev| [B], max |h| [B]) of one fixed-point iteration (`fixed_point.c`),
    the maxima per sequence, for contiguous real lam, scale, b, prev [B, T, d], u [B, T, r, d],
    alpha [B, T, r], h0 [B, d], CPU."""
    B, T, d = b.shape
    h = torch.empty_like(b)
    stats = b.new_zeros(B, 2)
    if h.numel():
        kernel = getattr(load(), f"fixed_point_{DTYPES[b.dtype]}_iterate")
        kernel(
            *map(_ptr, (lam, scale, b, u, alpha, prev, h0, h, stats)), B, T, d, u.shape[2], row_threads(B, u.numel())
        )
    return h, stats[:, 0], stats[:, 1]


def fixed_point_backward(lam, scale, b, u, alpha, prev, h0, h, dh, dh_final, want_prev=True):
    """(dlam, dscale, db, du, dalpha, dprev or None, dh0) of `fixed_point_iterate`'s h (`fixed_point.c`)
    given dh [B, T, d] and dh_final [B, d]; every array contiguous, CPU."""
    B, T, d = b.shape
    new = torch.empty_like if h.numel() else torch.zeros_like  # the kernel writes every element
    grads = [new(t) for t in (lam, scale, b, u, alpha)]
    dprev = new(prev) if want_prev else None
    carry = dh_final.clone(memory_format=torch.contiguous_format)
    if h.numel():
        kernel = getattr(load(), f"fixed_point_{DTYPES[b.dtype]}_backward")
        kernel(
            *map(_ptr, (lam, scale, b, u, alpha, prev, h0, h, dh, carry, *grads)),
            None if dprev is None else _ptr(dprev),
            B,
            T,
            d,
            u.shape[2],
            row_threads(B, u.numel()),
        )
    return (*grads, dprev, carry)


def bedouin_iterate(lam, delta, x, prev, u, alpha, Bbar, Cbar, h0, keep_states=False):
    """(y [B, T, E], h_T [B, E, N], every h_t [B, T, E, N] or None, max |y - prev| [B], max |y| [B])
    of one Bedouin iteration (`fixed_point.c`), the maxima per sequence, for contiguous real
    lam [B, T, E, N], delta, x, prev [B, T, E], u [B, T, r, E], alpha [B, T, r], Bbar, Cbar [B, T, N],
    h0 [B, E, N], CPU.
    keep_states: also return every state (what the backward needs)."""
    B, T, E, N = lam.shape
    y = torch.empty_like(x)
    state = h0.clone()
    hs = torch.empty_like(lam) if keep_states else None
    stats = x.new_zeros(B, 2)
    if y.numel():
        kernel = getattr(load(), f"bedouin_{DTYPES[x.dtype]}_iterate")
        kernel(
            *map(_ptr, (lam, delta, x, prev, u, alpha, Bbar, Cbar, state, y)),
            None if hs is None else _ptr(hs),
            _ptr(stats),
            B,
            T,
            E,
            N,
            u.shape[2],
            row_threads(B, lam.numel()),
        )
    return y, state, hs, stats[:, 0], stats[:, 1]


def bedouin_backward(lam, delta, x, prev, u, alpha, Bbar, Cbar, h0, hs, dy, dh_final, want_prev=True):
    """(dlam, ddelta, dx, dprev or None, du, dalpha, dBbar, dCbar, dh0) of `bedouin_iterate`'s y and
    h_T (`fixed_point.c`) given dy [B, T, E], dh_final [B, E, N] and the states hs; contiguous, CPU."""
    B, T, E, N = lam.shape
    new = torch.empty_like if dy.numel() else torch.zeros_like  # the kernel writes every element
    dlam, ddelta, dx = new(lam), new(delta), new(x)
    dprev = new(prev) if want_prev else None
    du, dalpha, dB, dC = new(u), new(alpha), new(Bbar), new(Cbar)
    carry = dh_final.clone(memory_format=torch.contiguous_format)
    if dy.numel():
        kernel = getattr(load(), f"bedouin_{DTYPES[x.dtype]}_backward")
        kernel(
            *map(_ptr, (lam, delta, x, prev, u, alpha, Bbar, Cbar, h0, hs, dy, carry, dlam, ddelta, dx)),
            None if dprev is None else _ptr(dprev),
            *map(_ptr, (du, dalpha, dB, dC)),
            B,
            T,
            E,
            N,
            u.shape[2],
            row_threads(B, lam.numel()),
        )
    return dlam, ddelta, dx, dprev, du, dalpha, dB, dC, carry


def panini_forward(A_l, A_r, B, H0, max_iter: int, tol: float, keep_inputs: bool = True):
    """(states, X or None, sweeps [T, M], clamped) of the renormalised Panini recurrence (`panini.c`)
    for contiguous real A_l, A_r, B [T, M, n, n] and H0 [M, n, n] of one dtype, n <= PANINI_MAX_N, CPU:
    X the pre-Sinkhorn inputs and sweeps the Sinkhorn sweeps of every step (what the backward
    needs), clamped whether some row or column sum fell below the clamp (or was not a number)."""
    T, M, n, _ = B.shape
    states = torch.empty_like(B)
    X = torch.empty_like(B) if keep_inputs else None
    sweeps = torch.zeros(T, M, dtype=torch.int64)
    clamped = torch.zeros(M, dtype=torch.int64)
    if states.numel():
        kernel = getattr(load(), f"panini_{DTYPES[B.dtype]}_forward")
        kernel(
            *map(_ptr, (A_l, A_r, B, H0, states)),
            None if X is None else _ptr(X),
            _ptr(sweeps),
            _ptr(clamped),
            T,
            M,
            n,
            max_iter,
            tol,
            row_threads(M, states.numel() * max(1, max_iter)),
        )
    return states, X, sweeps, bool(clamped.any())


def panini_backward(
    A_l,
    A_r,
    H0,
    states,
    X,
    sweeps,
    grad_states,
    grad_last,
    masks: bool,
    max_iter: int,
    want_A_l: bool = True,
    want_A_r: bool = True,
):
    """(dL/dX, dL/dA_l or None, dL/dA_r or None [T, M, n, n], dL/dH0 [M, n, n]) of `panini_forward`
    given the gradients of its states and of the last state; contiguous, CPU."""
    T, M, n, _ = X.shape
    new = torch.empty_like if X.numel() else torch.zeros_like  # the kernel writes every element
    grad_X = new(X)
    grad_A_l, grad_A_r = (new(X) if want else None for want in (want_A_l, want_A_r))
    carry = grad_last.clone(memory_format=torch.contiguous_format)
    if X.numel():
        kernel = getattr(load(), f"panini_{DTYPES[X.dtype]}_backward")
        kernel(
            *map(_ptr, (A_l, A_r, H0, states, X, sweeps, grad_states, carry, grad_X)),
            *(None if g is None else _ptr(g) for g in (grad_A_l, grad_A_r)),
            int(masks),
            T,
            M,
            n,
            max_iter,
            row_threads(M, X.numel() * max(1, max_iter)),
        )
    return grad_X, grad_A_l, grad_A_r, carry


def ids4_forward(a, u, phi, lam_re, A_im, B, C, h0, keep: bool):
    """(y [B, T, d], h_T [B, d, 2, n], checkpoints or None) of IDS4's recurrence (`ids4_scan.c`) for
    contiguous real a [B, T, d, 2, n], u [B, T, d], phi [B, T, n], lam_re, A_im [d, n], B, C [d, 2, n]
    and h0 [B, d, 2, n] of one dtype (complex numbers split: real parts, then imaginary), CPU; keep:
    also the checkpoints the backward needs."""
    Bsz, T, d, _, n = a.shape
    y = u.new_empty(Bsz, T, d)
    state = h0.clone(memory_format=torch.contiguous_format)
    ckpt = u.new_empty(Bsz, d, -(-T // IDS4_CHUNK), 2, n) if keep else None
    if y.numel():
        kernel = getattr(load(), f"ids4_{DTYPES[u.dtype]}_forward")
        kernel(
            *map(_ptr, (a, u, phi, lam_re, A_im, B, C, state, y)),
            None if ckpt is None else _ptr(ckpt),
            Bsz,
            T,
            d,
            n,
            row_threads(Bsz, a.numel()),
        )
    return y, state, ckpt


def ids4_backward(a, dt, u, phi, lam_re, A_im, B, C, ckpt, dy, dh_final):
    """(ddt, du, dphi, dlam_re, dA_im, dB, dC [d, 2, n], dh0 [B, d, 2, n]) of `ids4_forward` given
    dy [B, T, d] and dh_final [B, d, 2, n]; contiguous, CPU."""
    Bsz, T, d, _, n = a.shape
    threads = row_threads(Bsz, a.numel())
    carry = dh_final.clone(memory_format=torch.contiguous_format)
    ddt, du, dphi = torch.zeros_like(dt), torch.zeros_like(u), torch.zeros_like(phi)
    parts = [u.new_zeros(threads, *shape) for shape in ((d, n), (d, n), (d, 2, n), (d, 2, n))]
    if dy.numel():
        kernel = getattr(load(), f"ids4_{DTYPES[u.dtype]}_backward")
        kernel(
            *map(_ptr, (a, dt, u, phi, lam_re, A_im, B, C, ckpt, dy, carry, ddt, du, dphi, *parts)),
            Bsz,
            T,
            d,
            n,
            threads,
        )
    return (ddt, du, dphi, *(p.sum(0) for p in parts), carry)
