"""The C allocator's settings for a ktrace process that analyzes (``cli.TUNED_COMMANDS``: analyze, diff,
check): it makes and drops many numpy temporaries of a few MB.

glibc's malloc serves a block of at least its mmap threshold (128 KiB at first, raised towards 32 MiB as
such blocks are freed) from a fresh mapping, and gives the top of its heap back once more than its trim
threshold (twice the mmap threshold) lies free there: each next temporary then faults its pages in again,
every page zeroed by the kernel. Fixing the mmap threshold at 32 MiB (the most the dynamic rule reaches)
and the trim threshold at 256 MiB keeps temporaries up to 32 MiB on the heap and reuses their pages.
Blocks above 32 MiB (the large columns) are still mapped and returned on free.

Measured with ``ktrace analyze`` of a 1e7-record buffer with the numpy engine: 231k page faults -> 87k in
one process, 432k -> 335k with two workers (forked workers inherit the settings); at 1e8 records on two
workers the process tree's peak PSS stayed at 3.0-3.2 GiB (a 1 GiB mmap threshold without trimming took it
to 4.5 GiB).

A user's own settings win: nothing changes when ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_TOP_PAD_`` or ``GLIBC_TUNABLES`` is set, nor where the C library is not glibc.

And for every command: one BLAS thread (``one_blas_thread``), set before numpy loads.
"""

from __future__ import annotations

import os
import sys

__all__ = ["tune_allocator", "one_blas_thread", "MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "BLAS_THREAD_SETTINGS"]

MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")
# The thread counts of the BLAS libraries numpy may be built with (OpenBLAS, its OpenMP build, MKL).
BLAS_THREAD_SETTINGS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def tune_allocator() -> bool:
    """Sets glibc's mmap and trim thresholds for this process (see the module's docstring); True when both
    were set, False when left alone (not glibc, or the user set their own)."""
    if not sys.platform.startswith("linux") or any(os.environ.get(name) for name in _USER_SETTINGS):
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
    except (ValueError, OSError):  # not glibc
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))


def one_blas_thread() -> bool:
    """Before numpy is imported in a ktrace command's process: its BLAS library starts with one thread, not
    one per core. ktrace calls no BLAS routine (no matrix product, no linear algebra), but OpenBLAS starts
    its threads when numpy loads and they spin waiting for work: measured with ``perf stat`` on ``ktrace
    analyze`` of a sample (the SQL engine) 0.07-0.34 s more CPU a run, and at 1e7 records 1-4% of the
    CPU, on cores the engine's workers want. True when set; False when numpy was already loaded (too late:
    the library has started) or the user set any of ``BLAS_THREAD_SETTINGS`` (theirs are kept)."""
    if "numpy" in sys.modules or any(os.environ.get(name) for name in BLAS_THREAD_SETTINGS):
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    return True
