"""What every engine implements, and the pieces of the trace processor RPC protocol they share."""

from __future__ import annotations

import abc
import dataclasses
import functools
from typing import Any, Iterator

__all__ = ["Backend", "RawQueryResult", "rpc_protos", "split_rpc_stream"]


@dataclasses.dataclass
class RawQueryResult:
    """A query's reply as the engine sent it: column names, an error text ("" if none), the
    ``QueryResult.CellsBatch`` protos in order."""

    columns: tuple[str, ...]
    error: str
    batches: list[Any]


class Backend(abc.ABC):
    """One trace processor holding one trace. Methods return the engine's error text ("" when none);
    turning that into ktrace's exceptions is the Session's job."""

    name: str

    @abc.abstractmethod
    def append(self, chunk: bytes) -> str:
        """Feeds the next piece of the trace (any split is fine)."""

    @abc.abstractmethod
    def finalize(self) -> str:
        """Ends the trace: sorts and flushes everything appended."""

    @abc.abstractmethod
    def query(self, sql: str) -> RawQueryResult:
        """Runs SQL (one or more statements); the result is the last statement's."""

    @abc.abstractmethod
    def register_sql_package(self, name: str, modules: dict[str, str]) -> str:
        """Makes ``INCLUDE PERFETTO MODULE <module>`` work for each module (name -> SQL text)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Frees the engine; later calls fail."""


@functools.lru_cache(maxsize=1)
def rpc_protos() -> Any:
    """The trace processor's RPC messages (perfetto's ProtoFactory: TraceProcessorRpc, QueryResult, ...)."""
    from perfetto.trace_processor.platform import PlatformDelegate
    from perfetto.trace_processor.protos import ProtoFactory

    return ProtoFactory(PlatformDelegate())


def split_rpc_stream(data: bytes | bytearray) -> Iterator[memoryview]:
    """Yields the payloads of a ``TraceProcessorRpcStream``: each is field 1 (tag 0x0A), length-delimited."""
    view = memoryview(data)
    pos, end = 0, len(data)
    while pos < end:
        if data[pos] != 0x0A:
            raise ValueError(f"unexpected tag {data[pos]:#x} at byte {pos} of a trace processor reply")
        pos += 1
        length = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        yield view[pos:pos + length]
        pos += length
