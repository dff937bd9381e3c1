"""Hostile values and user mistakes from the issue "Nothing silent, nothing broken": each exits 2 (3 for a
missing engine) naming the file, the problem and the fix, never a traceback; outputs never land on an input,
its sidecar or a planted link, and the inputs stay byte for byte as they were."""

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import interruptible, run_ktrace, sample, sample_meta


def _refused(rc, err, *needles, code=2):
    assert rc == code, err
    assert "Traceback" not in err and "ktrace: error: " in err
    for n in needles:
        assert n in err, err


@pytest.fixture
def capture(tmp_path):
    buf = tmp_path / "x.bin"
    shutil.copy(sample("warpgroups_ktrace"), buf)
    (tmp_path / "x.json").write_text(json.dumps(sample_meta("warpgroups_ktrace")))
    return buf


def _sidecar(capture, change):
    meta = sample_meta("warpgroups_ktrace")
    change(meta)
    capture.with_suffix(".json").write_text(json.dumps(meta))
    return capture


# -- the merged trace of the README's multi-GPU flow ------------------------------------------------------


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    out = tmp_path_factory.mktemp("merged") / "m.perfetto-trace"
    rc, _, err = run_ktrace("merge", sample("multigpu_gpu0"), sample("multigpu_gpu1"), "-o", out)
    assert rc == 0, err
    return out


@pytest.mark.parametrize("fmt", [[], ["--markdown"]])
@pytest.mark.slow
def test_a_merged_trace_is_analyzed_in_text_and_markdown(merged, fmt):
    rc, out, err = run_ktrace("analyze", merged, *fmt)
    assert rc == 0 and "Traceback" not in err, err
    assert "aligned as ktrace merge placed them on one axis" in out and "GPU 1" in out


# -- sidecar values ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("key, value", [("timer.anchor_ns", 1), ("timer.anchor_ns", 1e9), ("timer_anchor_ns", 1),
                                        ("timer_anchor_ns", 1e9), ("host_launch_unix_ns", 1000)])
def test_a_time_anchor_too_small_to_be_unix_ns_exits_2(tmp_path, key, value):
    buf = tmp_path / "f.bin"
    shutil.copy(sample("imbalance_flashinfer"), buf)
    meta = sample_meta("imbalance_flashinfer")
    *head, last = key.split(".")
    (meta.setdefault(head[0], {}) if head else meta)[last] = value
    (tmp_path / "f.json").write_text(json.dumps(meta))
    _refused(*run_ktrace("analyze", buf)[::2], "f.json", f"'{key}'", "a time anchor is Unix ns", "--no-sidecar")


@pytest.mark.slow
@pytest.mark.parametrize("key", ["timer_anchor_ns", "anchor_ns", "globaltimer_anchor_ns", "launch_globaltimer_ns"])
def test_alias_anchor_keys_are_range_checked(capture, key):
    def change(m):
        del m["timer"]["anchor_ns"]
        m[key] = 2**64 - 1
    _sidecar(capture, change)
    _refused(*run_ktrace("analyze", capture)[::2], "x.json", f"'{key}' is 18446744073709551615", "--no-sidecar")


@pytest.mark.slow
@pytest.mark.parametrize("where", ["kernel", "event_names"])
def test_a_lone_surrogate_in_a_name_exits_2(capture, where):
    _sidecar(capture, lambda m: m.update({where: "k\ud800" if where == "kernel" else ["lo\ud800ad", "mma"]}))
    for fmt in ([], ["--json"], ["--markdown"]):
        _refused(*run_ktrace("analyze", capture, *fmt)[::2], "x.json", "lone surrogate", "--no-sidecar")


def test_a_byte_that_is_not_utf8_in_events_exits_2(capture):
    p = subprocess.run([shutil.which("ktrace") or "ktrace", "analyze", str(capture), "--events", b"lo\xffad,mma"],
                       capture_output=True, text=True, timeout=120)
    _refused(p.returncode, p.stderr, "--events", "not UTF-8", "give names as UTF-8 text")


@pytest.mark.parametrize("engine", ["numpy", "wasm"])
def test_a_nul_event_name_exits_2(capture, engine):
    _sidecar(capture, lambda m: m.update(event_names=["\u0000", "mma"]))
    _refused(*run_ktrace("analyze", capture, "--engine", engine)[::2], "x.json", "NUL character")


