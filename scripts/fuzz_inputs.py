"""Fuzz the sidecar reader and the rules-file parser with hostile values (as fuzz_decode.py does buffers).

    python scripts/fuzz_inputs.py --cases 2000 [--seed 1] [--json summary.json]

Each sidecar case takes a sample's sidecar and damages one value: a wrong type, a number out of range (1e30,
-1, 2^64+5, NaN, Infinity), a huge or hostile name (control characters, markup, 100k characters), deep
nesting, a body that is not UTF-8 or not JSON; then it decodes the sample with it and builds the inspect
report. Each rules case writes a TOML rules file the same way and parses it. The only exceptions allowed are
ktrace's own (KtraceError, with a message); anything else is a crash, printed with its input.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ktrace.api import inspect  # noqa: E402
from ktrace.analysis.rules import rule_book  # noqa: E402
from ktrace.errors import KtraceError  # noqa: E402

SAMPLES = sorted((REPO / "samples").glob("*.bin"))
VALUES = [None, True, -1, 0, 1, 2**31, 2**63, 2**64 + 5, -(2**64), 1e30, -1e30, 1.5, "x", "", [], {}, [1, "a"],
          {"a": 1}, "\x1b[2J\x1b]0;t\x07", "[link=file:///etc/passwd]x[/link]", "x" * 100_000, ["x" * 300],
          ["a", "a"], [["nested"]]]
RAW = ["NaN", "Infinity", "-Infinity", "1e999", "18446744073709551621"]
KEYS = ["kernel", "grid", "block", "event_names", "group_names", "num_blocks", "num_groups", "host_launch_unix_ns",
        "timer.tick_ns", "timer.anchor_ns", "timer.probe_cost_ns", "timer.offset_to_reference_ns", "timer_tick_ns",
        "device.name", "device.multiprocessors", "buffer.records_per_lane_capacity", "buffer.trailer", "producer",
        "timing.with_profiler.median_us", "timing.without_profiler.median_us", "timer", "device", "buffer"]
RULES = ["kernel.wall_us <= {v}", "*.imbalance < {v}", "compute@{v}.wall_us <= 1", "kernel.wall_us <= baseline * {v}",
         "{v}.wall_us <= 1", "kernel.{v} <= 1"]
RULE_VALUES = ["1e400", "nan", "inf", "-1e400", "18446744073709551621", "1" * 5000, "\x1b[2J", "[bold]x", "-0", "0x10"]


def _set(meta: dict, key: str, value) -> None:
    *head, last = key.split(".")
    d = meta
    for k in head:
        if not isinstance(d.get(k), dict):
            d[k] = {}
        d = d[k]
    d[last] = value


def sidecar_case(rng: random.Random) -> tuple[Path, bytes]:
    buf = rng.choice(SAMPLES)
    meta = json.loads(buf.with_suffix(".json").read_text())
    how = rng.random()
    if how < 0.6:
        _set(meta, rng.choice(KEYS), rng.choice(VALUES))
        body = json.dumps(meta).encode()
    elif how < 0.8:
        marker = "__RAW__"
        _set(meta, rng.choice(KEYS), marker)
        body = json.dumps(meta).replace(f'"{marker}"', rng.choice(RAW)).encode()
    elif how < 0.9:
        depth = rng.choice([10, 1000, 100_000])
        body = (b'{"a": [' * depth) + b"1" + (b"]}" * depth)
    else:
        body = json.dumps(meta).encode()
        cut = rng.randrange(len(body))
        body = body[:cut] + bytes([rng.choice([0xFF, 0xC0, 0x00, 0x80])]) + body[cut + 1:]
    return buf, body


def rules_case(rng: random.Random) -> bytes:
    how = rng.random()
    if how < 0.6:
        rule = rng.choice(RULES).format(v=rng.choice(RULE_VALUES))
        return f"rules = [{json.dumps(rule)}]\n".encode()
    if how < 0.75:
        depth = rng.choice([10, 1000, 100_000])
        return b"x = " + b"[" * depth + b"]" * depth + b"\n"
    if how < 0.9:
        return rng.choice([b"rules = [nan]\n", b"rules = [inf]\n", b"rules = 5\n", b"[kernels]\nx = 1\n",
                           b"[[kernels.k.sql]]\nquery = 5\n", b"rules = [\"kernel.wall_us <= 1\"]\n\xff\xfe\n"])
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    counts = {"sidecar_cases": 0, "sidecar_ok": 0, "sidecar_refused": 0, "rules_cases": 0, "rules_ok": 0,
              "rules_refused": 0, "crashes": 0}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ktrace-fuzz-") as tmp:
        side, rules = Path(tmp) / "side.json", Path(tmp) / "rules.toml"
        for i in range(a.cases):
            kind = "sidecar" if i % 2 == 0 else "rules"
            counts[f"{kind}_cases"] += 1
            try:
                if kind == "sidecar":
                    buf, body = sidecar_case(rng)
                    side.write_bytes(body)
                    inspect(buf, sidecar=side)
                else:
                    body = rules_case(rng)
                    rules.write_bytes(body)
                    rule_book(files=[rules])
                counts[f"{kind}_ok"] += 1
            except KtraceError as e:
                assert str(e), "an error with no message"
                counts[f"{kind}_refused"] += 1
            except Exception:  # noqa: BLE001 - what the fuzzer is looking for
                counts["crashes"] += 1
                print(f"CRASH case {i} ({kind}): {body[:200]!r}\n{traceback.format_exc()}", file=sys.stderr)
    counts["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(counts))
    if a.json:
        Path(a.json).write_text(json.dumps(counts, indent=1) + "\n")
    return 1 if counts["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
