"""PyCUDA, imported on first use, and the device context ktrace launches in.

The one place ktrace imports pycuda. A missing PyCUDA, driver or GPU raises EnvironmentMissing (exit 3)
with what to install or check.
"""

from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass

from ..errors import EnvironmentMissing

__all__ = ["driver", "ensure_context", "device_info", "DeviceInfo", "INSTALL_HINT", "device_index"]

INSTALL_HINT = "pip install 'ktrace[cuda]'"
_lock = threading.Lock()
_state: dict = {}


def driver():
    """The ``pycuda.driver`` module, or EnvironmentMissing naming what is missing."""
    try:
        import pycuda.driver as cuda
    except ImportError as e:
        text = str(e)
        if "libcuda" in text:
            raise EnvironmentMissing(
                f"no CUDA driver on this machine ({text}): capturing needs an NVIDIA GPU and its driver"
            ) from None
        if getattr(e, "name", None) and not str(e.name).startswith("pycuda"):
            raise EnvironmentMissing(f"PyCUDA is installed but cannot load ({text}); reinstall: {INSTALL_HINT}") from None
        raise EnvironmentMissing(
            f"capturing needs PyCUDA and an NVIDIA GPU, and PyCUDA is not installed: {INSTALL_HINT}"
        ) from None
    return cuda


def _device_index() -> int:
    raw = os.environ.get("KTRACE_DEVICE", "0")
    try:
        return int(raw)
    except ValueError:
        raise EnvironmentMissing(f"KTRACE_DEVICE={raw!r} is not a device number (0, 1, ...)") from None


def ensure_context():
    """Make a CUDA context current (the device's primary context, device ``$KTRACE_DEVICE`` or 0) unless
    the caller already has one (``import pycuda.autoinit``, say); returns the pycuda.driver module."""
    cuda = driver()
    with _lock:
        if _state.get("ready"):
            return cuda
        try:
            cuda.init()
        except cuda.Error as e:
            raise EnvironmentMissing(f"no usable CUDA GPU: cuInit failed ({e})") from None
        current = None
        try:
            current = cuda.Context.get_current()
        except cuda.Error:
            current = None
        if current is None:
            n = cuda.Device.count()
            if n == 0:
                raise EnvironmentMissing("no CUDA GPU found (the driver reports 0 devices)")
            idx = _device_index()
            if not 0 <= idx < n:
                raise EnvironmentMissing(f"KTRACE_DEVICE={idx}, but this machine has {n} CUDA device(s)")
            ctx = cuda.Device(idx).retain_primary_context()
            ctx.push()
            atexit.register(_pop, ctx)
        _state["ready"] = True
    return cuda


def _pop(ctx) -> None:
    try:
        ctx.pop()
    except Exception:  # noqa: BLE001 - at exit, a context already gone is not worth a traceback
        pass


@dataclass(frozen=True)
class DeviceInfo:
    """The current device: name, compute capability, SM count, clocks (kHz), driver and toolkit versions."""

    name: str
    compute_capability: tuple[int, int]
    multiprocessors: int
    clock_rate_khz: int
    memory_clock_khz: int
    max_shared_per_block_optin: int
    pci_bus_id: str
    driver_version: int
    cuda_version: tuple[int, ...]
    backend: str

    @property
    def arch(self) -> str:
        """nvcc's -arch for this device: the arch-specific target (sm_90a) on Hopper and later."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}" + ("a" if major >= 9 else "")

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "compute_capability": list(self.compute_capability),
            "multiprocessors": self.multiprocessors,
            "clock_rate_khz": self.clock_rate_khz,
            "memory_clock_khz": self.memory_clock_khz,
            "max_shared_per_block_optin": self.max_shared_per_block_optin,
            "pci_bus_id": self.pci_bus_id,
            "driver_version": self.driver_version,
            "cuda_runtime_build_version": list(self.cuda_version),
            "backend": self.backend,
        }


def device_info() -> DeviceInfo:
    """Facts about the current device (makes a context current first)."""
    cuda = ensure_context()
    if "info" in _state:
        return _state["info"]
    import pycuda

    dev = cuda.Context.get_device()
    a = dev.get_attributes()

    def attr(name: str) -> int:  # attributes a CUDA version dropped read as 0
        key = getattr(cuda.device_attribute, name, None)
        return int(a.get(key, 0)) if key is not None else 0

    info = DeviceInfo(
        name=dev.name(),
        compute_capability=tuple(dev.compute_capability()),
        multiprocessors=attr("MULTIPROCESSOR_COUNT"),
        clock_rate_khz=attr("CLOCK_RATE"),
        memory_clock_khz=attr("MEMORY_CLOCK_RATE"),
        max_shared_per_block_optin=attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        pci_bus_id=dev.pci_bus_id(),
        driver_version=int(cuda.get_driver_version()),
        cuda_version=tuple(cuda.get_version()),
        backend=f"pycuda {getattr(pycuda, 'VERSION_TEXT', '?')}",
    )
    _state["info"] = info
    return info


def device_index() -> int | None:
    """The CUDA index of the current context's device (as this process numbers devices), or None."""
    cuda = ensure_context()
    bus = cuda.Context.get_device().pci_bus_id()
    for i in range(cuda.Device.count()):
        if cuda.Device(i).pci_bus_id() == bus:
            return i
    return None
