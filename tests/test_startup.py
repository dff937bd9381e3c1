"""What the command line imports to start: ``ktrace --help`` and every command's ``--help`` build the parser
without numpy, the analysis, the engine or rich; ``ktrace convert`` and ``ktrace inspect`` of a real capture
never import the analysis or the engine. Each case runs the command line in a fresh interpreter and reads its
``sys.modules`` after ``main`` returns (how fast it starts is measured by scripts/bench_startup.py, not here).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, sample

# The command line of the console script (sys.argv[0] "ktrace"), then the modules it imported, as JSON.
_RUN = """
import json, sys
sys.argv = ["ktrace", *sys.argv[1:]]
from ktrace.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:  # --help
    rc = e.code
sys.stdout.flush()
print("\\n" + json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""

HEAVY = ("numpy", "rich", "ktrace.analysis", "ktrace.api", "ktrace.engine", "ktrace.decoding", "ktrace.export",
         "ktrace.capture", "ktrace.inputs")
ANALYSIS = ("ktrace.analysis", "ktrace.engine", "wasmtime", "matplotlib")


def _modules(*args, cwd=None) -> tuple[int, list[str], str]:
    p = subprocess.run([sys.executable, "-c", _RUN, *map(str, args)], capture_output=True, text=True, timeout=300,
                       cwd=cwd or ROOT)
    assert p.stdout.strip(), p.stderr
    last = json.loads(p.stdout.strip().splitlines()[-1])
    return last["rc"], last["modules"], p.stdout


def _of(modules: list[str], prefixes) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_ktrace_help_imports_no_layer_that_does_the_work():
    rc, modules, out = _modules("--help")
    assert rc == 0 and "usage: ktrace" in out
    assert _of(modules, HEAVY) == []


@pytest.mark.slow
@pytest.mark.parametrize("command", ["convert", "inspect", "analyze", "query", "diff", "check", "merge", "view",
                                     "run", "calibrate"])
def test_a_command_s_help_imports_no_numpy(command):
    rc, modules, out = _modules(command, "--help")
    assert rc == 0 and f"usage: ktrace {command}" in out
    # analyze --help lists the thresholds and query --help the SQL package's tables: those two modules only
    assert set(_of(modules, HEAVY)) <= {"ktrace.analysis", "ktrace.analysis.model", "ktrace.analysis.model.thresholds", "ktrace.analysis.figures",
                                         "ktrace.analysis.figures.sql", "ktrace.analysis.figures.sql.package"}


def test_analyze_and_query_help_still_list_the_thresholds_and_tables():
    _, _, out = _modules("analyze", "--help")
    words = " ".join(out.split())
    assert "imbalance (1.1)" in words and "tick_ns (auto)" in words
    _, _, out = _modules("query", "--help")
    words = " ".join(out.split())
    assert "ktrace.phases:" in words and "ktrace_phase" in words


def test_convert_of_a_real_capture_imports_no_analysis_no_engine_and_no_rich(tmp_path):
    out = tmp_path / "b.perfetto-trace"
    rc, modules, text = _modules("convert", sample("balanced_ktrace"), "-o", out, "-j", "1")
    assert rc == 0 and out.stat().st_size > 0 and "slices" in text
    assert _of(modules, ANALYSIS) == [] and _of(modules, ("rich",)) == []


@pytest.mark.slow
@pytest.mark.parametrize("json_out", [False, True])
def test_inspect_of_a_real_capture_imports_no_analysis_and_no_engine(json_out):
    rc, modules, text = _modules("inspect", sample("warpgroups"), *(["--json"] if json_out else []))
    assert rc == 0 and ("ktrace.inspect/1" in text if json_out else "layout" in text)
    assert _of(modules, ANALYSIS) == [] and _of(modules, ("ktrace.export", "perfetto")) == []  # it writes nothing
    if json_out:  # JSON needs no console
        assert _of(modules, ("rich",)) == []


_FACADE = """
import json, sys
import ktrace
before = sorted(m for m in sys.modules if m.startswith(("numpy", "ktrace.")))
from ktrace import analyze, Analysis, Thresholds, rule_book, is_trace
from ktrace import *  # every name of __all__ resolves
names = [n for n in ktrace.__all__ if n not in dir(ktrace)]
print(json.dumps({"before": before, "missing_from_dir": names, "analyze": analyze is ktrace.api.analyze,
                  "thresholds": Thresholds is ktrace.analysis.Thresholds, "version": ktrace.__version__,
                  "submodule": ktrace.decoding.decode is ktrace.decode, "rule_book": callable(rule_book)}))
"""


def test_import_ktrace_gives_every_public_name_on_first_use():
    p = subprocess.run([sys.executable, "-c", _FACADE], capture_output=True, text=True, timeout=300, cwd=ROOT)
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert [m for m in got["before"] if m == "numpy" or m.startswith("ktrace.analysis")] == []
    assert got["missing_from_dir"] == [] and got["analyze"] and got["thresholds"] and got["submodule"]
    assert got["rule_book"] and got["version"]


def test_an_unknown_name_is_still_an_attribute_error():
    import ktrace

    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        ktrace.nonexistent  # noqa: B018
    import ktrace.analysis

    with pytest.raises(AttributeError):
        ktrace.analysis.nonexistent  # noqa: B018


@pytest.mark.slow
def test_a_query_with_the_embedded_engine_imports_no_pandas():
    # perfetto.trace_processor's __init__ imports pandas (half a second); the engine reads the RPC messages
    # from the descriptor the package ships instead.
    rc, modules, text = _modules("query", sample("balanced_ktrace"), "select count(*) as n from slice",
                                 "--engine", "wasm")
    assert rc == 0 and "n" in text
    assert "wasmtime" in modules and _of(modules, ("pandas", "perfetto.trace_processor")) == []


def test_the_engine_s_rpc_messages_are_perfetto_s():
    pytest.importorskip("pandas")  # perfetto's own ProtoFactory comes with its package's imports
    from perfetto.trace_processor.platform import PlatformDelegate
    from perfetto.trace_processor.protos import ProtoFactory

    from ktrace.engine.backend import rpc_protos

    theirs, ours = ProtoFactory(PlatformDelegate()), rpc_protos()
    for name in ("TraceProcessorRpc", "TraceProcessorRpcStream"):
        a, b = getattr(theirs, name).DESCRIPTOR, getattr(ours, name).DESCRIPTOR
        assert a.full_name == b.full_name and [f.name for f in a.fields] == [f.name for f in b.fields]
    methods = theirs.TraceProcessorRpc.TraceProcessorMethod
    assert dict(methods.items()) == dict(ours.TraceProcessorRpc.TraceProcessorMethod.items())
    rpc = ours.TraceProcessorRpc(request=ours.TraceProcessorRpc.TPM_QUERY_STREAMING)
    assert theirs.TraceProcessorRpc.FromString(rpc.SerializeToString()).request == methods.Value("TPM_QUERY_STREAMING")


# What the text report of a buffer needs no part of: the trace writer (protobuf), the Proton and IKET readers, the
# engine, diff's catalog, plots and DataFrames; nor worker processes or threads for a capture of a few thousand
# records (concurrent.futures and the logging it imports: ~6 ms); nor, into a pipe, rich (the short report is plain
# lines there; rich draws it in a terminal and the --details tables).
NOT_FOR_ANALYZE = ("google.protobuf", "pandas", "matplotlib", "wasmtime", "perfetto", "multiprocessing",
                   "concurrent.futures", "logging", "ktrace.engine", "ktrace.export.writer", "ktrace.export.events",
                   "ktrace.decoding.iket", "ktrace.decoding.proton", "ktrace.analysis.compare", "ktrace.capture", "rich")


@pytest.mark.parametrize("name", ["fi_mla_decode_run1", "imbalance"])
def test_analyze_of_a_buffer_imports_only_what_the_text_report_needs(name):
    path = next(p for p in (ROOT / "samples" / f"{name}.bin", ROOT / "samples" / f"{name}.bin.gz") if p.is_file())
    rc, modules, text = _modules("analyze", path)
    assert rc == 0 and "ktrace.analysis.replay.replay" in modules  # the whole analysis ran, findings and stakes
    assert _of(modules, NOT_FOR_ANALYZE) == []


def test_a_large_buffer_holding_few_records_is_analyzed_without_workers():
    # fi_mla_decode_run1: 1,048,575 record slots, 61,248 records written (a buffer sized for the most a launch
    # could write): starting worker processes would cost more than they save
    from ktrace import api
    from ktrace.decoding import BufferDecoder

    dec = BufferDecoder(ROOT / "samples" / "fi_mla_decode_run1.bin.gz")
    assert dec.body.size >= api.NUMPY_MIN_RECORDS
    from ktrace.runtime.config import available_cores

    assert api._records_held(dec) == 61_248 and api._numpy_parallelism(None, dec).jobs == 1
    assert api._numpy_parallelism(2, dec).jobs == min(2, available_cores())  # --jobs is still obeyed
