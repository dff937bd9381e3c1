"""Fuzz what users and other programs hand ktrace: sidecars, rules files, clocks files, traces and command-line
values (as fuzz_decode.py does buffers).

    python scripts/fuzz_inputs.py --cases 2000 [--seed 1] [--kinds sidecar,rules,clocks,trace,cli,proton,gzbuf,fifo,iket,sparse]
                                  [--seconds 60] [--json summary.json]

Each case damages one input and runs what reads it:
- sidecar: a sample's sidecar with one value replaced (a wrong type, a number out of range, 1e30, -1, 2^64+5,
  NaN, a lone surrogate, a NUL, markup, 100k characters), deeply nested, or not UTF-8; then inspect.
- rules: a TOML rules file built the same way (and rules of 100,000 spaces); then the rule book is parsed.
- clocks: a --clocks file (offsets of 5,000 digits, 2^70, 1e400, the wrong shapes, deep nesting, the
  clock_sync.json form with hostile entries) and --offset values; then they are read.
- trace: a small converted trace cut, flipped, given a huge length, gzipped, or replaced by random bytes;
  then its framing is walked as it would stream to the engine (every 25th case: loaded by the engine).
- proton: a small Triton Proton trace with one thing made hostile: a CTA, core or warp id past any GPU's
  (4e9, 20 or 5,000 digits), a ts or dur of 1e16, -1, NaN or a string, a lone surrogate or a NUL in a name, a
  phase that is not 'X', a missing key, non-events, invalid UTF-8, deep nesting, a cut; or gzipped (whole, cut,
  flipped, several members, a bomb of spaces); then read, and every 8th case analyzed by the command line into
  a strict UTF-8 stream (a surrogate that reaches the terminal raises there).
- gzbuf: a ``.bin.gz`` buffer cut, flipped, with a header claiming up to 2^64 lanes, trailing garbage or zeros,
  several members, inflating to a length that is no whole record, one lane of empty slots up to the 512 MiB
  limit, or (rarely) a bomb of 1 GiB; then inspected, the process's memory held under 1 GB.
- sparse: a ``.bin`` of holes whose header claims up to 2^28 lanes (1 to 2^28 blocks or groups) over a file of up
  to 256 MiB, with a few records or none; then inspected, the process's memory held under 1 GB.
- fifo: a FIFO (no writer), /dev/zero or a folder named as a Proton trace or a .bin.gz, given to analyze or
  inspect under a 20 s alarm: a hang is a crash.
- iket: a small NVIDIA IKET JSON trace with one thing made hostile: an id past its table or any GPU's (ctaId,
  warpId, smId, a name or location index), a stamp of 2^64, -1, 1e30, a string or NaN, a range ending before it
  starts or 1e13 ns later, a grid of 2^31 x 2^31, a lone surrogate or a control character in a name, missing or
  mistyped tables, several launches; deeply nested, cut, not UTF-8, or gzipped (cut, flipped, a bomb); written
  with other spacing (json.dump's indent), its keys in another order or a first range of 20,000 events before the
  rest (then it must still be known as IKET by its content); then read, and every 8th case analyzed by the command
  line into a strict UTF-8 stream.
- cli: ``ktrace`` run in this process with hostile option values (thresholds, offsets, names, counts, ports,
  paths with NULs, outputs onto the inputs, what-if factors of 1e-308 and blocks of -1 or 999); stdout and stderr
  discarded.

Every name a Proton or IKET trace gives (names of up to 4M characters, of spaces alone, with bidi controls) must
come out of the reader at most 256 characters long (docs/security.md): a longer one is a crash.

The only exceptions allowed are ktrace's own (KtraceError, with a message) and argparse's usage exit (2);
anything else is a crash, printed with its input. The summary counts cases, outcomes and exit codes per kind,
and the process's peak memory (``peak_rss_mb``).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ktrace.api import inspect  # noqa: E402
from ktrace.analysis.gates.rules import rule_book  # noqa: E402
from ktrace.core.errors import KtraceError  # noqa: E402

KINDS = ("sidecar", "rules", "clocks", "trace", "cli", "proton", "gzbuf", "fifo", "iket", "sparse")
MAX_RSS_MB = 1000  # what one case may cost the process at most


def _peak_mb() -> int:
    """This process's peak resident memory (MB): its own address space's high-water mark (VmHWM, Linux), not
    ru_maxrss, which keeps the peak of the process it was started from (a large test runner's, across exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
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
        "buffer.trailer", "buffer.records_written", "producer", "timing.with_profiler.median_us", "timing.without_profiler.median_us",
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
SPEEDUPS = ["1e-300", "1e-308", "5e-324", "1e308", "inf", "nan", "0", "-1", "0.001", "1000", "1001", "2", "x", ""]
LONG_NAMES = ["x" * 300, "y" * 200_000, "   ", "\t", "\u2066a\u2069\u202e", "\u200b"]
HUGE_NAMES = ["z" * 4_000_000]  # given to one name only (a kernel's name is on every event)


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
    command = rng.choice(["analyze", "analyze", "inspect", "convert", "check", "merge", "query", "view", "whatif",
                          "nosuch"])
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
    elif command == "whatif":
        args += rng.choice([["--speedup", "mma=" + rng.choice(SPEEDUPS)], ["--barrier-cost", rng.choice(SPEEDUPS)],
                            ["--no-late-start", "--block", rng.choice(COUNTS + ["999", "-1"])]])
    elif command == "view":
        args += ["--port", rng.choice(["-1", "70000", "x", "99999999999999999999"]), "--no-browser"]
    return args


def _pev(cta=0, warp=0, name="a", ts=0.0, dur=0.1, core=None):
    return {"args": {"Frequency (MHz)": 1000.0}, "cat": "k", "dur": dur, "name": name, "ph": "X",
            "pid": f"k Core{cta if core is None else core} CTA{cta}", "tid": f"warp {warp} (line 0)", "ts": ts}


PROTON_PIDS = ["k Core2 CTA4000000000", "k Core2 CTA2000000000", "k Core2 CTA" + "9" * 20, "k Core" + "9" * 20 + " CTA1",
               "k Core2 CTA" + "9" * 5000, "k Core-1 CTA1", "k Core1 CTA1 x", "\ud800 Core1 CTA1", "j Core1 CTA1",
               "k\x1b[2J Core1 CTA1", "k Core70000 CTA1", " Core1 CTA1", "k Core1 CTA", 5, None, ["k Core1 CTA1"],
               "K" * 1_000_000 + " Core1 CTA1", "K" * 4_000_000 + " Core0 CTA0", "   Core0 CTA0"]
PROTON_TIDS = ["warp 2000000000 (line 0)", "warp " + "9" * 20 + " (line 0)", "warp " + "9" * 5000 + " (line 0)",
               "warp 1 (line " + "9" * 30 + ")", "warp -1 (line 0)", "warp 1023 (line 0)", "warp 1024 (line 0)",
               "warp\ud800", 7, None]
PROTON_NAMES = ["\ud800", "a\udfff", "\x00", "\x1b[2J\x1b]0;t\x07", "[bold]x[/bold]", "x" * 100_000, "\u202eexe", "", 5,
                None, ["a"], "a\nb\u2028c", "<img src=x>"] + LONG_NAMES + HUGE_NAMES
PROTON_TIMES = [1e16, -1.0, -1e16, 1e300, 2**64, 2**63, 86_400e6, 86_401e6, 1e-300, "x", None, [], True, "1e3"]
PROTON_RAW = ["NaN", "Infinity", "-Infinity", "1e999", "-0", "1" * 5000, "18446744073709551621"]


def _bomb_gz(body: bytes, mib: int, fill: bytes = b" ") -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [c.compress(body[: len(body) // 2])]
    chunk = fill * (1 << 20)
    out += [c.compress(chunk) for _ in range(mib)]
    out += [c.compress(body[len(body) // 2:]), c.flush()]
    return b"".join(out)


def _one_lane_gz(mib: int, extra: int = 0) -> bytes:
    """A .bin.gz of one lane (1 block x 1 group) whose slots are all empty, inflating to ``mib`` MiB and ``extra``
    bytes (the 512 MiB limit exactly, with 0): 521,847 bytes of gzip at the limit."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    out = [c.compress((1 | 1 << 32).to_bytes(8, "little") + zeros[8:])]
    out += [c.compress(zeros) for _ in range(mib - 1)] + [c.compress(bytes(extra)), c.flush()]
    return b"".join(out)


def sparse_case(rng: random.Random, path: Path) -> None:
    """A .bin of holes whose header claims up to 2^28 lanes over a file of up to 256 MiB, with a few records."""
    lanes = rng.choice([1 << 20, 1 << 22, (1 << 22) + 1, 1 << 25, (1 << 28) - 1])
    nb = rng.choice([1, lanes, 1 << 10])
    ng = max(1, lanes // nb)
    slots = min(rng.choice([nb * ng, nb * ng - 1, nb * ng * 2, 1 << 20]), 1 << 25)
    with open(path, "wb") as f:
        f.write((nb | ng << 32).to_bytes(8, "little"))
        for _ in range(rng.choice([0, 0, 1, 100])):  # a few records at random slots
            f.seek(8 + 8 * rng.randrange(slots))
            f.write(rng.getrandbits(64).to_bytes(8, "little"))
        f.truncate(8 + 8 * slots)


def _mangled_gz(rng: random.Random, body: bytes, how: str) -> bytes:
    """``body`` gzipped, then: whole, cut, with bits flipped, or in two members followed by padding."""
    g = gzip.compress(body, mtime=0)
    if how == "cut":
        return g[:rng.randrange(len(g))]
    if how == "flip":
        g = bytearray(g)
        for _ in range(rng.randrange(1, 5)):
            g[rng.randrange(len(g))] ^= 1 << rng.randrange(8)
        return bytes(g)
    if how == "members":
        cut = rng.randrange(len(body))
        pad = rng.choice([b"", bytes(rng.randrange(1, 100)), b"garbage", b"\x1f\x8b", b"\x1f\x8b\x08"])
        return gzip.compress(body[:cut], mtime=0) + gzip.compress(body[cut:], mtime=0) + pad
    return g


def _pick(x: float, shares: list[tuple[float, str]], last: str) -> str:
    """The name of the first share whose bound x is under, else ``last``."""
    return next((name for bound, name in shares if x < bound), last)


def proton_case(rng: random.Random) -> tuple[str, bytes]:
    """(the file's name, its bytes): a small Proton trace with one thing made hostile."""
    events = [_pev(c, w, n, ts=c * 0.5 + i * 0.2) for c in range(rng.choice([1, 2, 3])) for w in range(2)
              for i, n in enumerate("ab")]
    marker = None
    how = rng.random()
    e = rng.choice(events)
    if how < 0.15:
        e["pid"] = rng.choice(PROTON_PIDS)
    elif how < 0.25:
        e["tid"] = rng.choice(PROTON_TIDS)
    elif how < 0.35:
        e["name"] = rng.choice(PROTON_NAMES)
    elif how < 0.5:
        e[rng.choice(["ts", "dur"])] = rng.choice(PROTON_TIMES)
    elif how < 0.58:
        e[rng.choice(["ts", "dur"])] = marker = "__RAW__"
    elif how < 0.66:
        e["ph"] = rng.choice(["B", "E", "i", "M", "C", None, 5, "x"])
    elif how < 0.72:
        del e[rng.choice(["ph", "pid", "tid", "name", "ts", "dur"])]
    elif how < 0.78:
        events.insert(rng.randrange(len(events)), rng.choice([1, "x", None, [1, 2], {}, {"ph": "M", "name": "n"},
                                                              {"ph": "X"}]))
    elif how < 0.82:
        events = events * rng.choice([1, 100, 2000])  # the same scopes many times: many instances per lane
    elif how < 0.88:  # one kernel of a long name, or of spaces alone, on every event
        kernel = rng.choice(LONG_NAMES)
        for ev in events:
            ev["pid"] = kernel + ev["pid"][1:]
    doc = rng.choice([{"displayTimeUnit": "ns", "traceEvents": events}] * 8 + [events, {"traceEvents": 5}, {}, []])
    body = json.dumps(doc).encode("utf-8", "surrogatepass")
    if marker:
        body = body.replace(b'"__RAW__"', rng.choice(PROTON_RAW).encode())
    how = rng.random()
    if how < 0.05:
        depth = rng.choice([1000, 100_000])
        body = b'{"traceEvents": ' + b"[" * depth + b"]" * depth + b"}"
    elif how < 0.1:
        at = rng.randrange(len(body))
        body = body[:at] + bytes([rng.choice([0xFF, 0xC0, 0x80, 0x00])]) + body[at + 1:]
    elif how < 0.15:
        body = body[:rng.randrange(len(body))]
    elif how < 0.18:
        body = rng.choice([b"\xef\xbb\xbf" + body, body.decode("utf-8", "surrogatepass").encode("utf-16", "surrogatepass")])
    how = _pick(rng.random(), [(0.6, "plain"), (0.72, "whole"), (0.78, "cut"), (0.86, "flip"), (0.9, "members"),
                               (0.96, "bomb")], "t.json")
    if how == "plain":
        return "t.chrome_trace", body
    if how == "t.json":
        return "t.json", body  # known by its content
    if how == "bomb":  # spaces (valid JSON whitespace) or zeros, 1,000 times smaller compressed
        return "t.chrome_trace.gz", _bomb_gz(body, rng.choice([8, 64, 256]), rng.choice([b" ", b"\0"]))
    return "t.chrome_trace.gz", _mangled_gz(rng, body, how)


def read_proton_case(path: Path, rng: random.Random, cli: bool) -> None:
    from ktrace.decoding.proton import read_proton

    _bounded_names(read_proton(path, sidecar=False, lanes=rng.choice(["warp", "warpgroup"])))
    if cli:  # the whole report, into a stream that refuses what a UTF-8 terminal would
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                main_rc = __import__("ktrace.cli", fromlist=["main"]).main(["analyze", str(path), "--engine", "numpy"])
            except SystemExit as e:
                main_rc = e.code
            out.flush()
        if main_rc not in (0, 2):
            raise RuntimeError(f"analyze exited {main_rc}")


IKET_IDS = [-1, 2 ** 31, 2 ** 63, 2 ** 64 + 5, 10 ** 30, 1e30, float("nan"), "1", None, [1], True]
IKET_NAMES = ["\ud800", "a\x00b", "\x1b[2J", "\u202eevil", "x" * 100_000, "", 5, None] + LONG_NAMES + HUGE_NAMES


def iket_case(rng: random.Random) -> tuple[str, bytes]:
    """(the file's name, its bytes): a small IKET JSON trace (two CTAs, two warps, two nested ranges each, a
    marker, the warps' lifetimes) with one thing made hostile."""
    t0 = 1_796_442_611_252_500_000
    locs = [{"ctaId": [c, 0, 0], "gpcId": c, "smId": c, "tpcId": 0, "warpId": w} for c in range(2) for w in range(2)]
    ranges = [{"endTs": t0 + 900 + 100 * i, "internalEvents": [], "rangeColor": 0, "rangeId": 1, "rangeNameIdx": n,
               "rangeScope": 0, "rangeType": 2, "startTs": t0 + 100 * i + 200 * n, "warpLocIdxs": [i, i]}
              for i in range(4) for n in range(2)]
    markers = [{"color": 0, "locIdx": 1, "markerNameIdx": 2, "payloadType": 1, "payloadVal": 7, "timestamp": t0 + 500}]
    lifes = [{"endTs": t0 + 2000, "locIdx": i, "startTs": t0} for i in range(4)]
    run = {"blockDimX": 64, "blockDimY": 1, "blockDimZ": 1, "gridDimX": 2, "gridDimY": 1, "gridDimZ": 1,
           "kernelName": "k", "markers": markers, "ranges": ranges, "warpLifetimes": lifes}
    doc = {"graphLaunches": {}, "launches": [run], "locationTable": locs, "meta": {"version": 1},
           "stringTable": ["outer", "inner", "mark"]}
    how = rng.random()
    if how < 0.12:
        rng.choice(locs)[rng.choice(["warpId", "smId", "gpcId"])] = rng.choice(IKET_IDS)
    elif how < 0.2:
        rng.choice(locs)["ctaId"] = rng.choice([[2, 0, 0], [0, 0, 2 ** 40], [1], "x", [-1, 0, 0], [1e30, 0, 0]])
    elif how < 0.32:
        r = rng.choice(ranges)
        r[rng.choice(["startTs", "endTs", "rangeNameIdx"])] = rng.choice(IKET_IDS + [t0 + 10 ** 13, t0 - 10 ** 9])
    elif how < 0.38:
        rng.choice(ranges)["warpLocIdxs"] = rng.choice([[], [99], [-1], "x", [0, 3], [True]])
    elif how < 0.44:
        markers[0][rng.choice(["timestamp", "locIdx", "markerNameIdx"])] = rng.choice(IKET_IDS)
    elif how < 0.5:
        lifes[0][rng.choice(["startTs", "endTs", "locIdx"])] = rng.choice(IKET_IDS)
    elif how < 0.58:
        doc["stringTable"][rng.randrange(3)] = rng.choice(IKET_NAMES)
    elif how < 0.62:
        run["kernelName"] = rng.choice(IKET_NAMES)
    elif how < 0.68:
        run.update(gridDimX=rng.choice([2 ** 31, 0, -1, "2"]), gridDimY=rng.choice([1, 2 ** 31]))
    elif how < 0.72:
        run["blockDimX"] = rng.choice([0, 1 << 20, 2 ** 64, None])
    elif how < 0.78:
        del doc[rng.choice(["stringTable", "locationTable", "launches"])]
    elif how < 0.82:
        doc[rng.choice(["launches", "locationTable", "graphLaunches"])] = rng.choice([5, "x", None, {}, [1], [[]]])
    elif how < 0.86:
        doc["launches"] = [run] * rng.choice([2, 50])
    elif how < 0.9:
        run["ranges"] = ranges * rng.choice([100, 2000])
    spaced = how >= 0.9 and rng.random() < 0.5  # an undamaged trace in another spelling: still IKET's
    if spaced:
        body = _respelled(rng, doc)
    else:
        body = json.dumps(doc).encode("utf-8", "surrogatepass")
    how = rng.random() if not spaced else 1.0
    if how < 0.05:
        depth = rng.choice([1000, 100_000])
        body = b'{"locationTable": [], "launches": ' + b"[" * depth + b"]" * depth + b"}"
    elif how < 0.1:
        at = rng.randrange(len(body))
        body = body[:at] + bytes([rng.choice([0xFF, 0xC0, 0x80, 0x00])]) + body[at + 1:]
    elif how < 0.15:
        body = body[:rng.randrange(len(body))]
    how = _pick(rng.random() if not spaced else 0.0, [(0.7, "plain"), (0.8, "whole"), (0.88, "flip"), (0.94, "cut"),
                                                      (0.97, "members")], "bomb")
    if how == "plain":
        return "t.trace.json", body, spaced
    if how == "bomb":
        return "t.trace.json.gz", _bomb_gz(body, rng.choice([8, 64]), b" "), False
    return "t.trace.json.gz", _mangled_gz(rng, body, how), False


def _respelled(rng: random.Random, doc: dict) -> bytes:
    """An IKET trace written as another program would: json.dump's indent, its keys sorted or reversed, or a
    first range of 20,000 internal events written before everything else (its keys past the first 64 KiB)."""
    def reverse(o):
        if isinstance(o, dict):
            return {k: reverse(o[k]) for k in reversed(list(o))}
        return [reverse(x) for x in o] if isinstance(o, list) else o

    how = rng.choice(["indent", "sorted", "reversed", "long_first_range"])
    if how == "reversed":
        doc = reverse(doc)
    elif how == "long_first_range":
        run = doc["launches"][0]
        first = dict(run["ranges"][0], internalEvents=[{"eventId": 1, "timestamp": run["ranges"][0]["startTs"]}] * 20_000)
        doc["launches"][0] = {"ranges": [first] + run["ranges"][1:], **{k: v for k, v in run.items() if k != "ranges"}}
    return json.dumps(doc, indent=rng.choice([None, 1, 4]), sort_keys=how == "sorted").encode("utf-8", "surrogatepass")


def _bounded_names(d) -> None:
    """RuntimeError unless every name a trace reader gave is within the bound (docs/security.md)."""
    from ktrace.core.names import MAX_NAME_CHARS

    long = [n for n in (*d.launch.event_names, *d.launch.group_names, d.launch.kernel) if len(n) > MAX_NAME_CHARS]
    if long:
        raise RuntimeError(f"a name of {len(long[0]):,} characters passed the {MAX_NAME_CHARS}-character bound")


def read_iket_case(path: Path, cli: bool, spaced: bool = False) -> None:
    from ktrace.core.filetypes import is_iket
    from ktrace.decoding import open_source

    if spaced and not is_iket(path):
        raise RuntimeError("an IKET trace in another spelling is not known as IKET")
    _bounded_names(open_source(path, sidecar=False))
    if cli:  # the whole report, into a stream that refuses what a UTF-8 terminal would
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                main_rc = __import__("ktrace.cli", fromlist=["main"]).main(["analyze", str(path)])
            except SystemExit as e:
                main_rc = e.code
            out.flush()
        if main_rc not in (0, 2):
            raise RuntimeError(f"analyze exited {main_rc}")


def gzbuf_case(rng: random.Random, raw: bytes) -> bytes:
    """A .bin.gz's bytes: a small real buffer, gzipped, with one thing made hostile."""
    words = bytearray(raw)
    how = rng.random()
    if how < 0.3:  # the header claims another launch: up to 2^32 blocks x 2^32 groups
        nb, ng = rng.choice([0, 1, 2, 132, 1 << 20, (1 << 32) - 1]), rng.choice([0, 1, 2, 1 << 28, (1 << 32) - 1])
        words[:8] = (nb | ng << 32).to_bytes(8, "little")
    elif how < 0.4:
        words = words[:rng.randrange(len(words))]  # no whole number of records, or too few
    elif how < 0.5:
        for _ in range(rng.randrange(1, 20)):
            words[rng.randrange(len(words))] = rng.randrange(256)
    body = bytes(words)
    x = rng.random()
    how = _pick(x, [(0.4, "whole"), (0.55, "cut"), (0.7, "flip"), (0.85, "members")], "bomb")
    if how != "bomb":
        return _mangled_gz(rng, body, how)
    if x < 0.89:  # one lane, then nothing but empty slots up to (or just past, rarely) the 512 MiB limit
        return _one_lane_gz(rng.choice([16, 64, 64, 512]), rng.choice([0, 0, 8]))
    if x < 0.97:  # zeros after the header: a claimed capacity far past the records
        return _bomb_gz(body[:8], rng.choice([1, 16, 64]), b"\0")
    return _bomb_gz(body[:8], 1024, b"\0")  # 1 GiB of zeros in 1 MB: stops at the limit


def fifo_case(rng: random.Random, tmp: Path) -> list[str]:
    """A command on a FIFO with no writer, /dev/zero or a folder, named as an input ktrace reads."""
    where = tmp / "fifo"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    p = where / rng.choice(["x.chrome_trace", "x.chrome_trace.gz", "x.bin.gz", "x.json"])
    what = rng.choice(["fifo", "fifo", "zero", "folder"])
    if what == "fifo":
        os.mkfifo(p)
    elif what == "zero":
        p.symlink_to("/dev/zero")
    else:
        p.mkdir()
    if p.name == "x.json" and what != "folder":  # a .json is sniffed for Proton's content: only safe as a folder
        p.unlink()
        p.mkdir()
    return [rng.choice(["analyze", "inspect", "convert"]), str(p)] + (["--engine", "numpy"] if rng.random() < 0.5
                                                                       else [])


class _Alarm(Exception):
    pass


def _alarm(signum, frame):
    raise _Alarm("no answer within 20 s: a hang")


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
    crashes, over = 0, False
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ktrace-fuzz-") as tmpdir:
        tmp = Path(tmpdir)
        side, rules, clocks, trace = tmp / "side.json", tmp / "rules.toml", tmp / "clocks.json", tmp / "t.perfetto-trace"
        good = tmp / "good.perfetto-trace"
        if "trace" in kinds:
            from ktrace.api import convert

            convert(SMALL, good)
        small_raw = SMALL.read_bytes()
        signal.signal(signal.SIGALRM, _alarm)
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
                elif kind == "proton":
                    name, body = proton_case(rng)
                    p = tmp / name
                    p.write_bytes(body)
                    try:
                        read_proton_case(p, rng, c["cases"] % 8 == 0)
                    finally:
                        p.unlink()
                elif kind == "iket":
                    name, body, spaced = iket_case(rng)
                    p = tmp / name
                    p.write_bytes(body)
                    try:
                        read_iket_case(p, c["cases"] % 8 == 0, spaced)
                    finally:
                        p.unlink()
                elif kind == "sparse":
                    from ktrace.api import inspect as inspect_buffer

                    p = tmp / "s.bin"
                    sparse_case(rng, p)
                    body = f"{p.stat().st_size:,} bytes, header {p.read_bytes()[:8].hex()}"
                    try:
                        inspect_buffer(p, sidecar=False)
                    finally:
                        p.unlink()
                elif kind == "gzbuf":
                    from ktrace.api import inspect as inspect_buffer

                    body = gzbuf_case(rng, small_raw)
                    p = tmp / "g.bin.gz"
                    p.write_bytes(body)
                    inspect_buffer(p, sidecar=False)
                elif kind == "fifo":
                    body = fifo_case(rng, tmp)
                    signal.alarm(20)
                    try:
                        rc = run_cli(body)
                    finally:
                        signal.alarm(0)
                    c[f"exit_{rc}"] += 1
                    if rc != 2:
                        raise RuntimeError(f"exit {rc} from {body[0]} on a {Path(body[1]).name} that is no file")
                    continue
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
            except (Exception, _Alarm):  # noqa: BLE001 - what the fuzzer is looking for
                crashes += 1
                c["crashes"] += 1
                shown = body[:200] if isinstance(body, (bytes, str)) else [str(x)[:80] for x in body or ()]
                print(f"CRASH case {i} ({kind}): {shown!r}\n{traceback.format_exc()}", file=sys.stderr)
            peak = _peak_mb()
            if peak > MAX_RSS_MB and not over:  # the first case that took the process past the bound
                over = True
                crashes += 1
                c["crashes"] += 1
                shown = body[:200] if isinstance(body, (bytes, str)) else [str(x)[:80] for x in body or ()]
                print(f"CRASH case {i} ({kind}): the process reached {peak:,} MB (bound {MAX_RSS_MB:,}): "
                      f"{shown!r}", file=sys.stderr)
    summary = {k: dict(sorted(v.items())) for k, v in counts.items()}
    summary["crashes"] = crashes
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    summary["peak_rss_mb"] = _peak_mb()
    print(json.dumps(summary))
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1) + "\n")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
