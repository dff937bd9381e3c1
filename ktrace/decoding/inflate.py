"""Reading an input file with bounds: only a regular file (a FIFO would wait for a writer forever, a device
never end), and a gzip stream inflated a piece at a time, refused the moment it passes its limit, so that a
small file cannot make the reader hold more than that limit."""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path

from ..core.errors import InputError

__all__ = ["open_regular", "inflated_pieces", "PIECE_BYTES"]

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
            data = d.unconsumed_tail
            if d.eof:  # the next member, if any
                data, fed = d.unused_data + data, False
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    except zlib.error as e:
        raise InputError(f"{path}: not a readable gzip file ({e}): a damaged copy; {fix}") from None
    except OSError as e:
        raise InputError(f"{path}: cannot be read ({e}); {fix}") from None
    if fed:
        raise InputError(f"{path}: the gzip stream ends early: a truncated copy; {fix}")
