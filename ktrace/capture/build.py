"""Compiling a kernel twice: instrumented (``-DFLASHINFER_ENABLE_PROFILER``) and its unprofiled control.

Which profiler header: FlashInfer's when its include folder is found (``--flashinfer-include DIR``, then
``$FLASHINFER_INCLUDE``, then an installed flashinfer-python), else ktrace's own
(``ktrace/include/ktrace/profiler.cuh``: same macros and records, plus a capacity guard, instants that
land, an unaliased SM field and a 64-bit timer anchor). The chosen header is put in front of the source,
so a kernel written against FlashInfer's macros compiles against either; the source itself includes no
profiler header and says ``using namespace flashinfer;``.

The pure parts (discovery, the text and options handed to nvcc) need no GPU, so tests compile the sample
kernels with nvcc alone; ``CudaKernel`` compiles with PyCUDA for the current device.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import field
from pathlib import Path

from ..core.errors import InputError
from ..core.records import frozen

__all__ = [
    "HEADERS",
    "PROFILER_DEFINE",
    "HeaderChoice",
    "BuildSpec",
    "CudaKernel",
    "find_flashinfer_include",
    "ktrace_include",
    "resolve_header",
]

HEADERS = ("auto", "flashinfer", "ktrace")
PROFILER_DEFINE = "-DFLASHINFER_ENABLE_PROFILER"
DEFAULT_OPTIONS = ("-lineinfo",)
_FI_HEADER = Path("flashinfer") / "profiler.cuh"


def ktrace_include() -> Path:
    """The folder holding ``ktrace/profiler.cuh``."""
    return Path(__file__).resolve().parent.parent / "include"


def _installed_flashinfer_include() -> Path | None:
    try:
        spec = importlib.util.find_spec("flashinfer")  # locates the package without importing it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        for cand in (Path(loc) / "data" / "include", Path(loc).parent / "include"):
            if (cand / _FI_HEADER).is_file():
                return cand
    return None


def find_flashinfer_include(explicit: str | os.PathLike | None = None) -> tuple[Path | None, str]:
    """(FlashInfer's include folder or None, where it came from).

    explicit (``--flashinfer-include``) and ``$FLASHINFER_INCLUDE`` may name the include folder (holding
    ``flashinfer/profiler.cuh``) or the ``flashinfer`` folder itself; a named folder without the header is
    an InputError rather than a silent fallback.
    """
    for value, source in ((explicit, "--flashinfer-include"), (os.environ.get("FLASHINFER_INCLUDE"), "FLASHINFER_INCLUDE")):
        if not value:
            continue
        p = Path(value).expanduser()
        for cand in (p, p.parent):
            if (cand / _FI_HEADER).is_file():
                return cand.resolve(), source
        raise InputError(f"{source}={value}: no flashinfer/profiler.cuh there (name the folder that holds 'flashinfer/')")
    found = _installed_flashinfer_include()
    return (found, "flashinfer-python") if found else (None, "")


def _flashinfer_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("flashinfer-python")
    except Exception:  # noqa: BLE001 - not installed, or metadata unreadable: the version is only a label
        return None


@frozen
class HeaderChoice:
    """The profiler header a build uses: ``producer`` is "flashinfer" or "ktrace"."""

    producer: str
    include_dir: Path
    source: str  # where it was found: "--flashinfer-include", "FLASHINFER_INCLUDE", "flashinfer-python", "ktrace"

    @property
    def header(self) -> str:
        return "flashinfer/profiler.cuh" if self.producer == "flashinfer" else "ktrace/profiler.cuh"

    @property
    def path(self) -> Path:
        return self.include_dir / self.header

    def describe(self) -> str:
        if self.producer == "ktrace":
            return "ktrace (ktrace/include/ktrace/profiler.cuh)"
        ver = _flashinfer_version() if self.source == "flashinfer-python" else None
        return f"flashinfer ({self.path}; from {self.source}{', flashinfer-python ' + ver if ver else ''})"


def resolve_header(header: str = "auto", flashinfer_include=None) -> HeaderChoice:
    """The header for ``header`` = "auto" (FlashInfer's if found, else ktrace's), "flashinfer" or "ktrace"."""
    if header not in HEADERS:
        raise InputError(f"header {header!r}: choose one of {', '.join(HEADERS)}")
    if header == "ktrace":
        return HeaderChoice("ktrace", ktrace_include(), "ktrace")
    inc, source = find_flashinfer_include(flashinfer_include)
    if inc is not None:
        return HeaderChoice("flashinfer", inc, source)
    if header == "flashinfer":
        raise InputError(
            "FlashInfer's profiler.cuh was not found: pass --flashinfer-include DIR, set FLASHINFER_INCLUDE, "
            "install flashinfer-python, or use --header ktrace"
        )
    return HeaderChoice("ktrace", ktrace_include(), "ktrace")


@frozen
class BuildSpec:
    """What nvcc is given for one kernel: the source with the header in front, include folders, options."""

    source: str
    name: str  # the kernel's (extern "C") function name
    choice: HeaderChoice
    filename: str = "kernel.cu"
    include_dirs: tuple[str, ...] = ()
    options: tuple[str, ...] = DEFAULT_OPTIONS
    defines: dict = field(default_factory=dict)

    def text(self) -> str:
        """The source nvcc compiles: the profiler header, then the user's source at its own line numbers."""
        fname = self.filename.replace("\\", "/").replace('"', "")
        return f"#include <{self.choice.header}>\n#line 1 \"{fname}\"\n{self.source}"

    def nvcc_options(self, instrumented: bool) -> list[str]:
        opts = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in self.defines.items()]
        opts += list(self.options)
        if instrumented:
            opts.append(PROFILER_DEFINE)
        return opts

    def all_include_dirs(self) -> list[str]:
        return [str(self.choice.include_dir), *map(str, self.include_dirs)]

    def compile_info(self, arch: str) -> dict:
        """The sidecar's ``compile`` entry."""
        return {
            "arch": arch,
            "options": self.nvcc_options(True),
            "control_options": self.nvcc_options(False),
            "include_dirs": self.all_include_dirs(),
            "header": self.choice.describe(),
            "header_source": self.choice.source,
            "source_file": self.filename,
            "compiler": "pycuda.compiler.SourceModule (nvcc --cubin)",
        }


