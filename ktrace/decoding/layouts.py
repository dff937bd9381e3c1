"""The buffer format, in one place: the header word, the records and their tags, ktrace's trailer; and the
tag layouts of the producers ktrace reads, with detection of which one a buffer uses.

A buffer is little-endian uint64 words: word 0 is the header (``num_blocks | num_groups << 32``), then
``capacity`` records per lane, record k of lane ``b * num_groups + g`` at word ``1 + k * lanes + lane``;
ktrace's own header adds a trailer: one overflow count per lane, then the kernel's 64-bit timer anchor.

A record is ``ts_lo << 32 | tag``. Every layout keeps the type in bits 0-1 and the event index from bit 2;
they differ in where the block (or lane) sits and how wide the event field is. Block and group always come
from the record's position; the tag's own block/lane field is only checked against it, which is what tells
the layouts apart.
"""

from __future__ import annotations


import numpy as np

from ..core.errors import InputError
from ..core.records import frozen

__all__ = ["Layout", "LAYOUTS", "detect_layout", "get_layout", "HEADER_WORDS", "header_word", "split_header",
           "record_tag", "record_ts_lo", "record_type", "BEGIN", "END", "INSTANT", "FINALIZE", "buffer_words",
           "trailer_start", "overflow_counts", "timer_anchor", "LAYOUT_TEXT", "TRAILER_TEXT"]

# -- the buffer's words -------------------------------------------------------------------------------------
HEADER_WORDS = 1  # the record area starts at word 1
BEGIN, END, INSTANT, FINALIZE = 0, 1, 2, 3  # record types (tag bits 0-1); FINALIZE where the layout defines it

LAYOUT_TEXT = "buf[0]=num_blocks|num_groups<<32; record k of lane (b,g) at 1+k*nb*ng+b*ng+g"
TRAILER_TEXT = ("then one overflow count per lane at 1+capacity*lanes+lane, then the kernel's 64-bit %globaltimer "
                "anchor at 1+capacity*lanes+lanes")


def header_word(num_blocks: int, num_groups: int) -> int:
    """Word 0 as a producer writes it."""
    return int(num_blocks) | (int(num_groups) << 32)


def split_header(word: int) -> tuple[int, int]:
    """(num_blocks, num_groups) from word 0."""
    return word & 0xFFFFFFFF, word >> 32


def record_tag(raw: np.ndarray) -> np.ndarray:
    """The low 32 bits of each record (uint32): type, event, block/lane, per layout."""
    return (raw & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def record_ts_lo(raw: np.ndarray) -> np.ndarray:
    """The high 32 bits of each record (int64): the low 32 bits of the timer when it was written."""
    return (raw >> np.uint64(32)).astype(np.int64)


def record_type(tag: np.ndarray) -> np.ndarray:
    """Each tag's type field (bits 0-1): BEGIN, END, INSTANT or FINALIZE."""
    return tag & np.uint32(3)


def buffer_words(lanes: int, capacity: int, trailer: bool) -> int:
    """Words of a buffer: the header, ``capacity`` records per lane and, with ``trailer`` (ktrace's header),
    one overflow count per lane and the 64-bit timer anchor."""
    return HEADER_WORDS + capacity * lanes + (lanes + 1 if trailer else 0)


def trailer_start(lanes: int, capacity: int) -> int:
    """Index of the trailer's first word (lane 0's overflow count), just past the record area."""
    return HEADER_WORDS + capacity * lanes


def overflow_counts(words: np.ndarray, lanes: int, capacity: int) -> np.ndarray:
    """Records each lane dropped because it was full (the trailer's per-lane counts)."""
    start = trailer_start(lanes, capacity)
    return words[start:start + lanes]


def timer_anchor(words: np.ndarray) -> int:
    """The trailer's last word: the kernel's 64-bit timer read at launch (0 when it wrote none)."""
    return int(words[-1])


# -- tag layouts --------------------------------------------------------------------------------------------


@frozen
class Layout:
    name: str
    description: str
    event_bits: int
    max_type: int  # highest defined record type (3 = 'finalize' where defined)
    has_sm: bool

    def event(self, tag: np.ndarray) -> np.ndarray:
        return ((tag >> np.uint32(2)) & np.uint32((1 << self.event_bits) - 1)).astype(np.int64)

    def position_matches(self, tag: np.ndarray, block: np.ndarray, group: np.ndarray, num_groups: int) -> np.ndarray:
        """Whether each tag's block/lane field agrees with the block and group given by its position."""
        if self.name == "flashinfer":
            return ((tag >> np.uint32(12)) & np.uint32(0xFFF)) == (block & 0xFFF)
        lane = block * num_groups + group
        if self.name == "flashinfer_legacy":
            return (tag >> np.uint32(12)) == (lane & 0xFFFFF)
        if self.name == "mirage":
            return ((tag >> np.uint32(11)) & np.uint32(0x7FF)) == (lane & 0x7FF)
        raise AssertionError(self.name)

    def sm_field(self, tag: np.ndarray) -> np.ndarray:
        return (tag >> np.uint32(24)).astype(np.int64)


LAYOUTS = {
    "flashinfer": Layout(
        "flashinfer",
        "FlashInfer since PR #1305: type 0-1, event 2-11, block 12-23 (not masked), SM 24-31",
        event_bits=10,
        max_type=2,
        has_sm=True,
    ),
    "flashinfer_legacy": Layout(
        "flashinfer_legacy",
        "FlashInfer before PR #1305 / TVM TIRx / warpscope: type 0-1 (3 = finalize), event 2-11, "
        "block*groups+group 12-31",
        event_bits=10,
        max_type=3,
        has_sm=False,
    ),
    "mirage": Layout(
        "mirage",
        "Mirage MPK: type 0-1, event 2-10, block*groups+group 11-21, per-event counter 22-31",
        event_bits=9,
        max_type=2,
        has_sm=False,
    ),
}


def get_layout(name: str) -> Layout:
    try:
        return LAYOUTS[name]
    except KeyError:
        raise InputError(f"unknown layout {name!r}; choose one of: {', '.join(LAYOUTS)}") from None


def detect_layout(tag: np.ndarray, block: np.ndarray, group: np.ndarray, num_groups: int) -> dict[str, float]:
    """Fraction of records (0..1) whose tag agrees with its position and whose type is defined, per layout.

    Computed on an evenly spaced sample of at most 1M records: enough to tell layouts apart, cheap on 1e8.
    """
    n = len(tag)
    if n > 1_000_000:
        idx = np.linspace(0, n - 1, 1_000_000).astype(np.int64)
        tag, block, group = tag[idx], block[idx], group[idx]
    scores = {}
    for name, lay in LAYOUTS.items():
        if len(tag) == 0:
            scores[name] = 0.0
            continue
        ok = lay.position_matches(tag, block, group, num_groups) & (record_type(tag) <= lay.max_type)
        scores[name] = float(np.count_nonzero(ok)) / len(tag)
    return scores


def choose(scores: dict[str, float]) -> str:
    """The best-matching layout; ties go to the first in LAYOUTS order (the current FlashInfer layout)."""
    best = max(scores.values()) if scores else 0.0
    for name in LAYOUTS:
        if scores.get(name, 0.0) == best:
            return name
    return "flashinfer"
