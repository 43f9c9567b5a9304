"""Process-wide memory allocator setting for CPU runs (no torch import: the CLI calls it first)."""

from __future__ import annotations

import ctypes
import os


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to keep freed memory for reuse instead of returning it to the OS.

    By default glibc maps every allocation above 32 MiB fresh from the kernel and unmaps it on free,
    so each large tensor pays a page fault per 4 KiB page when first written, which for a
    [B, T, state] tensor of a long input costs more than the arithmetic that fills it. Raising the
    mmap and trim thresholds keeps such blocks in the heap, as the PyTorch CPU tuning guides get by
    preloading jemalloc or tcmalloc. The resident size then stays at the process's peak. Called by
    the CLI and by every run (`train_and_evaluate`); `STATETRACK_MALLOC=system` leaves malloc alone.
    Returns True when the settings were applied (glibc only).
    """
    if os.environ.get("STATETRACK_MALLOC", "keep") == "system":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    # some glibc versions cap the mmap threshold at 32 MiB: fall back to that
    ok = mallopt(M_MMAP_THRESHOLD, 1 << 30) == 1 or mallopt(M_MMAP_THRESHOLD, 1 << 25) == 1
    return mallopt(M_TRIM_THRESHOLD, (1 << 31) - 1) == 1 and ok
