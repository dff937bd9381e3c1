"""A stop (Ctrl-C, SIGTERM) that lands at an unlucky moment is still a stop: never swallowed by the code that
cleans up after it, nor held up by the clients connected."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time

import pytest

import ktrace

from conftest import sample
from test_view import _trickle, start_view


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_with_forty_slow_clients_connected_ends_the_viewer_at_once(tmp_path, sig, code):
    # The thread-per-connection server waited on its clients' threads (a slow one could take its 20 s per-line
    # timeout). One loop in the main thread stops where it is: the signal interrupts its select.
    trace = ktrace.convert(sample("warpgroups"), tmp_path / "w.perfetto-trace").path
    p, url, _ = start_view("--port", "0", "--plain", trace)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    slow, stop = [], threading.Event()
    trickler = threading.Thread(target=_trickle, args=(slow, stop))
    try:
        for _ in range(40):
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            c.sendall(f"GET /open HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n".encode())
            slow.append(c)
        trickler.start()
        time.sleep(0.5)
        p.send_signal(sig)
        try:
            out, err = p.communicate(timeout=30)  # a generous bound: it takes well under a second
        except subprocess.TimeoutExpired:
            p.kill()
            raise
        assert p.returncode == code and "stopped" in out and "Traceback" not in err
        for c in slow:  # every client's connection is closed with the server
            c.settimeout(10)
            try:
                assert c.recv(64) == b""
            except ConnectionError:
                pass
    finally:
        stop.set()
        if trickler.is_alive():
            trickler.join()
        for c in slow:
            c.close()
        if p.poll() is None:
            p.kill()
