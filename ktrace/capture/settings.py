"""Process-wide defaults for captures: which header, where files go, how many timing runs.

``ktrace run`` sets them from its options before it runs a driver script, so the driver's ``Kernel`` and
``profile`` calls pick them up without arguments; a library user may call ``configure`` or pass arguments.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from ..core.records import frozen

__all__ = ["Settings", "current", "configure"]


@frozen
class Settings:
    """header: "auto" | "flashinfer" | "ktrace"; out_dir: where ``Capture.save()`` writes by default;
    suffix: appended to capture names (``imbalance`` + ``_ktrace``); reps/warmup: timing runs per build;
    timing: time the builds at all; spin_us: the busy kernel queued before each timed launch."""

    header: str = "auto"
    flashinfer_include: str | None = None
    out_dir: Path = Path("ktrace-out")
    suffix: str = ""
    reps: int = 50
    warmup: int = 5
    timing: bool = True
    spin_us: int = 200


_current = Settings()


def current() -> Settings:
    return _current


def configure(**changes) -> Settings:
    """Change the defaults (keyword names as ``Settings``); returns the new settings."""
    global _current
    if "out_dir" in changes and changes["out_dir"] is not None:
        changes["out_dir"] = Path(changes["out_dir"])
    _current = replace(_current, **{k: v for k, v in changes.items() if v is not None})
    return _current