# -- clock offsets ------------------------------------------------------------------------------------------


_GPUS = (sample("multigpu_gpu0"), sample("multigpu_gpu1"))


@pytest.mark.slow
@pytest.mark.parametrize("offset", ["1=1e23", "1=" + "9" * 30, "1=4000000000000000000", "1=-4000000000000000000"])
def test_an_offset_beyond_any_clock_difference_exits_2(tmp_path, offset):
    rc, _, err = run_ktrace("merge", *_GPUS, "--offset", offset, "-o", tmp_path / "m.perfetto-trace")
    _refused(rc, err, "--offset" if "e" in offset or len(offset) > 30 else "check the offset")
    assert not (tmp_path / "m.perfetto-trace").exists()


@pytest.mark.parametrize("body, needle", ids=["deep", "digits", "2^70", "1e400", "nan", "offsets_ns 5", "offsets 5",
                                              "entry 1e30"], argvalues=[
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"offsets_ns": {"1": ' + "1" * 5000 + "}}", "cannot be read"),
    ('{"offsets_ns": {"1": %d}}' % 2**70, "an offset is at most"),
    ('{"offsets_ns": {"1": 1e400}}', "must be integer ns"),
    ('{"offsets_ns": {"1": NaN}}', "NaN is not a number JSON allows"),
    ('{"offsets_ns": 5}', "a clocks file holds"),
    ('{"before": {"offsets": 5}}', "'offsets' must be a list"),
    ('{"before": {"offsets": [{"device_index": 1, "offset_to_reference_ns": 1e30, "spread_ns": 1}]}}',
     "not an integer below"),
])
@pytest.mark.slow
def test_hostile_clocks_files_exit_2(tmp_path, body, needle):
    clocks = tmp_path / "clocks.json"
    clocks.write_text(body)
    for cmd in (["merge", *_GPUS, "-o", tmp_path / "m.perfetto-trace"], ["analyze", *_GPUS]):
        _refused(*run_ktrace(*cmd, "--clocks", clocks)[::2], "clocks.json", needle)


# -- plots ----------------------------------------------------------------------------------------------------


def test_a_plot_of_a_format_that_does_not_exist_exits_2_before_any_work(capture):
    _refused(*run_ktrace("analyze", capture, "--plot", capture.parent / "x.txt")[::2], "x.txt", "--plot writes one of",
             "--plot " + str(capture.parent / "x.png"))


@pytest.mark.parametrize("where", ["kernel", "event_names"])
@pytest.mark.slow
def test_mathtext_in_a_name_is_drawn_as_text(capture, where):
    pytest.importorskip("matplotlib")
    name = "$\\frac{$"
    _sidecar(capture, lambda m: m.update({where: name if where == "kernel" else [name, "mma"]}))
    rc, _, err = run_ktrace("analyze", capture, "--plot", capture.parent / "p.png")
    assert rc == 0 and "Traceback" not in err, err
    assert (capture.parent / "p.png").read_bytes()[:4] == b"\x89PNG"


# -- the environment --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ktrace_tp_wasm_naming_a_file_that_is_not_wasm_exits_3(capture, tmp_path):
    fake = tmp_path / "tp.wasm"
    fake.write_text("not wasm")
    rc, _, err = run_ktrace("analyze", capture, "--engine", "wasm", env={"KTRACE_TP_WASM": str(fake)})
    _refused(rc, err, "KTRACE_TP_WASM=", "not a WebAssembly module", "unset it", code=3)
    fake.write_bytes(b"\0asm" + b"\xff" * 64)  # the magic, then garbage: wasmtime refuses it
    rc, _, err = run_ktrace("analyze", capture, "--engine", "wasm", "--no-sidecar",
                            env={"KTRACE_TP_WASM": str(fake), "KTRACE_CACHE_DIR": str(tmp_path / "cache")})
    _refused(rc, err, "tp.wasm", "wasmtime cannot compile it", code=3)


def test_no_home_and_no_passwd_entry_caches_in_a_private_temp_folder(monkeypatch):
    from pathlib import Path

    from ktrace.engine import wasm_cache

    def nowhere():
        raise RuntimeError("Could not determine home directory.")

    for var in ("KTRACE_CACHE_DIR", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(nowhere))
    assert wasm_cache.cache_dir().name == f"ktrace-cache-{os.getuid()}"


@pytest.mark.slow
def test_a_nul_or_escape_in_a_request_to_view_is_a_400_not_a_traceback(tmp_path, capfd):
    from ktrace.view import TraceServer

    trace = tmp_path / "t.perfetto-trace"
    assert run_ktrace("convert", sample("warpgroups"), "-o", trace)[0] == 0
    with TraceServer(trace) as s:
        for path in ("/index.html%00.js", "/%1b]0;pwned%07", "/%ed%a0%80.js"):
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
            c.request("GET", path)
            assert c.getresponse().status == 400
            c.close()
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err and "\x1b" not in captured.err


_INTERRUPTED_IMPORT = """
import builtins, os, signal, sys
sys.argv[0] = "/usr/bin/ktrace"  # as the console script runs
real = builtins.__import__
AT, ARGS = sys.argv[1], sys.argv[2:]

def interrupting(name, *args, **kwargs):  # Ctrl-C exactly while ktrace imports AT
    if name == AT and AT not in sys.modules:
        os.kill(os.getpid(), signal.SIGINT)
    return real(name, *args, **kwargs)

builtins.__import__ = interrupting
from ktrace.cli import main
sys.exit(main(ARGS))
"""


@pytest.mark.parametrize("module,args", [
    ("argparse", ["--help"]),  # the start-up imports: the command line's own modules, before main runs
    ("numpy", ["inspect", str(sample("warpgroups"))]),  # a command's imports, once main runs it
])
def test_ctrl_c_during_the_start_up_imports_exits_130_without_a_traceback(module, args):
    p = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT, module, *args], capture_output=True, text=True,
                       timeout=120, preexec_fn=interruptible)
    assert p.returncode == 130 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip() == "ktrace: interrupted"


