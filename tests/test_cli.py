"""The installed ``ktrace`` command, run as a user would: files written, what it prints, exit codes."""

import json

import numpy as np
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from conftest import SAMPLE_NAMES, run_ktrace, sample, write_buffer

pytestmark = pytest.mark.slow  # every test runs the installed command in a subprocess


@pytest.mark.parametrize("name", SAMPLE_NAMES)
def test_convert_writes_a_trace_next_to_the_buffer(tmp_path, name):
    buf = tmp_path / f"{name}.bin"
    buf.write_bytes(sample(name).read_bytes())
    (tmp_path / f"{name}.json").write_bytes(sample(name).with_suffix(".json").read_bytes())
    rc, out, err = run_ktrace("convert", buf)
    assert rc == 0, err
    trace = tmp_path / f"{name}.perfetto-trace"
    t = pb.Trace()
    t.ParseFromString(trace.read_bytes())
    assert len(t.packet) > 10
    assert "ui.perfetto.dev" in out and "slices" in out


def test_convert_is_byte_identical_across_runs(tmp_path):
    a, b = tmp_path / "a.perfetto-trace", tmp_path / "b.perfetto-trace"
    assert run_ktrace("convert", sample("warpgroups"), "-o", a)[0] == 0
    assert run_ktrace("convert", sample("warpgroups"), "-o", b)[0] == 0
    assert a.read_bytes() == b.read_bytes()


def test_inspect_reports_the_overwritten_instants():
    rc, out, err = run_ktrace("inspect", sample("instant"))
    assert rc == 0, err
    assert "trailing_instant" in out and "overwritten" in out
    assert "inst_first" in out and "inst_mid" in out and "inst_last_a" in out  # never seen: overwritten
    rc, out, _ = run_ktrace("inspect", sample("instant"), "--json")
    info = json.loads(out)
    assert info["schema"] == "ktrace.inspect/1"
    assert info["records"] == 20 and info["slices"] == 8 and info["instants"] == 4 and info["accounted"]
    assert info["notes"]["trailing_instant"]["count"] == 4
    assert info["unused_event_names"] == ["inst_first", "inst_mid", "inst_last_a"]


def test_inspect_json_on_warpgroups():
    rc, out, _ = run_ktrace("inspect", sample("warpgroups"), "--json")
    info = json.loads(out)
    assert info["layout"]["name"] == "flashinfer" and info["layout"]["match"] == 1.0
    assert info["lanes"] == {"total": 528, "with_records": 528, "capacity_per_lane": 12}
    assert info["slices_per_event"] == {"load": 1056, "mma": 1056}
    assert info["time"]["min_step_ns"] == 32


def test_names_on_the_command_line(tmp_path):
    out = tmp_path / "t.perfetto-trace"
    rc, _, err = run_ktrace("convert", sample("imbalance"), "-o", out, "--events", "L,C,R", "--tracks", "flat")
    assert rc == 0, err
    t = pb.Trace()
    t.ParseFromString(out.read_bytes())
    names = {e.name for p in t.packet for e in p.interned_data.event_names}
    assert {"L", "C", "R"} <= names


@pytest.mark.parametrize("setup,args,needle", [
    (None, ["convert", "missing.bin"], "missing.bin: no such file"),
    (b"\x01" * 13, ["convert", "{buf}"], "13 bytes is not a whole number of 8-byte records"),
    (np.array([0, 1], np.uint64).tobytes(), ["convert", "{buf}"], "impossible header"),
    (np.array([1000 | (1 << 32), 1], np.uint64).tobytes(), ["inspect", "{buf}"], "only 1 record slots"),
    ("imbalance", ["convert", "{buf}", "--events", "a,b"], "2 event names given"),
    (b"", ["inspect", "{buf}"], "empty file"),
    ("imbalance", ["convert", "{buf}", "--events", "@{tmp}/nope.txt"], "cannot read the names file"),
])
def test_bad_input_exits_2_with_a_clear_message(tmp_path, setup, args, needle):
    buf = tmp_path / "buf.bin"
    if isinstance(setup, bytes):
        buf.write_bytes(setup)
    elif isinstance(setup, str):
        buf.write_bytes(sample(setup).read_bytes())
    rc, out, err = run_ktrace(*[a.format(buf=buf, tmp=tmp_path) for a in args], cwd=tmp_path)
    assert rc == 2
    assert needle in err and "Traceback" not in err


def test_bad_sidecar_is_named(tmp_path):
    buf = write_buffer(tmp_path, np.fromfile(sample("instant"), "<u8"))
    (tmp_path / "buf.json").write_text("{not json")
    rc, _, err = run_ktrace("inspect", buf)
    assert rc == 2 and "buf.json" in err and "--no-sidecar" in err
    rc, _, _ = run_ktrace("inspect", buf, "--no-sidecar")
    assert rc == 0


def test_no_command_prints_help_and_exits_2():
    rc, out, _ = run_ktrace()
    assert rc == 2 and "convert" in out


@pytest.mark.parametrize("name", ["imbalance", "warpgroups_ktrace"])
@pytest.mark.parametrize("args", [["inspect", "--json"], ["analyze", "--json"], ["analyze", "--markdown"]])
def test_reports_are_byte_identical_across_runs(name, args):
    # Two separate processes, same input: the same bytes (no dict-order, time or path dependence).
    first = run_ktrace(args[0], sample(name), *args[1:])
    second = run_ktrace(args[0], sample(name), *args[1:])
    assert first[0] == 0 and first[1] == second[1] and len(first[1]) > 100


def test_tables_into_a_pipe_or_log_are_full_width_and_plain(capsys):
    """Into a pipe (as ``ktrace run ... | tee log`` prints its analysis): every column whole, no ellipsis, no
    colour codes, no row cut at a fixed width."""
    from ktrace.cli import main

    assert main(["analyze", str(sample("imbalance_ktrace")), "--details"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and "\x1b[" not in out and "not shown for width" not in out
    header = next(line for line in out.splitlines() if "start skew (µs)" in line)
    assert "last block: in n/inst. (distinct)" in header and header.rstrip().endswith("crit. path")
    assert len(header) > 160  # wider than the 160 columns it used to be cut at


def test_the_parser_built_for_one_command_parses_it_as_the_whole_parser_does():
    # main() builds only the command it runs (each other command listed by its help line alone)
    from ktrace.cli import build_parser

    whole = build_parser()
    sub = next(a for a in whole._subparsers._group_actions)
    for name, full in sub.choices.items():
        one = build_parser(name)
        assert sorted(next(a for a in one._subparsers._group_actions).choices) == sorted(sub.choices)
        assert next(a for a in one._subparsers._group_actions).choices[name].format_help() == full.format_help()
    argv = ["analyze", "samples/imbalance.bin", "--details", "--threshold", "imbalance=1.2", "-j", "1"]
    assert vars(build_parser("analyze").parse_args(argv)) == vars(whole.parse_args(argv))
    assert build_parser("analyze").format_help() == whole.format_help()
