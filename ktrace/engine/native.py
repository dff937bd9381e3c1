"""The native engine: a ``trace_processor_shell`` binary, run by the ``perfetto`` package as a subprocess.

The binary is named by ``$KTRACE_TP_SHELL`` (or passed in). ktrace never lets the perfetto package
download one: without a configured binary this engine refuses to start.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Iterator

from ktrace.engine.backend import (Backend, RawQueryResult, UnsupportedRequest, register_sql_package_rpc, rpc_protos,
                                   split_rpc_stream)
from ktrace.core.errors import EnvironmentMissing, KtraceError

__all__ = ["SHELL_ENV", "NativeTraceProcessor"]

SHELL_ENV = "KTRACE_TP_SHELL"


class NativeTraceProcessor(Backend):
    """A trace_processor_shell subprocess. ``shell_path`` defaults to ``$KTRACE_TP_SHELL``."""

    name = "native"

    def __init__(self, shell_path: str | None = None) -> None:
        path = shell_path or os.environ.get(SHELL_ENV, "")
        if not path:
            raise EnvironmentMissing(
                f"engine 'native' needs a trace_processor_shell binary: set {SHELL_ENV}=/path/to/"
                "trace_processor_shell (ktrace never downloads one; on a connected machine get it from "
                "https://get.perfetto.dev/trace_processor), or use engine 'wasm'")
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            raise EnvironmentMissing(f"{SHELL_ENV}={path}: not an executable file (it should name a "
                                     "trace_processor_shell binary)")
        self._path = path
        self._tp: Any = None

    def load(self, chunks: Iterable[bytes]) -> str:
        from perfetto.common.exceptions import PerfettoException
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

        started = False

        def feed() -> Iterator[bytes]:
            nonlocal started
            for chunk in chunks:
                started = True
                yield chunk

        try:
            # bin_path is always set, so the perfetto package never downloads a binary.
            self._tp = TraceProcessor(trace=feed(), config=TraceProcessorConfig(bin_path=self._path))
        except PerfettoException as exc:
            if not started:
                raise EnvironmentMissing(f"{self._path} did not start as a trace processor: {exc}") from exc
            return str(exc).replace("Failed while parsing trace. Error message: ", "")
        return ""

    def query(self, sql: str, max_bytes: int | None = None) -> RawQueryResult:
        try:
            result = self._http().execute_query(sql)
        except OSError as exc:
            raise KtraceError(f"lost the connection to {self._path}: {exc}; open the trace again") from exc
        batches, size, cut = [], 0, None
        for batch in result.batch:  # the shell's HTTP reply is read whole; what is kept is bounded still
            data = batch.SerializeToString()
            size += len(data)
            if max_bytes is not None and size > max_bytes:
                cut = max_bytes
                break
            batches.append(data)
        return RawQueryResult(columns=tuple(result.column_names), error=result.error, batches=batches,
                              cut_at_bytes=cut)

    def register_sql_package(self, name: str, modules: dict[str, str], replace: bool) -> str:
        # The shell's HTTP server takes any RPC request on /rpc and answers with the reply stream.
        protos = rpc_protos()
        stream = register_sql_package_rpc(name, modules, replace)
        conn = self._http().conn
        try:
            conn.request("POST", "/rpc", body=stream.SerializeToString())
            with conn.getresponse() as response:
                status, body = response.status, response.read()
        except OSError as exc:
            raise KtraceError(f"lost the connection to {self._path}: {exc}; open the trace again") from exc
        if status == 404:
            raise UnsupportedRequest("TPM_REGISTER_SQL_PACKAGE")
        for payload in split_rpc_stream(body):
            reply = protos.TraceProcessorRpc.FromString(bytes(payload))
            if reply.HasField("invalid_request"):
                raise UnsupportedRequest("TPM_REGISTER_SQL_PACKAGE")
            if reply.fatal_error:
                return reply.fatal_error
            if reply.HasField("register_sql_package_result"):
                return reply.register_sql_package_result.error
        return f"{self._path} sent no reply to the SQL package registration"

    def close(self) -> None:
        if self._tp is not None:
            self._tp.close()
            self._tp = None

    def _http(self) -> Any:
        if self._tp is None:
            raise KtraceError("the native trace processor session is closed; open the trace again")
        # The perfetto package's HTTP client (TraceProcessorHttp): raw QueryResult protos, which decode
        # columnar much faster than its row iterator.
        return getattr(self._tp, "_backend", None) or self._tp.http
