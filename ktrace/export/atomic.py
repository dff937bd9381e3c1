"""Writing a trace atomically: ``ktrace.core.outputs.write_file``, the one writer every output goes through (a temp
file created exclusively beside the target, renamed into place at the end; leftovers of killed runs removed)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..core.outputs import write_file

__all__ = ["write_chunks"]


def write_chunks(out: str | Path, chunks: Iterable[bytes]) -> int:
    """Write byte chunks to ``out`` atomically (``ktrace.core.outputs.write_file``); returns the bytes written. An
    error part-way leaves no half trace."""
    return write_file(out, chunks, "trace")
