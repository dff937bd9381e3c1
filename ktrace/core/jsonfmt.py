"""JSON for people and for large tables at once: nested objects indented, and each row of a table (a list
of flat objects) on one line, written by the json module's C encoder. ``json.dumps(indent=2)`` runs the
pure-Python encoder over every value, which took seconds for the instance table of a long capture; this
takes a fraction of that. The text parses to the same value as json.dumps gives, and is deterministic."""

from __future__ import annotations

import json
import re
from json.encoder import encode_basestring  # what the encoder writes a str as, with ensure_ascii=False

__all__ = ["dumps", "escape_raw", "EncodedRows", "EncodedLines", "encode_basestring", "no_constant", "int_or_none"]

# What json leaves raw with ensure_ascii=False and a terminal or an editor would act on: DEL, the C1 controls
# (0x9b is CSI on some terminals), the bidirectional controls that make text read differently from how it is
# stored, and the line separators JavaScript reads as line ends. Only ever inside strings: escaping them as
# \uXXXX keeps the same value.
_RAW_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def no_constant(name: str):
    """``json.loads``' parse_constant for input files: NaN and Infinity refused (ValueError), as JSON has none."""
    raise ValueError(f"{name} is not a number JSON allows")


def int_or_none(v) -> int | None:
    """A JSON number as an int (a float cut toward 0), else None (booleans, strings, null)."""
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def escape_raw(text: str) -> str:
    """JSON text with the characters above written as \\uXXXX escapes (the value it parses to is unchanged)."""
    if text.isascii() and "\x7f" not in text:  # the common case, tested at memory speed
        return text
    return _RAW_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dumps(obj, indent: int | None = 2, **options) -> str:
    """json.dumps(obj, indent=indent, **options), with every list of flat objects or of scalars written one
    element per line."""
    if indent is None:
        return escape_raw(json.dumps(obj, **options))
    encode = json.JSONEncoder(separators=(", ", ": "), **options).encode

    def flat(v) -> str:  # every string of the text is inside one piece: escaped piece by piece, the same text
        return escape_raw(encode(v))

    return _dump(obj, 0, " " * indent, flat)


class EncodedRows(tuple):
    """Rows of a table already written as JSON text, one flat object each, exactly as the flat encoder
    below writes a dict (``{"a": 1, "b": null}``): ``dumps`` puts them one per line as it would the dicts.
    Only ``dumps`` with an indent reads them (``Table.json_rows`` makes them)."""

    __slots__ = ()


class EncodedLines(tuple):
    """A table's rows as pieces of text, each piece rows of ``EncodedRows`` joined by newlines and already
    escaped (``escape_raw``); ``dumps`` writes them as it would the rows. A row's text holds no newline (the
    encoder writes one inside a string as \\n), so a piece is one call of str.replace away from its place in
    the text, where a row at a time was a Python step per row (``Table.json_lines``)."""

    __slots__ = ()


def _key(k) -> str:
    """A key as json.dumps writes it."""
    if isinstance(k, str):
        return k
    return json.dumps(k) if isinstance(k, (bool, type(None))) else json.dumps(k).strip('"')


def _is_flat(v) -> bool:
    return not isinstance(v, (dict, list, tuple))


def _dump(obj, level: int, pad: str, flat) -> str:
    out: list = []
    _write(obj, level, pad, flat, out.append)
    return "".join(out)  # one copy of the text: a concatenation per level copied a long table's rows each time


def _write(obj, level: int, pad: str, flat, put) -> None:
    """Appends the text of ``obj`` at nesting ``level`` to a list (``put``), piece by piece."""
    inner = pad * (level + 1)
    if isinstance(obj, dict):
        if not obj:
            put("{}")
            return
        put("{\n")
        for i, (k, v) in enumerate(obj.items()):
            put((",\n" if i else "") + inner + flat(_key(k)) + ": ")
            _write(v, level + 1, pad, flat, put)
        put("\n" + pad * level + "}")
        return
    if isinstance(obj, EncodedLines):
        pieces = [p for p in obj if p]
        if not pieces:
            put("[]")
            return
        put("[\n" + inner)
        for i, p in enumerate(pieces):
            if i:
                put(",\n" + inner)
            put(p.replace("\n", ",\n" + inner))
        put("\n" + pad * level + "]")
        return
    if isinstance(obj, EncodedRows):
        put("[\n" + ",\n".join(inner + escape_raw(row) for row in obj) + "\n" + pad * level + "]" if obj else "[]")
        return
    if isinstance(obj, (list, tuple)):
        if not obj:
            put("[]")
            return
        if all(_is_flat(v) or (isinstance(v, dict) and all(_is_flat(x) for x in v.values())) for v in obj):
            put("[\n" + ",\n".join(inner + flat(v) for v in obj) + "\n" + pad * level + "]")
            return
        put("[\n")
        for i, v in enumerate(obj):
            put((",\n" if i else "") + inner)
            _write(v, level + 1, pad, flat, put)
        put("\n" + pad * level + "]")
        return
    put(flat(obj))
