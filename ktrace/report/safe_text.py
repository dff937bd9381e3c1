"""Text from captures (event and group names, kernel names, SQL results) made safe to show a person.

Names come from files anyone can write: a sidecar, a trace. Shown raw, ``ESC[2J`` would clear the terminal, an
OSC sequence retitle the window or plant a hyperlink, and rich markup (``[link=file:///etc/passwd]``) become
live. So every human-facing output goes through here: control characters are shown escaped (``\\x1b``), the
console never parses markup in what it prints, Markdown cells escape ``|`` and HTML, and XML holds only the
characters XML 1.0 allows. In Markdown outside tables (headings, bullets, story lines), a name can neither
start a line (its line breaks are shown escaped) nor open an HTML tag, an image or a code span. JSON output
keeps every value exact (``jsonfmt.escape_raw`` writes the raw characters a terminal would act on as
``\\uXXXX``). CSV cells keep their line breaks (the csv module quotes them); other controls are shown escaped.
"""

from __future__ import annotations

import re
import sys

__all__ = ["printable", "md_cell", "md_text", "md_code", "csv_cell", "json_text", "plot_text", "xml_safe", "safe_console",
           "for_stream"]

from ..core.terminal import escape_match, printable, visible_controls  # noqa: F401  (printable: shared)

_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_AUTOLINK = re.compile(r"(?i)\b(?:https?|ftp|mailto|file):|\bwww\.")
# What a spreadsheet reads as a formula when a cell starts with it (and tab / carriage return, which some
# strip before looking); a plain number such as -1.5 or +3e4 stays a number.
_FORMULA_START = frozenset("=+-@\t\r")
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
# What XML 1.0 cannot hold at all, even escaped.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def md_cell(text: object) -> str:
    """One Markdown table cell: printable, ``|`` escaped, no live HTML (a ``<`` that could open a tag is
    escaped; ``<= 1.2`` stays as it reads)."""
    return md_text(text).replace("|", "\\|")


def md_text(text: object) -> str:
    """Text inside a Markdown line (a heading, a bullet, a sentence): printable (a line break is shown as
    ``\\x0a``, never starting a ``##`` heading), no live HTML, no image or link (``[`` and ``]`` escaped), no
    autolinked address (``https://`` and ``www.`` written with an entity the autolinker does not match)."""
    t = _TAG_START.sub("&lt;", printable(text)).replace("[", "\\[").replace("]", "\\]")
    return _AUTOLINK.sub(lambda m: m.group()[:-1] + ("&#58;" if m.group().endswith(":") else "&#46;"), t)


def md_code(text: object) -> str:
    """``text`` as a Markdown code span: printable, fenced by more backticks than it holds in a row, so that
    nothing in it closes the span early."""
    t = printable(text)
    run = max((len(r) for r in re.findall("`+", t)), default=0)
    fence = "`" * (run + 1)
    pad = " " if t.startswith("`") or t.endswith("`") or not t.strip() else ""
    return f"{fence}{pad}{t}{pad}{fence}"


def csv_cell(value: object) -> object:
    """A CSV cell for a terminal and a spreadsheet: a string keeps its line breaks and tabs (the csv module
    quotes them), its other control characters shown escaped, and one that starts with ``=``, ``+``, ``-``,
    ``@`` (a formula to a spreadsheet) gets a leading ``'`` unless it is a plain number (``-1.5``); anything
    else as it is."""
    if not isinstance(value, str):
        return value
    text = printable(value, keep_newlines=True)
    if text[:1] in _FORMULA_START and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def json_text(text: str) -> str:
    """JSON text with the raw characters a terminal acts on (C1 controls, bidi overrides) as ``\\uXXXX``."""
    from ..core.jsonfmt import escape_raw

    return escape_raw(text)


def plot_text(text: object) -> str:
    """A name for a matplotlib title, label or tick: ``$`` escaped, so that a name like ``$\\frac{$`` is drawn
    as written, never parsed as mathtext (a parse error is a traceback at draw time)."""
    return str(text).replace("$", r"\$")


def xml_safe(text: object) -> str:
    """``text`` with the characters XML 1.0 cannot hold, and the bidirectional and format controls that would
    reorder the report's own text around a name, shown escaped (``\\x1b``, ``\\u202e``)."""
    return _NOT_XML.sub(escape_match, visible_controls(str(text)))


def _can_print(encoding: str, text: str) -> bool:
    try:
        text.encode(encoding or "utf-8")
        return True
    except (UnicodeEncodeError, LookupError):
        return False


# What the report writes beyond ASCII, and its ASCII spelling for a stream that cannot print it.
_ASCII = str.maketrans({"µ": "u", "…": "...", "—": "-", "–": "-", "×": "x", "≤": "<=", "≥": ">=", "→": "->",
                        "←": "<-", "≈": "~", "·": ".", "│": "|", "─": "-", "±": "+/-"})


def fit_encoding(text: str, encoding: str | None) -> str:
    """``text`` as a stream of ``encoding`` can show it: unchanged where it can; else the report's own symbols
    in ASCII (µs as us, … as ...) and anything else the encoding lacks as a backslash escape."""
    if _can_print(encoding, text):
        return text
    enc = encoding or "utf-8"
    try:
        return text.translate(_ASCII).encode(enc, "backslashreplace").decode(enc)
    except LookupError:
        return text.translate(_ASCII).encode("ascii", "backslashreplace").decode("ascii")


def for_stream(text: str, stream=None) -> str:
    """``text`` as a plain ``print`` to ``stream`` (default stdout) can show it (``fit_encoding``): µ (units
    are written µs, as ``core.units.format_ns`` and the console write them) becomes u, … becomes ..., where the
    stream's encoding cannot print them."""
    return fit_encoding(text, getattr(sys.stdout if stream is None else stream, "encoding", None))


def safe_console(**kwargs):
    """A rich Console that never interprets markup in strings and shows control characters escaped."""
    from rich.console import Console
    from rich.segment import Segment

    class _SafeConsole(Console):
        def _render_buffer(self, buffer):
            # The segments' text is what the report holds; their styles become escape codes only after this.
            # Units are written µs (core.units.format_ns); a terminal whose encoding cannot print µ gets us.
            enc = self.encoding
            return super()._render_buffer(
                s if s.control else Segment(fit_encoding(printable(s.text, keep_newlines=True), enc), s.style,
                                            s.control)
                for s in buffer)

    kwargs.setdefault("markup", False)
    kwargs.setdefault("emoji", False)
    return _SafeConsole(**kwargs)
