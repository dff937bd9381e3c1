"""One verdict: what a finding claims, the evidence, and the kernel time at stake (before severity)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["Verdict", "format_ns", "fmt", "num", "signed"]


@dataclass
class Verdict:
    """kind, phase, message, evidence: as the Finding; impact_ns: the kernel time at stake by the kind's rule,
    before it is made disjoint from the other findings'; claims: per critical-path step, the ns of it this
    verdict accounts for (None: no part of the path); cause: what it is about ('block 17', 'waves', ...):
    verdicts with one cause become one finding (causes.py)."""

    kind: str
    phase: str | None
    message: str
    evidence: str
    impact_ns: float
    warn: bool = True
    figures: dict = field(default_factory=dict)
    claims: object = None
    cause: str | None = None


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


fmt = format_ns


def signed(ns, more: str, less: str) -> str:
    """A difference in words, never a negative duration: '1.2 µs longer', '40 ns shorter'."""
    return f"{format_ns(abs(float(ns)))} {more if float(ns) >= 0 else less}"


def num(x, default=0.0) -> float:
    return default if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)
