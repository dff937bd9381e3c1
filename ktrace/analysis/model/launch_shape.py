"""The launch-shape tables (docs/analysis-structure.md): blocks, lane totals, busy SMs over time, occupancy."""

from __future__ import annotations

from typing import ClassVar

from .table import INT as _INT, INTN as _INTN, REAL as _REAL, Table, kinds as _kinds, table

__all__ = ["Blocks", "LaneTotals", "BusySms", "Occupancy"]


@table
class Blocks(Table):
    """One row per block with phase slices: its SM, extent, and whether it ran in a later wave. SQL
    ``ktrace_block``."""

    SQL_TABLE: ClassVar[str] = "ktrace_block"
    ORDER_BY: ClassVar[str] = "block"
    KINDS: ClassVar[dict[str, str]] = _kinds(
        block=_INT, sm=_INT, lanes=_INT, slices=_INT, begin_ns=_INT, end_ns=_INT, dur_ns=_INT, later_wave=_INT)


@table
class LaneTotals(Table):
    """One row per lane: its slices over all phases, busy time (top-level slices) and extent. SQL
    ``ktrace_lane``."""

    SQL_TABLE: ClassVar[str] = "ktrace_lane"
    ORDER_BY: ClassVar[str] = "lane"
    KINDS: ClassVar[dict[str, str]] = _kinds(
        lane=_INT, block=_INT, group=_INT, sm=_INT, slices=_INT, top_slices=_INT, busy_ns=_INT, begin_ns=_INT,
        end_ns=_INT)


@table
class BusySms(Table):
    """Busy SMs over time: from ``ts`` on, ``busy_sms`` SMs run a block. SQL ``ktrace_busy_sms``."""

    SQL_TABLE: ClassVar[str] = "ktrace_busy_sms"
    ORDER_BY: ClassVar[str] = "ts"
    KINDS: ClassVar[dict[str, str]] = _kinds(ts=_INT, busy_sms=_INT)


@table
class Occupancy(Table):
    """The launch shape, one row: SMs, blocks per SM, waves, SM busy fraction, the tail and the block that
    ends the kernel. SQL ``ktrace_occupancy``; docs/analysis-structure.md."""

    SQL_TABLE: ClassVar[str] = "ktrace_occupancy"
    ORDER_BY: ClassVar[str] = "1"
    KINDS: ClassVar[dict[str, str]] = _kinds(
        sms=_INT, blocks=_INT, unknown_sm_blocks=_INT, blocks_per_sm_max=_INTN, max_resident=_INT, waves=_REAL,
        sm_busy_ns=_INTN, sm_busy_fraction=_REAL, tail_begin_ns=_INTN, tail_ns=_INTN, busy_sms_in_tail=_REAL,
        last_block=_INT, last_block_begin_ns=_INT, last_block_dur_ns=_INT, median_block_dur_ns=_INT)
