"""Bounded on every input: names cut to the one bound from every reader, IKET known by its content, memory
bounded by what is present, what-if factors and blocks in range, bidi controls visible in what ktrace writes.
Each case exits 0 with the right figures or 2 with a clear one-line error, never a traceback."""

from __future__ import annotations

import pytest

from conftest import run_ktrace, sample


def _refused(rc, err, *needles):
    assert rc == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()[-1]) < 400, err
    for n in needles:
        assert n in err, err


@pytest.mark.parametrize("args, needle", [
    (["--speedup", "compute=1e-300"], "from 0.001 to 1000"),
    (["--speedup", "compute=1e-308"], "from 0.001 to 1000"),
    (["--speedup", "compute=1e300"], "from 0.001 to 1000"),
    (["--speedup", "compute=nan"], "give PHASE=FACTOR"),
    (["--barrier-cost", "1e300"], "0 or more, at most 1e+12"),
    (["--straggler-to-median", "compute", "--block", "-1"], "0 or more"),
    (["--straggler-to-median", "compute", "--block", "999"], "has 132 blocks, 0 to 131"),
])
def test_whatif_factors_and_blocks_out_of_range_are_refused(args, needle):
    rc, out, err = run_ktrace("whatif", sample("imbalance"), *args)
    _refused(rc, err, needle)


def test_whatif_at_the_factor_bounds_gives_finite_walls():
    import json

    for factor, faster in (("0.001", False), ("1000", True)):
        rc, out, err = run_ktrace("whatif", sample("imbalance"), "--speedup", f"compute={factor}", "--json")
        assert rc == 0, err
        d = json.loads(out)
        walls = [v for k, v in d.items() if k.endswith("wall_ns")]
        assert walls and all(isinstance(v, int) and 0 < v < 10**12 for v in walls), d
        assert (d["predicted_wall_ns"] < d["measured_wall_ns"]) == faster


# ---- one bound on every name -------------------------------------------------------------------------------

def test_cut_names_keeps_short_names_and_two_long_names_apart():
    from ktrace.core.names import MAX_NAME_CHARS, cut_names

    names, cut = cut_names(["a", "x" * 300 + "1", "x" * 300 + "2", "b" * MAX_NAME_CHARS])
    assert cut == [1, 2]
    assert names[0] == "a" and names[3] == "b" * MAX_NAME_CHARS
    assert all(len(n) <= MAX_NAME_CHARS for n in names) and len(set(names)) == 4
    assert names[1].endswith("\u2026") and names[2].endswith("\u20262")


def _iket_with_long_name(tmp_path, chars):
    import json

    from test_iket import trace

    d = trace()
    d["stringTable"][1] = "m" * chars  # the mma phase
    p = tmp_path / "long.trace.json"
    p.write_text(json.dumps(d))
    return p


def _proton_with_long_names(tmp_path, kernel="k", scope="outer", extra_kernel=None):
    import json

    from test_proton import _ev

    ev = [_ev(c, w, scope if i == 0 else "inner", base + 100 * i, 2000 - 1000 * i, kernel=kernel)
          for c, base in ((0, 0), (1, 500)) for w in range(2) for i in range(2)]
    if extra_kernel:
        ev.append(_ev(0, 0, "x", 0, 10, kernel=extra_kernel))
    p = tmp_path / "long.chrome_trace"
    p.write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": ev}))
    return p


def _analyzed_with_names_cut(tmp_path, src):
    import json

    out = tmp_path / "a.json"
    rc, text, err = run_ktrace("analyze", src, f"--json={out}")
    assert rc == 0, err
    assert "1 name(s) longer than 256 characters cut to 256" in text
    assert out.stat().st_size < 200_000  # the names do not multiply by the slices
    d = json.loads(out.read_text())
    assert any("cut to 256" in w for w in d["data_quality"]["warnings"])
    assert d["launch"]["note_names_cut"] == 1
    return d


