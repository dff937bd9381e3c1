"""Record every sample's command-line outputs, or compare two recordings byte for byte.

    python scripts/check_outputs.py record /tmp/before      # from the repository root, ktrace on PATH
    python scripts/check_outputs.py record /tmp/after
    python scripts/check_outputs.py compare /tmp/before /tmp/after

Two checkouts recording at the same time set KTRACE_CHECK_TRACES to a folder of their own (the same value for
both recordings they compare).

For each samples/*.bin: convert (the trace's sha256), inspect and analyze (JSON and text); each samples/*.bin.gz
and samples/repeats/*.bin analyzed (JSON and text), two kernels' --runs; then diff, check,
query, merge and the multi-GPU analyze. Each command's stdout, stderr and exit code are kept; traces it writes
go into the recording folder (a fixed path, so printed paths compare too) and are recorded by sha256.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# The same in every recording, so printed paths compare; KTRACE_CHECK_TRACES gives two checkouts recording at
# once each its own folder (use one value for both recordings of a comparison).
TRACES = os.environ.get("KTRACE_CHECK_TRACES", "/tmp/ktrace-check-outputs-traces")


def _commands() -> dict[str, list[str]]:
    cmds: dict[str, list[str]] = {}
    for b in sorted(Path("samples").glob("*.bin")):
        s = str(b)
        cmds[f"convert-{b.stem}"] = ["convert", s, "-o", f"{TRACES}/{b.stem}.perfetto-trace"]
        cmds[f"convert-block-{b.stem}"] = ["convert", s, "--tracks", "block", "-o", f"{TRACES}/{b.stem}.block.perfetto-trace"]
        cmds[f"inspect-json-{b.stem}"] = ["inspect", s, "--json"]
        cmds[f"inspect-{b.stem}"] = ["inspect", s]
        cmds[f"analyze-json-{b.stem}"] = ["analyze", s, "--json"]
        cmds[f"analyze-md-{b.stem}"] = ["analyze", s, "--markdown"]
        cmds[f"analyze-{b.stem}"] = ["analyze", s]
        cmds[f"check-{b.stem}"] = ["check", s, "--rules", "examples/ktrace-rules.toml"]
    for b in sorted(Path("samples").glob("*.bin.gz")) + sorted(Path("samples/repeats").glob("*.bin")):
        stem = b.name.split(".")[0]
        cmds[f"analyze-json-{b.parent.name}-{stem}"] = ["analyze", str(b), "--json"]
        cmds[f"analyze-{b.parent.name}-{stem}"] = ["analyze", str(b)]
    for kernel in ("fi_batch_attention_mixed", "fi_mla_decode"):
        cmds[f"analyze-runs-{kernel}"] = ["analyze", "--runs", f"samples/{kernel}_run*.bin.gz", "--json"]
    a, b = "samples/imbalance_ktrace.bin", "samples/balanced_ktrace.bin"
    cmds["diff-json"] = ["diff", a, b, "--json"]
    cmds["diff"] = ["diff", a, b]
    cmds["diff-md"] = ["diff", a, b, "--markdown"]
    cmds["check-balanced"] = ["check", b, "--rules", "examples/ktrace-rules.toml"]
    cmds["check-balanced-json"] = ["check", b, "--rules", "examples/ktrace-rules.toml", "--json"]
    cmds["check-baseline"] = ["check", b, "--rule", "compute.wall_us <= baseline * 1.05", "--baseline", a, "--json"]
    cmds["check-fail"] = ["check", a, "--rule", "*.imbalance < 1.1", "--sql",
                          "INCLUDE PERFETTO MODULE ktrace.phases; SELECT phase FROM ktrace_phase WHERE imbalance > 1.1"]
    cmds["check-bad-rule"] = ["check", a, "--rule", "compute.imbalanse < 1.1"]
    cmds["query"] = ["query", a, "INCLUDE PERFETTO MODULE ktrace.phases; SELECT * FROM ktrace_phase", "--json"]
    cmds["query-csv"] = ["query", a, "INCLUDE PERFETTO MODULE ktrace.critical_path; SELECT * FROM ktrace_critical_path_share", "--csv"]
    cmds["query-package"] = ["query", "--print-package"]
    cmds["query-trace-opts"] = ["query", f"{TRACES}/imbalance_ktrace.perfetto-trace", "SELECT 1", "--events", "a"]
    cmds["analyze-trace"] = ["analyze", f"{TRACES}/imbalance_ktrace.perfetto-trace", "--json"]
    cmds["analyze-trace-opts"] = ["analyze", f"{TRACES}/imbalance_ktrace.perfetto-trace", "--events", "a"]
    g0, g1 = "samples/multigpu_gpu0.bin", "samples/multigpu_gpu1.bin"
    cmds["merge"] = ["merge", g0, g1, "-o", f"{TRACES}/merged.perfetto-trace"]
    cmds["merge-report"] = ["merge", g0, g1, "-o", f"{TRACES}/merged-report.perfetto-trace", "--report"]
    cmds["merge-start"] = ["merge", g0, g1, "--align", "start", "-o", f"{TRACES}/merged-start.perfetto-trace"]
    cmds["merge-trace"] = ["merge", g0, f"{TRACES}/imbalance_ktrace.perfetto-trace"]
    cmds["analyze-multi-json"] = ["analyze", g0, g1, "--json"]
    cmds["analyze-multi-md"] = ["analyze", g0, g1, "--markdown"]
    cmds["analyze-multi"] = ["analyze", g0, g1]
    cmds["analyze-missing"] = ["analyze", "samples/nope.bin"]
    cmds["no-command"] = []
    return cmds


def _run(args: list[str]) -> tuple[bytes, bytes, int]:
    p = subprocess.run(["ktrace", *args], capture_output=True)
    return p.stdout, p.stderr, p.returncode


def record(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(TRACES, ignore_errors=True)
    Path(TRACES).mkdir(parents=True)
    cmds = _commands()
    first = {k: v for k, v in cmds.items() if k.startswith("convert-")}
    rest = {k: v for k, v in cmds.items() if k not in first}
    for group in (first, rest):  # the trace commands read what convert wrote
        with ThreadPoolExecutor(8) as pool:
            for name, (so, se, rc) in zip(group, pool.map(_run, group.values())):
                (out / f"{name}.stdout").write_bytes(so)
                (out / f"{name}.stderr").write_bytes(se)
                (out / f"{name}.rc").write_text(f"{rc}\n")
    sums = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in sorted(Path(TRACES).glob("*"))]
    (out / "traces.sha256").write_text("\n".join(sums) + "\n")
    print(f"{out}: {len(cmds)} commands, {len(sums)} traces")


def compare(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    bad = [n for n in names if not (a / n).is_file() or not (b / n).is_file()
           or (a / n).read_bytes() != (b / n).read_bytes()]
    for n in bad:
        print(f"DIFFERS: {n}")
    print(f"{len(names) - len(bad)}/{len(names)} files identical")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["record"] and len(sys.argv) == 3:
        record(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
