"""The launch metadata sidecar: ``buf.json`` next to ``buf.bin``.

Its schema is ``proto/ktrace/launch.proto`` (message ``LaunchMetadata``) in its JSON form; the captures in
samples/ follow it. Unknown keys are kept out of the way, not rejected, so older and richer sidecars load.
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import InputError

__all__ = ["sidecar_path", "read_sidecar", "read_names_file"]


def sidecar_path(buffer_path: str | Path) -> Path:
    """``dir/name.json`` for ``dir/name.bin`` (or ``.npy``)."""
    p = Path(buffer_path)
    return p.with_suffix(".json")


def read_sidecar(path: str | Path) -> dict:
    """The sidecar as a dict, or an InputError naming the file and the problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{p}: cannot read the metadata sidecar ({e.strerror})") from None
    try:
        meta = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{p}: the metadata sidecar is not valid JSON ({e}); fix it or pass --no-sidecar") from None
    if not isinstance(meta, dict):
        raise InputError(f"{p}: the metadata sidecar must be a JSON object; fix it or pass --no-sidecar")
    for key in ("event_names", "group_names"):
        v = meta.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise InputError(f"{p}: '{key}' must be a list of strings; fix it or pass --no-sidecar")
    return meta


def read_names_file(path: str | Path) -> list[str]:
    """Event or group names from a file: one per line, or a JSON list. Blank lines and '#' comments skip."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{p}: cannot read the names file ({e.strerror})") from None
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            names = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise InputError(f"{p}: names file looks like JSON but does not parse ({e})") from None
        if not all(isinstance(x, str) for x in names):
            raise InputError(f"{p}: a JSON names file must be a list of strings")
        return names
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
