"""JSON for people and for large tables at once: nested objects indented, and each row of a table (a list
of flat objects) on one line, written by the json module's C encoder. ``json.dumps(indent=2)`` runs the
pure-Python encoder over every value, which took seconds for the instance table of a long capture; this
takes a fraction of that. The text parses to the same value as json.dumps gives, and is deterministic."""

from __future__ import annotations

import json

__all__ = ["dumps"]


def dumps(obj, indent: int | None = 2, **options) -> str:
    """json.dumps(obj, indent=indent, **options), with every list of flat objects or of scalars written one
    element per line."""
    if indent is None:
        return json.dumps(obj, **options)
    flat = json.JSONEncoder(separators=(", ", ": "), **options).encode
    return _dump(obj, 0, " " * indent, flat)


def _key(k) -> str:
    """A key as json.dumps writes it."""
    if isinstance(k, str):
        return k
    return json.dumps(k) if isinstance(k, (bool, type(None))) else json.dumps(k).strip('"')


def _is_flat(v) -> bool:
    return not isinstance(v, (dict, list, tuple))


def _dump(obj, level: int, pad: str, flat) -> str:
    inner = pad * (level + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{flat(_key(k))}: {_dump(v, level + 1, pad, flat)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad * level + "}"
    if isinstance(obj, (list, tuple)):
        if not obj:
            return "[]"
        if all(_is_flat(v) or (isinstance(v, dict) and all(_is_flat(x) for x in v.values())) for v in obj):
            return "[\n" + ",\n".join(inner + flat(v) for v in obj) + "\n" + pad * level + "]"
        return "[\n" + ",\n".join(inner + _dump(v, level + 1, pad, flat) for v in obj) + "\n" + pad * level + "]"
    return flat(obj)
