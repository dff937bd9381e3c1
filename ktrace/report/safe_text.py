"""Text from captures (event and group names, kernel names, SQL results) made safe to show a person.

Names come from files anyone can write: a sidecar, a trace. Shown raw, ``ESC[2J`` would clear the terminal, an
OSC sequence retitle the window or plant a hyperlink, and rich markup (``[link=file:///etc/passwd]``) become
live. So every human-facing output goes through here: control characters are shown escaped (``\\x1b``), the
console never parses markup in what it prints, Markdown cells escape ``|`` and HTML, and XML holds only the
characters XML 1.0 allows. JSON output is left exact (``json`` escapes control characters itself).
"""

from __future__ import annotations

import re

__all__ = ["printable", "md_cell", "xml_safe", "safe_console"]

# C0 controls, DEL, C1 controls (0x9b is CSI on some terminals) and the bidirectional overrides that make text
# read differently from how it is stored.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
# What XML 1.0 cannot hold at all, even escaped.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``); ``keep_newlines`` leaves line
    breaks and tabs alone (for whole reports, not single names)."""
    return (_UNSAFE_KEEP_LINES if keep_newlines else _UNSAFE).sub(_escape, str(text))


def md_cell(text: object) -> str:
    """One Markdown table cell: printable, ``|`` escaped, no live HTML (a ``<`` that could open a tag is
    escaped; ``<= 1.2`` stays as it reads)."""
    return _TAG_START.sub("&lt;", printable(text).replace("|", "\\|"))


def xml_safe(text: object) -> str:
    """``text`` with the characters XML 1.0 cannot hold shown escaped (``\\x1b``)."""
    return _NOT_XML.sub(_escape, str(text))


def safe_console(**kwargs):
    """A rich Console that never interprets markup in strings and shows control characters escaped."""
    from rich.console import Console
    from rich.segment import Segment

    class _SafeConsole(Console):
        def _render_buffer(self, buffer):
            # The segments' text is what the report holds; their styles become escape codes only after this.
            return super()._render_buffer(
                s if s.control else Segment(printable(s.text, keep_newlines=True), s.style, s.control)
                for s in buffer)

    kwargs.setdefault("markup", False)
    kwargs.setdefault("emoji", False)
    return _SafeConsole(**kwargs)
