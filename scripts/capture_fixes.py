"""The record of the measured fixes (samples/fixes/, made by scripts/capture_fixes.sh): for each case, what
ktrace predicted from the before capture against what the after measured.

    python scripts/capture_fixes.py [--json OUT] [FIXES_DIR]      # default samples/fixes

Per case: the before's top warning (its kind and stake, `ktrace analyze --json`), the wall `ktrace whatif
before.bin $(cat whatif.args)` predicts, the after's measured wall (profiled: the capture's; unprofiled: the
A/B record's means), the measured saving, and the errors. Prints the Markdown table docs/fixes.md shows, then
the median and the largest error.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def ktrace_json(*args: str) -> tuple[int, dict, str]:
    p = subprocess.run([sys.executable, "-m", "ktrace", *args, "--json"], capture_output=True, text=True)
    try:
        return p.returncode, json.loads(p.stdout) if p.returncode == 0 else {}, p.stderr.strip()
    except ValueError:
        return p.returncode, {}, p.stderr.strip()


def ncu_estimates(path: Path) -> list[tuple[float, str, str]]:
    """Nsight Compute's rules with an "Est. Speedup" in its report (``ncu.txt``): (percent, section, the rule's
    first words), largest first; "Est. Local Speedup" lines (a part of the kernel, not its time) left out."""
    import re

    if not path.is_file():
        return []
    out, section = [], ""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for i, ln in enumerate(lines):
        m = re.match(r"\s*Section: (.*)", ln)
        if m:
            section = m.group(1).strip()
        m = re.search(r"OPT\s+Est\. Speedup: ([\d.]+)%", ln)
        if m:
            out.append((float(m.group(1)), section, " ".join(x.strip() for x in lines[i + 1:i + 3])))
    return sorted(out, reverse=True)


def ncu_on_the_problem(case: str, est: list) -> tuple[float, str] | None:
    """ncu's estimate for the problem the case is built around: the launch's waves for `waves`, warps stalled
    at a barrier for `pipeline`, else the largest of its workload-distribution rules (SMs, SMSPs, L1 or L2
    slices busier than the average)."""
    if case == "waves":
        hits = [e for e in est if "Launch Statistics" in e[1]]
    elif case == "pipeline":  # the consumer's wait on the producer: warps stalled at a (named) barrier
        hits = [e for e in est if "Warp State" in e[1] and "barrier" in e[2]]
    else:
        hits = [e for e in est if "Workload Distribution" in e[1]]
    return (hits[0][0], hits[0][1]) if hits else None


def top_warning(analysis: dict) -> dict:
    return next((f for f in analysis.get("findings", []) if f.get("severity") == "warning"), {})


def case_record(d: Path) -> dict:
    before, after = d / "before.bin", d / "after.bin"
    args = shlex.split((d / "whatif.args").read_text().strip())
    _, a_before, _ = ktrace_json("analyze", str(before))
    _, a_after, _ = ktrace_json("analyze", str(after))
    rc, w, err = ktrace_json("whatif", str(before), *args)
    top = top_warning(a_before)
    wall_b, wall_a = a_before["kernel"]["wall_ns"], a_after["kernel"]["wall_ns"]
    saving = wall_b - wall_a
    pred = w.get("predicted_wall_ns") if rc == 0 else None
    ab = json.loads((d / "before_vs_after.ab.json").read_text())
    prof = [json.loads((d / f"{role}.json").read_text())["timing"]["with_profiler"]["median_us"]
            for role in ("before", "after")]
    v = ab["verdict"]
    return {
        "case": d.name,
        "whatif_args": " ".join(args),
        "top_kind": top.get("kind"),
        "top_stake_ns": top.get("impact_ns"),
        "before_wall_ns": wall_b,
        "after_wall_ns": wall_a,
        "saving_ns": saving,
        "predicted_wall_ns": pred,
        "whatif_error": None if rc == 0 else err.splitlines()[-1] if err else f"exit {rc}",
        "prediction_error": None if pred is None else (pred - wall_a) / wall_a,
        "stake_error": None if not top or saving <= 0 else (top["impact_ns"] - saving) / saving,
        "profiled_before_us": prof[0],
        "profiled_after_us": prof[1],
        "unprofiled_before_us": v["before_mean_us"],
        "unprofiled_after_us": v["after_mean_us"],
        "unprofiled_saving": -v["relative"],
        "ab_change": v["change"],
        "ab_text": v["text"],
        "own_contents": ab["timing"].get("own_contents"),
        "ncu_on_problem": ncu_on_the_problem(d.name, ncu := ncu_estimates(d / "ncu.txt")),
        "ncu_largest": ncu[0][:2] if ncu else None,
    }


def _us(ns) -> str:
    return "n/a" if ns is None else f"{ns / 1e3:,.1f}"


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def _ncu(r: dict) -> str:
    on, top = r["ncu_on_problem"], r["ncu_largest"]
    if top is None:
        return "not run"
    short = lambda sec: sec.replace("GPU and Memory ", "")  # noqa: E731
    return (f"{on[0]:.1f}% ({short(on[1])})" if on else "none") + f"; {top[0]:.1f}% ({short(top[1])})"


def table(records: list[dict]) -> list[str]:
    lines = ["| case | the fix (`whatif` arguments) | before's top warning | before wall | predicted wall | after wall | "
             "error | stake | measured saving | stake error | profiled build (events) | unprofiled (A/B) | "
             "ncu Est. Speedup: on this problem; its largest |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        pred = f"{_us(r['predicted_wall_ns'])} µs" if r["predicted_wall_ns"] is not None else "n/a (a"
        if r["predicted_wall_ns"] is None:
            pred = "n/a: " + (r["whatif_error"] or "").split("error: ")[-1].split(";")[0]
        lines.append(
            f"| {r['case']} | `{r['whatif_args']}` | {r['top_kind'] or 'none'} | {_us(r['before_wall_ns'])} µs | "
            f"{pred} | {_us(r['after_wall_ns'])} µs | {_pct(r['prediction_error'])} | {_us(r['top_stake_ns'])} µs | "
            f"{_us(r['saving_ns'])} µs | {_pct(r['stake_error'])} | {r['profiled_before_us']:,.1f} -> "
            f"{r['profiled_after_us']:,.1f} µs | {r['unprofiled_before_us']:,.1f} -> "
            f"{r['unprofiled_after_us']:,.1f} µs ({_pct(-r['unprofiled_saving'])}) | {_ncu(r)} |")
    errs = [abs(r["prediction_error"]) for r in records if r["prediction_error"] is not None]
    stakes = [abs(r["stake_error"]) for r in records if r["stake_error"] is not None]
    if errs:
        lines += ["", f"Predicted wall against the after's: median error {np.median(errs):.1%}, largest "
                  f"{max(errs):.1%} ({len(errs)} of {len(records)} cases predicted)."]
    if stakes:
        lines += [f"Top warning's stake against the measured saving: median error {np.median(stakes):.1%}, "
                  f"largest {max(stakes):.1%}."]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=str(ROOT / "samples" / "fixes"))
    ap.add_argument("--json", metavar="OUT", help="also write the records as JSON")
    a = ap.parse_args(argv)
    cases = sorted(p for p in Path(a.folder).iterdir() if (p / "whatif.args").is_file())
    records = [case_record(d) for d in cases]
    print("\n".join(table(records)))
    if a.json:
        Path(a.json).write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
