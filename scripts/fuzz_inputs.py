"""Fuzz what users and other programs hand ktrace: sidecars, rules files, clocks files, traces and command-line
values (as fuzz_decode.py does buffers).

    python scripts/fuzz_inputs.py --cases 2000 [--seed 1] [--kinds sidecar,rules,clocks,trace,cli]
                                  [--seconds 60] [--json summary.json]

Each case damages one input and runs what reads it:
- sidecar: a sample's sidecar with one value replaced (a wrong type, a number out of range, 1e30, -1, 2^64+5,
  NaN, a lone surrogate, a NUL, markup, 100k characters), deeply nested, or not UTF-8; then inspect.
- rules: a TOML rules file built the same way (and rules of 100,000 spaces); then the rule book is parsed.
- clocks: a --clocks file (offsets of 5,000 digits, 2^70, 1e400, the wrong shapes, deep nesting, the
  clock_sync.json form with hostile entries) and --offset values; then they are read.
- trace: a small converted trace cut, flipped, given a huge length, gzipped, or replaced by random bytes;
  then its framing is walked as it would stream to the engine (every 25th case: loaded by the engine).
- cli: ``ktrace`` run in this process with hostile option values (thresholds, offsets, names, counts, ports,
  paths with NULs, outputs onto the inputs); stdout and stderr discarded.

The only exceptions allowed are ktrace's own (KtraceError, with a message) and argparse's usage exit (2);
anything else is a crash, printed with its input. The summary counts cases, outcomes and exit codes per kind.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ktrace.api import inspect  # noqa: E402
from ktrace.analysis.rules import rule_book  # noqa: E402
from ktrace.errors import KtraceError  # noqa: E402

KINDS = ("sidecar", "rules", "clocks", "trace", "cli")
SAMPLES = sorted((REPO / "samples").glob("*.bin"))
SMALL = REPO / "samples" / "warpgroups_ktrace.bin"
VALUES = [None, True, -1, 0, 1, 1e9, 2**31, 2**63, 2**64 - 1, 2**64 + 5, -(2**64), 1e30, -1e30, 1.5, "x", "",
          [], {}, [1, "a"], {"a": 1}, "\x1b[2J\x1b]0;t\x07", "[link=file:///etc/passwd]x[/link]", "x" * 100_000,
          ["x" * 300], ["a", "a"], [["nested"]], "k\ud800", ["\ud800", "mma"], "\u0000", ["\u0000", "mma"],
          "<img src=x onerror=alert(1)>\n## heading", "$\\frac{$", "\u202egnp.exe"]
RAW = ["NaN", "Infinity", "-Infinity", "1e999", "18446744073709551621", "1" * 5000]
KEYS = ["kernel", "grid", "block", "event_names", "group_names", "num_blocks", "num_groups", "host_launch_unix_ns",
        "timer.tick_ns", "timer.anchor_ns", "timer.probe_cost_ns", "timer.offset_to_reference_ns", "timer_tick_ns",
        "timer_anchor_ns", "anchor_ns", "globaltimer_anchor_ns", "launch_globaltimer_ns", "device.name",
        "device.multiprocessors", "device.index", "device.pci_bus_id", "buffer.records_per_lane_capacity",
        "buffer.trailer", "producer", "timing.with_profiler.median_us", "timing.without_profiler.median_us",
        "timer", "device", "buffer"]
RULES = ["kernel.wall_us <= {v}", "*.imbalance < {v}", "compute@{v}.wall_us <= 1", "kernel.wall_us <= baseline * {v}",
         "{v}.wall_us <= 1", "kernel.{v} <= 1", "{v}"]
RULE_VALUES = ["1e400", "nan", "inf", "-1e400", "18446744073709551621", "1" * 5000, "\x1b[2J", "[bold]x", "-0", "0x10",
               " " * 100_000, "a" + " " * 20_000 + "b", "\ud800", "<=<=<=", "!" * 1000]
OFFSETS = ["1=1e23", "1=" + "9" * 30, "1=4000000000000000000", "1=-4000000000000000000", "=5", "1=", "1=5=6",
           "1=0x10", "1=\ud800", "\x00=1", "1=1_000", "x" * 1000 + "=1", "1=nan", "1=-0"]
CLOCK_VALUES = [16400, -5200, 0, 300, 5, "5", None, [], {}, 1e400, float("nan"), 2**70, -(2**70), 2**62, 1.5, True, "\ud800",
                [{"device_index": 1}], [5], [{"device_index": 1e30, "offset_to_reference_ns": 1, "spread_ns": 1}],
                [{"device_index": 1, "offset_to_reference_ns": 2**70, "spread_ns": 1}]]
THRESHOLDS = ["imbalance=1.2", "tick_ns=32", "imbalance=1e400", "imbalance=nan", "imbalance=-1", "tick_ns=1e30", "top_waits=1e9", "nosuch=1",
              "imbalance", "=1", "imbalance=\ud800", "min_impact=2", "tail_share=-0", "imbalance=" + "9" * 5000]
NAMES = ["load,mma", "a,b,c", "\ud800,mma", "\x00,mma", "a," * 5000, "x" * 300, "load,load", ",", "<img>,\n##", "@/nonexistent",
         "@/dev/null", "@/etc"]
COUNTS = ["264", "2", "-1", "0", "1", "99999999999999999999", "1e9", "nan", "2147483648", "\ud800"]


def _set(meta: dict, key: str, value) -> None:
    *head, last = key.split(".")
    d = meta
    for k in head:
        if not isinstance(d.get(k), dict):
            d[k] = {}
        d = d[k]
    d[last] = value


def _dumps(obj) -> bytes:
    return json.dumps(obj).encode("utf-8", "surrogatepass")


def sidecar_case(rng: random.Random) -> tuple[Path, bytes]:
    buf = rng.choice(SAMPLES)
    meta = json.loads(buf.with_suffix(".json").read_text())
    how = rng.random()
    if how < 0.6:
        _set(meta, rng.choice(KEYS), rng.choice(VALUES))
        body = _dumps(meta)
    elif how < 0.8:
        marker = "__RAW__"
        _set(meta, rng.choice(KEYS), marker)
        body = _dumps(meta).replace(f'"{marker}"'.encode(), rng.choice(RAW).encode())
    elif how < 0.9:
        depth = rng.choice([10, 1000, 100_000])
        body = (b'{"a": [' * depth) + b"1" + (b"]}" * depth)
    else:
        body = _dumps(meta)
        cut = rng.randrange(len(body))
        body = body[:cut] + bytes([rng.choice([0xFF, 0xC0, 0x00, 0x80])]) + body[cut + 1:]
    return buf, body


def rules_case(rng: random.Random) -> bytes:
    how = rng.random()
    if how < 0.6:
        rule = rng.choice(RULES).format(v=rng.choice(RULE_VALUES))
        return f"rules = [{json.dumps(rule)}]\n".encode("utf-8", "surrogatepass")
    if how < 0.75:
        depth = rng.choice([10, 1000, 100_000])
        return b"x = " + b"[" * depth + b"]" * depth + b"\n"
    if how < 0.9:
        return rng.choice([b"rules = [nan]\n", b"rules = [inf]\n", b"rules = 5\n", b"[kernels]\nx = 1\n",
                           b"[[kernels.k.sql]]\nquery = 5\n", b"rules = [\"kernel.wall_us <= 1\"]\n\xff\xfe\n"])
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))


def clocks_case(rng: random.Random) -> tuple[bytes, list[str]]:
    """(a clocks file's bytes, --offset values)."""
    how = rng.random()
    offsets = [rng.choice(OFFSETS)] if rng.random() < 0.3 else []
    if how < 0.4:
        unc = rng.choice(CLOCK_VALUES + [None, {"1": rng.choice(CLOCK_VALUES)}])
        doc = {"offsets_ns": {rng.choice(["1", "0", "x" * 300, "\ud800"]): rng.choice(CLOCK_VALUES)}, "uncertainty_ns": unc}
    elif how < 0.6:
        doc = {"before": {"offsets": rng.choice(CLOCK_VALUES)}, "after": rng.choice(CLOCK_VALUES)}
    elif how < 0.75:
        doc = rng.choice(CLOCK_VALUES)
    elif how < 0.85:
        depth = rng.choice([10, 1000, 100_000])
        return (b"[" * depth + b"]" * depth), offsets
    elif how < 0.95:
        return b'{"offsets_ns": {"1": ' + rng.choice(RAW).encode() + b"}}", offsets
    else:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 100))), offsets
    try:
        return json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass"), offsets
    except ValueError:
        return b"{}", offsets


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def trace_case(rng: random.Random, good: bytes) -> bytes:
    how = rng.random()
    data = bytearray(good)
    if how < 0.25:
        return bytes(data[:rng.randrange(len(data))])
    if how < 0.45:
        for _ in range(rng.randrange(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if how < 0.6:  # a packet header claiming far more than follows
        at = rng.randrange(len(data))
        return bytes(data[:at]) + b"\x0a" + _varint(rng.choice([2**31, 2**40, 2**63, 300 << 20])) + bytes(64)
    if how < 0.75:
        return gzip.compress(bytes(data) if rng.random() < 0.5 else bytes(data[:rng.randrange(len(data))]))
    if how < 0.85:  # tiny packets, many of them (gzipped: a bomb in small)
        body = b"\x0a\x00" * rng.choice([10, 1 << 20, 2 << 20])
        return gzip.compress(body, 1) if rng.random() < 0.5 else body
    if how < 0.92:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096)))
    return rng.choice([b"", b"\x0a", b"{}", b"\x1f\x8b", b"\x1f\x8b" + bytes(30), b"\x0a\xff\xff\xff\xff\x0f"])


