"""Where a command may write: checked before any work, so that ``-o`` never destroys an input and a bad path
fails at once with a message naming the file and the fix (exit 2), not a traceback after minutes of decoding.
"""

from __future__ import annotations

import functools
import glob
import gzip
import os
import re
import stat
import tempfile
import zlib
from pathlib import Path
from typing import Iterable

from .errors import InputError
from .filetypes import BUFFER_SUFFIXES, is_iket, is_iket_pftrace, is_proton, sibling, special_kind

__all__ = ["check_output", "check_outputs", "planted_link", "cannot_write", "write_atomically", "write_file",
           "append_file", "standard_stream", "PLOT_SUFFIXES", "temporary_folder", "temporary_root",
           "temporary_folders_in", "captured_kind", "replace_allowed", "refuse_replacing", "TRACE_OUTPUTS"]

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


def standard_stream(path) -> bool:
    """True when ``path`` is this process's own stdout or stderr (``/dev/stdout``, ``/dev/fd/2``, the terminal
    or pipe they are): writing there is printing, it never blocks on a missing reader."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    for fd in (1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


# What the outputs that write a Perfetto trace call it: one of them may replace a Perfetto trace (the same
# command run again); any other output may not.
TRACE_OUTPUTS = ("trace", "annotated trace", "merged trace")
_HEAD_BYTES = 1 << 16
# A launch sidecar: ktrace's schema, or (an older one, with no schema) two of the keys only a sidecar has.
_SIDECAR_SCHEMA = re.compile(rb'"schema"\s*:\s*"ktrace\.launch/')
_KTRACE_SCHEMA = re.compile(rb'"schema"\s*:\s*"ktrace\.')
_SIDECAR_KEYS = re.compile(rb'"(event_names|group_names|num_blocks|num_groups|group_of_thread|grid|block|'
                           rb'records_per_lane_capacity|anchor_ns|num_sms|kernel|producer)"\s*:')
# The captures whose sidecar is ``<stem>.json`` beside them.
_CAPTURE_ENDINGS = (*BUFFER_SUFFIXES, ".chrome_trace", ".chrome_trace.gz", ".trace.json", ".trace.json.gz")
_replaceable: set[str] = set()  # the outputs --force lets replace a capture, a sidecar or a trace


def replace_allowed(paths) -> None:
    """Lets the outputs at ``paths`` replace a capture, a sidecar or a trace found there (``--force``): every
    ``check_output`` of this process for one of them skips ``captured_kind``."""
    _replaceable.update(os.path.abspath(p) for p in paths)


def captured_kind(path) -> str | None:
    """What ``path`` holds when it is a capture, a sidecar or a trace, by its content (a buffer by its name too):
    "a profiler buffer", "a launch sidecar", "a Triton Proton trace", "an NVIDIA IKET trace", "a Perfetto
    trace"; None for anything else (ktrace's own reports: a JSON whose schema is ``ktrace.*`` other than the
    launch's), a missing or empty file, a folder, a FIFO or a device (never opened: it could block)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode) or os.path.getsize(path) == 0:
            return None
    except (OSError, ValueError):
        return None
    name = os.path.basename(str(path)).lower()
    head = b""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as g:
                head = g.read(_HEAD_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error):
        pass
    if head.startswith(b"\x93NUMPY") or name.endswith(BUFFER_SUFFIXES) or _raw_buffer(path, head):
        return "a profiler buffer"
    if is_iket(path) or (_protobuf_trace(head) and is_iket_pftrace(path)):
        return "an NVIDIA IKET trace"
    if is_proton(path):
        return "a Triton Proton trace"
    if head.lstrip()[:1] == b"{":
        if _SIDECAR_SCHEMA.search(head):
            return "a launch sidecar"
        if not _KTRACE_SCHEMA.search(head) and (_capture_beside(path) or len(
                {m.group(1) for m in _SIDECAR_KEYS.finditer(head)}) >= 2):
            return "a launch sidecar"  # one of another producer's, or an older one: no ktrace report
        return None
    if _protobuf_trace(head):
        return "a Perfetto trace"
    return None


