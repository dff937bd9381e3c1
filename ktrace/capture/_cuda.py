"""PyCUDA, imported on first use, and the device context ktrace launches in.

The one place ktrace imports pycuda. A missing PyCUDA, driver or GPU raises EnvironmentMissing (exit 3)
with what to install or check.
"""

from __future__ import annotations

import atexit
import os
import threading

from ..core.errors import EnvironmentMissing
from ..core.records import frozen

__all__ = ["driver", "ensure_context", "device_info", "DeviceInfo", "INSTALL_HINT", "device_index"]

INSTALL_HINT = "pip install 'ktrace[cuda]'"
NOT_NEEDED = "decoding, converting and analyzing captures need neither GPU nor PyCUDA"


def _driver_present() -> bool:
    """True when the NVIDIA driver's library (libcuda) can be found on this machine."""
    import ctypes
    import ctypes.util

    if ctypes.util.find_library("cuda"):
        return True
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _toolkit() -> str | None:
    """The CUDA toolkit PyCUDA would build against (a folder holding include/cuda.h), or None."""
    import shutil
    from pathlib import Path

    cands = [os.environ.get(k) for k in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(str(Path(nvcc).resolve().parent.parent))
    cands.append("/usr/local/cuda")
    for c in filter(None, cands):
        if (Path(c) / "include" / "cuda.h").is_file():
            return c
    return None


def missing_pycuda_message(driver_found: bool, toolkit: str | None) -> str:
    """What to do when PyCUDA is not installed, given what this machine has: an NVIDIA driver (without it,
    installing PyCUDA cannot help) and a CUDA toolkit (PyCUDA is published as source only and its build
    needs nvcc and cuda.h)."""
    head = "capturing needs an NVIDIA GPU with its driver, and PyCUDA, which is not installed"
    if not driver_found:
        return (f"{head}; this machine has no NVIDIA driver (libcuda.so.1 not found), so capture on a machine with "
                f"a GPU ({NOT_NEEDED})")
    if toolkit:
        return f"{head}: {INSTALL_HINT} (builds PyCUDA against the CUDA toolkit in {toolkit}, a few minutes)"
    return (f"{head}. PyCUDA is published as source only and builds against the CUDA toolkit (nvcc and "
            "cuda.h), which was not found here (set CUDA_HOME if it is installed elsewhere): install the toolkit, "
            f"then {INSTALL_HINT}; or install a prebuilt pycuda wheel (pip install pycuda-*.whl)")
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
                f"no CUDA driver on this machine ({text}): capturing needs an NVIDIA GPU and its driver ({NOT_NEEDED})"
            ) from None
        if getattr(e, "name", None) and not str(e.name).startswith("pycuda"):
            raise EnvironmentMissing(f"PyCUDA is installed but cannot load ({text}): reinstall it (pip install "
                                     "--force-reinstall pycuda, which needs the CUDA toolkit, or a prebuilt wheel)") from None
        raise EnvironmentMissing(missing_pycuda_message(_driver_present(), _toolkit())) from None
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
            raise EnvironmentMissing(f"no usable CUDA GPU: cuInit failed ({e}); check the NVIDIA driver with "
                                     f"nvidia-smi ({NOT_NEEDED})") from None
        current = None
        try:
            current = cuda.Context.get_current()
        except cuda.Error:
            current = None
        if current is None:
            n = cuda.Device.count()
            if n == 0:
                raise EnvironmentMissing(f"no CUDA GPU found (the driver reports 0 devices; {NOT_NEEDED})")
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


@frozen
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
