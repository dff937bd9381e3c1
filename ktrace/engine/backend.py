"""What every engine implements, and the pieces of the trace processor RPC protocol they share."""

from __future__ import annotations

import abc
import dataclasses
import functools
from typing import Any, Iterable, Iterator

__all__ = ["Backend", "RawQueryResult", "SnapshotRejected", "UnsupportedRequest", "rpc_protos", "split_rpc_stream",
           "whole_payloads", "proto_fields", "read_varint"]


class UnsupportedRequest(Exception):
    """The engine does not know this RPC request (a trace processor older than the request type)."""


class SnapshotRejected(Exception):
    """``Backend.restore`` took up a snapshot that then failed its checks: the snapshot is removed, the
    backend is spent (close it), and the trace is to be loaded in a fresh one."""


@dataclasses.dataclass
class RawQueryResult:
    """A query's reply as the engine sent it: column names, an error text ("" if none), the
    ``QueryResult.CellsBatch`` protos in order."""

    columns: tuple[str, ...]
    error: str
    batches: list[Any]
    cut_at_bytes: int | None = None  # the reply was longer than this limit: the batches are its first ones only


class Backend(abc.ABC):
    """One trace processor holding one trace. Methods return the engine's error text ("" when none);
    turning that into ktrace's exceptions is the Session's job. A crashed engine raises KtraceError."""

    name: str

    def expect(self, name: str, trace_bytes: int | None) -> None:
        """Told the size of the trace about to load (None: unknown, e.g. compressed), before ``load``: an
        engine may size itself from it, or raise InputError for a trace that cannot fit."""

    def snapshot_wanted(self, trace_bytes: int | None) -> bool:
        """Whether this engine keeps snapshots of loaded traces of that size (then the session hashes the
        trace's bytes for ``restore`` and ``save_snapshot``)."""
        return False

    def restore(self, trace_sha256: str) -> bool:
        """After ``expect``, instead of ``load``: takes up the state a snapshot kept of the trace whose bytes
        have that SHA-256 (hex). Returns False (nothing changed that a load would notice) when there is
        none; raises SnapshotRejected when the state taken up failed its checks (the backend is spent)."""
        return False

    def save_snapshot(self, trace_sha256: str) -> None:
        """Right after ``load``, before any query: keeps the loaded state for a later ``restore``."""

    @abc.abstractmethod
    def load(self, chunks: Iterable[bytes]) -> str:
        """Feeds the whole trace, piece by piece (any split is fine), then ends it (sort and flush).
        Returns the engine's first parse error, "" if none."""

    @abc.abstractmethod
    def query(self, sql: str, max_bytes: int | None = None) -> RawQueryResult:
        """Runs SQL (one or more statements); the result is the last statement's. Its batches are
        serialized ``QueryResult.CellsBatch`` messages. ``max_bytes``: keep at most that many bytes of the
        reply (its first whole batches; ``cut_at_bytes`` says it was cut), never more in memory."""

    @abc.abstractmethod
    def register_sql_package(self, name: str, modules: dict[str, str], replace: bool) -> str:
        """Makes ``INCLUDE PERFETTO MODULE <module>`` work for each module (name -> SQL text).
        ``replace`` allows replacing a package of that name (only ever one this session registered,
        never the stdlib's). Raises UnsupportedRequest when the engine has no such request."""

    @abc.abstractmethod
    def close(self) -> None:
        """Frees the engine; later calls fail."""


_RPC_MESSAGES = ("TraceProcessorRpc", "TraceProcessorRpcStream")  # what the engines send and read


@functools.lru_cache(maxsize=1)
def rpc_protos() -> Any:
    """The trace processor's RPC messages ``.TraceProcessorRpc`` and ``.TraceProcessorRpcStream`` (the classes
    perfetto's ProtoFactory makes), from the descriptor the perfetto package ships, read without importing
    ``perfetto.trace_processor``: its ``__init__`` imports pandas, half a second of every SQL run."""
    import importlib.util
    import os
    import types

    from google.protobuf import descriptor_pb2, message_factory
    from google.protobuf.descriptor_pool import DescriptorPool

    spec = importlib.util.find_spec("perfetto.trace_processor")  # imports the package perfetto, not this one
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    if not where:
        raise ImportError("perfetto.trace_processor is not installed (pip install perfetto)")
    with open(os.path.join(where[0], "trace_processor.descriptor"), "rb") as f:
        files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = DescriptorPool()
    for file in files.file:
        pool.Add(file)
    return types.SimpleNamespace(**{name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"perfetto.protos.{name}")) for name in _RPC_MESSAGES})


def register_sql_package_rpc(name: str, modules: dict[str, str], replace: bool) -> Any:
    """A TraceProcessorRpcStream holding one TPM_REGISTER_SQL_PACKAGE request (both engines send it)."""
    stream = rpc_protos().TraceProcessorRpcStream()
    request = stream.msg.add()
    request.request = rpc_protos().TraceProcessorRpc.TPM_REGISTER_SQL_PACKAGE
    args = request.register_sql_package_args
    args.package_name = name
    args.allow_override = replace
    for module_name, sql in modules.items():
        module = args.modules.add()
        module.name = module_name
        module.sql = sql
    return stream


def split_rpc_stream(data: bytes | bytearray) -> Iterator[memoryview]:
    """Yields the payloads of a ``TraceProcessorRpcStream``: each is field 1 (tag 0x0A), length-delimited."""
    for field, value in proto_fields(data):
        if field != 1 or not isinstance(value, memoryview):
            raise ValueError(f"unexpected field {field} in a trace processor reply stream")
        yield value


def whole_payloads(data: bytes | bytearray) -> list[memoryview]:
    """The payloads of a ``TraceProcessorRpcStream`` cut short somewhere: every whole one, in order (a last one
    the data holds only part of is left out)."""
    view = memoryview(data)
    out, pos, end = [], 0, len(data)
    while pos < end:
        try:
            key, at = read_varint(data, pos)
            length, at = read_varint(data, at)
        except IndexError:
            break
        if key != 0x0A:
            raise ValueError(f"unexpected field {key >> 3} in a trace processor reply stream")
        if at + length > end:
            break
        out.append(view[at:at + length])
        pos = at + length
    return out


def proto_fields(buf: bytes) -> Iterator[tuple[int, Any]]:
    """Yields (field number, value) of a protobuf message: int for varints, memoryview for the rest."""
    view = memoryview(buf)
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = read_varint(buf, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = read_varint(buf, pos)
        elif wire_type == 2:
            length, pos = read_varint(buf, pos)
            value, pos = view[pos:pos + length], pos + length
        elif wire_type == 1:
            value, pos = view[pos:pos + 8], pos + 8
        elif wire_type == 5:
            value, pos = view[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unexpected protobuf wire type {wire_type} in a trace processor message")
        yield field, value


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos
