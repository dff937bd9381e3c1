"""Decoding profiler buffers into slices, instants and anomalies (numpy, columnar)."""

from .decoder import FINALIZE_EVENT, BufferDecoder, decode
from .layouts import LAYOUTS
from .source import load_buffer

__all__ = ["decode", "BufferDecoder", "load_buffer", "LAYOUTS", "FINALIZE_EVENT"]
