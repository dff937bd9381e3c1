"""GPU tests: they compile, launch and decode real kernels, so they need PyCUDA and a CUDA GPU and are
skipped cleanly anywhere else (CI never has a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "samples" / "kernels"


def _gpu_reason() -> str | None:
    try:
        from ktrace.capture._cuda import ensure_context

        ensure_context()
    except Exception as e:  # noqa: BLE001 - any failure to get a GPU means: skip
        return str(e)
    return None


_REASON = _gpu_reason()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.gpu)
            if _REASON is not None:
                item.add_marker(pytest.mark.skip(reason=f"needs a CUDA GPU and PyCUDA: {_REASON}"))


def _capture_cli() -> list[str]:
    """``ktrace`` with the capture commands: the main CLI once it has them, else their own entry point."""
    from ktrace.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert "run" in sub.choices
    return [sys.executable, "-m", "ktrace"]


def headers() -> list[str]:
    from ktrace.capture.build import find_flashinfer_include

    return ["ktrace"] + (["flashinfer"] if find_flashinfer_include()[0] is not None else [])


def run_capture(tmp_path: Path, driver: str, header: str, *driver_args: str, reps: int = 5, timeout: int = 300):
    """``ktrace run --header H DRIVER`` into tmp_path: (returncode, stdout, stderr)."""
    cmd = [*_capture_cli(), "run", "--out", str(tmp_path), "--header", header, "--suffix", f"_{header}",
           "--reps", str(reps), "--warmup", "2", "--no-report", str(KERNELS / driver), *driver_args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path)
    return p.returncode, p.stdout, p.stderr


def sidecar(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / f"{name}.json").read_text())