def walk_trace(path: Path, engine: bool) -> None:
    """The trace's framing walked as it streams to the engine (or loaded by the engine itself)."""
    if engine:
        from ktrace.engine import open_trace

        with open_trace(path, engine="wasm"):
            return
    from ktrace.engine.framing import Framing
    from ktrace.engine.session import _trace_source

    name, _, chunks = _trace_source(path)
    framing = Framing(name)
    for chunk in chunks:
        framing.feed(chunk)
    framing.finish()


def cli_case(rng: random.Random, tmp: Path) -> list[str]:
    buf = tmp / "cap.bin"
    side = tmp / "cap.json"
    opts = [
        lambda: ["--threshold", rng.choice(THRESHOLDS)],
        lambda: ["--events", rng.choice(NAMES)],
        lambda: ["--groups", rng.choice(NAMES)],
        lambda: ["--num-blocks", rng.choice(COUNTS)],
        lambda: ["--num-groups", rng.choice(COUNTS)],
        lambda: ["--layout", rng.choice(["flashinfer", "mirage", "nope", ""])],
        lambda: ["--sidecar", rng.choice([str(side), "/nonexistent.json", str(tmp), "a\x00b", str(buf)])],
        lambda: ["--plot", rng.choice([str(tmp / "x.txt"), str(buf), str(side), str(tmp), str(tmp / "no" / "p.png")])],
        lambda: ["--trace", rng.choice([str(buf), str(side), str(tmp), "a\x00b.perfetto-trace"])],
        lambda: ["--json"], lambda: ["--markdown"], lambda: ["--all"],
    ]
    command = rng.choice(["analyze", "analyze", "inspect", "convert", "check", "merge", "query", "view", "nosuch"])
    source = rng.choice([str(buf)] * 5 + ["/nonexistent.bin", str(tmp), "a\x00b.bin", str(side)])
    args = [command, source]
    if command == "analyze":
        args += ["--engine", "numpy"]
        for _ in range(rng.randrange(0, 3)):
            args += rng.choice(opts)()
    elif command == "inspect":
        args += rng.choice(opts[1:5])()
    elif command == "convert":
        args += ["-o", rng.choice([str(buf), str(side), str(tmp / "t.perfetto-trace"), str(tmp), "a\x00b"]),
                 "-j", rng.choice(["1", "0", "-5", "x"])]
    elif command == "check":
        rule = rng.choice(RULES).format(v=rng.choice(RULE_VALUES)) if rng.random() < 0.5 else "kernel.wall_us <= 1e9"
        args += ["--rule", rule, "--engine", "numpy",
                 rng.choice(["--junit", "--markdown"]), rng.choice([str(buf), str(side), str(tmp / "o.xml")])]
    elif command == "merge":
        args += [str(buf), "--offset", rng.choice(OFFSETS), "-o", str(tmp / "m.perfetto-trace")]
    elif command == "query":
        args += [rng.choice(["select", "\ud800", "x" * 10_000, ""]), "--timeout", rng.choice(["0", "-1", "nan",
                                                                                            "1e400", "5"])]
    elif command == "view":
        args += ["--port", rng.choice(["-1", "70000", "x", "99999999999999999999"]), "--no-browser"]
    return args


