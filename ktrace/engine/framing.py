"""A trace's protobuf framing, walked before it is trusted: a file cut short is refused, not half-read.

A Perfetto trace is a ``Trace`` message: a run of fields, each a tag (varint) and, for the packets
(field 1, length-delimited), a varint length and that many bytes. The trace processor silently drops a last
packet that the file cuts short, so an analysis (and a CI gate) would run on part of the slices. ``Framing``
follows the fields over the bytes as they stream to the engine (decompressing gzip first) and ``finish``
raises InputError when the last field is cut or a length runs past the end.

The walk is one step per packet (a field header), not per byte: a few microseconds per thousand packets.
Bounded by what a trace can hold, before the engine sees the bytes: gzip is inflated a megabyte at a time, a
stream that expands more than MAX_RATIO times is refused (a gzip bomb), and so are a packet larger than
MAX_PACKET_BYTES and a run of packets too small to hold a slice.
"""

from __future__ import annotations

import zlib

from ..core.errors import InputError

__all__ = ["Framing", "MAX_PACKET_BYTES", "MAX_RATIO"]

_GZIP_MAGIC = b"\x1f\x8b"
# A trace packet holds one event or a batch of interned names: far below this. A larger one is damage.
MAX_PACKET_BYTES = 256 << 20
# A ktrace trace compresses 5-30 times; a stream inflating more than this is not one.
MAX_RATIO = 200
_RATIO_AFTER = 4 << 20  # ... once this much is inflated (a tiny trace's ratio means nothing)
_PIECE = 1 << 20        # inflated at a time: memory stays bounded whatever a chunk expands to
# Packets of a trace of slices average tens of bytes; a million of fewer than this is not one.
_MIN_MEAN_PACKET = 6


def _varint(buf: bytes, i: int) -> tuple[int, int] | None:
    """(value, next index) of the varint at i, or None when buf ends inside it."""
    value = shift = 0
    while i < len(buf):
        b = buf[i]
        value |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return value, i
        shift += 7
    return None


class Framing:
    """Feed the trace's chunks in order (``feed``), then ``finish``: InputError naming what is cut."""

    def __init__(self, name: str):
        self.name = name
        self._gzip = None
        self._started = False
        self._skip = 0          # payload bytes of the current field still to come
        self._head = b""        # a field header split across chunks
        self._offset = 0        # bytes of the (decompressed) trace seen
        self._field_at = 0      # where the current field began
        self._packets = 0
        self._bad = ""          # why the bytes are not a trace, once seen (reported by finish)
        self._compressed = 0    # gzip bytes inflated so far

    def feed(self, chunk: bytes) -> None:
        """Walk ``chunk`` (the next bytes of the file); InputError at once for a bomb (a stream that inflates
        too far, a packet too large, packets too small), before the chunk goes on to the engine."""
        if self._bad:
            return
        if not self._started:
            self._started = True
            if chunk.startswith(_GZIP_MAGIC):
                self._gzip = zlib.decompressobj(wbits=31)
        if self._gzip is None:
            self._walk(chunk)
            return
        data = chunk
        while data and not self._gzip.eof:
            try:
                piece = self._gzip.decompress(data, _PIECE)
            except zlib.error:
                self._bad = f"{self.name}: a damaged gzip stream, not a readable trace"
                return
            self._compressed += len(data) - len(self._gzip.unconsumed_tail)
            data = self._gzip.unconsumed_tail
            if self._offset + len(piece) > max(_RATIO_AFTER, MAX_RATIO * self._compressed):
                raise InputError(f"{self.name}: the gzip stream inflates more than {MAX_RATIO} times "
                                 f"({(self._offset + len(piece)) >> 20:,} MiB from {self._compressed:,} bytes so "
                                 "far): not a trace ktrace wrote (a gzip bomb?); refused before loading it")
            self._walk(piece)
            if self._bad:
                return

    def _walk(self, data: bytes) -> None:
        start = self._offset
        self._offset += len(data)
        i = 0
        if self._skip:
            step = min(self._skip, len(data))
            self._skip -= step
            i = step
        if self._head:
            data, start, i = self._head + data[i:], start + i - len(self._head), 0
            self._head = b""
        n = len(data)
        while i < n:
            # The common case first, inline: a packet (field 1, length-delimited, tag 0x0A) of under 16 KiB
            # (a length of one or two varint bytes) that ends inside this piece. Every millionth-or-so packet,
            # where the packets' mean size is checked, goes the general way below.
            packets, last = self._packets, -1
            while i + 3 <= n and data[i] == 0x0A and (packets + 1) & 0xFFFFF:
                b1 = data[i + 1]
                if b1 < 0x80:
                    end = i + 2 + b1
                else:
                    b2 = data[i + 2]
                    if b2 >= 0x80:
                        break
                    end = i + 3 + ((b1 & 0x7F) | (b2 << 7))
                if end > n:
                    break
                packets += 1
                last, i = i, end
            self._packets = packets
            if last >= 0:
                self._field_at = start + last
            if i >= n:
                return
            at = i
            tag = _varint(data, i)
            if tag is None:
                self._head = data[at:]
                return
            key, i = tag
            wire = key & 7
            if wire == 2:
                length = _varint(data, i)
                if length is None:
                    self._head = data[at:]
                    return
                size, i = length
            elif wire == 0:
                v = _varint(data, i)
                if v is None:
                    self._head = data[at:]
                    return
                size, i = 0, v[1]
            elif wire in (1, 5):
                size = 8 if wire == 1 else 4
            else:
                self._bad = (f"{self.name}: not a Perfetto trace from byte {start + at:,} on (field wire type "
                             f"{wire}): damaged or not a trace")
                return
            self._field_at = start + at
            if size > MAX_PACKET_BYTES:
                raise InputError(f"{self.name}: a field of {size:,} bytes at byte {start + at:,}: larger than any "
                                 f"trace packet (at most {MAX_PACKET_BYTES >> 20} MiB); damaged, or not a trace")
            self._packets += wire == 2
            if not self._packets & 0xFFFFF and self._packets and start + i < _MIN_MEAN_PACKET * self._packets:
                raise InputError(f"{self.name}: {self._packets:,} packets in {start + i:,} bytes: too small to "
                                 "hold slices (a trace ktrace wrote has tens of bytes per packet); damaged, or "
                                 "not a trace")
            if i + size > n:
                self._skip = i + size - n
                return
            i += size

    def finish(self) -> int:
        """The number of packets; InputError when the trace ends inside a field."""
        if self._bad:
            raise InputError(self._bad)
        if self._gzip is not None and not self._gzip.eof:
            raise InputError(f"{self.name}: the gzip stream is cut short (an incomplete copy?); convert the buffer "
                             "again or copy the whole file")
        if self._skip or self._head:
            missing = f"{self._skip:,} bytes missing" if self._skip else "cut inside its header"
            raise InputError(f"{self.name}: truncated: the field at byte {self._field_at:,} runs past the end of "
                             f"the trace ({missing}; {self._packets:,} packets before it); the file was cut short "
                             "(an incomplete copy?): convert the buffer again or copy the whole file")
        return self._packets
