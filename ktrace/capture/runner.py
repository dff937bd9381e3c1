"""Running a driver script (``ktrace run DRIVER.py``): the script compiles, launches and saves captures
through this package; the runner checks the machine first and hands back what the script saved."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from ..core.errors import InputError, KtraceError
from .recording import LaunchCapture, forget_saved, saved_captures

__all__ = ["run_driver"]


def run_driver(path, argv=()) -> list[LaunchCapture]:
    """Run the Python script at ``path`` as ``__main__`` with ``argv``; returns the captures it saved.

    Raises EnvironmentMissing before running anything when there is no PyCUDA or no GPU, InputError when
    the script is missing or exits with a nonzero status.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such driver script")
    from ._cuda import ensure_context

    ensure_context()
    forget_saved()
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [str(p), *argv]
    sys.path.insert(0, str(p.resolve().parent))
    try:
        runpy.run_path(str(p), run_name="__main__")
    except SystemExit as e:
        if isinstance(e.code, str):
            raise KtraceError(f"{p}: {e.code}") from None
        if e.code not in (None, 0):
            raise KtraceError(f"{p}: the driver exited with status {e.code}") from None
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
    return saved_captures()
