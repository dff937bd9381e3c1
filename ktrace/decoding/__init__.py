"""Decoding profiler buffers (and Triton Proton traces) into slices, instants and anomalies (numpy, columnar)."""

from .decoder import FINALIZE_EVENT, BufferDecoder, decode
from .layouts import LAYOUTS
from .source import load_buffer
from .opening import is_proton_source, open_source

__all__ = ["decode", "BufferDecoder", "load_buffer", "LAYOUTS", "FINALIZE_EVENT", "open_source", "is_proton_source"]
