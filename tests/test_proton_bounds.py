"""A hostile or damaged Proton trace is bounded like a buffer: ids and times checked against limits before
anything is sized by them, events that cannot be read counted and reported, gzip inflated a piece at a time
under a stated ratio, and only regular files read. Each case ends in a report or exit 2, never a traceback."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib

import pytest

from ktrace.decoding import proton_events
from ktrace.decoding.proton import read_proton
from ktrace.core.errors import InputError
from conftest import run_ktrace_peak_mb


def _ev(cta=0, warp=0, name="a", ts=0.0, dur=0.1, pid=None, tid=None, ph="X"):
    return {"args": {"Frequency (MHz)": 1000.0}, "cat": "k", "dur": dur, "name": name, "ph": ph,
            "pid": pid or f"k Core{cta} CTA{cta}", "tid": tid or f"warp {warp} (line 0)", "ts": ts}


GOOD = [_ev(c, w, n, ts=c * 0.5 + i * 0.2) for c in range(2) for w in range(2) for i, n in enumerate("ab")]


def _write(tmp_path, extra, name="t.chrome_trace", raw=None):
    p = tmp_path / name
    p.write_bytes(raw if raw is not None else json.dumps({"traceEvents": GOOD + extra}).encode())
    return p


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "ktrace", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("bad", [
    _ev(pid="k Core2 CTA4000000000"),           # would size a 30 GiB array
    _ev(tid="warp 2000000000 (line 0)"),        # would size 2e9 lanes
    _ev(pid="k Core2 CTA" + "9" * 20),          # past int64
    _ev(pid="k Core" + "9" * 20 + " CTA1"),
    _ev(pid="k Core2 CTA" + "9" * 5000),        # past Python's int() digit limit
    _ev(ts=1e16), _ev(dur=1e16),                # past int64 once in cycles
    _ev(ts=-1.0), _ev(ts="x"), _ev(dur=None),
    _ev(ph="B"), {"ph": "M", "name": "process_name"}, [1, 2], "x",
])
def test_an_event_past_the_limits_is_counted_not_used_and_the_rest_read(tmp_path, bad):
    d = read_proton(_write(tmp_path, [bad]), sidecar=False)
    assert (d.launch.num_blocks, d.launch.num_groups, len(d.slices)) == (2, 2, 8)
    assert d.notes == {"proton_unused": 1}
    assert d.slices.end_ns.max() < 10_000


def test_ids_in_their_limits_that_would_need_billions_of_lanes_are_refused(tmp_path):
    p = _write(tmp_path, [_ev(pid="k Core2 CTA2000000000")])
    with pytest.raises(InputError, match=r"CTA ids up to 2,000,000,000 and warp ids up to 1 make 4,000,000,002 "
                                         r"lanes for 9 events") as e:
        read_proton(p, sidecar=False)
    assert str(p) in str(e.value)


def test_a_trace_of_nothing_readable_says_why(tmp_path):
    p = _write(tmp_path, [], raw=json.dumps({"traceEvents": [_ev(ts=1e16), _ev(dur=-1)]}).encode())
    with pytest.raises(InputError, match="no event can be read .negative ts or dur"):
        read_proton(p, sidecar=False)


def test_unused_events_are_said_by_inspect_analyze_and_check(tmp_path):
    p = _write(tmp_path, [_ev(ph="B"), _ev(ph="E"), _ev(ts=1e16)])
    r = _cli("inspect", p, "--json")
    assert r.returncode == 0, r.stderr
    note = json.loads(r.stdout)["notes"]["proton_unused"]
    assert note["count"] == 3
    assert note["example_lanes"] == ["2 not a complete event ('ph' other than 'X')", "1 ts or dur past a day"]
    r = _cli("analyze", p, "--engine", "numpy")
    assert r.returncode == 0 and "3 events of the Proton trace not read" in r.stdout, r.stdout + r.stderr
    r = _cli("check", p, "--rule", "kernel.wall_us <= 1e9")  # a gate does not pass on part of the events
    assert r.returncode == 2 and "3 events of the Proton trace not read" in r.stderr, r.stderr[-2000:]
    assert "--allow-anomalies unread_events" in r.stderr


def test_a_lone_surrogate_in_a_name_is_escaped_not_a_crash(tmp_path):
    raw = json.dumps({"traceEvents": GOOD + [_ev(1, 1, "\ud800", ts=0.9)]}).encode()
    p = _write(tmp_path, [], raw=raw)
    assert "\\ud800" in read_proton(p, sidecar=False).launch.event_names
    for enc in ("utf-8",):
        r = subprocess.run([sys.executable, "-m", "ktrace", "analyze", str(p), "--engine", "numpy", "--details"],  # the phase table names it
                           capture_output=True, timeout=120, env={**os.environ, "PYTHONIOENCODING": enc})
        assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr[-2000:]
        assert b"\\ud800" in r.stdout


def test_a_huge_duration_converts_without_overflow(tmp_path):
    p = _write(tmp_path, [_ev(dur=1e16)])
    r = _cli("convert", p, "-o", tmp_path / "t.perfetto-trace")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_a_damaged_or_cut_gzip_trace_is_refused_naming_it(tmp_path):
    g = bytearray(gzip.compress(json.dumps({"traceEvents": GOOD * 50}).encode(), mtime=0))
    bad = g.copy()
    bad[20] ^= 0xFF  # inside the first deflate block's header: zlib's "invalid ... " error
    for name, body, words in (("bad.chrome_trace.gz", bytes(bad), "not a readable gzip file"),
                              ("cut.chrome_trace.gz", bytes(g[:len(g) // 2]), "the gzip stream ends early")):
        p = tmp_path / name
        p.write_bytes(body)
        r = _cli("analyze", p, "--engine", "numpy")
        assert r.returncode == 2 and words in r.stderr and str(p) in r.stderr, r.stderr[-2000:]
        assert "Traceback" not in r.stderr


def test_a_gzip_trace_of_several_members_or_zero_padding_reads(tmp_path):
    raw = json.dumps({"traceEvents": GOOD}).encode()
    p = _write(tmp_path, [], name="m.chrome_trace.gz", raw=gzip.compress(raw[:100]) + gzip.compress(raw[100:])
               + bytes(512))
    assert len(read_proton(p, sidecar=False).slices) == 8


def test_a_gzip_bomb_is_refused_past_its_ratio_in_bounded_memory(tmp_path):
    p = tmp_path / "spaces.chrome_trace.gz"
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(p, "wb") as f:
        f.write(c.compress(b'{"traceEvents": ['))
        for _ in range(512):  # 512 MiB of spaces, 0.5 MB compressed
            f.write(c.compress(b" " * (1 << 20)))
        f.write(c.compress(b"]}") + c.flush())
    limit = proton_events.MAX_INFLATE_RATIO * p.stat().st_size
    rc, err, mb = run_ktrace_peak_mb("analyze", p, "--engine", "numpy")
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    assert f"inflates to more than {limit:,} bytes ({proton_events.MAX_INFLATE_RATIO} times the file" in err
    assert mb < 2 * limit / 2**20 + 150  # the pieces up to the limit, not the whole 512 MiB


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_only_a_regular_file_is_read_as_a_trace(tmp_path, kind):
    p = tmp_path / "x.chrome_trace"
    if kind == "fifo":
        os.mkfifo(p)  # no writer: reading it would wait forever
    elif kind == "device":
        p.symlink_to("/dev/zero")  # endless: read whole, it would fill the memory
    else:
        p.mkdir()
    with pytest.raises(InputError, match="not a regular file|a directory") as e:
        read_proton(p, sidecar=False)
    assert str(p) in str(e.value)
    r = _cli("analyze", p, "--engine", "numpy", timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
