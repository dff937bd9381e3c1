"""Reading a profiler buffer: raw little-endian uint64 files (``.bin``, or gzip-compressed ``.bin.gz``), .npy
files, or anything array-like."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..core.errors import InputError
from ..core.filetypes import TRACE_SUFFIXES, is_gzip_buffer, is_iket_pftrace, is_trace, json_found
from .inflate import inflated_pieces, open_regular
from .layouts import split_header
from ..core.records import frozen

__all__ = ["Buffer", "load_buffer", "parse_header"]

_MAP_MIN_BYTES = 64 << 20
# A compressed buffer is inflated in memory: at most this much (a bomb stops here, not in swap); a larger
# buffer is passed as its .bin, which is mapped, not read.
MAX_GZIP_BUFFER_BYTES = 512 << 20
# A header may claim at most this many lanes, plus so many per byte of the .bin.gz (an empty lane compresses to
# about a hundredth of a byte; a lane with records to several bytes)
GZIP_LANES_FREE, GZIP_LANES_PER_BYTE = 1 << 20, 16


@frozen
class Buffer:
    """A buffer's words (uint64; word 0 is the header) and where they came from."""

    words: np.ndarray
    name: str
    path: Path | None = None
    file_offset: int | None = None  # byte offset of word 0 in ``path`` when the words are mapped from it


def load_buffer(source, name: str | None = None) -> Buffer:
    """A Buffer from a path (``.bin`` raw uint64 LE, ``.npy``), bytes, a numpy array, a torch.Tensor (CPU or
    CUDA, copied to the host once), or any object with ``__dlpack__`` (host memory) or ``__array__``."""
    if isinstance(source, Buffer):
        return source
    if isinstance(source, (str, Path)):
        return _load_path(Path(source))
    label = name or "<buffer>"
    if isinstance(source, (bytes, bytearray, memoryview)):
        raw = bytes(source)
        if len(raw) % 8:
            raise InputError(f"{label}: {len(raw)} bytes is not a whole number of 8-byte records (truncated copy?)")
        return Buffer(np.frombuffer(raw, dtype="<u8").astype(np.uint64, copy=False), label)
    if hasattr(source, "detach") and hasattr(source, "cpu"):  # a torch tensor, without importing torch
        label = name or _tensor_label(source)
        return Buffer(_as_words(_tensor_on_host(source, label), label), label)
    if not isinstance(source, np.ndarray) and hasattr(source, "__dlpack__") and not hasattr(source, "__array__"):
        return Buffer(_as_words(_from_dlpack(source, label), label), label)
    try:
        arr = np.asarray(source)
    except Exception as e:  # noqa: BLE001 - any conversion failure is the caller's input problem
        raise InputError(f"{label}: cannot be read as an array of uint64 records ({e})") from None
    return Buffer(_as_words(arr, label), label)


_TENSOR_DTYPES = ("int64", "uint64", "int32", "uint32")


def _tensor_label(t) -> str:
    return f"<torch.Tensor on {getattr(t, 'device', '?')}>"


def _tensor_on_host(t, label: str) -> np.ndarray:
    """A torch tensor's words as a host numpy array: one device-to-host copy for a GPU tensor (FlashInfer's
    profiler buffer is an int64 CUDA tensor), none for a contiguous CPU one."""
    t = t.detach()
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in _TENSOR_DTYPES:
        raise InputError(f"{label}: dtype torch.{dtype} is not an integer buffer; pass the int64 or uint64 "
                         "profiler buffer")
    if dtype == "uint64":
        # numpy() of a uint64 tensor is refused by some torch versions; the same bits as int64 are not
        import sys

        torch = sys.modules.get("torch")
        if torch is not None and hasattr(t, "view"):
            t = t.view(torch.int64)
    if getattr(getattr(t, "device", None), "type", "cpu") != "cpu":
        t = t.cpu()  # the one copy: the whole buffer, device to host
    return np.asarray(t.contiguous().numpy())


