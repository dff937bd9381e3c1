"""Inputs written by someone else: names that try to drive the terminal, values out of range, outputs that
point at inputs. Each behaves as a careful user expects: shown escaped, refused with exit 2, or left alone."""

import json
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
