"""--json and --markdown said and done the same way by every command, and what each command reads.

Alone, ``--json`` / ``--markdown`` print the JSON or the Markdown to stdout instead of the text report. With a
file, written ``--json=FILE`` / ``--markdown=FILE`` (the '=' is what gives the file: a capture after the option is
never taken for it, so ``check --markdown buf.bin`` checks buf.bin), the text report is still printed; JSON
replaces FILE, Markdown is appended to it ($GITHUB_STEP_SUMMARY collects several).

The old spelling ``--markdown FILE`` (diff and check took an optional file) still works where the word cannot
be a capture: a name ending in .md or .markdown, or one holding "summary" ($GITHUB_STEP_SUMMARY), that is not a
capture by its name. ``--json out.json`` where out.json does not exist is refused with the '=' form to use.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import InputError

__all__ = ["BUFFER_KINDS", "ANY_KINDS", "FORMAT_OPTIONS", "format_options", "explicit_formats", "one_stdout", "emit",
           "write_text"]

# What the input resolver reads, said the same way in every help text (ktrace.core.filetypes decides).
BUFFER_KINDS = ("a profiler buffer (.bin, .bin.gz, .npy), a Triton Proton trace (.chrome_trace, .chrome_trace.gz, "
                "or Proton's .json) or an NVIDIA IKET trace (.trace.json, .trace.json.gz)")
ANY_KINDS = f"a Perfetto trace (.perfetto-trace, .pftrace), {BUFFER_KINDS}"

FORMAT_OPTIONS = ("--json", "--markdown")


def format_options(p, json_what: str, markdown: str | None = None, report: str = "the report") -> None:
    """--json[=FILE] and, when ``markdown`` says what it prints, --markdown[=FILE], on a subparser."""
    p.add_argument("--json", metavar="FILE", nargs="?", const="-",
                   help=f"print {json_what} as JSON instead of {report}; --json=FILE writes it to FILE and still "
                   f"prints {report}")
    if markdown:
        p.add_argument("--markdown", metavar="FILE", nargs="?", const="-",
                       help=f"print {markdown} as Markdown (for a PR comment) instead of {report}; --markdown=FILE "
                       f"appends it to FILE (e.g. $GITHUB_STEP_SUMMARY) and still prints {report}")


def explicit_formats(argv: list[str]) -> list[str]:
    """argv with a bare --json or --markdown made --json=- (stdout), so that the word after it is read as a
    capture, never as its file; the old ``--markdown FILE`` kept where FILE cannot be a capture (module doc)."""
    out: list[str] = []
    skip = False
    for i, word in enumerate(argv):
        if skip:
            skip = False
            continue
        if word == "--":
            return out + list(argv[i:])
        if word in FORMAT_OPTIONS:
            nxt = str(argv[i + 1]) if i + 1 < len(argv) else ""
            if word == "--markdown" and _markdown_file(nxt):
                out.append(f"--markdown={nxt}")
                skip = True
                continue
            if word == "--json" and _json_file(nxt):
                raise InputError(f"--json {nxt}: give the file as --json={nxt} (with '='); --json alone prints to "
                                 "stdout, and the word after it is read as a capture")
            word += "=-"
        out.append(word)
    return out


def _capture_like(word: str) -> bool:
    from ..core.filetypes import BUFFER_SUFFIXES, PROTON_SUFFIXES, TRACE_SUFFIXES

    return word.lower().endswith(tuple(BUFFER_SUFFIXES) + tuple(TRACE_SUFFIXES) + tuple(PROTON_SUFFIXES))


def _markdown_file(word: str) -> bool:
    name = Path(word).name.lower()
    if not name or word.startswith("-") or _capture_like(word):
        return False
    return name.endswith((".md", ".markdown")) or "summary" in name or word in ("/dev/stdout", "/dev/stderr")


def _json_file(word: str) -> bool:
    return (not word.startswith("-") and word.lower().endswith(".json") and not word.lower().endswith(".trace.json")
            and not os.path.lexists(word))


def one_stdout(a) -> None:
    """Refuse --json and --markdown both to stdout (one of them needs a FILE)."""
    if getattr(a, "json", None) == "-" and getattr(a, "markdown", None) == "-":
        raise InputError("--json and --markdown both print to stdout; give one of them a file: --json=FILE or "
                         "--markdown=FILE")


def emit(a, text, json=None, markdown=None) -> None:
    """The output as --json / --markdown ask (each a callable returning the text, called only when asked): a
    FILE form written there; then stdout gets the JSON or the Markdown asked without a file, else ``text()``."""
    one_stdout(a)
    j, m = getattr(a, "json", None), getattr(a, "markdown", None)
    if json and j not in (None, "-"):
        write_text(j, json())
    if markdown and m not in (None, "-"):
        from ._common import append

        append(m, markdown(), "Markdown summary")
    if json and j == "-":
        print(json())
    elif markdown and m == "-":
        print(markdown())
    else:
        text()


def write_text(path: str, text: str) -> None:
    """Write ``text`` (one trailing newline) to ``path`` atomically, in place of what it held; never through a
    symbolic link to a file (ktrace.core.outputs)."""
    from ..core.outputs import append_file, planted_link, standard_stream, write_atomically

    if standard_stream(path):  # --json=/dev/stderr: printed there (stdout was made --json alone before)
        append_file(path, text if text.endswith("\n") else text + "\n", "JSON file")
        return
    if planted_link(path):
        raise InputError(f"{path}: is a symbolic link to a file; ktrace never writes through one: remove it or "
                         "choose another file")
    write_atomically(path, (text if text.endswith("\n") else text + "\n").encode("utf-8"), "JSON file")