def test_an_iket_phase_name_of_a_million_characters_is_cut_and_said(tmp_path):
    d = _analyzed_with_names_cut(tmp_path, _iket_with_long_name(tmp_path, 1_000_000))
    phases = [p["phase"] for p in d["phases"]]
    assert "m" * 255 + "\u2026" in phases and all(len(p) <= 256 for p in phases)
    rc, out, err = run_ktrace("inspect", tmp_path / "long.trace.json")
    assert rc == 0 and "names_cut" in out and "(1,000,000 characters)" in out, err


def test_proton_kernel_and_scope_names_of_a_million_characters_are_cut_and_said(tmp_path):
    d = _analyzed_with_names_cut(tmp_path, _proton_with_long_names(tmp_path, scope="S" * 1_000_000))
    assert "S" * 255 + "\u2026" in [p["phase"] for p in d["phases"]]
    d = _analyzed_with_names_cut(tmp_path, _proton_with_long_names(tmp_path, kernel="K" * 1_000_000))
    assert d["launch"]["kernel"] == "K" * 255 + "\u2026"


def test_a_refusal_quotes_only_an_excerpt_of_a_long_name(tmp_path):
    src = _proton_with_long_names(tmp_path, kernel="K" * 1_000_000, extra_kernel="Q" * 1_000_000)
    rc, out, err = run_ktrace("analyze", src)
    _refused(rc, err, "holds 2 kernels", "(1,000,000 characters)")


# ---- IKET known by its content -----------------------------------------------------------------------------

def _iket_far_keys(tmp_path, name="far.trace.json"):
    """An IKET trace whose keys lie past its first 64 KiB: a first range of 20,000 internal events written
    first, every object's keys in reverse order, written back by json.dump(indent=1)."""
    import json

    from test_iket import trace

    def reverse(o):
        if isinstance(o, dict):
            return {k: reverse(o[k]) for k in reversed(list(o))}
        return [reverse(x) for x in o] if isinstance(o, list) else o

    d = reverse(trace())
    run = d["launches"][0]
    first = run["ranges"][0]
    first["internalEvents"] = [{"timestamp": first["startTs"], "eventId": 1}] * 20_000
    d["launches"][0] = {"ranges": run["ranges"], **{k: v for k, v in run.items() if k != "ranges"}}
    p = tmp_path / name
    with open(p, "w") as f:
        json.dump(d, f, indent=1)
    assert p.stat().st_size > 1 << 20
    return p


def test_an_iket_trace_is_known_by_its_keys_anywhere_with_any_spacing_or_order(tmp_path):
    from ktrace.core.filetypes import is_iket, is_trace

    p = _iket_far_keys(tmp_path)
    assert is_iket(p) and not is_trace(p)
    rc, out, err = run_ktrace("analyze", p)
    assert rc == 0, err
    assert "my_kernel: 2 blocks x 2 warps" in out and "3 phases" in out


@pytest.mark.parametrize("name", ["far.bin", "far.bin.gz", "far"])
def test_json_is_never_decoded_as_a_buffer_and_the_refusal_names_what_it_is(tmp_path, name):
    import gzip

    p = _iket_far_keys(tmp_path, "far.trace.json")
    q = tmp_path / name
    q.write_bytes(gzip.compress(p.read_bytes()) if name.endswith(".gz") else p.read_bytes())
    for cmd in ("analyze", "inspect", "convert"):
        rc, out, err = run_ktrace(cmd, q)
        _refused(rc, err, "NVIDIA IKET's JSON trace, not a profiler buffer", "NAME.trace.json")
        assert "header says" not in err


def test_a_sidecar_given_as_the_capture_is_named_as_one(tmp_path):
    side = tmp_path / "x.bin"
    side.write_bytes((sample("imbalance").with_suffix(".json")).read_bytes())
    rc, out, err = run_ktrace("inspect", side)
    _refused(rc, err, "a ktrace metadata sidecar, not a profiler buffer")
    rc, out, err = run_ktrace("query", sample("imbalance").with_suffix(".json"), "select 1")
    _refused(rc, err, "a ktrace metadata sidecar")


