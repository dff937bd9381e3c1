"""Command-line handlers for the analysis commands (analyze, query), kept apart from cli.py's decoding ones."""

from __future__ import annotations

__all__ = ["add_analysis_commands", "HANDLERS"]

HANDLERS: dict = {}


def add_analysis_commands(sub, decode_options) -> None:
    """Register the analysis subcommands on the ``ktrace`` parser."""