class CudaKernel:
    """A CUDA source compiled twice for the current device: ``instrumented`` and ``control`` (PyCUDA
    Functions taking the same arguments).

    source: CUDA C++ written against FlashInfer's profiler macros, including no profiler header itself,
    with the kernel declared ``extern "C"``; header: "auto", "flashinfer" or "ktrace"; defines: extra
    ``-D`` macros; options: extra nvcc options; shared_bytes: dynamic shared memory the launches use (sets
    the functions' limit when above 48 KiB).
    """

    def __init__(self, source: str, name: str, *, header: str | None = None, flashinfer_include=None,
                 include_dirs=(), options=(), defines=None, filename: str = "kernel.cu", arch: str | None = None,
                 shared_bytes: int = 0):
        from . import settings
        from ._cuda import device_info, ensure_context

        s = settings.current()
        cuda = ensure_context()
        self.device = device_info()
        self.arch = arch or self.device.arch
        choice = resolve_header(header or s.header, flashinfer_include or s.flashinfer_include)
        self.spec = BuildSpec(source, name, choice, filename, tuple(map(str, include_dirs)),
                              DEFAULT_OPTIONS + tuple(options), dict(defines or {}))
        self.producer = choice.producer
        self.instrumented_module = self._compile(True)
        self.control_module = self._compile(False)
        self.instrumented = self._function(self.instrumented_module)
        self.control = self._function(self.control_module)
        if shared_bytes > 48 * 1024:
            for f in (self.instrumented, self.control):
                f.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, int(shared_bytes))

    @classmethod
    def from_file(cls, path, name: str, **kw) -> "CudaKernel":
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(f"{p}: cannot read the kernel source ({e.strerror})") from None
        kw.setdefault("filename", p.name)
        kw.setdefault("include_dirs", (str(p.resolve().parent),))
        return cls(text, name, **kw)

    def _compile(self, instrumented: bool):
        from pycuda.compiler import SourceModule
        from pycuda.driver import CompileError

        try:
            return SourceModule(self.spec.text(), options=self.spec.nvcc_options(instrumented), no_extern_c=True,
                                arch=self.arch, include_dirs=self.spec.all_include_dirs())
        except CompileError as e:
            which = "instrumented" if instrumented else "control"
            raise InputError(f"{self.spec.filename}: the {which} build did not compile:\n{e}") from None

    def _function(self, module):
        from pycuda.driver import LogicError

        try:
            return module.get_function(self.spec.name)
        except LogicError:
            raise InputError(
                f"{self.spec.filename}: no kernel named {self.spec.name!r} (declare it extern \"C\")"
            ) from None

    def set_capacity(self, records_per_lane: int) -> None:
        """Set ktrace's header's per-lane capacity in the instrumented module (no-op for FlashInfer's)."""
        if self.producer != "ktrace":
            return
        import numpy as np

        from ._cuda import driver

        ptr, size = self.instrumented_module.get_global("ktrace_profiler_capacity")
        driver().memcpy_htod(ptr, np.array([records_per_lane], dtype=np.uint32))

    def compile_info(self) -> dict:
        return self.spec.compile_info(self.arch)