def _from_dlpack(obj, label: str) -> np.ndarray:
    try:
        dev = obj.__dlpack_device__()[0] if hasattr(obj, "__dlpack_device__") else 1
    except Exception:  # noqa: BLE001 - a broken producer is the caller's input problem
        dev = 1
    if int(dev) not in (1, 3):  # kDLCPU, kDLCUDAHost
        raise InputError(f"{label}: the array is on a device (DLPack device type {int(dev)}); copy it to the host "
                         "first (a torch.Tensor is copied for you; for others: .get(), .cpu() or numpy.asarray)")
    try:
        return np.from_dlpack(obj)
    except Exception as e:  # noqa: BLE001
        raise InputError(f"{label}: cannot be read through DLPack as uint64 records ({e})") from None


def _as_words(arr: np.ndarray, label: str) -> np.ndarray:
    if arr.dtype.kind not in "iu":
        raise InputError(f"{label}: dtype {arr.dtype} is not an integer buffer; pass the uint64 profiler buffer")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))  # a big-endian .npy holds the same numbers, byte-swapped
    if arr.dtype.itemsize == 8:
        return arr.reshape(-1).view(np.uint64)
    if arr.dtype.itemsize == 4 and arr.size % 2 == 0:
        # A uint32/int32 view of the same memory: pairs of words make one record, little-endian.
        return np.ascontiguousarray(arr.reshape(-1)).view(np.uint64)
    raise InputError(f"{label}: dtype {arr.dtype} cannot hold 64-bit records; pass the uint64 profiler buffer")


def _load_path(path: Path) -> Buffer:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a profiler buffer")
    if path.suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as e:
            raise InputError(f"{path}: not a readable .npy file ({e})") from None
        words = _as_words(arr, str(path))
        mapped = isinstance(arr, np.memmap) and arr.dtype.itemsize == 8 and arr.dtype.byteorder in "<=|"
        return Buffer(words, str(path), path, arr.offset if mapped else None)
    if is_gzip_buffer(path):
        _refuse_json(path)
        return _load_gzip(path)
    size = path.stat().st_size
    if path.name.lower().endswith(TRACE_SUFFIXES) or (size % 8 and is_trace(path)):
        if is_iket_pftrace(path):
            raise InputError(f"{path}: NVIDIA IKET's Perfetto trace, not a profiler buffer: ktrace reads IKET's JSON "
                             "trace; give the iket_pid_<pid>.trace.json run-iket wrote beside it (run-iket ... "
                             "profile --postprocess all)")
        raise InputError(f"{path}: a Perfetto trace, not a profiler buffer; analyze, query or view it (ktrace "
                         f"analyze {path}), or convert the buffer it came from")
    _refuse_json(path)
    if size % 8:
        raise InputError(f"{path}: {size} bytes is not a whole number of 8-byte records (truncated copy?)")
    if size >= _MAP_MIN_BYTES:
        # Mapped, not read: a huge buffer is decoded a range of lanes at a time and never held whole.
        return Buffer(np.memmap(path, dtype="<u8", mode="r"), str(path), path, 0)
    words = np.fromfile(path, dtype="<u8")
    return Buffer(words.astype(np.uint64, copy=False), str(path), path)


def _refuse_json(path: Path) -> None:
    """InputError naming what a JSON file is (IKET's trace, a Chrome trace, a sidecar) instead of decoding its
    text as records ("header says 1532713819 blocks")."""
    found = json_found(path)
    if found:
        raise InputError(f"{path}: {found[0]}, not a profiler buffer; {found[1]}")


