"""Inputs written by someone else: names that try to drive the terminal, values out of range, outputs that
point at inputs. Each behaves as a careful user expects: shown escaped, refused with exit 2, or left alone."""

import json
import os
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from ktrace.cli import main
from ktrace.report.safe_text import md_cell, printable, xml_safe

from conftest import KTRACE_SAYING_QUERIES, ROOT, read_until_querying, sample, sample_meta

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;pwned\x07"
LINK = "[link=file:///etc/passwd]click[/link]"


@pytest.fixture
def hostile(tmp_path):
    """The warpgroups capture whose sidecar names its events and groups as an attacker would."""
    buf = tmp_path / "hostile.bin"
    buf.write_bytes(sample("warpgroups").read_bytes())
    meta = sample_meta("warpgroups")
    meta["event_names"] = [f"load{CLEAR}{TITLE}", f"mma{LINK}"]
    meta["group_names"] = [f"g0{CLEAR}", f"g1{LINK}"]
    meta["kernel"] = f"warpgroups{TITLE}"
    (tmp_path / "hostile.json").write_text(json.dumps(meta))
    return buf


def _shown_safely(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text  # nothing reaches the terminal as a control sequence
    assert "\\x1b[2J" in text or "\\x1b]0;pwned" in text  # what the name holds is still visible
    assert "file:///etc/passwd" not in text or "[link=file:///etc/passwd]" in text  # markup shown as text


def test_printable_escapes_control_characters_only():
    assert printable("load") == "load" and printable("µs → ≥") == "µs → ≥"
    assert printable(f"a{CLEAR}b") == "a\\x1b[2Jb"
    assert printable("x\x9b31m\u202egnp.exe") == "x\\x9b31m\\u202egnp.exe"
    assert printable("a\nb", keep_newlines=True) == "a\nb" and printable("a\nb") == "a\\x0ab"
    assert md_cell("a|b<img src=x>") == "a\\|b&lt;img src=x>" and md_cell("<= 1.2") == "<= 1.2"
    assert xml_safe("ok\x1b\x00") == "ok\\x1b\\x00"


@pytest.mark.slow
@pytest.mark.parametrize("args", [["analyze"], ["analyze", "--markdown"], ["inspect"], ["convert", "-o", None]])
def test_hostile_names_never_reach_the_terminal_raw(hostile, capsys, args, tmp_path):
    args = [str(tmp_path / "t.perfetto-trace") if a is None else a for a in args]
    assert main([args[0], str(hostile), *args[1:]]) == 0
    out, err = capsys.readouterr()
    if args[0] != "convert":
        _shown_safely(out)
    assert "\x1b" not in out + err


def test_hostile_names_in_the_query_table(hostile, capsys):
    assert main(["query", str(hostile), "select distinct name from slice order by name"]) == 0
    out = capsys.readouterr().out
    _shown_safely(out)
    assert "[link=file:///etc/passwd]click[/link]" in out


def test_hostile_names_in_error_messages(tmp_path, capsys):
    rc = main(["query", str(sample("warpgroups")), f"select * from no_such_table_{CLEAR}"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2J" in err


def test_junit_xml_always_parses(hostile, tmp_path, capsys):
    junit = tmp_path / "junit.xml"
    md = tmp_path / "summary.md"
    rc = main(["check", str(hostile), "--rule", "*.wall_us < 0", "--junit", str(junit), "--markdown", str(md)])
    assert rc == 1
    root = ET.parse(junit).getroot()
    names = [c.get("name") for c in root.iter("testcase")]
    assert any("\\x1b[2J" in n for n in names) and all("\x1b" not in n for n in names)
    assert "\x1b" not in md.read_text() and "<img" not in md.read_text()
    _shown_safely(capsys.readouterr().out)


# -- temporary files -----------------------------------------------------------------------------------------


def test_a_planted_symlink_beside_the_output_is_never_written_through(tmp_path):
    from ktrace.export.writer import write_chunks

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "t.perfetto-trace"
    # The name the writer used to pick (OUT.tmpPID) and a few guesses around it.
    for name in [f"{out.name}.tmp{os.getpid()}", f"{out.name}.tmp{os.getpid()}.part", f"{out.name}.tmp"]:
        (tmp_path / name).symlink_to(victim)
    assert write_chunks(out, [b"trace bytes"]) == 11
    assert victim.read_text() == "precious"
    assert out.read_bytes() == b"trace bytes" and not out.is_symlink()
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_temp_files_of_a_killed_run_are_removed_by_the_next(tmp_path):
    from ktrace.export.writer import write_chunks

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "t.perfetto-trace"
    stale = tmp_path / f"{out.name}.tmp{dead.pid}.abc123.part"
    stale.write_bytes(b"x" * 1000)
    mine = tmp_path / f"{out.name}.tmp{os.getpid()}.other.part"  # a live process's (this one): kept
    mine.write_bytes(b"y")
    write_chunks(out, [b"z"])
    assert not stale.exists() and mine.exists()


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_remove_the_temporary_trace(tmp_path, sig):
    """``ktrace analyze BUF`` writes a temporary trace in $TMPDIR; killing it must not leave it behind."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = dict(os.environ, TMPDIR=str(tmpdir))
    p = subprocess.Popen([sys.executable, "-c", KTRACE_SAYING_QUERIES, "query", str(sample("warpgroups")), ENDLESS],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    read_until_querying(p, "WITH RECURSIVE")  # into the query, its temporary trace written
    assert p.poll() is None and list(tmpdir.glob("ktrace-*/*.perfetto-trace"))
    p.send_signal(getattr(signal, sig))
    _, err = p.communicate(timeout=30)
    assert p.returncode == 128 + getattr(signal, sig), err
    assert "Traceback" not in err
    assert list(tmpdir.iterdir()) == []


ENDLESS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"


# -- outputs that would destroy inputs, and outputs that cannot be written -------------------------------------


@pytest.fixture
def capture(tmp_path):
    buf = tmp_path / "x.bin"
    buf.write_bytes(sample("warpgroups").read_bytes())
    (tmp_path / "x.json").write_text(json.dumps(sample_meta("warpgroups")))
    return buf


@pytest.mark.parametrize("target", ["x.bin", "x.json", "./sub/../x.bin", "link.bin"])
def test_output_onto_the_input_is_refused(capture, capsys, target):
    (capture.parent / "sub").mkdir()
    (capture.parent / "link.bin").symlink_to(capture)
    before = {p.name: p.read_bytes() for p in capture.parent.glob("x.*")}
    assert main(["convert", str(capture), "-o", str(capture.parent / target)]) == 2
    err = capsys.readouterr().err
    assert "would destroy it" in err and "choose another -o" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in capture.parent.glob("x.*")} == before


def test_merge_onto_one_of_its_inputs_is_refused(capture, capsys, tmp_path):
    other = tmp_path / "y.bin"
    other.write_bytes(capture.read_bytes())
    before = capture.read_bytes()
    assert main(["merge", str(capture), str(other), "--align", "start", "-o", str(capture)]) == 2
    assert "would destroy it" in capsys.readouterr().err
    assert capture.read_bytes() == before


@pytest.mark.parametrize("case", ["folder", "missing parent", "read-only folder"])
def test_output_that_cannot_be_written_exits_2_naming_it(capture, capsys, tmp_path, case):
    if case == "folder":
        out, needle = tmp_path, "is a folder"
    elif case == "missing parent":
        out, needle = tmp_path / "no" / "such" / "t.perfetto-trace", "does not exist"
    else:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        if os.access(ro, os.W_OK):
            pytest.skip("root can write a read-only folder")
        out, needle = ro / "t.perfetto-trace", "permission denied"
    assert main(["convert", str(capture), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and str(out) in err and "Traceback" not in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_exits_2_with_the_fix(capture, tmp_path, monkeypatch):
    """Simulated by making the temp file /dev/full's twin: every write fails with ENOSPC."""
    import tempfile as tempfile_mod

    from ktrace.core.errors import InputError
    from ktrace.export import atomic as writer

    real = tempfile_mod.mkstemp

    def full(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        os.dup2(os.open("/dev/full", os.O_WRONLY), fd)
        return fd, name

    monkeypatch.setattr(tempfile_mod, "mkstemp", full)
    out = tmp_path / "t.perfetto-trace"
    with pytest.raises(InputError, match=r"t\.perfetto-trace: cannot write the trace \(No space left on device\); "
                                         r"free some space"):
        writer.write_chunks(out, [b"x" * (1 << 20)])
    assert not out.exists() and not list(tmp_path.glob("*.part"))


def test_file_size_limit_exits_2(capture, tmp_path):
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); "
            "from ktrace.cli import main; sys.exit(main(sys.argv[1:]))")
    out = tmp_path / "t.perfetto-trace"
    p = subprocess.run([sys.executable, "-c", code, "convert", str(capture), "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "File too large" in p.stderr and "ulimit -f" in p.stderr and "Traceback" not in p.stderr


def test_plot_into_a_folder_exits_2(capture, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["analyze", str(capture), "--plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot write the plot" in err and "Traceback" not in err


# -- sidecar values out of range ----------------------------------------------------------------------------


def _with_sidecar(capture, text: bytes):
    capture.with_suffix(".json").write_bytes(text)
    return capture


def _meta(**changes) -> bytes:
    meta = sample_meta("warpgroups")
    for path, value in changes.items():
        d = meta
        *head, last = path.split("__")
        for k in head:
            d = d.setdefault(k, {})
        d[last] = value
    return json.dumps(meta).encode()


@pytest.mark.parametrize("text, needle", [
    (_meta(timer__tick_ns=1e30), "'timer.tick_ns' is 1e+30"),
    (_meta(timer_tick_ns=2**64 + 5), "'timer_tick_ns' is 18446744073709551621"),
    (_meta(timer__tick_ns=0), "between 1 and"),
    (_meta(host_launch_unix_ns=-5), "'host_launch_unix_ns' is -5"),
    (_meta(anything_else=2**64 + 5), "'anything_else' is 18446744073709551621"),
    (_meta(anything_else=[1, {"x": -2**63 - 1}]), "'anything_else[1].x' is -9223372036854775809"),  # 19 digits
    (_meta(grid=[2**40, 1, 1]), "'grid'"),
    (_meta(device__multiprocessors=10**12), "'device.multiprocessors'"),
    (_meta(event_names=["x" * 100_000, "mma"]),
     "'event_names'[0] is 100,000 characters long; a name may have at most 256"),
    (_meta(group_names=["g"] * 100_000), "at most 4,096"),
    (_meta(kernel="k" * 1_000_000), "'kernel' is 1,000,000 characters long"),
    (_meta().replace(b'"num_blocks": 264', b'"num_blocks": NaN'), "NaN is not a number JSON allows"),
    (_meta().replace(b'"num_blocks": 264', b'"num_blocks": Infinity'), "Infinity is not a number JSON allows"),
    (b'{"a": ' * 100_000 + b"1" + b"}" * 100_000, "nested too deeply"),
    (b'{"kernel": "\xff\xfe"}', "not UTF-8"),
])
@pytest.mark.slow
def test_sidecar_values_out_of_range_exit_2(capture, capsys, text, needle):
    _with_sidecar(capture, text)
    for args in (["inspect", str(capture)], ["analyze", str(capture)]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert needle in err and "x.json" in err and "--no-sidecar" in err and "Traceback" not in err


# -- rules files out of range ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, needle", [
    (b'rules = ["kernel.wall_us <= 1"]\n# \xff\xfe\n', "not UTF-8"),
    (b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
    (b"x = " + b"{a=" * 100_000 + b"1" + b"}" * 100_000 + b"\n", "nested too deeply"),
    (b'rules = ["kernel.wall_us <= 1e400"]\n', "too large to be a number"),
    (b'rules = ["kernel.wall_us <= baseline * 1e400"]\n', "too large to be a number"),
    (b'rules = [nan]\n', "not nan"),
])
def test_rules_file_values_out_of_range_exit_2(tmp_path, capsys, text, needle):
    rules = tmp_path / "rules.toml"
    rules.write_bytes(text)
    assert main(["check", str(sample("warpgroups")), "--rules", str(rules)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "rules.toml" in err and "Traceback" not in err


def test_long_names_from_the_command_line_or_a_names_file_exit_2(tmp_path, capsys):
    names = tmp_path / "names.txt"
    names.write_text("x" * 10_000 + "\nmma\n")
    for events in ["x" * 10_000 + ",mma", f"@{names}"]:
        assert main(["inspect", str(sample("warpgroups")), "--events", events]) == 2
        assert "10,000 characters long; a name may have at most 256" in capsys.readouterr().err
    names.write_bytes(b"\xff\xfe\n")
    assert main(["inspect", str(sample("warpgroups")), "--events", f"@{names}"]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_big_endian_npy_holds_the_same_records(tmp_path):
    import numpy as np

    from ktrace.api import inspect

    words = np.fromfile(sample("warpgroups"), dtype="<u8")
    np.save(tmp_path / "be.npy", words.astype(">u8"))
    np.save(tmp_path / "le.npy", words)
    be, le = inspect(tmp_path / "be.npy", sidecar=False), inspect(tmp_path / "le.npy", sidecar=False)
    assert be["records"] == le["records"] > 0 and be["slices"] == le["slices"]


def test_impossible_header_names_the_real_options(tmp_path, capsys):
    buf = tmp_path / "zero.bin"
    buf.write_bytes(bytes(8 * 16))
    assert main(["inspect", str(buf)]) == 2
    err = capsys.readouterr().err
    assert "--num-blocks and --num-groups" in err


def test_a_group_index_of_5000_digits_exits_2(capsys):
    assert main(["check", str(sample("warpgroups")), "--rule", "mma@" + "1" * 5000 + ".wall_us <= 1"]) == 2
    assert "give a warp group index" in capsys.readouterr().err


@pytest.mark.slow
def test_fuzzed_sidecars_and_rules_files_never_crash():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_inputs.py"), "--cases", "300", "--seed", "7"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.splitlines()[-1])["crashes"] == 0


def test_writing_a_sidecar_never_follows_a_planted_symlink(tmp_path):
    from ktrace.core.sidecar import read_sidecar, write_sidecar

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "cap.json"
    (tmp_path / f"cap.json.{os.getpid()}.tmp").symlink_to(victim)  # the name it used to write through
    write_sidecar(out, {"kernel": "k"})
    assert victim.read_text() == "precious" and read_sidecar(out) == {"kernel": "k"}
