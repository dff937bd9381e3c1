"""Capturing profiler buffers on the GPU with PyCUDA: compile, time, launch, read back, save.

The only part of ktrace that uses PyCUDA, imported on first use: importing this package needs no GPU.

    from ktrace.capture import BUFFER, CudaKernel, profile
    kern = CudaKernel.from_file("persistent.cu", "persistent_phases")   # instrumented + control builds
    cap = profile(kern, grid=(132, 1, 1), block=(128, 1, 1), args=[BUFFER, ...],
                  max_events_per_lane=48, event_names=["load", "compute", "reduce"], name="imbalance")
    cap.save()                               # NAME.bin + NAME.json; then ktrace.convert / ktrace.analyze

This package produces a buffer and its sidecar, nothing more: it imports no decoding, export or analysis.
``LaunchCapture`` is the context object underneath (allocate and zero on entry, read back on exit) for launches
``profile`` does not describe. ``calibrate()`` measures the timer tick and one probe's cost.
"""

from __future__ import annotations

from . import settings
from .build import HEADERS, BuildSpec, CudaKernel, HeaderChoice, find_flashinfer_include, ktrace_include, resolve_header
from .recording import BUFFER, LaunchCapture, buffer_words, profile, saved_captures
from .torchflow import Recorded, TorchBackend, record_runs
from .torch_ab import RecordedAB, record_ab

__all__ = [
    "BUFFER",
    "LaunchCapture",
    "CudaKernel",
    "profile",
    "calibrate",
    "device",
    "configure",
    "settings",
    "saved_captures",
    "buffer_words",
    "HEADERS",
    "BuildSpec",
    "HeaderChoice",
    "find_flashinfer_include",
    "ktrace_include",
    "resolve_header",
    "record_runs",
    "Recorded",
    "TorchBackend",
    "record_ab",
    "RecordedAB",
]


def calibrate(**kw):
    """Measure the timer tick and each header's probe cost on the current GPU (see ``calibrate.calibrate``)."""
    from .calibrate import calibrate as _calibrate

    return _calibrate(**kw)


def device():
    """The current GPU's facts (``DeviceInfo``), making a CUDA context current first."""
    from ._cuda import device_info

    return device_info()


def configure(**changes):
    """Set capture defaults (``settings.Settings`` fields: header, out_dir, suffix, reps, ...)."""
    return settings.configure(**changes)


# The names before CudaKernel and LaunchCapture (ktrace.analysis has its own Kernel and Capture): drivers
# written with them keep working, with a DeprecationWarning.
_DEPRECATED = {"Kernel": ("CudaKernel", CudaKernel), "Capture": ("LaunchCapture", LaunchCapture)}


def __getattr__(name):
    if name in _DEPRECATED:
        import warnings

        new, obj = _DEPRECATED[name]
        warnings.warn(f"ktrace.capture.{name} is now ktrace.capture.{new}", DeprecationWarning, stacklevel=2)
        return obj
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