@pytest.mark.slow
def test_ctrl_c_a_moment_after_the_start_exits_130_without_a_traceback():
    for delay in (0.3, 0.6):  # and a real Ctrl-C a moment after the start (the imports, or the command)
        q = subprocess.Popen([shutil.which("ktrace") or "ktrace", "inspect", str(sample("warpgroups"))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
        time.sleep(delay)
        q.send_signal(signal.SIGINT)
        _, err = q.communicate(timeout=60)
        # -2 with nothing printed: the signal came before Python ran a line (a loaded machine), nothing to catch
        assert q.returncode in (0, 130) or (q.returncode == -signal.SIGINT and not err), err
        assert "Traceback" not in err, err


def test_the_start_up_hook_is_only_the_command_s():
    code = "import ktrace, sys; print(sys.excepthook is sys.__excepthook__)"
    assert subprocess.run(["python", "-c", code], capture_output=True, text=True).stdout.strip() == "True"


# -- every output guarded as -o is ------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ["analyze", "{buf}", "--trace", "{buf}"], ["analyze", "{buf}", "--trace", "{side}"],
    ["analyze", "{buf}", "--plot", "{dir}/link.png"], ["convert", "{buf}", "-o", "{dir}/link.perfetto-trace"],
    ["check", "{buf}", "--rule", "kernel.wall_us <= 1e9", "--junit", "{side}"],
    ["check", "{buf}", "--rule", "kernel.wall_us <= 1e9", "--junit", "{dir}/link.xml"],
    ["check", "{buf}", "--rule", "kernel.wall_us <= 1e9", "--markdown={buf}"],
    ["check", "{buf}", "--rule", "kernel.wall_us <= 1e9", "--markdown", "{dir}/link.md"],
    ["diff", "{buf}", "{buf}", "--markdown={side}"], ["analyze", "{buf}", "--json={side}"],
])
@pytest.mark.slow
def test_no_output_lands_on_an_input_its_sidecar_or_a_planted_link(capture, args):
    d = capture.parent
    victim = d / "victim.txt"
    victim.write_text("precious")
    for name in ("link.png", "link.perfetto-trace", "link.xml", "link.md"):
        (d / name).symlink_to(victim)
    before = {p.name: p.read_bytes() for p in d.glob("x.*")}
    args = [a.format(buf=capture, side=capture.with_suffix(".json"), dir=d) for a in args]
    rc, _, err = run_ktrace(*args)
    _refused(rc, err, "choose another")
    assert "would destroy it" in err or "symbolic link" in err
    assert {p.name: p.read_bytes() for p in d.glob("x.*")} == before and victim.read_text() == "precious"


