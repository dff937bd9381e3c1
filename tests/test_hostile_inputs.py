"""Inputs written by someone else: names that try to drive the terminal, values out of range, outputs that
point at inputs. Each behaves as a careful user expects: shown escaped, refused with exit 2, or left alone."""

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from ktrace.cli import main
from ktrace.report.safe_text import md_cell, printable, xml_safe

from conftest import sample, sample_meta

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
    assert md_cell("a|b<img src=x>") == "a\\|b&lt;img src=x&gt;"
    assert xml_safe("ok\x1b\x00") == "ok\\x1b\\x00"


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
    code = "import sys; from ktrace.cli import main; sys.exit(main(sys.argv[1:]))"
    p = subprocess.Popen([sys.executable, "-c", code, "query", str(sample("warpgroups")), ENDLESS], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not list(tmpdir.glob("ktrace-*/*.perfetto-trace")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(3)  # into the query
    assert p.poll() is None and list(tmpdir.glob("ktrace-*/*.perfetto-trace"))
    p.send_signal(getattr(signal, sig))
    _, err = p.communicate(timeout=30)
    assert p.returncode == 128 + getattr(signal, sig), err
    assert "Traceback" not in err
    assert list(tmpdir.iterdir()) == []


ENDLESS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"
