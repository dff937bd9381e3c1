"""Hand-written hot-path helpers of the numpy analysis, tested against the library they stand in for."""

import numpy as np
import pytest

from ktrace.analysis.oracle_structure import unique_columns


@pytest.mark.parametrize("seed", range(20))
def test_unique_columns_is_numpys_unique_over_rows(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    cols = [rng.integers(0, hi, n) for hi in (7, 5000, 3)]
    want, want_n = np.unique(np.stack(cols), axis=1, return_counts=True)
    got, got_n = unique_columns(*cols, return_counts=True)
    assert np.array_equal(got, want) and np.array_equal(got_n, want_n)
    assert np.array_equal(unique_columns(*cols), want)


def test_unique_columns_of_nothing():
    got, n = unique_columns(np.zeros(0, np.int64), np.zeros(0, np.int64), return_counts=True)
    assert got.shape == (2, 0) and len(n) == 0