def run_cli(args: list[str]) -> int:
    from ktrace.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            return main(args)
        except SystemExit as e:  # argparse: a usage error
            return e.code if isinstance(e.code, int) else 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long (the counts say how many ran)")
    ap.add_argument("--engine", action="store_true", help="load every 25th damaged trace in the engine too")
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    rng = random.Random(a.seed)
    counts = {k: Counter() for k in kinds}
    crashes = 0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ktrace-fuzz-") as tmpdir:
        tmp = Path(tmpdir)
        side, rules, clocks, trace = tmp / "side.json", tmp / "rules.toml", tmp / "clocks.json", tmp / "t.perfetto-trace"
        good = tmp / "good.perfetto-trace"
        if "trace" in kinds:
            from ktrace.api import convert

            convert(SMALL, good)
        for i in range(a.cases):
            if a.seconds is not None and time.perf_counter() - t0 > a.seconds:
                break
            kind = kinds[i % len(kinds)]
            c = counts[kind]
            c["cases"] += 1
            body: object = None
            try:
                if kind == "sidecar":
                    buf, body = sidecar_case(rng)
                    side.write_bytes(body)
                    inspect(buf, sidecar=side)
                elif kind == "rules":
                    body = rules_case(rng)
                    rules.write_bytes(body)
                    rule_book(files=[rules])
                elif kind == "clocks":
                    from ktrace.decoding.clocks import given_offsets

                    body, offsets = clocks_case(rng)
                    clocks.write_bytes(body)
                    given_offsets(offsets, clocks)
                elif kind == "trace":
                    body = trace_case(rng, good.read_bytes())
                    trace.write_bytes(body)
                    walk_trace(trace, a.engine and c["cases"] % 25 == 0)
                else:
                    shutil.copy(SMALL, tmp / "cap.bin")
                    shutil.copy(SMALL.with_suffix(".json"), tmp / "cap.json")
                    body = cli_case(rng, tmp)
                    rc = run_cli(body)
                    c[f"exit_{rc}"] += 1
                    if rc == 1 and body[0] != "check":  # 1 means a failed gate: no other command says it
                        raise RuntimeError(f"exit 1 from {body[0]}")
                    continue
                c["ok"] += 1
            except KtraceError as e:
                assert str(e), "an error with no message"
                c["refused"] += 1
            except Exception:  # noqa: BLE001 - what the fuzzer is looking for
                crashes += 1
                c["crashes"] += 1
                shown = body[:200] if isinstance(body, (bytes, str)) else [str(x)[:80] for x in body or ()]
                print(f"CRASH case {i} ({kind}): {shown!r}\n{traceback.format_exc()}", file=sys.stderr)
    summary = {k: dict(sorted(v.items())) for k, v in counts.items()}
    summary["crashes"] = crashes
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(summary))
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