# ---- memory bounded by what is present ---------------------------------------------------------------------

@pytest.mark.slow
def test_a_one_lane_gzip_that_inflates_to_the_limit_costs_memory_for_its_records_only(tmp_path):
    import zlib

    from conftest import run_ktrace_peak_mb
    from ktrace.decoding.source import MAX_GZIP_BUFFER_BYTES

    p = tmp_path / "onelane.bin.gz"
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    with open(p, "wb") as f:
        f.write(z.compress((1 | 1 << 32).to_bytes(8, "little")))  # 1 block x 1 group, then empty slots
        zeros = bytes(1 << 20)
        for i in range(MAX_GZIP_BUFFER_BYTES // len(zeros)):
            f.write(z.compress(zeros if i else zeros[8:]))
        f.write(z.flush())
    assert p.stat().st_size < 600_000
    for args in (["inspect", p], ["analyze", p], ["convert", p, "-o", tmp_path / "o.perfetto-trace"]):
        rc, err, mb = run_ktrace_peak_mb(*args)
        assert rc == 0, err  # one lane of empty slots: nothing to analyze, said, not a failure
        assert mb < 1000, (args[0], mb)


# ---- bidi and format controls visible in what ktrace writes --------------------------------------------------

def _bidi_capture(tmp_path):
    import json
    import shutil

    from conftest import sample_meta

    buf = tmp_path / "x\u202ey.bin"
    shutil.copy(sample("imbalance"), buf)
    meta = sample_meta("imbalance")
    meta["event_names"] = ["lo\u202ead", "compute", "red\u2066uce"]
    meta["kernel"] = "k\u202eernel"
    buf.with_suffix(".json").write_text(json.dumps(meta))
    return buf


def _visible_only(path, at_least):
    raw = path.read_bytes()
    for c in ("\u202e", "\u2066"):
        assert c.encode() not in raw, (path, c)
    assert raw.count(b"\\u202e") >= at_least, path


def test_bidi_controls_are_visible_in_every_trace_and_in_junit(tmp_path):
    buf = _bidi_capture(tmp_path)
    rc, out, err = run_ktrace("convert", buf, "-o", tmp_path / "c.perfetto-trace")
    assert rc == 0, err
    _visible_only(tmp_path / "c.perfetto-trace", 2)  # the phase and the kernel
    rc, out, err = run_ktrace("analyze", buf, f"--trace={tmp_path / 'a.perfetto-trace'}")
    assert rc == 0, err
    _visible_only(tmp_path / "a.perfetto-trace", 3)  # and the findings' own spans that name the phase
    rc, out, err = run_ktrace("check", buf, "--rule", "kernel.wall_us <= 1", "--rule", "*.imbalance <= 1.0",
                              f"--junit={tmp_path / 'j.xml'}")
    assert rc == 1, err
    _visible_only(tmp_path / "j.xml", 3)  # the capture's name, the kernel's, and the phase's
    assert "red\\u2066uce" in (tmp_path / "j.xml").read_text()


def test_work_far_over_the_devices_peak_is_said_implausible(tmp_path):
    import json
    import shutil

    from conftest import sample_meta

    buf = tmp_path / "w.bin"
    shutil.copy(sample("imbalance"), buf)  # an H200: 4,800 GB/s
    meta = sample_meta("imbalance")
    meta["work"] = {"bytes": 3e15, "flops": 0}  # 3 PB in 602 µs: a million times the peak
    buf.with_suffix(".json").write_text(json.dumps(meta))
    rc, out, err = run_ktrace("analyze", buf, "--json")
    assert rc == 0, err
    w = [x for x in json.loads(out)["data_quality"]["warnings"] if "implausible" in x]
    assert len(w) == 1 and "1.04e+06 times the peak 4,800 GB/s (H200)" in w[0] and "work.bytes" in w[0]
    meta["work"] = {"bytes": 2e9}  # 2 GB in 602 µs: 3.3 TB/s, within the peak
    buf.with_suffix(".json").write_text(json.dumps(meta))
    rc, out, err = run_ktrace("analyze", buf, "--json")
    assert rc == 0 and not [x for x in json.loads(out)["data_quality"]["warnings"] if "implausible" in x]


def test_a_phase_name_of_whitespace_alone_is_printed_visibly(tmp_path):
    import json
    import shutil

    from conftest import sample_meta

    buf = tmp_path / "w.bin"
    shutil.copy(sample("imbalance"), buf)
    meta = sample_meta("imbalance")
    meta["event_names"] = ["load", "   ", "reduce"]  # the compute phase, named with spaces
    buf.with_suffix(".json").write_text(json.dumps(meta))
    rc, out, err = run_ktrace("analyze", buf)
    assert rc == 0, err
    assert "block 17 finishes \\x20\\x20\\x20 last" in out
    rc, out, err = run_ktrace("inspect", buf)
    assert rc == 0 and "load, \\x20\\x20\\x20, reduce" in out, err


def test_shown_and_cut_names_from_a_trace_reader():
    from ktrace.core.names import cut_names, shown_name

    assert shown_name(" \t") == "\\x20\\x09" and shown_name("a b") == "a b" and shown_name("") == ""
    assert cut_names(["  ", "x"]) == (["\\x20\\x20", "x"], [])


def test_a_merged_traces_gpu_names_are_bounded(tmp_path):
    import json
    import re
    import shutil

    from conftest import SAMPLES

    bufs = []
    for g in (0, 1):
        b = tmp_path / f"multigpu_gpu{g}.bin"
        shutil.copy(SAMPLES / b.name, b)
        meta = json.loads((SAMPLES / f"multigpu_gpu{g}.json").read_text())
        meta["device"]["name"] = "D" * 4000  # a sidecar's text may have 4,096 characters; a name 256
        b.with_suffix(".json").write_text(json.dumps(meta))
        bufs.append(b)
    rc, out, err = run_ktrace("merge", *bufs, "-o", tmp_path / "m.perfetto-trace")
    assert rc == 0, err
    labels = re.findall(r"GPU \d \((D+)\u2026\)", out)
    assert len(labels) == 2 and all(len(x) == 127 for x in labels), out


@pytest.mark.slow
def test_a_200m_character_iket_name_and_a_16m_character_proton_kernel_cost_under_1_gb(tmp_path):
    import json

    from conftest import run_ktrace_peak_mb

    iket = _iket_with_long_name(tmp_path, 200_000_000)  # 200 MB, under IKET's 256 MiB limit
    proton = _proton_with_long_names(tmp_path, kernel="K" * 16_000_000)
    for src in (iket, proton):
        out = tmp_path / "a.json"
        rc, err, mb = run_ktrace_peak_mb("analyze", src, f"--json={out}")
        assert rc == 0, err
        assert mb < 1000 and out.stat().st_size < 200_000, (src.name, mb, out.stat().st_size)
        assert json.loads(out.read_text())["launch"]["note_names_cut"] == 1
        rc, err, mb = run_ktrace_peak_mb("inspect", src)
        assert rc == 0 and mb < 1000, (src.name, mb, err)


def test_a_long_phase_name_in_a_trace_ktrace_did_not_bound_is_cut_by_the_sql_package(tmp_path):
    import json
    from dataclasses import replace

    from ktrace.decoding import decode
    from ktrace.export.writer import write_trace

    d = decode(sample("imbalance"))  # a trace another writer made, with a phase name of a million characters
    d = replace(d, launch=replace(d.launch, event_names=("L" * 1_000_000, "compute", "reduce")))
    trace = tmp_path / "foreign.perfetto-trace"
    write_trace(d, trace)
    out = tmp_path / "a.json"
    rc, text, err = run_ktrace("analyze", trace, f"--json={out}")
    assert rc == 0, err
    phases = [p["phase"] for p in json.loads(out.read_text())["phases"]]
    assert sorted(phases) == sorted(["L" * 256, "compute", "reduce"])
    assert out.stat().st_size < 1_000_000  # the name is not carried on every row
