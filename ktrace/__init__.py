"""ktrace: per-block timelines of CUDA kernels instrumented with FlashInfer's profiler macros.

    import ktrace
    d = ktrace.decode("buf.bin")                  # slices, instants, anomalies (numpy columns)
    ktrace.convert("buf.bin", "buf.perfetto-trace")
    a = ktrace.analyze("buf.bin")                 # per-phase figures and findings, via the trace processor
    ktrace.annotate("buf.bin", "buf.analyzed.perfetto-trace")   # the trace with the analysis drawn on it
    print(a)                                      # the report ``ktrace analyze`` prints
    ktrace.plot(a, "buf.png")                     # per-block durations and the critical path (matplotlib)
    ktrace.query / diff / check / merge / analyze_gpus   # the other commands' work (ktrace.api)
"""

from ._interrupt import is_command as _is_command, quiet_interrupts as _quiet_interrupts

if _is_command():  # Ctrl-C during the imports below: exit 130 with a line, not a traceback
    _quiet_interrupts()


from .core.lazy import lazy_names, text_renderer  # noqa: E402
from ._version import __version__  # noqa: E402
from .core.errors import EnvironmentMissing, GateFailed, InputError, KtraceError  # noqa: E402

# Each public name from its module, imported on first use (PEP 562): ``import ktrace`` (and the command line's
# start, ``ktrace --help``) costs no numpy, no analysis and no engine until a name that needs them is used.
_LAZY = {
    **{name: "analysis" for name in ("Analysis", "Thresholds")},
    **{name: "api" for name in ("AnnotatedTrace", "ConvertResult", "MergedTrace", "analyze", "analyze_gpus",
                                "analyze_merged", "analyze_runs", "annotate", "check", "convert", "diff",
                                "inspect", "load_capture", "merge", "query", "rule_book", "whatif")},
    "plot": "report.analysis_plot",
    "Change": "analysis.replay.change",
    **{name: "decoding" for name in ("decode", "load_buffer")},
    "is_trace": "core.filetypes",
    **{name: "core.model" for name in ("Decoded", "Launch")},
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, lambda: __all__, globals())


def _text(name: str):  # str(result): the report its command prints, imported when first printed
    def render(result) -> str:
        from .report import plain_text

        return getattr(plain_text, name)(result)

    return render


text_renderer("Analysis", _text("analysis_str"))
text_renderer("Diff", _text("diff_str"))
text_renderer("Check", _text("check_str"))


__all__ = [
    "decode",
    "load_buffer",
    "convert",
    "inspect",
    "analyze",
    "query",
    "diff",
    "check",
    "rule_book",
    "merge",
    "analyze_gpus",
    "analyze_merged",
    "load_capture",
    "analyze_runs",
    "annotate",
    "plot",
    "whatif",
    "Change",
    "is_trace",
    "Analysis",
    "Thresholds",
    "ConvertResult",
    "MergedTrace",
    "AnnotatedTrace",
    "Decoded",
    "Launch",
    "KtraceError",
    "InputError",
    "EnvironmentMissing",
    "GateFailed",
    "__version__",
]
