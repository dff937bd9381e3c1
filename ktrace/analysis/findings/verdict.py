"""One verdict: what a finding claims, the evidence, and the kernel time at stake (before severity)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.units import format_ns

if TYPE_CHECKING:  # the kinds' modules import Verdict: no import of the kinds package from here
    from .kinds.base import KindFigures

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
    figures: KindFigures | None = None  # the kind's typed figures (kinds/<kind>.py)
    claims: object = None
    cause: str | None = None


fmt = format_ns


def signed(ns, more: str, less: str) -> str:
    """A difference in words, never a negative duration: '1.2 µs longer', '40 ns shorter'."""
    return f"{format_ns(abs(float(ns)))} {more if float(ns) >= 0 else less}"


def num(x, default=0.0) -> float:
    return default if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)