def _two_captures(capture):
    d = capture.parent
    for name in ("imbalance", "balanced"):
        shutil.copy(capture, d / f"{name}.bin")
        shutil.copy(capture.with_suffix(".json"), d / f"{name}.json")
    return d


@pytest.mark.parametrize("args", [
    ["check", "{d}/imb*.bin", "--rule", "kernel.wall_us <= 1e9", "--junit", "{d}/imbalance.bin"],
    ["check", "{d}/imb*.bin", "--rule", "kernel.wall_us <= 1e9", "--markdown={d}/imbalance.json"],
    ["check", "{d}/x.bin", "--baseline", "{d}/bal*.bin", "--rule", "kernel.wall_us <= baseline * 2",
     "--junit", "{d}/balanced.json"],
    ["diff", "{d}/x.bin", "{d}/bal*.bin", "--markdown={d}/balanced.json"],
    ["diff", "--before", "{d}/x.bin", "--after", "{d}/[bi]*.bin", "--markdown={d}/imbalance.bin"],
    ["analyze", "--runs", "{d}/*.bin", "--trace", "{d}/balanced.bin"],
])
def test_no_output_lands_on_a_file_a_quoted_glob_matches_or_its_sidecar(capture, args):
    d = _two_captures(capture)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    rc, _, err = run_ktrace(*[a.format(d=d) for a in args], timeout=120)
    _refused(rc, err, "would destroy it", "choose another")
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


