"""Writing a file atomically and safely: a temp file created exclusively beside the target, renamed into
place at the end; leftovers of killed runs removed."""

from __future__ import annotations

import functools
import glob
import os
import tempfile
from pathlib import Path
from typing import Iterable

from ..outputs import cannot_write

__all__ = ["write_chunks"]


def write_chunks(out: str | Path, chunks: Iterable[bytes]) -> int:
    """Write byte chunks to ``out`` atomically: into a temp file beside it, renamed into place at the end, so
    an error part-way leaves no half trace. Returns the bytes written.

    The temp file is created exclusively (O_EXCL, a fresh random name): a file or symlink planted beside
    ``out`` is never written through. Temp files that a killed run left behind are removed first.
    """
    out = Path(out)
    _remove_stale_temps(out)
    try:
        fd, name = tempfile.mkstemp(dir=out.parent, prefix=f"{out.name}.tmp{os.getpid()}.", suffix=".part")
    except OSError as e:
        raise cannot_write(out, e, "trace") from None
    tmp = Path(name)
    size = 0
    writing = False  # an OSError while writing is this file's problem; one reading the input (in chunks) is not
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, 0o666 & ~_umask())  # the mode open() would have given it (mkstemp makes 600)
            for chunk in chunks:
                writing = True
                f.write(chunk)
                writing = False
                size += len(chunk)
            writing = True  # closing flushes the last bytes
        os.replace(tmp, out)
    except OSError as e:
        if not writing:
            raise
        raise cannot_write(out, e, "trace") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return size


@functools.cache
def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove_stale_temps(out: Path) -> None:
    """Removes ``OUT.tmpPID.*.part`` files whose process is gone (a run killed by SIGKILL or a crash)."""
    try:
        leftovers = list(out.parent.glob(f"{glob.escape(out.name)}.tmp*.part"))
    except OSError:
        return
    for path in leftovers:
        pid = path.name[len(out.name) + 4:].split(".", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        try:
            path.unlink()
        except OSError:
            pass


def _alive(pid: int) -> bool:
    if os.name != "posix":
        return True  # no signal-0 probe: leave it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True
