"""ktrace: per-block timelines of CUDA kernels instrumented with FlashInfer's profiler macros.

    import ktrace
    d = ktrace.decode("buf.bin")                  # slices, instants, anomalies (numpy columns)
    ktrace.convert("buf.bin", "buf.perfetto-trace")
    a = ktrace.analyze("buf.bin")                 # per-phase figures and findings, via the trace processor
"""

from .analysis import Analysis, Thresholds, analyze
from .api import ConvertResult, convert, inspect
from .decoding import decode, load_buffer
from .errors import EnvironmentMissing, GateFailed, InputError, KtraceError
from .model import Decoded, Launch

__version__ = "0.1.0"

__all__ = [
    "decode",
    "load_buffer",
    "convert",
    "inspect",
    "analyze",
    "Analysis",
    "Thresholds",
    "ConvertResult",
    "Decoded",
    "Launch",
    "KtraceError",
    "InputError",
    "EnvironmentMissing",
    "GateFailed",
    "__version__",
]