def test_no_output_lands_on_a_hard_link_to_an_input(capture):
    d = _two_captures(capture)
    os.link(d / "imbalance.bin", d / "results.xml")
    os.link(d / "imbalance.json", d / "summary.md")
    before = (d / "imbalance.bin").read_bytes(), (d / "imbalance.json").read_bytes()
    for option, out in (("--junit", "results.xml"), ("--markdown", "summary.md")):
        rc, _, err = run_ktrace("check", d / "imb*.bin", "--rule", "kernel.wall_us <= 1e9", option, d / out)
        _refused(rc, err, "would destroy it")
    assert ((d / "imbalance.bin").read_bytes(), (d / "imbalance.json").read_bytes()) == before


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("args", [
    ["check", "{buf}", "--rule", "kernel.wall_us <= 1e9", "--junit", "{fifo}"],
    ["check", "{buf}", "--rule", "kernel.wall_us <= 1e9", "--markdown={fifo}"],
    ["diff", "{buf}", "{buf}", "--markdown={fifo}"],
    ["convert", "{buf}", "-o", "{fifo}"],
    ["analyze", "{buf}", "--plot", "{fifo}.png"],
])
def test_a_fifo_as_an_output_is_refused_at_once(capture, args):
    fifo = capture.parent / "out.fifo"
    os.mkfifo(fifo)
    os.mkfifo(f"{fifo}.png")
    # a regression would block on opening the FIFO: the timeout fails the test instead of hanging it
    rc, _, err = run_ktrace(*[a.format(buf=capture, fifo=fifo) for a in args], timeout=60)
    _refused(rc, err, "FIFO (named pipe), not a regular file", "choose another")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("args", [
    ["analyze", "--runs", "{d}/*.bin"], ["analyze", "{d}/run2.bin"], ["check", "{d}/*.bin", "--rule", "x.wall_us < 1"],
    ["diff", "{d}/x.bin", "{d}/run2.bin"], ["convert", "{d}/run2.bin"],
])
def test_a_fifo_among_the_inputs_is_refused_at_once(capture, args):
    d = capture.parent
    shutil.copy(capture, d / "run1.bin")
    os.mkfifo(d / "run2.bin")
    rc, _, err = run_ktrace(*[a.format(d=d) for a in args], timeout=60)
    _refused(rc, err, "run2.bin: the input is a FIFO (named pipe), not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_as_a_sidecar_is_refused_at_once(capture):
    capture.with_suffix(".json").unlink()
    os.mkfifo(capture.with_suffix(".json"))
    rc, _, err = run_ktrace("analyze", capture, timeout=60)
    _refused(rc, err, "x.json: the sidecar of", "is a FIFO")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_given_to_the_python_api_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "run.bin"
    os.mkfifo(fifo)
    code = f"from ktrace import analyze\ntry:\n    analyze({str(fifo)!r})\nexcept Exception as e:\n    print(e)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "is a FIFO (named pipe), not a regular file" in p.stdout, p.stderr


def test_the_junit_file_is_written_whole_or_not_at_all(capture, tmp_path):
    """A file size limit below the XML's size: the write fails (exit 2) and no truncated XML is left."""
    code = ("import resource, sys\nfrom ktrace.report import compare_report as rep\nxml = rep.junit_xml\n"
            "def limited(checks):  # once the analysis is done: the limit hits the JUnit file only\n"
            "    resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.RLIM_INFINITY))\n    return xml(checks)\n"
            "rep.junit_xml = limited\nfrom ktrace.cli import main\nsys.exit(main(sys.argv[1:]))")
    out = tmp_path / "results.xml"
    out.write_text("old")
    p = subprocess.run([sys.executable, "-c", code, "check", str(capture), "--rule", "kernel.wall_us <= 1e9",
                        "--junit", str(out)], capture_output=True, text=True, timeout=120)
    _refused(p.returncode, p.stderr, "results.xml: cannot write the JUnit file (File too large)")
    assert out.read_text() == "old" and not list(tmp_path.glob("*.part"))


def test_two_outputs_on_one_file_are_refused(capture):
    out = capture.parent / "both.png"
    _refused(*run_ktrace("analyze", capture, "--trace", out, "--plot", out)[::2], "would both write it")


@pytest.mark.slow
def test_markdown_may_still_go_to_dev_stdout(capture):
    rc, out, err = run_ktrace("check", capture, "--rule", "kernel.wall_us <= 1e9", "--markdown", "/dev/stdout")
    assert rc == 0, err


# -- query results bounded: rows printed and bytes read ------------------------------------------------------

_COUNT = "with recursive c(x) as (select 1 union all select x + 1 from c where x < {n}) select x, 'row' || x as s from c"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("query") / "t.perfetto-trace"
    rc, _, err = run_ktrace("convert", sample("warpgroups_ktrace"), "-o", out)
    assert rc == 0, err
    return out


@pytest.mark.parametrize("command", [["query", "{t}"], ["check", "{t}", "--sql"]])
def test_a_result_of_one_huge_value_is_refused_with_the_limit_and_the_option(trace, command):
    rc, out, err = run_ktrace(*[c.format(t=trace) for c in command], "select zeroblob(100000000) as x", timeout=120)
    _refused(rc, err, "first rows alone are over 32 MiB (the result size limit)", "--max-result-mb")
    assert len(out) < 10_000


def test_a_long_result_is_cut_at_the_byte_limit_with_a_note(trace):
    rc, out, err = run_ktrace("query", trace, _COUNT.format(n=400_000), "--csv", "--max-result-mb", "1",
                              "--max-rows", "0", timeout=120)
    assert rc == 0 and "Traceback" not in err, err
    lines = out.splitlines()
    assert lines[0] == "x,s" and 1000 < len(lines) - 1 < 400_000
    assert lines[1:3] == ["1,row1", "2,row2"] and lines[-1] == f"{len(lines) - 1},row{len(lines) - 1}"  # whole rows
    assert "the result is longer than 1 MiB (the limit read)" in err and "--max-result-mb" in err


def test_the_rows_printed_are_bounded_and_the_option_prints_every_one(trace):
    rc, out, err = run_ktrace("query", trace, _COUNT.format(n=12_000), "--csv", timeout=120)
    assert rc == 0 and len(out.splitlines()) == 1 + 10_000, err
    assert "printed the first 10,000 of 12,000 rows; --max-rows N prints more" in err
    rc, out, err = run_ktrace("query", trace, _COUNT.format(n=12_000), "--csv", "--max-rows", "0", timeout=120)
    assert rc == 0 and len(out.splitlines()) == 1 + 12_000 and "note" not in err, err
    rc, out, err = run_ktrace("query", trace, _COUNT.format(n=30), "--max-rows", "5", timeout=120)
    assert rc == 0 and "5 of 30 rows" in out and "row6" not in out, out


def test_the_table_shows_a_long_value_cut_and_csv_writes_it_whole(trace):
    sql = "select printf('%.5000c', 'v') as s, zeroblob(3000000) as b"
    rc, out, err = run_ktrace("query", trace, sql, timeout=120)
    assert rc == 0 and "Traceback" not in err, err
    text = " ".join(out.split())
    assert "(5,000 characters; --csv or --json for all)" in text and "(3,000,000 bytes; --csv or --json" in text
    assert "v" * 1001 not in out.replace("\n", "").replace("│", "").replace(" ", "") and len(out) < 20_000
    rc, out, err = run_ktrace("query", trace, sql, "--csv", timeout=120)
    assert rc == 0 and "v" * 5000 in out, err


def test_a_sql_rule_with_a_long_result_says_it_was_cut(trace):
    rc, out, err = run_ktrace("check", trace, "--sql", _COUNT.format(n=400_000), "--max-result-mb", "1", timeout=120)
    assert rc == 1 and "Traceback" not in err, err
    text = " ".join(out.split())  # the report wraps its lines
    assert "at least" in text and "the result was cut at 1 MiB, --max-result-mb raises the limit" in text


def test_a_cut_result_is_the_first_rows_of_the_whole_one(trace):
    from ktrace.engine import open_trace

    sql = _COUNT.format(n=100_000)
    with open_trace(trace) as s:
        whole, cut = s.query(sql), s.query(sql, max_bytes=200_000)
        assert whole.cut_at_bytes is None and cut.cut_at_bytes == 200_000
        assert 0 < len(cut) < len(whole)
        assert cut.rows == whole.rows[:len(cut)] and cut.head(3) == [(1, "row1"), (2, "row2"), (3, "row3")]
        assert s.query("select 7 as y").rows == [(7,)]  # the session is still usable


# -- the compiled-module cache's lock ---------------------------------------------------------------------------


@pytest.mark.slow
def test_the_cache_lock_is_a_private_file_and_a_held_lock_is_waited_for_with_a_message(tmp_path):
    import fcntl

    from ktrace.engine.cache_files import LOCK_NAME, cache_lock

    lines = []
    with cache_lock(tmp_path, say=lines.append):
        lock = tmp_path / LOCK_NAME
        assert oct(lock.stat().st_mode & 0o777) == oct(0o600)  # only this user can open it, so hold it
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another process holds it
    try:
        with cache_lock(tmp_path, wait_s=1.5, say=lines.append):  # gives up waiting, and says so
            pass
    finally:
        os.close(fd)
    assert any("waiting for another ktrace" in x for x in lines)
    assert any("stayed locked" in x and "compiling without waiting longer" in x for x in lines)


def test_a_lock_file_that_is_a_link_or_open_to_others_is_not_used(tmp_path):
    from ktrace.engine.cache_files import LOCK_NAME, cache_lock

    lines = []
    (tmp_path / LOCK_NAME).symlink_to(tmp_path / "elsewhere")
    with cache_lock(tmp_path, say=lines.append):
        pass
    assert lines and "not locking the cache" in lines[0] and not (tmp_path / "elsewhere").exists()


@pytest.mark.slow
def test_mathtext_in_a_name_is_drawn_as_text_in_the_diff_plot(capture):
    pytest.importorskip("matplotlib")
    _sidecar(capture, lambda m: m.update(kernel="$\\frac{$", event_names=["$\\frac{$", "mma"]))
    rc, _, err = run_ktrace("diff", capture, capture, "--plot", capture.parent / "d.png")
    assert rc == 0 and "Traceback" not in err, err
    assert (capture.parent / "d.png").read_bytes()[:4] == b"\x89PNG"


def test_markdown_before_the_captures_never_takes_one(tmp_path):
    """A bare `--markdown` prints to stdout: `check --markdown a.bin b.bin` checks both captures, and a capture
    is never overwritten; the file is given as --markdown=FILE."""
    import shutil

    from conftest import run_ktrace, sample

    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    for name, to in (("imbalance_ktrace", a), ("balanced_ktrace", b)):
        shutil.copy(sample(name), to)
        shutil.copy(sample(name).with_suffix(".json"), to.with_suffix(".json"))
    before = a.read_bytes()
    rc, out, err = run_ktrace("check", "--markdown", a, b, "--rule", "compute.imbalance <= 100")
    assert rc == 0 and a.read_bytes() == before, err
    assert out.startswith("### ✅ ktrace check passed: 0 of 2 checks failed on 2 captures")
    rc, out, err = run_ktrace("check", b, "--rule", "compute.imbalance <= 100", f"--markdown={a}")
    assert rc == 2 and "a capture by its name" in err and a.read_bytes() == before
    rc, out, err = run_ktrace("check", a, "--rule", "compute.imbalance <= 100", f"--markdown={tmp_path / 'r.md'}")
    assert rc == 0 and (tmp_path / "r.md").read_text().startswith("###")
