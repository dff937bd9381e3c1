"""When a figure becomes a finding: the thresholds ``--threshold NAME=VALUE`` overrides. Apart from the
findings (numpy), so that ``ktrace analyze --help`` can list them and their defaults without importing them."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, fields
from functools import lru_cache
from pathlib import Path

from ...core.errors import InputError
from ...core.records import frozen

__all__ = ["Thresholds", "NOISE_MODEL_PATH", "shipped_noise", "margin_of"]

# The measured run-to-run noise (compare/noise_model.py builds and reads it; the findings read its bounds here, below
# the layers that build it): family -> (relative, ticks, wall_share).
NOISE_MODEL_PATH = Path(__file__).resolve().parents[1] / "compare" / "noise_model.json"


@lru_cache(maxsize=1)
def shipped_noise() -> dict:
    """Family -> (relative, ticks, wall_share) bound of the shipped noise model (docs/ci.md)."""
    doc = json.loads(NOISE_MODEL_PATH.read_text(encoding="utf-8"))
    return {k: (float(v["relative"]), float(v["ticks"]), float(v["wall_share"])) for k, v in doc["families"].items()}


def margin_of(bound: tuple, value: float, tick_ns: float, unit_ns: float, per_ns: float | None,
              wall_ns: float | None) -> tuple[float, str]:
    """A noise family's margin for one figure, in its unit, and its words: the relative bound (x |value|), or,
    where smaller, the kernel-time bound (the wall share x wall / ``per_ns``, never under ticks x tick /
    ``unit_ns``). bound: (relative, ticks, wall_share). Every same-input change stayed within each bound."""
    relative, ticks, wall_share = bound
    rel = (relative * abs(value), f"{relative:.1%} of the figure")
    kernel = []
    if wall_ns and per_ns and wall_share:
        kernel.append((wall_share * wall_ns / per_ns, f"{wall_share:.1%} of the kernel wall"))
        if tick_ns and unit_ns and ticks:
            kernel.append((ticks * tick_ns / unit_ns, f"{ticks:,.0f} timer ticks"))
    return min([rel, max(kernel, key=lambda x: x[0])] if kernel else [rel], key=lambda x: x[0])


@frozen
class Thresholds:
    """When a figure becomes a finding. Override by name: ``Thresholds.parse(["imbalance=1.2"])``."""

    imbalance: float = 1.10  # a phase's mean slowest slice / its mean slice above this: load imbalance
    excess_fraction: float = 0.05  # mean (wall - slowest slice) / mean wall above this: start skew
    stable_fraction: float = 0.75  # one block last in at least this share of instances (or of a segment's)
    wait_fraction: float = 0.05  # a boundary's waits above this share of all lanes' time: a large wait
    top_waits: int = 3  # at most this many wait findings, largest first
    dominant_share: float = 0.5  # a phase with this share of the critical path dominates it
    min_impact: float = 0.01  # a warning costs at least this share of the kernel's wall time
    min_ticks: float = 2.0  # ... and at least this many timer ticks; every difference a finding rests on too
    tail_share: float = 0.05  # the tail is a finding when it costs at least this share of the wall
    tick_ns: float = 0.0  # timer resolution; 0 = from the trace (launch tick, else smallest step, else 32 ns)

    @classmethod
    def of(cls, value) -> "Thresholds":
        """Thresholds from what ``analyze(thresholds=...)`` takes: None (the defaults), Thresholds, a dict
        ``{"imbalance": 1.2}`` or a list of ``"NAME=VALUE"`` strings; KtraceError (InputError) for anything else."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            names = [f.name for f in fields(cls)]
            unknown = [k for k in value if str(k).replace("-", "_") not in names]
            if unknown:
                raise InputError(f"thresholds: no threshold is called {unknown[0]!r}; the names are {', '.join(names)}")
            bad = [k for k, v in value.items() if isinstance(v, bool) or not isinstance(v, (int, float))]
            if bad:
                raise InputError(f"thresholds: {bad[0]!r} must be a number, got {value[bad[0]]!r} "
                                 f"(e.g. {{'imbalance': 1.2}})")
            return cls.parse(f"{k}={v}" for k, v in value.items())
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return cls.parse(value)
        raise InputError(f"thresholds: expected ktrace.Thresholds(...), a dict such as {{'imbalance': 1.2}} or a "
                         f"list of 'NAME=VALUE' strings, got {type(value).__name__}")

    @classmethod
    def parse(cls, items) -> "Thresholds":
        """Thresholds with ``name=value`` overrides (strings, e.g. from ``--threshold``)."""
        known = {f.name: f for f in fields(cls)}
        values = {}
        for item in items or ():
            name, sep, text = str(item).partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in known:
                raise InputError(f"threshold {item!r}: use NAME=VALUE with NAME one of {', '.join(known)}")
            kind = int if known[name].type in ("int", int) else float
            try:
                value = kind(text)
            except ValueError:
                raise InputError(f"threshold {item!r}: {text!r} is not a number ({kind.__name__})") from None
            if not math.isfinite(value) or value < 0:
                raise InputError(f"threshold {item!r}: must be a finite number >= 0")
            values[name] = value
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)
