"""One escaping for every Markdown and terminal string: names from a capture (a sidecar anyone can write)
never become live HTML, a heading or an extra line in a report, never drive the terminal, and JSON keeps
their exact value with the characters a terminal acts on written as \\u escapes."""

import json
import re
import shutil

import pytest

from conftest import run_ktrace, sample, sample_meta

EVIL = "<img src=x onerror=alert(1)>\n## pwned\x1b]0;t\x07\u202egnp"


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    d = tmp_path_factory.mktemp("evil")
    buf = d / "e.bin"
    shutil.copy(sample("warpgroups_ktrace"), buf)
    meta = sample_meta("warpgroups_ktrace")
    meta["kernel"] = "k" + EVIL
    meta["event_names"] = ["load" + EVIL, "mma`</sub>"]
    (d / "e.json").write_text(json.dumps(meta))
    return buf


def _no_live_markdown(md: str) -> None:
    outside_code = re.sub(r"(`+)(?:(?!\1).)*\1", "", md)  # in a code span, <img> is text
    assert "<img" not in outside_code and "\x1b" not in md and "\u202e" not in md
    assert not re.search(r"^#+ pwned", md, re.M)  # a line break in a name never starts a heading
    assert "&lt;img src=x onerror=alert(1)>" in md  # what the name holds is still readable


def _no_fake_lines(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert not any(line.startswith("## pwned") for line in text.splitlines())
    assert "\\x0a## pwned" in text


@pytest.mark.slow
def test_analyze_markdown_has_no_live_html_and_no_injected_heading(evil):
    rc, md, err = run_ktrace("analyze", evil, "--markdown", "--all")
    assert rc == 0, err
    _no_live_markdown(md)
    assert "`mma`</sub>`" not in md  # a backtick never closes the code span early


@pytest.mark.slow
def test_check_and_diff_markdown_escape_names(evil, tmp_path):
    rc, md, err = run_ktrace("check", evil, "--rule", "kernel.wall_us <= 1e9", "--markdown")
    assert rc == 0, err
    _no_live_markdown(md)
    rc, md, err = run_ktrace("diff", evil, evil, "--markdown")
    assert rc == 0, err
    _no_live_markdown(md)


@pytest.mark.parametrize("cmd", [["analyze"], ["inspect"], ["check", "--rule", "kernel.wall_us <= 1e9"]])
@pytest.mark.slow
def test_text_reports_show_line_breaks_in_names_escaped(evil, cmd):
    rc, out, err = run_ktrace(cmd[0], evil, *cmd[1:])
    assert rc == 0, err
    _no_fake_lines(out)


@pytest.mark.slow
def test_query_table_and_csv_never_pass_escapes_to_the_terminal(evil):
    sql = "select distinct name from slice order by name"
    rc, out, _ = run_ktrace("query", evil, sql)
    assert rc == 0 and "\x1b" not in out and "\u202e" not in out
    rc, out, _ = run_ktrace("query", evil, sql, "--csv")
    assert rc == 0 and "\x1b" not in out and "\\x1b]0;t" in out


@pytest.mark.slow
def test_json_keeps_the_value_and_escapes_bidi_controls(evil):
    for cmd in (["analyze", "--json"], ["query", "select distinct name from slice", "--json"],
                ["check", "--rule", "kernel.wall_us <= 1e9", "--json"], ["diff", "{evil}", "--json"]):
        cmd = [str(evil) if c == "{evil}" else c for c in cmd]
        rc, out, err = run_ktrace(cmd[0], evil, *cmd[1:])
        assert rc == 0, err
        assert "\u202e" not in out and "\\u202e" in out
        text = json.dumps(json.loads(out), ensure_ascii=False)
        assert "\u202e" in text  # the value itself is exact


def test_paths_printed_by_convert_are_escaped(evil, tmp_path):
    out = tmp_path / "t\x1b[2J.perfetto-trace"
    rc, stdout, err = run_ktrace("convert", evil, "-o", out)
    assert rc == 0, err
    assert "\x1b" not in stdout and "t\\x1b[2J.perfetto-trace" in stdout
