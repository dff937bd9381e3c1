"""Triton Proton traces as a source: hand-written traces for each rule (CTA/warp mapping, the SM clock and
where it came from, nesting, warp groups, drops, bad input), and the H200 captures of samples/kernels/triton_*.py
held to their ground truth (recorded by the kernels apart from Proton)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ktrace
from ktrace.decoding import open_source
from ktrace.decoding.proton import read_proton
from ktrace.core.errors import InputError
from ktrace.core.filetypes import is_trace

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "proton"


def _ev(cta, warp, name, ts_cyc, dur_cyc, core=None, kernel="k", line=0):
    """One Proton event: ts/dur are cycles printed as us at 1 GHz (cycles / 1000)."""
    return {"args": {"Frequency (MHz)": 1000.0}, "cat": kernel, "ph": "X", "name": name,
            "pid": f"{kernel} Core{cta if core is None else core} CTA{cta}", "tid": f"warp {warp} (line {line})",
            "ts": ts_cyc / 1000, "dur": dur_cyc / 1000}


def _write(tmp_path, events, name="t.chrome_trace", sidecar=None):
    p = tmp_path / name
    p.write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": events}))
    if sidecar is not None:
        (tmp_path / (name.split(".")[0] + ".json")).write_text(json.dumps(sidecar))
    return p


def _two_ctas():
    # CTA 0 starts at 0 ns, CTA 1 at 500 ns (its %globaltimer offset); inside, cycles
    ev = []
    for cta, base in ((0, 0), (1, 500)):
        for w in range(2):
            ev += [_ev(cta, w, "outer", base + 0, 2000), _ev(cta, w, "inner", base + 100, 1000)]
    return ev


def test_ctas_warps_and_scopes_map_onto_blocks_lanes_and_phases_with_the_sm_clock(tmp_path):
    p = _write(tmp_path, _two_ctas(), sidecar={"sm_clock_mhz": 2000, "device": "X"})
    d = read_proton(p)
    assert (d.launch.num_blocks, d.launch.num_groups, d.launch.producer) == (2, 2, "proton")
    assert d.launch.event_names == ("outer", "inner")
    assert "2000 MHz, from the sidecar (t.json)" in d.time_origin
    s = d.slices
    one = (s.block == 1) & (s.group == 0)
    # CTA 1's start stays 500 ns (globaltimer); its 2000 cycles at 2 GHz are 1000 ns; inner begins 50 ns in
    assert s.begin_ns[one & (s.event == 0)].tolist() == [500]
    assert s.dur_ns[one & (s.event == 0)].tolist() == [1000]
    assert s.begin_ns[one & (s.event == 1)].tolist() == [550]
    # nesting kept: inner's records sit between outer's
    o, i = np.flatnonzero(one & (s.event == 0))[0], np.flatnonzero(one & (s.event == 1))[0]
    assert s.begin_seq[o] < s.begin_seq[i] < s.end_seq[i] < s.end_seq[o]
    assert d.accounted and d.dropped_records == 0


def test_the_clock_comes_from_the_option_then_the_sidecar_then_calibrate_then_proton_1ghz(tmp_path, monkeypatch):
    monkeypatch.setenv("KTRACE_CACHE_DIR", str(tmp_path / "cache"))
    p = _write(tmp_path, _two_ctas(), sidecar={"sm_clock_mhz": 2000})
    assert "500 MHz, from --sm-clock" in read_proton(p, sm_clock_mhz="500").time_origin
    assert "from the sidecar" in read_proton(p).time_origin
    assert "assumed 1 GHz" in read_proton(p, sidecar=False).time_origin
    cal = tmp_path / "cache" / "calibration"
    cal.mkdir(parents=True)
    (cal / "H200.json").write_text(json.dumps({"device": "NVIDIA H200", "sm_clock_mhz": 1980.0}))
    d = read_proton(p, sidecar=False)
    assert "1980 MHz, from ktrace calibrate's cache" in d.time_origin
    assert d.slices.dur_ns[d.slices.event == 0].tolist() == [1010] * 4  # 2000 cycles / 1.98


def test_assumed_clock_is_a_data_quality_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("KTRACE_CACHE_DIR", str(tmp_path / "none"))
    a = ktrace.analyze(_write(tmp_path, _two_ctas()))
    assert any("assumed 1 GHz" in w for w in a.data_quality.warnings)


def test_warp_groups_span_their_warps(tmp_path):
    ev = [_ev(0, w, "mma", 10 * w, 100 + w) for w in range(8)]
    d = read_proton(_write(tmp_path, ev, sidecar={"sm_clock_mhz": 1000}), lanes="warpgroup")
    assert d.launch.num_groups == 2 and d.launch.group_names == ("warps 0-3", "warps 4-7")
    assert d.slices.begin_ns.tolist() == [0, 40] and d.slices.end_ns.tolist() == [133, 177]


def test_drops_counted_from_the_sidecar_warnings_or_protons_log(tmp_path):
    warn = "Warning (cta0, warp1): first 10 events are dropped due to insufficient buffer size (4/14)"
    p = _write(tmp_path, _two_ctas(), sidecar={"sm_clock_mhz": 1000, "proton_warnings": [warn]})
    d = read_proton(p)
    assert d.dropped_records == 10 and d.notes == {"proton_dropped": 1}
    log = tmp_path / "stderr.txt"
    log.write_text(warn.replace("cta0", "cta1") + "\n")
    assert read_proton(p, sidecar=False, proton_log=log).dropped_records == 10
    a = ktrace.analyze(p)
    assert any("Proton's circular buffer was full on 1 lane(s)" in w for w in a.data_quality.warnings)


def test_a_gzip_or_json_proton_trace_is_known_by_its_content(tmp_path):
    raw = json.dumps({"traceEvents": _two_ctas()}).encode()
    (tmp_path / "a.json").write_bytes(raw)
    (tmp_path / "b.gz").write_bytes(gzip.compress(raw))
    (tmp_path / "other.json").write_text(json.dumps({"traceEvents": [{"ph": "X", "pid": 1, "tid": 2}]}))
    assert not is_trace(tmp_path / "a.json") and not is_trace(tmp_path / "b.gz")
    assert is_trace(tmp_path / "other.json")  # any other Chrome JSON goes to the trace processor as before
    assert len(read_proton(tmp_path / "b.gz").slices) == 8


@pytest.mark.parametrize("events, words", [
    ("{", "not valid JSON"),
    ('{"traceEvents": 3}', "without a 'traceEvents' list"),
    ('{"traceEvents": [{"ph": "B"}]}', "no complete events"),
    ('{"traceEvents": [{"ph": "X", "pid": "p", "tid": "warp 0 (line 0)", "name": "a", "ts": 0, "dur": 1}]}',
     "is not Proton's"),
    ('{"traceEvents": [{"ph": "X", "pid": "k Core0 CTA0", "tid": "warp 0 (line 0)", "name": "a", "ts": "x", '
     '"dur": 1}]}', "not a number"),
    ('{"traceEvents": [{"ph": "X", "pid": "k Core0 CTA0", "tid": "warp 0 (line 0)", "name": "a", "ts": 0, '
     '"dur": 1}, {"ph": "X", "pid": "j Core0 CTA0", "tid": "warp 0 (line 0)", "name": "a", "ts": 0, "dur": 1}]}',
     "holds 2 kernels"),
])
def test_bad_traces_say_the_file_the_problem_and_the_fix(tmp_path, events, words):
    p = tmp_path / "bad.chrome_trace"
    p.write_text(events)
    with pytest.raises(InputError, match=words) as e:
        read_proton(p)
    assert str(p) in str(e.value)


def test_options_of_the_other_kind_are_refused(tmp_path):
    p = _write(tmp_path, _two_ctas())
    with pytest.raises(InputError, match="--layout applies to profiler buffers"):
        open_source(p, layout="mirage")
    with pytest.raises(InputError, match="--sm-clock applies to Triton Proton traces"):
        open_source(SAMPLES / "imbalance.bin", sm_clock_mhz=1000)


def _cli(*args, cwd=SAMPLES):
    return subprocess.run([sys.executable, "-m", "ktrace", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_cli_bad_input_exits_2_with_the_file(tmp_path):
    p = tmp_path / "x.chrome_trace"
    p.write_text('{"traceEvents": [')
    r = _cli("analyze", p)
    assert r.returncode == 2 and str(p) in r.stderr and "not valid JSON" in r.stderr
    r = _cli("analyze", "triton_imbalance.chrome_trace", "--sm-clock", "0")
    assert r.returncode == 2 and "no SM clock" in r.stderr


# ---- the H200 captures (samples/kernels/triton_*.py, Triton 3.6.0) ----

def _truth(name):
    return json.loads((SAMPLES / f"{name}.json").read_text())


def test_imbalanced_program_is_the_straggler_and_the_busiest_lane():
    t = _truth("triton_imbalance")
    a = ktrace.analyze(SAMPLES / "triton_imbalance.chrome_trace")
    slow = t["slow_program"]
    assert slow == t["ground_truth"]["last_program_by_clock"] == 17
    imb = [f for f in a.findings if f.kind == "load_imbalance" and f.phase == "compute"][0]
    assert imb.severity == "warning" and imb.figures["slowest_block"] == slow
    assert 2.8 < imb.figures["imbalance"] < 3.1  # 3x the iterations
    assert a.occupancy["last_block"] == slow
    g = t["ground_truth"]
    wall = max(g["program_end_ns"]) - min(g["program_begin_ns"])
    assert abs(a.kernel.wall_ns - wall) < 0.01 * wall  # the SM clock turns Proton's cycles into true ns
    # the SM each CTA ran on is Proton's CoreN, the same as the kernel's own %smid
    d = read_proton(SAMPLES / "triton_imbalance.chrome_trace")
    sm = np.full(d.launch.num_blocks, -1)
    sm[d.slices.block] = d.slices.sm
    assert sm.tolist() == g["program_smid"]


def test_balanced_run_has_no_straggler_and_diff_sees_the_wall_fall():
    a = ktrace.analyze(SAMPLES / "triton_balanced.chrome_trace")
    assert not [f for f in a.findings if f.kind == "load_imbalance" and f.severity == "warning"]
    r = _cli("diff", "triton_imbalance.chrome_trace", "triton_balanced.chrome_trace", "--json")
    assert r.returncode == 0, r.stderr
    assert "wall" in r.stdout


def test_matmul_waves_match_the_clock():
    t = _truth("triton_matmul")
    g = t["ground_truth"]
    a = ktrace.analyze(SAMPLES / "triton_matmul.chrome_trace.gz")
    o = a.occupancy
    assert o["blocks"] == t["programs"] == 1024 and o["sms"] == t["num_sms"]
    assert o["blocks_per_sm_max"] == g["most_resident_per_sm"] == 2
    assert round(o["waves"]) == g["waves"] == 4
    assert o["last_block"] == int(np.argmax(g["program_end_ns"]))
    assert any(r["part"] == "waves" for r in a.critical_shares.rows()) or a.critical_shares


def test_warp_groups_of_the_matmul():
    d = read_proton(SAMPLES / "triton_matmul.chrome_trace.gz", lanes="warpgroup")
    assert d.launch.num_groups == 2 and len(d.slices) == 1024 * 2 * 3


def test_persistent_loop_of_phases():
    t = _truth("triton_persistent")
    d = read_proton(SAMPLES / "triton_persistent.chrome_trace.gz")
    k = t["tiles_per_program"]
    assert len(d.slices) == t["grid"][0] * t["num_warps"] * k * 3
    heavy = np.array(t["ground_truth"]["heavy_tiles_per_program"])
    a = ktrace.analyze(SAMPLES / "triton_persistent.chrome_trace.gz")
    assert heavy[a.occupancy["last_block"]] == heavy.max()  # a program with the most 4x tiles ends it


@pytest.mark.slow
def test_protons_drops_are_counted_as_its_warnings_say():
    t = _truth("triton_dropped")
    d = read_proton(SAMPLES / "triton_dropped.chrome_trace.gz")
    assert d.dropped_records == sum(x["dropped"] for x in t["proton_dropped"]) == 528 * 1136
    assert d.notes["proton_dropped"] == 528
    r = _cli("check", "triton_dropped.chrome_trace.gz", "--rule", "compute.imbalance <= 9")
    assert r.returncode == 2 and "records lost" in r.stderr


@pytest.mark.slow
def test_every_command_takes_a_proton_trace(tmp_path):
    src = "triton_imbalance.chrome_trace"
    for args in (["convert", src, "-o", tmp_path / "c.perfetto-trace"], ["inspect", src],
                 ["query", src, "select count(*) from slice"],
                 ["analyze", src, "--trace", tmp_path / "v.analyzed.perfetto-trace"],
                 ["check", src, "--rule", "compute.imbalance <= 1.2"]):
        r = _cli(*args)
        assert r.returncode == (1 if args[0] == "check" else 0), (args, r.stderr)
    assert (tmp_path / "c.perfetto-trace").stat().st_size > 0
    assert (tmp_path / "v.analyzed.perfetto-trace").stat().st_size > 0


@pytest.mark.parametrize("plain", [False, True])
def test_view_serves_a_proton_trace_with_the_analysis_drawn(monkeypatch, plain):
    from ktrace import view as view_mod

    served = []

    class Server:
        def __init__(self, trace, **kw):
            served.append((Path(trace), Path(trace).read_bytes(), kw))
            self.url, self.port = "http://127.0.0.1:1/open", 1

        def serve_forever(self):
            raise KeyboardInterrupt

        def close(self):
            pass

    monkeypatch.setattr(view_mod, "TraceServer", Server)
    said = []
    assert view_mod.view(SAMPLES / "triton_imbalance.chrome_trace", open_browser=False, plain=plain,
                         say=said.append) == 130  # stopped by Ctrl-C
    (trace, data, kw), = served
    text = "\n".join(said)
    if plain:
        assert trace.name == "triton_imbalance.perfetto-trace" and kw["focus"] is None
    else:
        assert trace.name.endswith(".analyzed.perfetto-trace") and kw["focus"] is not None
        assert "drawn on the timeline" in text and "block 17" in text
    assert len(data) > 10_000


def test_protons_own_print_is_read_in_one_pass_with_the_same_slices_as_the_json_parser(monkeypatch):
    from ktrace.decoding import proton_events

    p = SAMPLES / "triton_matmul.chrome_trace.gz"
    assert proton_events._fast_columns(proton_events._read(p)) is not None
    fast = read_proton(p, lanes="warpgroup")
    monkeypatch.setattr(proton_events, "_fast_columns", lambda raw: None)
    slow = read_proton(p, lanes="warpgroup")
    assert fast.launch == slow.launch
    for k in fast.slices.__dataclass_fields__:
        assert np.array_equal(getattr(fast.slices, k), getattr(slow.slices, k)), k


def test_a_trace_cut_between_two_events_is_refused_not_read_short(tmp_path):
    raw = (SAMPLES / "triton_imbalance.chrome_trace").read_bytes()
    cut = tmp_path / "cut.chrome_trace"
    cut.write_bytes(raw[:raw.index(b"},{", len(raw) // 2) + 2])
    with pytest.raises(InputError, match="not valid JSON"):
        read_proton(cut)


PROTON_CAPTURES = sorted(p.name for p in SAMPLES.glob("triton_*.chrome_trace*"))


@pytest.mark.parametrize("name", PROTON_CAPTURES)
@pytest.mark.slow
def test_each_capture_is_accounted_covered_sorted_and_the_same_in_sql_and_numpy(name):
    d = read_proton(SAMPLES / name)
    assert d.accounted and d.lanes_with_records == d.launch.num_blocks * d.launch.num_groups
    a = ktrace.analyze(d)
    assert a.to_dict()["critical_path"]["coverage"] == 1.0
    warn = [f.impact_ns for f in a.findings if f.severity == "warning"]
    assert warn == sorted(warn, reverse=True) and all(f.evidence for f in a.findings)
    sql = ktrace.analyze(SAMPLES / name, engine="wasm")
    assert a.figures.differences(sql.figures) == []