def _raw_buffer(path, head: bytes) -> bool:
    """True when ``head`` starts a raw profiler buffer whatever its name: little-endian 64-bit words, the
    first ``num_blocks | num_groups << 32`` (1 to 2^31 blocks, 1 to 1,024 groups), then a whole number of
    records per lane, with or without ktrace's trailer (one overflow count per lane and the timer anchor).
    Its size is the file's, or a gzip file's own record of its inflated size."""
    if len(head) < 16:
        return False
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            if f.read(2) == b"\x1f\x8b":
                f.seek(-4, os.SEEK_END)
                size = int.from_bytes(f.read(4), "little")  # the inflated size, modulo 2^32
    except (OSError, ValueError):
        return False
    blocks, groups = int.from_bytes(head[:4], "little"), int.from_bytes(head[4:8], "little")
    if size % 8 or not (1 <= blocks <= 1 << 31 and 1 <= groups <= 1024):
        return False
    lanes, records = blocks * groups, size // 8 - 1
    return records >= lanes and (records % lanes == 0 or (records - lanes - 1) % lanes == 0)


def _capture_beside(path) -> Path | None:
    """The capture whose sidecar ``path`` (``<stem>.json``) is, if one is beside it."""
    p = Path(str(path))
    if not p.name.lower().endswith(".json"):
        return None
    stem = p.name[:-5]
    return next((c for c in (p.with_name(stem + e) for e in _CAPTURE_ENDINGS) if c.is_file()), None)


def _protobuf_trace(head: bytes) -> bool:
    """True when ``head`` starts as a Perfetto ``Trace``: packets (field 1, length-delimited), each holding a
    field with a valid tag, framed one after the other (up to three, as far as ``head`` goes)."""
    i = 0
    for _ in range(3):
        if i >= len(head):
            return i > 0
        if head[i] != 0x0A:
            return False
        n, i = _varint(head, i + 1)
        if n is None or n == 0:
            return False
        tag, _ = _varint(head, i)
        if tag is None or tag >> 3 == 0 or tag & 7 not in (0, 1, 2, 5):
            return False
        i += n
    return True


def _varint(b: bytes, i: int) -> tuple[int | None, int]:
    value = shift = 0
    while i < len(b) and shift < 64:
        value |= (b[i] & 0x7F) << shift
        i += 1
        if not b[i - 1] & 0x80:
            return value, i
        shift += 7
    return None, i


def _replacing(out: Path, what: str, option: str) -> None:
    """Raises InputError when ``out`` holds a capture, a sidecar or a trace that this output would replace
    (a trace output may replace a Perfetto trace: the same command run again), unless ``--force`` allowed it."""
    if os.path.abspath(out) in _replaceable:
        return
    kind = captured_kind(out)
    if kind is None or (kind == "a Perfetto trace" and what in TRACE_OUTPUTS):
        return
    capture = _capture_beside(out) if kind == "a launch sidecar" else None
    of = f" (of {capture})" if capture else ""
    raise InputError(f"{out}: holds {kind}{of}; writing the {what} there would replace "
                     f"it: choose another {option}, or add --force to replace it")


def refuse_replacing(outputs) -> None:
    """InputError when an output (as ``check_outputs`` takes them) would replace a capture, a sidecar or a trace
    that is not its own kind of output (``captured_kind``), unless ``replace_allowed`` named it."""
    for path, what, option, _suffixes, *stream_ok in outputs:
        if not (stream_ok and stream_ok[0] and standard_stream(path)):
            _replacing(Path(path), what, option)


def check_output(out, inputs=(), what: str = "output", option: str = "-o", suffixes=None,
                 stream_ok: bool = False, replacing: bool = True) -> Path:
    """Returns ``out`` as a Path, or raises InputError when it is an input (or an input's ``.json`` sidecar,
    through any link, a hard link included), a symbolic link to a file (never written through), a folder, a
    FIFO, a device or a socket (``stream_ok``: except this process's own stdout or stderr), in a folder that does
    not exist, or in one this user cannot write; with ``suffixes``, when its name ends with none of them; when
    it holds another capture, a sidecar or a trace (``captured_kind``; a trace output may replace a Perfetto
    trace) unless ``replace_allowed`` (``--force``) named it (``replacing=False``: that is checked later, by
    ``refuse_replacing``). ``option`` names the option in the fix (``-o``,
    ``--plot``). A FIFO or device is never opened: it never blocks."""
    out = Path(out)
    for src in inputs:
        if not isinstance(src, (str, os.PathLike)):
            continue
        src = Path(src)
        for protected in (src, src.with_suffix(".json"), sibling(src, ".json")):
            if protected.exists() and _same_file(out, protected):
                kind = "input" if protected == src else f"sidecar of the input {src}"
                if os.path.abspath(out) != os.path.abspath(protected):  # a link to it, a glob's match
                    kind = f"{kind} {protected} (the same file)" if protected == src else f"{kind} (the same file)"
                raise InputError(f"{out}: that is the {kind}; writing the {what} there would destroy it: "
                                 f"choose another {option}")
    if planted_link(out):
        raise InputError(f"{out}: is a symbolic link; ktrace never writes through one (it could point anywhere): "
                         f"remove it or choose another {option}")
    kind = special_kind(out)
    if kind and not (stream_ok and standard_stream(out)):
        raise InputError(f"{out}: is {kind}, not a regular file; ktrace writes the {what} to a regular file only "
                         f"(a pipe or device could block or take part of it): choose another {option}")
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
    if replacing and not (stream_ok and standard_stream(out)):
        _replacing(out, what, option)
    return out


