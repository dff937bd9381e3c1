"""How large the embedded engine's heap may grow for one trace, sized from the trace.

Loading a trace takes a heap of about 5 times its bytes (measured: a 60 MB trace of 1M slices, ~330 MB; a
~3 GB trace of 5e7 slices, 13.2 GiB), and the analysis's tables a little more. So, for a trace of N bytes:

- it cannot fit when even 4 N (under every figure measured) exceeds the build's 16 GiB limit: refused before
  any loading, with what to use instead, rather than failing after many minutes;
- the heap starts at that 4 N (grown once, not a step at a time; untouched pages cost no memory);
- it may grow to 16 N, at least 4 GiB (room for the SQL package and a user's queries), never past the
  build's limit nor the machine's memory: a runaway query on a small trace stops with a clear error instead
  of swapping the machine. $KTRACE_WASM_HEAP_GIB sets that maximum instead.
"""

from __future__ import annotations

import os

from ktrace.engine.wasm_cache import HEAP_MAX_BYTES, NARROW_HEAP_MAX_BYTES
from ktrace.core.errors import InputError

__all__ = ["HEAP_ENV", "heap_plan", "machine_memory", "env_number", "needs_wide_build"]

HEAP_ENV = "KTRACE_WASM_HEAP_GIB"
LOAD_BYTES_PER_TRACE_BYTE = 4  # a lower bound of what loading takes
MAX_BYTES_PER_TRACE_BYTE = 16
HEAP_FLOOR_BYTES = 4 << 30


def machine_memory() -> int | None:
    """The machine's physical memory in bytes, None when unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def heap_plan(name: str, trace_bytes: int | None, build_max: int = HEAP_MAX_BYTES) -> tuple[int, int, str]:
    """(initial heap bytes, maximum heap bytes, why that maximum) for a trace of ``trace_bytes`` (None: not
    known, e.g. compressed). Raises InputError, naming the alternatives, for a trace that cannot fit."""
    given = _given_max()
    if given is not None:
        maximum, why = min(given, build_max), f"${HEAP_ENV}"
    elif trace_bytes is None:
        maximum, why = build_max, "the build's limit"
    else:
        maximum = min(build_max, max(HEAP_FLOOR_BYTES, MAX_BYTES_PER_TRACE_BYTE * trace_bytes))
        why = "the build's limit" if maximum == build_max else f"sized from the trace's {_size(trace_bytes)}"
    memory = machine_memory()
    if memory is not None and memory < maximum and given is None:
        maximum, why = memory, "the machine's memory"
    need = LOAD_BYTES_PER_TRACE_BYTE * (trace_bytes or 0)
    if need > maximum:
        raise InputError(
            f"{name}: a trace of {_size(trace_bytes)} needs at least {_size(need)} of the embedded trace processor's "
            f"heap, more than it can have ({_size(maximum)}: {why}); analyze the buffer with --engine numpy, use a "
            "native trace_processor_shell (KTRACE_TP_SHELL), or capture fewer iterations")
    return min(need, maximum), maximum, why


def needs_wide_build(trace_bytes: int | None) -> bool:
    """Whether a trace of ``trace_bytes`` (None: not known) needs the memory64 build: the heap its plan allows
    (16 times the trace, or $KTRACE_WASM_HEAP_GIB) is more than the 32-bit build's 4 GiB; else the 32-bit one
    gives it the same heap, faster."""
    given = _given_max()
    if trace_bytes is None or (given is not None and given > NARROW_HEAP_MAX_BYTES):
        return True
    return MAX_BYTES_PER_TRACE_BYTE * trace_bytes > NARROW_HEAP_MAX_BYTES


def env_number(name: str) -> tuple[str, float] | None:
    """$name as (its text, its number; NaN when it is not one), None when it is unset or empty: each caller
    checks the range it takes and says what to give."""
    text = os.environ.get(name, "")
    if not text:
        return None
    try:
        return text, float(text)
    except ValueError:
        return text, float("nan")


def _given_max() -> int | None:
    given = env_number(HEAP_ENV)
    if given is None:
        return None
    text, value = given
    if not 0 < value <= HEAP_MAX_BYTES / 2**30:
        raise InputError(f"{HEAP_ENV}={text!r}: give the heap's maximum in GiB, above 0 and at most "
                         f"{HEAP_MAX_BYTES >> 30}")
    return int(value * 2**30)


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
