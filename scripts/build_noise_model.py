"""Rebuild ktrace's noise model (ktrace/analysis/compare/noise_model.json) from the same-input sets in samples/.

    python scripts/build_noise_model.py            # writes ktrace/analysis/compare/noise_model.json
    python scripts/build_noise_model.py --check    # exit 1 when the shipped file differs from a rebuild
    python scripts/build_noise_model.py -o FILE    # writes FILE instead

A same-input set is several runs of one kernel on the same inputs: FlashInfer's fi_NAME_run1..5, the
ktrace kernels' NAME_ktrace with NAME_run2/_run3_ktrace beside them or NAME_runK_ktrace in samples/repeats/,
and the A/B session's no-op pair (samples/ab/noop_before, noop_after). Every pair of runs within a set is
compared; per figure family, the largest change that cleared the floors (2 timer ticks, 1% of the kernel
wall) is the bound, relative to the figure's value, in ticks and as a share of the kernel wall
(ktrace/analysis/noise_model.py). The output depends on the samples alone: a rebuild is byte-identical.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ktrace.analysis.compare.noise_model import MODEL_PATH, NoiseModel, fit, observations  # noqa: E402


def same_input_sets(samples: Path) -> dict[str, list[Path]]:
    """Set name -> its runs (sorted), every set of two runs or more of the same inputs in ``samples``."""
    sets: dict[str, list[Path]] = {}
    for p in sorted(samples.glob("fi_*_run*.bin*")):
        sets.setdefault(p.name.split("_run")[0], []).append(p)
    for p in sorted(samples.glob("*_run*_ktrace.bin")):
        name = p.name.split("_run")[0]
        sets.setdefault(name, [samples / f"{name}_ktrace.bin"]).append(p)
    for p in sorted((samples / "repeats").glob("*_run*_ktrace.bin")):
        name = p.name.split("_run")[0]
        sets.setdefault(name, [samples / f"{name}_ktrace.bin"]).append(p)
    noop = [samples / "ab" / "noop_before.bin", samples / "ab" / "noop_after.bin"]
    if all(p.exists() for p in noop):
        sets["ab_noop"] = noop
    return {k: [p for p in v if p.exists()] for k, v in sorted(sets.items()) if len(v) >= 2}


def build(samples: Path = ROOT / "samples") -> NoiseModel:
    from ktrace.api import load_capture

    sets = same_input_sets(samples)
    obs = []
    for name, runs in sets.items():
        obs += observations([load_capture(p) for p in runs], name)
    listing = tuple((name, *(p.relative_to(samples).as_posix() for p in runs)) for name, runs in sets.items())
    return NoiseModel(fit(obs), sum(len(r) for r in sets.values()), len(sets), listing)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", type=Path, default=MODEL_PATH)
    ap.add_argument("--samples", type=Path, default=ROOT / "samples")
    ap.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    a = ap.parse_args(argv)
    text = build(a.samples).to_json()
    if a.check:
        same = a.output.exists() and a.output.read_text(encoding="utf-8") == text
        print(f"{a.output}: {'up to date' if same else 'differs from a rebuild'}")
        return 0 if same else 1
    a.output.write_text(text, encoding="utf-8")
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