def check_outputs(outputs, inputs, replacing: bool = True) -> None:
    """Every output of a command checked before any work (``check_output``): outputs is ``[(path, what,
    option, suffixes)]`` or ``[(path, what, option, suffixes, stream_ok)]``, inputs every file the command reads.
    Two outputs on one file are refused too. ``replacing=False``: another capture, sidecar or trace where an
    output goes is left to ``refuse_replacing``."""
    seen: dict = {}
    for path, what, option, suffixes, *stream_ok in outputs:
        out = check_output(path, inputs, what, option, suffixes, bool(stream_ok and stream_ok[0]), replacing)
        for other, opt in seen.items():
            if other.exists() and out.exists() and _same_file(out, other) or os.path.abspath(out) == os.path.abspath(other):
                raise InputError(f"{out}: {opt} and {option} would both write it; give each its own file")
        seen[out] = option


def cannot_write(out, e: OSError, what: str = "output") -> InputError:
    """The InputError for an OS error while writing ``out`` (a full disk, a file size limit, permissions)."""
    reason = e.strerror or str(e)
    hint = {28: "free some space or write elsewhere", 27: "the file size limit (ulimit -f) is too low",
            13: "choose a folder you can write", 30: "the file system is read-only: write elsewhere",
            21: "give a file name, not a folder"}.get(e.errno or 0, f"write the {what} elsewhere")
    return InputError(f"{out}: cannot write the {what} ({reason}); {hint}")


def write_atomically(path, data: bytes, what: str = "output") -> Path:
    """Writes ``data`` to ``path`` atomically (``write_file``); returns the path."""
    write_file(path, [data], what)
    return Path(path)


def write_file(path, chunks: Iterable[bytes], what: str = "output") -> int:
    """The one way ktrace writes a file: byte chunks into a temporary file created exclusively beside ``path``
    (O_EXCL, a fresh random name: a planted file or symlink is never written through), renamed into place at
    the end, so a reader never sees half a file and an error part-way (a full disk) leaves none. Temporary files
    a killed run left behind are removed first. Returns the bytes written; an OSError while writing is an
    InputError naming the file and the fix (one raised by ``chunks`` itself, reading an input, is not)."""
    path = Path(path)
    _remove_stale_temps(path)
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.tmp{os.getpid()}.", suffix=".part")
    except OSError as e:
        raise cannot_write(path, e, what) from None
    tmp = Path(name)
    size = 0
    writing = False
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
        os.replace(tmp, path)
    except OSError as e:
        if not writing:
            raise
        raise cannot_write(path, e, what) from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return size


def append_file(path, text: str, what: str = "output") -> None:
    """Appends ``text`` to ``path`` (e.g. $GITHUB_STEP_SUMMARY): printed when ``path`` is this process's stdout
    or stderr; else the file's bytes and the new text written through ``write_file`` (atomic: a full disk leaves
    the file as it was). A FIFO, device or socket is refused without being opened."""
    import sys

    data = text.encode("utf-8")
    if standard_stream(path):
        for stream in (sys.stdout, sys.stderr):
            try:
                same = os.path.samestat(os.fstat(stream.fileno()), os.stat(path))
            except (OSError, ValueError, AttributeError):
                continue
            if same:
                stream.write(text)
                stream.flush()
                return
    kind = special_kind(path)
    if kind:
        raise InputError(f"{path}: is {kind}, not a regular file; ktrace writes the {what} to a regular file only")
    old = None
    if os.path.lexists(path):
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO put there since: no wait
        except OSError as e:
            raise cannot_write(path, e, what) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InputError(f"{path}: is not a regular file; ktrace writes the {what} to a regular file only")
        old = os.fdopen(fd, "rb")

    def pieces():
        if old is not None:
            with old:
                while chunk := old.read(1 << 20):
                    yield chunk
        yield data

    write_file(path, pieces(), what)


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
