"""One way to open a capture for decoding: a Triton Proton trace is read whole into a Decoded
(``proton.py``), anything else opens a BufferDecoder. Every command's input comes through here
(``ktrace.inputs``), so a Proton trace works wherever a buffer does."""

from __future__ import annotations

import os

from ..core.errors import InputError
from ..core.filetypes import is_proton
from .decoder import BufferDecoder
from .proton import PROTON_OPTIONS, read_proton

__all__ = ["open_source", "is_proton_source"]


def is_proton_source(source) -> bool:
    """True for a path to a Triton Proton trace."""
    return isinstance(source, (str, os.PathLike)) and is_proton(source)


def open_source(source, **options):
    """A Decoded for a Proton trace (options: lanes, sm_clock_mhz, proton_log, sidecar; the buffer-only ones
    refused), else a BufferDecoder (the Proton-only options refused)."""
    if is_proton_source(source):
        return read_proton(source, **options)
    given = [k for k in PROTON_OPTIONS if options.get(k) not in (None, False)]
    if given:
        label = source if isinstance(source, (str, os.PathLike)) else "the buffer"
        flags = ", ".join("--" + k.replace("_mhz", "").replace("_", "-") for k in given)
        raise InputError(f"{label}: {flags} {'apply' if len(given) > 1 else 'applies'} to Triton Proton traces (.chrome_trace), not profiler buffers")
    return BufferDecoder(source, **{k: v for k, v in options.items() if k not in PROTON_OPTIONS})
