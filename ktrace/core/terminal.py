"""What may reach a terminal: text shown with every control character escaped (``printable``).

Paths, error messages and names can come from files or settings anyone can write; shown raw, ``ESC[2J`` would
clear the terminal and an OSC sequence retitle the window. The bottom layer's own messages (the engine's cache
notes) go through here; ``report.safe_text`` builds every other human-facing output on it.
"""

from __future__ import annotations

import re

__all__ = ["printable", "escape_match", "excerpt", "FORMAT_CONTROLS", "visible_controls"]

# C0 controls, DEL, C1 controls (0x9b is CSI on some terminals), the bidirectional marks and overrides that make
# text read differently from how it is stored (U+061C the Arabic letter mark among them) and the line and
# paragraph separators U+2028/U+2029 (a line break to many viewers: a table row would split on one), and the
# invisible format controls (zero-width space, word joiner, byte order mark, ...).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
                     "\ufff9-\ufffb]")
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u2064"
                                "\u2066-\u206f\ufeff\ufff9-\ufffb]")


# The bidirectional and invisible format controls (and the line and paragraph separators): what makes text read
# differently from how it is stored. A name is data and keeps its other characters, but one of these in a trace
# or a JUnit report would reorder ktrace's own text after it ("\u202e" before "· block 17" shows it reversed).
FORMAT_CONTROLS = "\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
_FORMAT = re.compile(f"[{FORMAT_CONTROLS}]")


def visible_controls(text: str) -> str:
    """``text`` with every bidirectional or invisible format control shown as ``\\u202e``, the rest as it is:
    for names in what ktrace writes for other programs to show (a Perfetto trace, JUnit XML)."""
    return _FORMAT.sub(escape_match, text) if _FORMAT.search(text) else text


def escape_match(m: re.Match) -> str:  # one character of a regex match, as \x1b or \u202e
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``); ``keep_newlines`` leaves line
    breaks and tabs alone (for whole reports, not single names)."""
    return (_UNSAFE_KEEP_LINES if keep_newlines else _UNSAFE).sub(escape_match, str(text))


def excerpt(text: object, chars: int = 40) -> str:
    """At most the first ``chars`` characters of ``text``, printable, and when it is longer ``...`` and its
    length: what an error message quotes of a name or value that may be of any length (a 16M-character name
    must not make a 16 MB message)."""
    s = str(text) if not isinstance(text, str) else text
    if len(s) <= chars:
        return printable(s)
    return f"{printable(s[:chars])}... ({len(s):,} characters)"
