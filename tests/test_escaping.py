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
        if cmd[0] == "query":  # the trace it queries holds the name with its bidi control made visible
            assert "\u202e" not in text and "\\u202e" in text
        else:
            assert "\u202e" in text  # the value itself is exact


def test_paths_printed_by_convert_are_escaped(evil, tmp_path):
    out = tmp_path / "t\x1b[2J.perfetto-trace"
    rc, stdout, err = run_ktrace("convert", evil, "-o", out)
    assert rc == 0, err
    assert "\x1b" not in stdout and "t\\x1b[2J.perfetto-trace" in stdout


# -- the code points every output escapes, CSV formulas, links and the HTML repr --------------------------------

SNEAKY = "lo\u2028ad\u2029x\u061cy [link](https://evil.example/a) www.evil.example"


@pytest.fixture(scope="module")
def sneaky(tmp_path_factory):
    d = tmp_path_factory.mktemp("sneaky")
    buf = d / "s.bin"
    shutil.copy(sample("warpgroups_ktrace"), buf)
    meta = sample_meta("warpgroups_ktrace")
    meta["kernel"] = "k\x1b[2J\x07\u202e"
    meta["event_names"] = [SNEAKY, "=HYPERLINK(\"https://evil.example\",\"x\")"]
    (d / "s.json").write_text(json.dumps(meta))
    return buf


@pytest.mark.parametrize("code_point", ["\u061c", "\u2028", "\u2029", "\x1b", "\x07", "\u202e"])
def test_one_escaping_covers_the_separators_and_marks(code_point):
    from ktrace.core.jsonfmt import escape_raw
    from ktrace.report.safe_text import csv_cell, md_cell, md_text, printable

    shown = f"\\u{ord(code_point):04x}" if ord(code_point) > 0xff else f"\\x{ord(code_point):02x}"
    for escape in (printable, md_cell, md_text, csv_cell, lambda t: printable(t, keep_newlines=True)):
        assert escape(f"a{code_point}b") == f"a{shown}b"
    if ord(code_point) > 0x7f:  # JSON writes what a terminal or a viewer acts on as \uXXXX (the value unchanged)
        assert escape_raw(json.dumps(f"a{code_point}b", ensure_ascii=False)) == f'"a\\u{ord(code_point):04x}b"'


def test_a_markdown_table_row_never_splits_and_names_hold_no_link(sneaky):
    rc, md, err = run_ktrace("check", sneaky, "--rule", "*.wall_us <= 1e12", "--markdown")
    assert rc == 0, err
    assert "\u2028" not in md and "\u2029" not in md and "\u061c" not in md and "lo\\u2028ad\\u2029x\\u061cy" in md
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert rows and all(line.rstrip().endswith("|") for line in rows)  # every row whole on its line
    assert "](https://" not in md and "https://evil" not in md and "www.evil" not in md
    assert "\\[link\\]" in md  # still readable


@pytest.mark.parametrize("fmt", [["--markdown"], []])
def test_analyze_reports_hold_no_raw_separator_nor_link(sneaky, fmt):
    rc, out, err = run_ktrace("analyze", sneaky, *fmt)
    assert rc == 0, err
    assert not any(c in out for c in "\u2028\u2029\u061c\x1b\x07\u202e") and "\\u2028" in out
    if fmt:
        assert "](https://" not in out and "https://evil" not in out


def test_csv_cells_never_start_a_formula_but_numbers_stay_numbers(sneaky):
    sql = ("select distinct name from slice where name like '=%' union all select '+cmd' union all select '-2+3' "
           "union all select '@SUM(A1)' union all select '-1.5' union all select -1.5 union all select 'a-b'")
    rc, out, err = run_ktrace("query", sneaky, sql, "--csv")
    assert rc == 0, err
    cells = set(out.splitlines()[1:])
    assert {"'+cmd", "'-2+3", "'@SUM(A1)", "-1.5", "a-b"} <= cells, cells  # the text "-1.5" and the number -1.5
    assert any(c.startswith("\"'=HYPERLINK(") for c in cells), cells
    assert not any(c[:1] in "=+@" or c[:2] == '"=' for c in cells)


def test_the_html_repr_shows_controls_and_overrides_escaped(sneaky):
    import ktrace

    book = ktrace.api.rule_book(["kernel.wall_us <= 1e12"])
    for h in (ktrace.analyze(sneaky)._repr_html_(), ktrace.api.check(sneaky, book)._repr_html_()):
        assert not any(c in h for c in "\x1b\x07\u202e\u2028\u061c"), h
        assert "\\x1b[2J\\x07\\u202e" in h
