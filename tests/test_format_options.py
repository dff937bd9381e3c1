"""--json[=FILE] and --markdown[=FILE] mean the same on every command: alone, stdout instead of the text report;
with '=FILE', the file written and the text report still printed; the word after a bare option is a capture."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import sample

from ktrace.cli import build_parser, main
from ktrace.cli.formats import explicit_formats

RULE = ["--rule", "compute.imbalance <= 100"]


def _run(capsys, *args):
    rc = main([str(x) for x in args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def capture(tmp_path):
    to = tmp_path / "a.bin"
    shutil.copy(sample("imbalance_ktrace"), to)
    shutil.copy(sample("imbalance_ktrace").with_suffix(".json"), to.with_suffix(".json"))
    return to


@pytest.mark.parametrize("command", ["analyze", "diff", "check", "inspect", "query", "calibrate", "whatif"])
def test_every_command_takes_json_with_an_optional_file(command):
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    opts = {o: act for act in sub._actions for o in act.option_strings}
    assert opts["--json"].nargs == "?" and opts["--json"].const == "-"
    assert "--json=FILE" in opts["--json"].help
    if command in ("analyze", "diff", "check"):
        assert opts["--markdown"].nargs == "?" and "--markdown=FILE" in opts["--markdown"].help


def test_bare_option_never_takes_the_next_word():
    assert explicit_formats(["check", "--markdown", "a.bin", "--json", "b.bin"]) == \
        ["check", "--markdown=-", "a.bin", "--json=-", "b.bin"]
    # the old spelling, kept where the word cannot be a capture
    assert explicit_formats(["check", "a.bin", "--markdown", "out/summary.md"])[-1] == "--markdown=out/summary.md"
    assert explicit_formats(["check", "a.bin", "--markdown", "/tmp/_runner/step_summary_1"])[-1] \
        == "--markdown=/tmp/_runner/step_summary_1"
    assert explicit_formats(["query", "--", "--json"]) == ["query", "--", "--json"]


def test_check_markdown_before_the_capture_checks_it(capsys, capture):
    before = capture.read_bytes()
    rc, out, err = _run(capsys, "check", "--markdown", capture, *RULE)
    assert rc == 0, err
    assert out.startswith("### ✅ ktrace check passed: 0 of 1 check failed on 1 capture")
    assert capture.read_bytes() == before


def test_markdown_file_that_names_a_capture_is_refused(capsys, capture, tmp_path):
    before = capture.read_bytes()
    rc, _, err = _run(capsys, "check", tmp_path / "other.bin", *RULE, f"--markdown={capture}")
    assert rc == 2 and "a capture by its name" in err and capture.read_bytes() == before


def test_json_file_after_a_bare_option_is_refused_with_the_spelling(capsys, capture, tmp_path):
    rc, _, err = _run(capsys, "analyze", capture, "--json", tmp_path / "out.json")
    assert rc == 2 and f"--json={tmp_path / 'out.json'}" in err and not (tmp_path / "out.json").exists()


def test_both_to_stdout_is_refused(capsys, capture):
    for command in (["analyze", capture], ["check", capture, *RULE], ["diff", capture, capture]):
        rc, _, err = _run(capsys, *command, "--json", "--markdown")
        assert rc == 2 and "--json and --markdown both print to stdout" in err


@pytest.mark.parametrize("command,schema", [
    (["analyze"], "ktrace.analysis/2"), (["check", *RULE], "ktrace.check/1"), (["inspect"], "ktrace.inspect/1")])
def test_json_file_written_and_the_report_still_printed(capsys, capture, tmp_path, command, schema):
    out_json = tmp_path / "r.json"
    rc, out, err = _run(capsys, command[0], capture, *command[1:], f"--json={out_json}")
    assert rc == 0, err
    assert json.loads(out_json.read_text())["schema"] == schema
    assert not out.lstrip().startswith("{") and "persistent_phases" in out  # the text report, not the JSON
    rc, out, err = _run(capsys, command[0], capture, *command[1:], "--json")
    assert rc == 0 and json.loads(out)["schema"] == schema


def test_diff_markdown_file_appended_and_json_to_stdout(capsys, capture, tmp_path):
    md = tmp_path / "s.md"
    md.write_text("earlier\n")
    rc, out, err = _run(capsys, "diff", capture, capture, "--json", f"--markdown={md}")
    assert rc == 0, err
    assert json.loads(out)["schema"] == "ktrace.diff/1"
    assert md.read_text().startswith("earlier\n### ktrace diff")


def test_analyze_markdown_file(capsys, capture, tmp_path):
    md = tmp_path / "a.md"
    rc, out, err = _run(capsys, "analyze", capture, f"--markdown={md}")
    assert rc == 0, err
    assert md.read_text().startswith("#") and not out.startswith("#")


def test_query_json_file(capsys, capture, tmp_path):
    q = tmp_path / "q.json"
    rc, out, err = _run(capsys, "query", capture, "SELECT 7 AS x", f"--json={q}")
    assert rc == 0, err
    assert json.loads(q.read_text()) == [{"x": 7}] and "1 rows as JSON" in err
    rc, out, err = _run(capsys, "query", "--json", capture, "SELECT 7 AS x")
    assert rc == 0 and json.loads(out) == [{"x": 7}]


# -- one unit style, one name per figure ---------------------------------------------------------------------

def test_inspect_and_analyze_write_microseconds_alike(capsys):
    rc, inspect_out, err = _run(capsys, "inspect", sample("imbalance"))
    assert rc == 0, err
    rc, analyze_out, err = _run(capsys, "analyze", sample("imbalance"), "--details")
    assert rc == 0, err
    import re

    for out in (inspect_out, analyze_out):
        assert "µs" in out and not re.search(r"\d us\b", out)
    assert "span 602 µs" in inspect_out


def test_the_record_gap_and_the_tick_are_named_apart(capsys):
    """inspect's 352 ns is the smallest gap between a lane's records; analyze's 32 ns is the timer tick. Neither
    calls its figure a 'smallest step'."""
    rc, inspect_out, _ = _run(capsys, "inspect", sample("imbalance"))
    rc2, analyze_out, _ = _run(capsys, "analyze", sample("imbalance"), "--details")
    assert rc == rc2 == 0
    assert "smallest gap between a lane's consecutive records 352 ns" in " ".join(inspect_out.split())
    assert "timer tick 32 ns (the smallest difference between slice durations or a lane's records)" in \
        " ".join(analyze_out.split())
    assert "smallest step" not in inspect_out + analyze_out


@pytest.mark.parametrize("command", [["inspect"], ["analyze"]])
def test_a_terminal_that_cannot_print_micro_gets_us(command):
    from conftest import run_ktrace

    rc, out, err = run_ktrace(command[0], sample("imbalance"), env={"PYTHONIOENCODING": "ascii"})
    assert rc == 0 and "Traceback" not in err, err
    assert "602 us" in out and "µ" not in out


@pytest.mark.parametrize("name", ["nested_ktrace.bin", "fi_mla_decode_run1.bin.gz"])
def test_an_ascii_stream_gets_the_whole_report_in_ascii(name):
    # these reports hold a cut line ending in an ellipsis: printed as '...', never a UnicodeEncodeError
    from conftest import run_ktrace

    rc, out, err = run_ktrace("analyze", sample("x").with_name(name), "--all", env={"PYTHONIOENCODING": "ascii"})
    assert rc == 0 and "Traceback" not in err, err
    assert out.isascii() and "..." in out and len(out.splitlines()) > 3


def test_merge_report_on_an_ascii_stream_spells_plus_minus_in_ascii(tmp_path):
    # its alignment line holds "±2.24 µs": printed as "+/-2.24 us", never a UnicodeEncodeError
    from conftest import run_ktrace

    rc, out, err = run_ktrace("merge", sample("multigpu_gpu0"), sample("multigpu_gpu1"), "-o",
                              str(tmp_path / "m.perfetto-trace"), "--report", env={"PYTHONIOENCODING": "ascii"})
    assert rc == 0 and "Traceback" not in err, err
    assert out.isascii() and "+/-2.24 us" in out


# -- help texts name every input kind ------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["convert", "inspect", "analyze", "diff", "check", "query"])
def test_help_names_every_input_the_resolver_takes(command, capsys, monkeypatch):
    from ktrace.core.filetypes import BUFFER_SUFFIXES, PROTON_SUFFIXES, TRACE_SUFFIXES

    monkeypatch.setenv("COLUMNS", "400")  # no suffix split at its hyphen

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    kinds = [*BUFFER_SUFFIXES, *PROTON_SUFFIXES, ".trace.json", ".trace.json.gz"]
    if command not in ("convert", "inspect"):
        kinds += TRACE_SUFFIXES
    for suffix in kinds:
        assert f"{suffix}," in text or f"{suffix})" in text or f"{suffix} " in text, (command, suffix)
    assert "Proton" in text and "IKET" in text


@pytest.mark.parametrize("name", ["imbalance.bin", "fi_mla_decode_run1.bin.gz", "iket/gemm_run1.trace.json.gz",
                                  "proton/triton_dropped.chrome_trace.gz"])
def test_convert_and_inspect_take_what_their_help_names(capsys, tmp_path, name, samples_dir):
    src = samples_dir / name
    rc, out, err = _run(capsys, "inspect", "--json", src)
    assert rc == 0 and json.loads(out)["records"] > 0, err
    rc, _, err = _run(capsys, "convert", src, "-o", tmp_path / "t.perfetto-trace")
    assert rc == 0 and (tmp_path / "t.perfetto-trace").stat().st_size > 0, err


# -- --engine: the same choices and words wherever the engine runs ------------------------------------------

def _engine(command):
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    return next(act for act in sub._actions if "--engine" in act.option_strings)


def test_engine_offered_alike_on_every_command_that_runs_it():
    analyzing = [_engine(c) for c in ("analyze", "diff", "view", "run")]
    sql_only = [_engine(c) for c in ("query", "check")]
    assert {tuple(e.choices) for e in analyzing} == {("auto", "wasm", "native", "numpy")}
    assert len({e.help for e in analyzing}) == 1 and len({e.help for e in sql_only}) == 1
    assert {tuple(e.choices) for e in sql_only} == {("auto", "wasm", "native")}
    assert "numpy is not among its engines" in sql_only[0].help
    assert all(e.default == "auto" for e in analyzing + sql_only)


def test_diff_with_numpy_gives_the_figures_of_the_trace_processor(capsys, capture):
    other = sample("balanced_ktrace")
    rc, by_numpy, err = _run(capsys, "diff", capture, other, "--engine", "numpy", "--json")
    assert rc == 0, err
    rc, by_wasm, err = _run(capsys, "diff", capture, other, "--engine", "wasm", "--json")
    assert rc == 0, err
    a, b = json.loads(by_numpy), json.loads(by_wasm)
    assert a["phases"] == b["phases"] and a["verdict"] == b["verdict"]


def test_usage_errors_show_the_options_as_typed(capsys, capture, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["convert", str(capture), "--json"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unrecognized arguments: --json" in err and "--json=-" not in err
    with pytest.raises(SystemExit):
        main(["check", str(capture), *RULE, "--markdown", str(tmp_path / "notes.txt")])
    err = capsys.readouterr().err
    assert f"to write {tmp_path / 'notes.txt'}, give --markdown={tmp_path / 'notes.txt'}" in err