def _load_gzip(path: Path, limit: int = MAX_GZIP_BUFFER_BYTES) -> Buffer:
    """A .bin.gz inflated a piece at a time into one array, its header checked as soon as it is out: a header
    claiming more lanes than the file could hold is refused before the rest is inflated. The array is reserved
    at the limit and never copied: only the pages filled are taken."""
    fix = "pass the raw .bin or a whole .bin.gz"
    with open_regular(path, "a profiler buffer", fix) as f:
        size = os.fstat(f.fileno()).st_size
        out, first = None, b""  # a stream inflated in one piece (up to PIECE_BYTES) is read where it lies
        n = 0
        why = ("the most a .bin.gz may inflate to; decompress it yourself (gunzip -k) and pass the .bin, which is "
               "read without holding it in memory")
        for piece in inflated_pieces(path, f, limit, why, fix):
            end = n + len(piece)
            if n < 8 <= end:
                _check_claim(path, int.from_bytes((first + piece)[:8], "little"), size, limit)
            if out is None and n == 0:
                first = piece
            else:
                if out is None:
                    out = np.zeros(limit, np.uint8)  # calloc: fresh pages, zero, not yet memory
                    out[:n] = np.frombuffer(first, np.uint8)
                    first = b""
                # An empty stretch is never written: the pages of the zeroed reservation read as zeros and take
                # no memory until written, so a .bin.gz of empty slots costs memory for its records only.
                arr = np.frombuffer(piece, np.uint8)
                if arr.any():
                    out[n:end] = arr
            n = end
    if n % 8:
        raise InputError(f"{path}: inflates to {n} bytes, not a whole number of 8-byte records (truncated copy?)")
    words = np.frombuffer(first, "<u8") if out is None else out[:n].view("<u8")
    return Buffer(words.astype(np.uint64, copy=False), str(path), path)


def _check_claim(path: Path, header: int, size: int, limit: int) -> None:
    """InputError when a .bin.gz's header claims more lanes than its file or the inflate limit could hold."""
    nb, ng = split_header(header)
    lanes = nb * ng
    fix = ("a damaged file, or a header never written (then gunzip -k and pass the .bin with --num-blocks and "
           "--num-groups)")
    if lanes > GZIP_LANES_FREE + GZIP_LANES_PER_BYTE * size:
        raise InputError(f"{path}: its header claims {nb:,} blocks x {ng:,} groups = {lanes:,} lanes, more than a "
                         f"{size:,}-byte .bin.gz can hold (at most {GZIP_LANES_FREE:,} + {GZIP_LANES_PER_BYTE} per "
                         f"byte): {fix}")
    if 8 * (lanes + 1) > limit:
        raise InputError(f"{path}: its header claims {lanes:,} lanes, {8 * (lanes + 1):,} bytes at least, more than "
                         f"the {limit:,} bytes a .bin.gz may inflate to; gunzip -k and pass the .bin (read without "
                         "holding it in memory)")


def parse_header(buf: Buffer, num_blocks: int | None = None, num_groups: int | None = None) -> tuple[int, int]:
    """(num_blocks, num_groups) from word 0, checked against the buffer's length.

    Explicit values override the header (for a buffer whose header was never written).
    """
    w = buf.words
    if len(w) == 0:
        raise InputError(f"{buf.name}: empty file: a profiler buffer has at least its header word")
    hdr = int(w[0])
    hdr_blocks, hdr_groups = split_header(hdr)
    nb = num_blocks if num_blocks is not None else hdr_blocks
    ng = num_groups if num_groups is not None else hdr_groups
    fix = "pass --num-blocks and --num-groups if the header was never written"
    if nb <= 0 or ng <= 0:
        raise InputError(
            f"{buf.name}: impossible header {hdr:#018x} (num_blocks={nb}, num_groups={ng}); {fix}"
        )
    slots = len(w) - 1
    if nb * ng > slots:
        raise InputError(
            f"{buf.name}: header says {nb} blocks x {ng} groups = {nb * ng} lanes, but the buffer has only "
            f"{slots} record slots (not a profiler buffer, a truncated copy, or a wrong header); {fix}"
        )
    return nb, ng
