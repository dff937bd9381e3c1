"""Durations for people: one way to print nanoseconds, shared by the analysis, the reports and notebooks."""

from __future__ import annotations

import math

__all__ = ["format_ns"]


def format_ns(ns) -> str:
    """A duration for people: '468 ns', '43.6 µs', '1.25 ms', '2.00 s'."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "—"
    a = abs(ns)
    if a < 1e3:
        return f"{ns:.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:.3g} µs" if a < 1e5 else f"{ns / 1e3:.0f} µs"
    if a < 1e9:
        return f"{ns / 1e6:.3g} ms" if a < 1e8 else f"{ns / 1e6:.0f} ms"
    return f"{ns / 1e9:.3g} s"
