"""One way to open a capture for decoding: a Triton Proton trace (``proton.py``) or an NVIDIA IKET JSON trace
(``iket.py``) is read whole into a Decoded, anything else opens a BufferDecoder. Every command's input comes through here
(``ktrace.inputs``), so a Proton trace works wherever a buffer does."""

from __future__ import annotations

import os

from ..core.errors import InputError
from ..core.filetypes import is_iket, is_proton
from .decoder import BufferDecoder
from .options import IKET_OPTIONS, PROTON_OPTIONS

# The Proton and IKET readers are imported when such a trace is opened: a buffer needs neither.

__all__ = ["open_source", "is_proton_source"]


def is_proton_source(source) -> bool:
    """True for a path to a Triton Proton trace or an NVIDIA IKET JSON trace (both read whole into a Decoded)."""
    return isinstance(source, (str, os.PathLike)) and (is_proton(source) or is_iket(source))


def open_source(source, **options):
    """A Decoded for a Proton trace (options: lanes, sm_clock_mhz, proton_log, sidecar; the buffer-only ones
    refused), else a BufferDecoder (the Proton-only options refused)."""
    if isinstance(source, (str, os.PathLike)) and is_iket(source):
        extra = [k for k in PROTON_OPTIONS if k not in IKET_OPTIONS and options.get(k) not in (None, False)]
        if extra:
            flags = ", ".join("--" + k.replace("_mhz", "").replace("_", "-") for k in extra)
            raise InputError(f"{source}: {flags} {'apply' if len(extra) > 1 else 'applies'} to Triton Proton traces, not IKET traces")
        from .iket import read_iket

        return read_iket(source, **{k: v for k, v in options.items() if k not in PROTON_OPTIONS or k in IKET_OPTIONS})
    if is_proton_source(source):
        if options.get("launch") is not None:
            raise InputError(f"{source}: --launch applies to IKET traces; a Proton trace holds one launch")
        from .proton import read_proton

        return read_proton(source, **{k: v for k, v in options.items() if k != "launch"})
    given = [k for k in PROTON_OPTIONS + ("launch",) if options.get(k) not in (None, False)]
    if given:
        label = source if isinstance(source, (str, os.PathLike)) else "the buffer"
        flags = ", ".join("--" + k.replace("_mhz", "").replace("_", "-") for k in given)
        raise InputError(f"{label}: {flags} {'apply' if len(given) > 1 else 'applies'} to Triton Proton traces (.chrome_trace) "
                         "or IKET traces (.trace.json), not profiler buffers")
    return BufferDecoder(source, **{k: v for k, v in options.items() if k not in PROTON_OPTIONS + ("launch",)})
