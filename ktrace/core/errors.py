"""ktrace's exceptions: one root, a few kinds, each mapped to a fixed exit code.

Every message says what is wrong and what to do about it, e.g.
``"buf.bin: 13 bytes is not a whole number of 8-byte records (truncated copy?)"``.
"""

from __future__ import annotations

__all__ = [
    "KtraceError",
    "InputError",
    "EnvironmentMissing",
    "GateFailed",
    "EXIT_OK",
    "EXIT_GATE",
    "EXIT_INPUT",
    "EXIT_ENV",
]

EXIT_OK = 0
EXIT_GATE = 1
EXIT_INPUT = 2
EXIT_ENV = 3


class KtraceError(Exception):
    """Root of every error ktrace raises on purpose."""

    exit_code = EXIT_INPUT


class InputError(KtraceError):
    """The user's input (a file, an option, a names list) is wrong. Exit 2."""

    exit_code = EXIT_INPUT


class EnvironmentMissing(KtraceError):
    """Something the machine lacks: a GPU, pycuda, an engine that cannot start. Exit 3."""

    exit_code = EXIT_ENV


class GateFailed(KtraceError):
    """A CI gate failed. Exit 1."""

    exit_code = EXIT_GATE
