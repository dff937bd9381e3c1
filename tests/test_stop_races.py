"""A stop (Ctrl-C, SIGTERM) that lands at an unlucky moment is still a stop: never swallowed by the code that
cleans up after it."""

from __future__ import annotations

import socket
import threading

import pytest

from ktrace import view


def test_a_ctrl_c_raised_as_a_request_thread_starts_stops_the_viewer(monkeypatch, tmp_path):
    # Thread.start() waits for the new thread to run: a Ctrl-C raised in that wait leaves the thread running
    # (it gives its connection slot back when done) and the server giving the slot back too. The bounded
    # semaphore's second release raised ValueError in the Ctrl-C's place, which serve_forever reported as a
    # failed request ("Semaphore released too many times") and went on serving: the stop was lost.
    server = view._Server(("127.0.0.1", 0), view._Handler)
    server.ui_dir = tmp_path
    start = threading.Thread.start

    def start_then_interrupted(self):
        start(self)
        raise KeyboardInterrupt

    a, b = socket.socketpair()
    try:
        monkeypatch.setattr(threading.Thread, "start", start_then_interrupted)
        with pytest.raises(KeyboardInterrupt):
            server.process_request(a, ("127.0.0.1", 1))
        monkeypatch.undo()
        b.close()  # the request ends: its thread gives the slot back
        for t in [t for t in threading.enumerate() if t.name.startswith("Thread")]:
            t.join(10)
        # every slot is free again, and none twice
        assert [server._slots.acquire(timeout=0) for _ in range(view._MAX_CONNECTIONS + 1)] == \
            [True] * view._MAX_CONNECTIONS + [False]
    finally:
        server.server_close()
        a.close()
