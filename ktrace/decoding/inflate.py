"""Reading an input file with bounds: only a regular file (a FIFO would wait for a writer forever, a device
never end), and a gzip stream inflated a piece at a time, refused the moment it passes its limit, so that a
small file cannot make the reader hold more than that limit."""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path

from ..core.errors import InputError

__all__ = ["open_regular", "inflated_pieces", "read_bounded", "PIECE_BYTES"]

PIECE_BYTES = 16 << 20  # the most one inflate step returns


def open_regular(path: Path, what: str, fix: str):
    """The file open for reading (binary), or InputError when it is missing or not a regular file.

    what: what the file should hold ("a Proton trace"); fix: what to do instead."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO opens without a writer
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot be read ({e.strerror}); {fix}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, device or socket)"
        raise InputError(f"{path}: {kind}: {what} is read from a file; save it to a file and pass that")
    return os.fdopen(fd, "rb")


def inflated_pieces(path: Path, f, limit: int, why: str, fix: str):
    """The gzip stream of ``f`` (one member or several, zero padding allowed) inflated, in pieces of at most
    PIECE_BYTES; InputError once more than ``limit`` bytes come out (``why`` says the limit), on damage, or
    when the stream ends early. ``fix``: what to do about a damaged or cut copy."""
    total = 0
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data, fed = b"", False  # fed: the current member has begun
    try:
        while True:
            if not fed:
                data = data.lstrip(b"\0")  # zeros may pad a gzip file after a member, as gzip(1) allows
            if not data:
                data = f.read(1 << 20)
                if not data:
                    break
                continue
            piece = d.decompress(data, min(PIECE_BYTES, limit + 1 - total))
            fed = True
            total += len(piece)
            if total > limit:
                raise InputError(f"{path}: inflates to more than {limit:,} bytes ({why})")
            if piece:
                yield piece
            if d.eof:  # the next member, if any: the input past this member's end is unused_data alone (after
                # a step cut short by max_length, unconsumed_tail holds the same bytes again)
                data, fed = d.unused_data, False
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                data = d.unconsumed_tail
    except zlib.error as e:
        raise InputError(f"{path}: not a readable gzip file ({e}): a damaged copy; {fix}") from None
    except OSError as e:
        raise InputError(f"{path}: cannot be read ({e}); {fix}") from None
    if fed:
        raise InputError(f"{path}: the gzip stream ends early: a truncated copy; {fix}")


def _size_words(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 and n % (1 << 30) == 0 else f"{n >> 20} MiB"


def read_bounded(path: Path, what: str, fix: str, *, max_bytes: int, ratio: int, min_limit: int,
                 too_big: str) -> bytes:
    """A whole input file's bytes, inflated when gzip-compressed: only a regular file, its size checked before
    it is read, and a gzip stream inflated a piece at a time and refused as soon as it passes
    min(max_bytes, max(min_limit, ratio x the file)).

    what: what the file should hold ("a Proton trace"); too_big: what a file over the bound is not, and what to
    do ("not one kernel's Proton trace (profile one kernel per Proton session)")."""
    most = _size_words(max_bytes)
    not_one = too_big.split(" (")[0]
    with open_regular(path, what, fix) as f:
        size = os.fstat(f.fileno()).st_size
        try:
            gz = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            if not gz and size > max_bytes:
                raise InputError(f"{path}: {size:,} bytes, more than {most}: {too_big}")
            if not gz:
                raw = f.read(max_bytes + 1)
        except OSError as e:
            raise InputError(f"{path}: cannot be read ({e}); {fix}") from None
        if gz:
            limit = min(max_bytes, max(min_limit, ratio * size))
            why = f"{ratio} times the file, at most {most}: a gzip bomb, or {not_one}; check what it holds with gunzip -l"
            # the pieces, joined once at the end: a refused stream never holds more than its limit
            return b"".join(list(inflated_pieces(path, f, limit, why, fix)))
    if len(raw) > max_bytes:  # it grew while read
        raise InputError(f"{path}: more than {most}: {not_one}")
    return raw
