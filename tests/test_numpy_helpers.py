"""Hand-written hot-path helpers of the numpy analysis, tested against the library they stand in for."""

import numpy as np
import pytest

from ktrace.analysis.figures.numpy.structure import unique_columns


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


# -- fast paths that use the slices' (lane, sequence) order, each against the general way -------------------

from ktrace.analysis.figures.numpy import structure as st  # noqa: E402
from ktrace.analysis.figures.numpy.instance_math import sorted_within as _sorted_within  # noqa: E402


def _nested_lanes(rng, lanes=5):
    """Slices of random nesting on a few lanes, in (lane, begin sequence) order, as Slices holds them."""
    lane, b_seq, e_seq, begin = [], [], [], []
    for ln in range(lanes):
        seq, t, open_ = 0, 0, []
        for _ in range(int(rng.integers(0, 30))):
            if open_ and rng.random() < 0.5:
                i = open_.pop(int(rng.integers(len(open_))))
                e_seq[i] = seq
            else:
                open_.append(len(lane))
                lane.append(ln), b_seq.append(seq), e_seq.append(-1), begin.append(t)
            seq, t = seq + 1, t + int(rng.integers(0, 3))
        for i in open_:
            e_seq[i], seq = seq, seq + 1
    return [np.array(c, np.int64) for c in (lane, b_seq, e_seq, begin)]


@pytest.mark.parametrize("seed", range(20))
def test_slice_depth_from_lane_order_equals_the_event_sweep(seed):
    rng = np.random.default_rng(seed)
    lane, b_seq, e_seq, _ = _nested_lanes(rng)
    overlap = rng.random(len(lane)) < 0.2
    want = st._slice_depth_sorting(np.flatnonzero(~overlap), lane[~overlap], b_seq[~overlap], e_seq[~overlap],
                                   np.zeros(len(lane), np.int64))
    assert np.array_equal(st.slice_depth(lane, b_seq, e_seq, overlap), want)
    shuffled = rng.permutation(len(lane))  # out of order: the sweep itself
    got = st.slice_depth(lane[shuffled], b_seq[shuffled], e_seq[shuffled], overlap[shuffled])
    assert np.array_equal(got, want[shuffled])


@pytest.mark.parametrize("seed", range(20))
def test_lane_neighbours_in_or_out_of_order(seed):
    rng = np.random.default_rng(seed)
    lane, seq, _, begin = _nested_lanes(rng)
    top = rng.random(len(lane)) < 0.7
    prev, nxt = st.lane_neighbours(lane, begin, seq, top)
    for i in range(len(lane)):  # the definition, slice by slice
        same = np.flatnonzero(top & (lane == lane[i]))
        same = same[np.lexsort((seq[same], begin[same]))].tolist()
        if not top[i]:
            assert prev[i] == nxt[i] == -1
            continue
        j = same.index(i)
        assert prev[i] == (same[j - 1] if j else -1) and nxt[i] == (same[j + 1] if j + 1 < len(same) else -1)
    p = rng.permutation(len(lane))
    inv = np.argsort(p)
    prev2, nxt2 = st.lane_neighbours(lane[p], begin[p], seq[p], top[p])
    assert np.array_equal(np.where(prev2 >= 0, p[prev2], -1), prev[p])
    assert np.array_equal(np.where(nxt2 >= 0, p[nxt2], -1), nxt[p]) and len(inv) == len(p)


