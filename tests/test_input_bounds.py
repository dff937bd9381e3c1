"""Bounded on every input: names cut to the one bound from every reader, IKET known by its content, memory
bounded by what is present, what-if factors and blocks in range, bidi controls visible in what ktrace writes.
Each case exits 0 with the right figures or 2 with a clear one-line error, never a traceback."""

from __future__ import annotations

import pytest

from conftest import run_ktrace, sample


def _refused(rc, err, *needles):
    assert rc == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()[-1]) < 400, err
    for n in needles:
        assert n in err, err


@pytest.mark.parametrize("args, needle", [
    (["--speedup", "compute=1e-300"], "from 0.001 to 1000"),
    (["--speedup", "compute=1e-308"], "from 0.001 to 1000"),
    (["--speedup", "compute=1e300"], "from 0.001 to 1000"),
    (["--speedup", "compute=nan"], "give PHASE=FACTOR"),
    (["--barrier-cost", "1e300"], "from 0 to 1e+12"),
    (["--straggler-to-median", "compute", "--block", "-1"], "0 or more"),
    (["--straggler-to-median", "compute", "--block", "999"], "has 132 blocks, 0 to 131"),
])
def test_whatif_factors_and_blocks_out_of_range_are_refused(args, needle):
    rc, out, err = run_ktrace("whatif", sample("imbalance"), *args)
    _refused(rc, err, needle)


def test_whatif_at_the_factor_bounds_gives_finite_walls():
    import json

    for factor, faster in (("0.001", False), ("1000", True)):
        rc, out, err = run_ktrace("whatif", sample("imbalance"), "--speedup", f"compute={factor}", "--json")
        assert rc == 0, err
        d = json.loads(out)
        walls = [v for k, v in d.items() if k.endswith("wall_ns")]
        assert walls and all(isinstance(v, int) and 0 < v < 10**12 for v in walls), d
        assert (d["predicted_wall_ns"] < d["measured_wall_ns"]) == faster
