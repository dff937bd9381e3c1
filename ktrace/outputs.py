"""Where a command may write: checked before any work, so that ``-o`` never destroys an input and a bad path
fails at once with a message naming the file and the fix (exit 2), not a traceback after minutes of decoding.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import InputError
from .filetypes import sibling

__all__ = ["check_output", "check_outputs", "planted_link", "cannot_write", "write_atomically", "PLOT_SUFFIXES",
           "temporary_folder", "temporary_root", "temporary_folders_in"]

# What --plot can write (matplotlib's raster and vector formats a person opens).
PLOT_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".webp", ".eps", ".ps", ".tif", ".tiff")


_TEMPORARY_ROOT: str | None = None  # a worker's: the folder its parent made for its workers' temporary files


def temporary_folders_in(folder: str | None) -> None:
    """This process's temporary folders made in ``folder`` from now on (a worker of ``run_in_workers``: its
    parent removes the folder once the workers are gone, whatever state a stopped worker left it in)."""
    global _TEMPORARY_ROOT
    _TEMPORARY_ROOT = folder


def temporary_root() -> str:
    """Where ``temporary_folder`` makes its folders: the worker's folder, else the system's temporary folder."""
    return _TEMPORARY_ROOT or tempfile.gettempdir()


def temporary_folder(prefix: str = "ktrace-", ignore_cleanup_errors: bool = False) -> tempfile.TemporaryDirectory:
    """A temporary folder (``tempfile.TemporaryDirectory``) for what ktrace writes on the way (a trace to load,
    a lane-major copy, the workers' folder), in ``temporary_root()``."""
    return tempfile.TemporaryDirectory(prefix=prefix, dir=temporary_root(), ignore_cleanup_errors=ignore_cleanup_errors)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def planted_link(path) -> bool:
    """A symbolic link to a file (or to nothing yet): writing through it would write wherever it points. A link
    to a terminal, a pipe or /dev/null (``/dev/stdout``, the system's own links) is not one."""
    if not os.path.islink(path) or os.path.abspath(path).startswith(("/dev/", "/proc/")):
        return False
    real = os.path.realpath(path)
    return not os.path.exists(real) or os.path.isfile(real) or os.path.isdir(real)


def check_output(out, inputs=(), what: str = "output", option: str = "-o", suffixes=None) -> Path:
    """Returns ``out`` as a Path, or raises InputError when it is an input (or an input's ``.json`` sidecar,
    through any link), a symbolic link to a file (never written through), a folder, in a folder that does not
    exist, or in one this user cannot write; with ``suffixes``, when its name ends with none of them.
    ``option`` names the option in the fix (``-o``, ``--plot``)."""
    out = Path(out)
    for src in inputs:
        if not isinstance(src, (str, os.PathLike)):
            continue
        src = Path(src)
        for protected in (src, src.with_suffix(".json"), sibling(src, ".json")):
            if protected.exists() and _same_file(out, protected):
                kind = "input" if protected == src else f"sidecar of the input {src}"
                raise InputError(f"{out}: that is the {kind}; writing the {what} there would destroy it: "
                                 f"choose another {option}")
    if planted_link(out):
        raise InputError(f"{out}: is a symbolic link; ktrace never writes through one (it could point anywhere): "
                         f"remove it or choose another {option}")
    if out.is_dir():
        example = out / ("out" + (suffixes[0] if suffixes else ".perfetto-trace"))
        raise InputError(f"{out}: cannot write the {what} there: it is a folder; give a file name, e.g. {option} "
                         f"{example}")
    if suffixes and not out.name.lower().endswith(tuple(suffixes)):
        raise InputError(f"{out}: {option} writes one of {', '.join(suffixes)} (by the name's ending); give the "
                         f"{what} such a name, e.g. {option} {out.with_name(out.stem + suffixes[0])}")
    parent = out.parent
    if not parent.is_dir():
        raise InputError(f"{out}: the folder {parent} does not exist; create it (mkdir -p {parent}) or choose "
                         f"another {option}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{out}: cannot write in the folder {parent} (permission denied); choose another {option}")
    if out.exists() and not os.access(out, os.W_OK) and not os.access(parent, os.W_OK):
        raise InputError(f"{out}: cannot replace it (permission denied); choose another {option}")
    return out


def check_outputs(outputs, inputs) -> None:
    """Every output of a command checked before any work (``check_output``): outputs is ``[(path, what,
    option, suffixes)]``, inputs every file the command reads. Two outputs on one file are refused too."""
    seen: dict = {}
    for path, what, option, suffixes in outputs:
        out = check_output(path, inputs, what, option, suffixes)
        for other, opt in seen.items():
            if other.exists() and out.exists() and _same_file(out, other) or os.path.abspath(out) == os.path.abspath(other):
                raise InputError(f"{out}: {opt} and {option} would both write it; give each its own file")
        seen[out] = option


def cannot_write(out, e: OSError, what: str = "output") -> InputError:
    """The InputError for an OS error while writing ``out`` (a full disk, a file size limit, permissions)."""
    reason = e.strerror or str(e)
    hint = {28: "free some space or write elsewhere", 27: "the file size limit (ulimit -f) is too low",
            13: "choose a folder you can write", 30: "the file system is read-only: write elsewhere",
            21: "give a file name, not a folder"}.get(e.errno or 0, "choose another -o")
    return InputError(f"{out}: cannot write the {what} ({reason}); {hint}")


def write_atomically(path, data: bytes) -> Path:
    """Writes ``data`` to ``path`` through a temporary file created exclusively beside it (a planted file or
    symlink is never written through), renamed into place: a reader never sees half a file."""
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            mask = os.umask(0o022)
            os.umask(mask)
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), 0o666 & ~mask)
            f.write(data)
        os.replace(name, path)
    except BaseException:
        try:
            os.unlink(name)
        except OSError:
            pass
        raise
    return path