@pytest.mark.parametrize("seed", range(10))
def test_lane_totals_of_lane_ordered_rows_equal_those_of_shuffled_rows(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    lane = np.sort(rng.integers(0, 9, n))
    cols = (lane, lane // 2, lane % 2, rng.integers(-1, 4, n), *np.sort(rng.integers(0, 1000, (2, n)), axis=0))
    top = rng.random(n) < 0.6
    fast = st.lane_totals(*cols, top)
    slow = st._lane_totals_unsorted(*cols, top)
    p = rng.permutation(n)
    shuffled = st.lane_totals(*(c[p] for c in cols), top[p])
    for name in ("lane", "block", "group", "sm", "slices", "top_slices", "busy_ns", "begin_ns", "end_ns"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
        assert np.array_equal(getattr(shuffled, name), getattr(slow, name)), name


@pytest.mark.parametrize("seed", range(10))
def test_sorted_within_groups_is_a_sort_per_group(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    group = np.sort(rng.integers(0, 7, n))
    values = rng.integers(-10**6, 10**6, n) * (10**12 if seed % 2 else 1)  # odd seeds: too wide to combine
    by = rng.permutation(n)
    inst = group  # rows already grouped: by_inst picks them in a shuffled order within the grouping
    order = np.lexsort((by, inst))
    starts = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])
    got = _sorted_within(values[by], order, inst, starts)
    want = np.concatenate([np.sort(values[by][order][inst == g]) for g in np.unique(inst)])
    assert np.array_equal(got, want)


@pytest.mark.parametrize("seed", range(20))
def test_block_extents_in_lane_order_equal_the_unique_way(seed):
    rng = np.random.default_rng(seed)
    n, groups = int(rng.integers(1, 400)), int(rng.integers(1, 4))
    lane = np.sort(rng.integers(0, 40, n))
    block, sm = lane // groups, rng.integers(-1, 8, n)
    begin = rng.integers(0, 1000, n)
    end = begin + rng.integers(0, 50, n)
    got = st.block_extents(block, sm, lane, begin, end)
    shuffled = rng.permutation(n)  # out of order: np.unique's way
    want = st.block_extents(block[shuffled], sm[shuffled], lane[shuffled], begin[shuffled], end[shuffled])
    for g, w in zip(got[:-1], want[:-1]):
        assert np.array_equal(g, w)
    assert np.array_equal(got[-1][shuffled], want[-1])
    ub, inv = np.unique(block, return_inverse=True)
    assert np.array_equal(got[0], ub) and np.array_equal(got[-1], inv)
    assert got[5].tolist() == [len(set(lane[block == b].tolist())) for b in ub.tolist()]


@pytest.mark.parametrize("seed", range(10))
def test_slice_depth_of_lanes_that_never_nest_is_zero_as_the_sweep_says(seed):
    rng = np.random.default_rng(seed)
    lane = np.sort(rng.integers(0, 6, 200))
    b_seq = np.arange(200) * 4
    e_seq = b_seq + 1  # each slice ends before the next begins
    overlap = np.zeros(200, bool)
    want = st._slice_depth_sorting(np.arange(200), lane, b_seq, e_seq, np.zeros(200, np.int64))
    assert not want.any() and np.array_equal(st.slice_depth(lane, b_seq, e_seq, overlap), want)
    e_seq[5] = b_seq[6] + 2  # slice 5 now holds slice 6 (when they share a lane)
    got = st.slice_depth(lane, b_seq, e_seq, overlap)
    want = st._slice_depth_sorting(np.arange(200), lane, b_seq, e_seq, np.zeros(200, np.int64))
    assert np.array_equal(got, want) and (got > 0).any() == bool(lane[5] == lane[6])


@pytest.mark.parametrize("seed", range(5))
def test_distinct_values_by_a_sort_are_numpys_unique(seed):
    from ktrace.analysis.figures.numpy.stream import _distinct

    rng = np.random.default_rng(seed)
    for a in (rng.integers(-5, 40, 1000), rng.integers(0, 2**40, 300), np.zeros(0, np.int64), np.array([7]),
              np.full(50, 3, np.int32)):
        got = _distinct(a)
        assert got.tolist() == np.unique(a).tolist() and got.dtype == a.dtype


@pytest.mark.parametrize("seed", range(6))
def test_backwards_records_are_those_below_their_lanes_running_maximum(seed):
    from ktrace.decoding.unwrap import backwards_mask

    rng = np.random.default_rng(seed)
    lane = np.sort(rng.integers(0, 7, 400))
    u = np.cumsum(rng.integers(0, 50, 400))  # every lane non-decreasing: the fast way
    if seed % 2:
        u[rng.integers(0, 400, 6)] -= rng.integers(1, 500, 6)  # some records step back
    expect = np.zeros(400, bool)
    for ln in np.unique(lane):
        at = np.flatnonzero(lane == ln)
        expect[at[1:]] = u[at[1:]] < np.maximum.accumulate(u[at])[:-1]
    assert backwards_mask(lane, u).tolist() == expect.tolist()
    if seed % 2:
        assert expect.any()  # the slow way was taken and found them


@pytest.mark.parametrize("seed", range(12))
def test_unique_columns_counted_directly_or_sorted_equal_numpys_unique_over_rows(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 500))
    wide = 10**9 if seed % 2 else 5  # odd seeds: a key space too large to count directly (np.unique's way)
    cols = (rng.integers(0, 4, n), rng.integers(0, wide, n))
    weights = rng.integers(1, 1000, n)
    want, count = np.unique(np.stack(cols), axis=1, return_counts=True)
    got, got_count = st.unique_columns(*cols, return_counts=True)
    assert np.array_equal(got, want) and np.array_equal(got_count, count)
    assert np.array_equal(st.unique_columns(*cols), want)
    rows, summed = st.unique_columns(*cols, return_counts=True, weights=weights)
    assert np.array_equal(rows, want)
    assert summed.tolist() == [int(weights[(cols[0] == a) & (cols[1] == b)].sum()) for a, b in want.T.tolist()]


def _k_by_counting(lane, event):
    """Each pair's instance number within its (lane, event), by counting in Python (the definition)."""
    seen, out = {}, []
    for key in zip(lane.tolist(), event.tolist()):
        out.append(seen.get(key, 0))
        seen[key] = out[-1] + 1
    return np.array(out, np.int64)


@pytest.mark.parametrize("seed", range(30))
def test_instance_numbers_of_record_pairs_periodic_or_not_are_the_counted_ones(seed):
    from ktrace.decoding.pairing import _periodic_k, alternating_k

    rng = np.random.default_rng(seed)
    lanes = []
    for ln in range(int(rng.integers(1, 6))):
        period = rng.permutation(int(rng.integers(1, 5)))  # the lane's events, each once per period
        ev = np.tile(period, int(rng.integers(1, 8)))[:int(rng.integers(1, 30))]
        if seed % 3 == 1 and len(ev) > 2:  # break the period: an event twice in a row, or one swapped
            ev[int(rng.integers(1, len(ev)))] = ev[0]
        lanes.append((np.full(len(ev), ln * 2 + int(rng.integers(0, 2))), ev))
    lane = np.concatenate([a for a, _ in lanes]).astype(np.int64)
    event = np.concatenate([b for _, b in lanes]).astype(np.int64)
    assert np.array_equal(alternating_k(lane, event), _k_by_counting(lane, event))
    k = _periodic_k(lane, event, len(np.unique(event)))
    assert k is None or np.array_equal(k, _k_by_counting(lane, event))


def test_instance_numbers_of_pairs_of_many_events_are_the_counted_ones():
    from ktrace.decoding.pairing import alternating_k

    rng = np.random.default_rng(5)
    lane = np.sort(rng.integers(0, 6, 4000))
    event = rng.integers(0, 300, 4000)  # many events, no period: sorted by (lane, event), not a pass each
    assert np.array_equal(alternating_k(lane, event), _k_by_counting(lane, event))


def test_instance_numbers_of_a_regular_buffer_come_from_the_pairs_place():
    from ktrace.decoding.pairing import _periodic_k

    lane = np.repeat([0, 1, 3], [7, 9, 3])
    event = np.concatenate([np.tile([2, 0, 1], 3)[:7], np.tile([1, 2, 0], 3), [0, 1, 2]])
    assert np.array_equal(_periodic_k(lane, event, 3), _k_by_counting(lane, event))
    assert _periodic_k(lane, np.where(np.arange(19) == 4, 2, event), 3) is None  # an event twice in a period


@pytest.mark.parametrize("name", ["imbalance_ktrace", "warpgroups_flashinfer", "waves_ktrace", "nested_ktrace"])
def test_record_pairs_read_with_a_stride_are_the_slices_pairing_finds(name, monkeypatch):
    # A part whose records are all BEGIN, END, BEGIN, END... is read as record pairs; the general pairing
    # (sorted per event, unpaired records, partial overlaps) gives the same slices.
    import os
    from ktrace.decoding import part
    from ktrace.decoding.decoder import BufferDecoder
    from ktrace.decoding.part import _record_pairs

    path = os.path.join(os.path.dirname(__file__), "..", "samples", f"{name}.bin")
    taken = []
    monkeypatch.setattr(part, "_record_pairs", lambda *a: taken.append(1) or _record_pairs(*a))
    fast = BufferDecoder(path).part(0, BufferDecoder(path).lanes).slices
    assert taken == ([] if name.startswith("nested") else [1])  # nested slices are not record pairs
    monkeypatch.setattr(part, "alternating", lambda *a: False)
    general = BufferDecoder(path).part(0, BufferDecoder(path).lanes).slices
    for f in fast.__dataclass_fields__:
        assert np.array_equal(getattr(fast, f), getattr(general, f)), f
        assert getattr(fast, f).dtype == getattr(general, f).dtype, f


@pytest.mark.parametrize("rows,lanes,lo,hi,step", [(5000, 264, 0, 13, 1024), (1023, 7, 2, 7, 1024), (3, 5, 1, 2, 2),
                                                  (2049, 32, 31, 32, 1024), (10, 4, 0, 4, 3)])
def test_lanes_copied_lane_major_in_tiles_equal_one_copy(rows, lanes, lo, hi, step):
    from ktrace.decoding.lanes import _tiled_copy

    area = np.random.default_rng(rows).integers(0, 1 << 63, rows * lanes, dtype=np.uint64).reshape(rows, lanes)
    view = area[:, lo:hi].T
    got = _tiled_copy(view, step)
    assert got.flags.c_contiguous and np.array_equal(got, np.ascontiguousarray(view))


@pytest.mark.parametrize("seed", range(10))
def test_block_spans_of_blocks_in_lane_order_equal_those_of_shuffled_rows(seed):
    # The wait evidence reads each block's first begin and last end run by run where the blocks ascend (lane
    # order), else element by element: the same spans either way.
    from ktrace.analysis.evidence.waits import _block_span

    rng = np.random.default_rng(seed)
    nb = int(rng.integers(1, 40))
    block = np.sort(rng.integers(0, nb, int(rng.integers(1, 3000))))
    begin = rng.integers(0, 1 << 40, len(block))
    end = begin + rng.integers(0, 1 << 20, len(block))
    shuffled = rng.permutation(len(block))
    run_lo, run_hi = _block_span(block, begin, end, nb)
    at_lo, at_hi = _block_span(block[shuffled], begin[shuffled], end[shuffled], nb)
    assert np.array_equal(run_lo, at_lo) and np.array_equal(run_hi, at_hi)
    present = np.unique(block)
    assert run_lo[present].tolist() == [int(begin[block == b].min()) for b in present.tolist()]
