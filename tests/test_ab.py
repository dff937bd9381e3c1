"""A/B sessions without a GPU: the paired test against known values, the interleaving on a fake GPU whose clock
drifts and whose first launch after a synchronize is slow (wrong pairing or no alternation gives a wrong
verdict), the comparison record, torch's record_ab, and `ktrace diff` of two captures reading the record."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ktrace.core import abrecord
from ktrace.capture import record_ab
from ktrace.capture.ab import DriverCall, time_pairs
from ktrace.decoding.encode import place_records
from ktrace.core.errors import InputError
from ktrace.core.paired import paired_test, sign_interval, t_quantile, t_two_sided_p

from conftest import SAMPLES, run_ktrace


# ---------------------------------------------------------------------------------------- the paired test
@pytest.mark.parametrize("conf,dof,want", [(0.95, 1, 12.7062), (0.95, 9, 2.2622), (0.95, 49, 2.0096),
                                           (0.99, 199, 2.6008), (0.95, 10_000, 1.9602)])
def test_t_quantiles_match_the_tables(conf, dof, want):
    assert t_quantile(conf, dof) == pytest.approx(want, abs=1e-4)


def test_t_p_values_match_the_tables():
    assert t_two_sided_p(2.0096, 49) == pytest.approx(0.05, abs=1e-4)
    assert t_two_sided_p(1.0, 10) == pytest.approx(0.3409, abs=1e-4)
    assert t_two_sided_p(0.0, 5) == pytest.approx(1.0)


def test_sign_interval_is_the_binomial_order_statistics():
    med, lo, hi = sign_interval(np.arange(100.0), 0.95)  # n=100: the 40th and 61st of the sorted values
    assert (med, lo, hi) == (49.5, 39.0, 60.0)


def _pairs(n=200, change=0.0, sd=0.2, seed=1):
    rng = np.random.default_rng(seed)
    drift = 100.0 + 20.0 * np.linspace(0, 1, n)  # both sides drift alike: only the pairs' differences are clean
    b = drift + rng.normal(0, sd, n)
    return b, drift * (1 + change) + rng.normal(0, sd, n)


def test_paired_test_finds_a_one_percent_change_under_a_drift_larger_than_it():
    b, a = _pairs(change=0.01)
    t = paired_test(b, a)
    assert t.change == "slower" and t.significant and t.p_value < 1e-6
    lo, hi = t.relative_ci
    assert lo < 0.01 < hi and hi - lo < 0.002
    assert t.text.startswith("SLOWER: unprofiled +1.0")
    f = t.flipped()
    assert f.change == "faster" and f.ci_us == (-t.ci_us[1], -t.ci_us[0]) and f.before_mean_us == t.after_mean_us


def test_no_change_and_inconclusive_and_under_the_threshold():
    b, a = _pairs(change=0.0)
    t = paired_test(b, a)
    assert t.change == "no change" and not t.significant and t.ci_us[0] < 0 < t.ci_us[1]
    b, a = _pairs(change=0.0, sd=3.0, n=20)  # too noisy to rule out a 0.25% change: more pairs would
    assert paired_test(b, a).change == "inconclusive"
    b, a = _pairs(change=0.001, sd=0.05)  # 0.1%: significant, but within the 0.25% that counts
    t = paired_test(b, a)
    assert t.significant and t.change == "no change" and "within +-0.25%" in t.text
    assert paired_test(b, a, threshold_pct=0.05).change == "slower"


def test_paired_test_refuses_what_it_cannot_test():
    with pytest.raises(InputError, match="as many"):
        paired_test([1.0] * 20, [1.0] * 19)
    with pytest.raises(InputError, match="at least 10 pairs"):
        paired_test([1.0] * 5, [1.0] * 5)
    with pytest.raises(InputError, match="finite"):
        paired_test([1.0] * 19 + [np.nan], [1.0] * 20)


# ------------------------------------------------------------------------------------ the interleaving
class FakeGPU:
    """Events read a clock the fake kernels advance. A launch is 0.5% slower when it is the first after a
    synchronize (a position effect) and every launch 0.1% slower than the one before (a drift)."""

    def __init__(self):
        self.now_us, self.launches, self.since_sync, self.log = 0.0, 0, 0, []

    def event(self):
        return {"t": None}

    def record(self, ev):
        ev["t"] = self.now_us

    @staticmethod
    def elapsed_us(a, b):
        return b["t"] - a["t"]

    def spin(self, us):
        self.now_us += us

    def synchronize(self):
        self.since_sync = 0
        self.log.append("sync")

    def kernel(self, name, base_us):
        def launch():
            first = 1.005 if self.since_sync == 0 else 1.0
            self.now_us += base_us * first * (1 + 0.001 * self.launches)
            self.launches += 1
            self.since_sync += 1
            self.log.append(name)
        return launch


def test_pairs_alternate_and_cancel_position_and_drift():
    gpu = FakeGPU()
    t = time_pairs(gpu.kernel("A", 100.0), gpu.kernel("B", 100.0), pairs=60, warmup=3, spin_us=5, backend=gpu)
    runs = [x for x in gpu.log if x != "sync"]
    assert runs[:8] == ["A", "B", "B", "A", "A", "B", "B", "A"] and len(runs) == 2 * 63
    assert gpu.log[:3] == ["A", "B", "sync"]  # one pair, then its events are read
    assert len(t.before_us) == len(t.after_us) == 60 and t.warmup == 3
    assert t.order[:3] == ("BA", "AB", "BA")  # 3 warm-up pairs: the first timed pair is the 4th (B first)
    assert max(t.before_us) > 1.1 * min(t.before_us)  # the drift is ten times the change tested below
    p = paired_test(t.before_us, t.after_us)  # always A first would read -0.5%: alternation cancels it
    assert abs(p.relative) < 0.001 and p.ci_us[0] < 0 < p.ci_us[1] and not p.significant


def test_pairs_see_a_one_percent_change_despite_position_and_drift():
    gpu = FakeGPU()
    t = time_pairs(gpu.kernel("A", 100.0), gpu.kernel("B", 101.0), pairs=60, warmup=2, spin_us=5, backend=gpu)
    p = paired_test(t.before_us, t.after_us)
    assert p.change == "slower"
    lo, hi = p.relative_ci
    assert lo < 0.01 < hi
    assert "alternating order" in t.method and "60 pairs" in t.method


def test_time_pairs_needs_enough_pairs():
    with pytest.raises(InputError, match="at least 10 pairs"):
        time_pairs(lambda: None, lambda: None, pairs=3, backend=FakeGPU())


def test_driver_calls_are_shell_words(tmp_path):
    d = tmp_path / "work.py"
    d.write_text("")
    c = DriverCall.parse(f"{d} --extra-work 2 --name 'more work'")
    assert c.path == d and c.argv == ("--extra-work", "2", "--name", "more work")
    assert "'more work'" in c.label
    with pytest.raises(InputError, match="no such driver"):
        DriverCall.parse(str(tmp_path / "nope.py"), "AFTER")


# ------------------------------------------------------------------------------------------ the record
def _side(path, name):
    return {"label": name, "name": name, "capture": path.name, "sidecar": path.stem + ".json",
            "sha256": abrecord.file_sha256(path), "kernel": "k",
            "profiler_overhead": {"overhead_ratio": 1.01, "overhead_us": 2.5}}


def _copy_pair(tmp_path, change=0.01, names=("imbalance_ktrace", "balanced_ktrace"), pointer=True):
    """Two captures (copies of a sample) with a record of a session that measured ``change``."""
    paths = []
    rec_name = abrecord.record_name("x", "y")
    for src, role in zip(names, ("before", "after")):
        dst = tmp_path / f"{src}_{role}.bin"
        shutil.copy(SAMPLES / f"{src}.bin", dst)
        meta = json.loads((SAMPLES / f"{src}.json").read_text())
        if pointer:
            meta.setdefault("checks", {}).update(ab_record=rec_name, ab_side=role)
        (tmp_path / f"{src}_{role}.json").write_text(json.dumps(meta))
        paths.append(dst)
    b, a = _pairs(change=change, sd=0.3)
    order = ["AB" if i % 2 == 0 else "BA" for i in range(len(b))]
    rec = abrecord.build_record(_side(paths[0], "x"), _side(paths[1], "y"), b, a, order, method="fake",
                                warmup=5, spin_us=200, device={"name": "Fake GPU"})
    abrecord.write_record(tmp_path / rec_name, rec)
    return paths, tmp_path / rec_name


def test_record_round_trip_and_its_verdict(tmp_path):
    (b, a), path = _copy_pair(tmp_path)
    rec = abrecord.read_record(path)
    data = json.loads(path.read_text())
    assert data["schema"] == "ktrace.ab/1" and data["timing"]["pairs"] == 200
    assert data["verdict"]["change"] == "slower" == rec.test.change
    assert data["verdict"]["ci_us"] == pytest.approx(list(rec.test.ci_us), abs=1e-5)
    assert rec.capture_path("before") == b
    found = abrecord.find_record(b, a)
    assert found.record.path == path and not found.flipped and found.test.change == "slower"
    back = abrecord.find_record(a, b)
    assert back.flipped and back.test.change == "faster"


@pytest.mark.parametrize("edit,problem", [
    (lambda d: d.update(schema="x"), "schema"),
    (lambda d: d["timing"]["after_us"].pop(), "equal length"),
    (lambda d: d["timing"]["before_us"].__setitem__(0, -1), "positive"),
    (lambda d: d["after"].__setitem__("capture", "../x.bin"), "beside the record"),
])
def test_a_damaged_record_is_refused_with_its_name(tmp_path, edit, problem):
    _, path = _copy_pair(tmp_path)
    d = json.loads(path.read_text())
    edit(d)
    path.write_text(json.dumps(d))
    with pytest.raises(InputError, match=problem) as e:
        abrecord.read_record(path)
    assert str(path) in str(e.value)


def test_a_buffer_changed_since_the_session_is_not_judged_by_it(tmp_path):
    (b, a), path = _copy_pair(tmp_path)
    raw = bytearray(a.read_bytes())
    raw[-1] ^= 1
    a.write_bytes(bytes(raw))
    found = abrecord.find_record(b, a)
    assert found.record is None and "holds other captures" in found.note
    assert abrecord.find_record(SAMPLES / "balanced_ktrace.bin", SAMPLES / "imbalance_ktrace.bin") is None


def test_a_300_character_record_name_in_a_sidecar_gives_the_note_not_an_error(tmp_path):
    shutil.copy(SAMPLES / "balanced_ktrace.bin", tmp_path / "b.bin")
    shutil.copy(SAMPLES / "imbalance_ktrace.bin", tmp_path / "a.bin")
    for name in ("b", "a"):
        meta = json.loads((SAMPLES / "balanced_ktrace.json").read_text())
        meta["checks"] = {"ab_record": "r" * 300 + ".ab.json", "ab_side": "before"}
        (tmp_path / f"{name}.json").write_text(json.dumps(meta))
    found = abrecord.find_record(tmp_path / "b.bin", tmp_path / "a.bin")
    assert found.record is None and "A/B record not used" in found.note and "cannot be read" in found.note
    assert "r" * 100 not in found.note and "(308 characters)" in found.note
    rc, out, err = run_ktrace("diff", tmp_path / "b.bin", tmp_path / "a.bin")
    assert rc == 0 and "Traceback" not in err and "File name too long" not in err, err
    assert "A/B record not used" in " ".join(out.split())


def test_identical_buffers_are_told_apart_by_their_names(tmp_path):
    (b, a), path = _copy_pair(tmp_path, names=("balanced_ktrace", "balanced_ktrace"))
    assert not abrecord.find_record(b, a).flipped and abrecord.find_record(a, b).flipped


def test_a_record_is_found_without_the_sidecars_pointer(tmp_path):
    (b, a), path = _copy_pair(tmp_path, pointer=False)
    assert abrecord.find_record(b, a).record.path == path


# -------------------------------------------------------------------------------- ktrace diff reads it
@pytest.mark.slow
def test_diff_of_the_two_captures_leads_with_the_paired_verdict(tmp_path):
    (b, a), path = _copy_pair(tmp_path, change=0.01)
    rc, out, err = run_ktrace("diff", b, a)
    assert rc == 0, err
    first = out.splitlines()[0]
    assert first.startswith("worse: unprofiled +1.0"), out
    flat = " ".join(out.split())  # the text wraps at 100 columns, wherever the temporary folder's path falls
    assert "paired t-test on 200 interleaved pairs" in flat and f"A/B record {path}" in flat
    rc, out, err = run_ktrace("diff", "--json", a, b)
    d = json.loads(out)
    assert d["verdict"]["verdict"] == "better" and d["verdict"]["test"] == "paired"
    assert d["paired"]["change"] == "faster" and d["paired"]["record"] == str(path)
    assert d["headline"].startswith("better: unprofiled -")
    control = next(k for k in d["kernel"] if k["figure"] == "control_us")
    assert control["verdict"] == "better" and control["test"] == "paired"


@pytest.mark.slow
def test_diff_of_a_no_op_session_says_no_change(tmp_path):
    (b, a), _ = _copy_pair(tmp_path, change=0.0)
    rc, out, err = run_ktrace("diff", "--json", b, a)
    d = json.loads(out)
    assert d["verdict"]["verdict"] == "no change" and d["headline"].startswith("no change: unprofiled")
    assert "p<" not in d["headline"] and "p=" not in d["headline"]  # no p-value beside words it contradicts


def test_the_committed_no_op_session_says_no_change_without_a_p_value():
    from ktrace.analysis.compare.diff_result import paired_line

    rec = abrecord.read_record(SAMPLES / "ab" / "noop_vs_noop.ab.json")
    line = paired_line(rec.test)
    assert rec.test.significant and rec.test.change == "no change"  # the t-test alone would call it a change
    assert line.startswith("no change: unprofiled -0.03% [") and "within +-0.25%" in line
    assert "p=" not in line and "p<" not in line
    worse = paired_line(abrecord.read_record(SAMPLES / "ab" / "more_work_vs_more_work_plus2.ab.json").test)
    assert worse.startswith("worse: unprofiled +1.18% [+1.16%, +1.20%] (paired t-test on 200 interleaved pairs")


@pytest.mark.slow
def test_diff_without_a_record_is_unchanged(tmp_path):
    rc, out, _ = run_ktrace("diff", "--json", SAMPLES / "imbalance_ktrace.bin", SAMPLES / "balanced_ktrace.bin")
    d = json.loads(out)
    assert d["paired"] is None and d["verdict"]["test"] == "reps"


# ----------------------------------------------------------------------------------- torch's record_ab
class FakeTorch(FakeGPU):
    @staticmethod
    def length(buf):
        return len(buf)

    @staticmethod
    def zero(buf):
        buf[:] = 0

    @staticmethod
    def to_host(buf, n):
        return buf[:n].copy()

    @staticmethod
    def nonzero_after(buf, n):
        return int(np.count_nonzero(buf[n:]))

    @staticmethod
    def device_facts():
        return {"index": 0, "name": "Fake GPU", "multiprocessors": 4, "backend": "fake"}


def _words(blocks=4, capacity=6):
    block = np.repeat(np.arange(blocks), 4)
    seq, ev, typ = np.tile(np.arange(4), blocks), np.tile([0, 0, 1, 1], blocks), np.tile([0, 1, 0, 1], blocks)
    return place_records(blocks, 1, block, np.zeros_like(block), seq, (block << 12) | (ev << 2) | typ,
                         1000 + seq * 64 + block * 32, capacity)


def test_record_ab_times_both_saves_both_and_writes_the_record(tmp_path):
    gpu = FakeTorch()
    buf = np.zeros(64, np.uint64)
    words = _words()

    def profiled(us):
        run = gpu.kernel("P", us)

        def call():
            buf[: len(words)] = words
            run()
        return call

    before = (profiled(105.0), gpu.kernel("A", 100.0))
    after = (profiled(106.0), gpu.kernel("B", 101.0))
    r = record_ab(before, after, buf, event_names=["prefill", "decode"], name="fi", out_dir=tmp_path, pairs=40,
                  warmup=2, reps=10, spin_us=5, backend=gpu, timer=False)
    assert (r.before.name, r.after.name) == ("fi_before.bin", "fi_after.bin")
    assert r.record.path.name == "fi_vs_fi.ab.json" and r.record.test.change == "slower"
    assert r.overhead[0].overhead_ratio == pytest.approx(1.05, abs=0.01)
    side = json.loads((tmp_path / "fi_after.json").read_text())
    assert side["checks"]["ab_record"] == "fi_vs_fi.ab.json" and side["checks"]["ab_side"] == "after"
    assert abrecord.find_record(r.before, r.after).record.path == r.record.path
    assert np.array_equal(np.fromfile(r.after, "<u8"), buf)
    assert "torch" in r.record.data["timing"]["method"]


def test_record_ab_wants_pairs_of_callables(tmp_path):
    with pytest.raises(InputError, match="profiled, unprofiled"):
        record_ab(lambda: None, (lambda: None, lambda: None), np.zeros(8, np.uint64), event_names=["a"], name="x",
                  out_dir=tmp_path, backend=FakeTorch())


# ------------------------------------------------------------------------------------- the command line
def test_run_ab_names_a_missing_driver(tmp_path):
    rc, out, err = run_ktrace("run", "--ab", tmp_path / "nope.py", tmp_path / "nope2.py")
    assert rc == 2 and "nope.py: no such driver script" in err and "Traceback" not in err


def test_run_ab_refuses_a_third_driver_and_few_pairs(tmp_path):
    d = tmp_path / "d.py"
    d.write_text("")
    rc, _, err = run_ktrace("run", "--ab", d, d, "--pairs", "3")
    assert rc == 2 and "--pairs" in err
    rc, _, err = run_ktrace("run", "--ab", d, d, "--no-timing")
    assert rc == 2 and "--no-timing" in err


# ------------------------------------------------------- ktrace run --ab's orchestration, on a fake GPU
class FakeArray:
    """A GPU array as ktrace sees one; ``slow``: kernels on it take 1.3% longer (where it lies); ``data``: its
    contents (a kernel's work follows them)."""

    def __init__(self, slow, data=1.0):
        self.gpudata, self.nbytes, self.dtype, self.shape, self.slow = 1, 64, np.dtype("f4"), (16,), slow
        self.data = float(data)

    def get(self):
        return np.full(self.shape, self.data, self.dtype)

    def copy(self):
        return FakeArray(self.slow, self.data)


def _fake_session(tmp_path, monkeypatch, after_argv, buffers="shared", pairs=40, after_data=1.0, copies=None):
    from types import SimpleNamespace

    from ktrace.capture import BUFFER, _cuda, ab, recording, runner, settings
    from ktrace.capture.timing import Comparison, stats_of

    gpu = FakeGPU()
    gpu.stream = "stream"
    monkeypatch.setattr(ab, "CudaEvents", lambda: gpu)
    monkeypatch.setattr(_cuda, "ensure_context", lambda: None)
    monkeypatch.setattr(_cuda, "device_index", lambda: 0)
    monkeypatch.setattr(_cuda, "device_info", lambda: SimpleNamespace(as_dict=lambda: {"name": "Fake GPU"}))
    streams, drivers = [], []

    def fake_run_driver(path, argv):  # what a driver does through profile() and save()
        s = settings.current()
        name = argv[argv.index("--name") + 1] if "--name" in argv else path.stem
        stem = f"{name}{s.suffix}"
        bin_path = s.out_dir / f"{stem}.bin"
        s.out_dir.mkdir(parents=True, exist_ok=True)
        bin_path.write_bytes(stem.encode())
        (s.out_dir / f"{stem}.json").write_text(json.dumps({"checks": {"own": 1}}))
        cap = SimpleNamespace(name=name, paths={"bin": bin_path, "json": s.out_dir / f"{stem}.json"},
                              timing=Comparison(stats_of([11.0] * 3, 1), stats_of([10.0] * 3, 1), "m"), kernel=None)
        extra = float(argv[argv.index("--extra") + 1]) if "--extra" in argv else 0.0
        drivers.append(name)

        def launch(args, stream):  # the second driver's allocation happens to lie better: 1.3% faster
            assert args[0] == np.uintp(0) and float(args[2]) == 100.0 * (1 + extra / 100)
            streams.append(stream)
            gpu.kernel(name, float(args[2]) * args[1].data * (1.013 if args[1].slow else 1.0))()

        first = len(drivers) == 1
        args = (BUFFER, FakeArray(slow=first, data=1.0 if first else after_data), np.float64(100.0 * (1 + extra / 100)))
        recording._KEPT.append(recording.KeptLaunch(cap, args, launch, 0))
        return [cap]

    monkeypatch.setattr(runner, "run_driver", fake_run_driver)

    def copy_into(dst, src, stream):  # a copy takes GPU time: inside the events it would be timed
        assert stream == "stream"
        gpu.now_us += 50.0
        dst.data = src.data
        if copies is not None:
            copies.append(src.data)

    monkeypatch.setattr(ab, "_copy_into", copy_into)
    tmp_path.mkdir(parents=True, exist_ok=True)
    d = tmp_path / "work.py"
    d.write_text("")
    settings.configure(out_dir=tmp_path / "out", suffix="_k", timing=True)
    try:
        s = ab.run_ab(DriverCall(d), DriverCall(d, after_argv), pairs=pairs, warmup=2, buffers=buffers)
    finally:
        settings.configure(out_dir="ktrace-out", suffix="")
    return s, d, streams


def test_run_ab_runs_both_drivers_times_their_controls_and_writes_the_record(tmp_path, monkeypatch):
    s, d, streams = _fake_session(tmp_path, monkeypatch, ("--extra", "1", "--name", "more"))
    out = tmp_path / "out"
    assert s.record.path == out / "work_k_vs_more_k.ab.json"
    assert (s.before.paths["bin"].name, s.after.paths["bin"].name) == ("work_k_before.bin", "more_k_after.bin")
    assert s.record.test.change == "slower" and set(streams) == {"stream"} and len(streams) == 2 * 42
    lo, hi = s.record.test.relative_ci
    assert lo < 0.01 < hi  # the 1.3% of where the buffers lie cancelled: the code's 1% is what is left
    side = json.loads((out / "more_k_after.json").read_text())
    assert side["checks"] == {"own": 1, "ab_record": "work_k_vs_more_k.ab.json", "ab_side": "after"}
    data = s.record.data
    assert data["before"]["label"] == str(d) and data["after"]["label"].endswith("--extra 1 --name more")
    assert data["before"]["profiler_overhead"]["overhead_ratio"] == pytest.approx(1.1)
    assert data["device"] == {"index": 0, "name": "Fake GPU"}
    bop = data["timing"]["buffers_of_pair"]  # two pairs on each side's buffers in turn
    assert data["timing"]["buffers"] == "shared" and bop[0::2] == bop[1::2] and bop[0] != bop[2] and bop[0] == bop[4]
    before_set, after_set = abrecord.placement(data)
    assert after_set / before_set - 1 == pytest.approx(-0.013 / 1.013, abs=0.005)  # and the drift
    assert abrecord.find_record(s.before.paths["bin"], s.after.paths["bin"]).record.path == s.record.path


def test_a_no_op_on_buffers_that_lie_differently_is_no_change_only_when_they_are_shared(tmp_path, monkeypatch):
    s, _, _ = _fake_session(tmp_path / "shared", monkeypatch, (), pairs=200)
    assert s.record.test.change == "no change"
    s, _, _ = _fake_session(tmp_path / "own", monkeypatch, (), buffers="own", pairs=200)
    assert s.record.test.change == "faster"  # each on its own buffers, where they lie is the difference
    assert s.record.data["timing"]["buffers"] == "own" and "--ab-buffers own" in s.record.data["timing"]["buffers_note"]


def test_a_fix_that_lives_in_the_data_is_timed_on_each_variants_own_contents(tmp_path, monkeypatch):
    # the same kernel, the after's table holding 34% less work: both on the same buffers in turn, each with its
    # own contents copied in before its launch (outside the events), so the saving shows and placement is apart
    copies = []
    s, _, _ = _fake_session(tmp_path, monkeypatch, ("--name", "fixed"), pairs=200, after_data=0.66, copies=copies)
    t = s.record.test
    assert t.change == "faster"
    lo, hi = t.relative_ci
    assert lo < -0.34 < hi and hi - lo < 0.01  # the copies' 50 µs are outside the events
    timing = s.record.data["timing"]
    assert timing["buffers"] == "shared" and timing["own_contents"] == [1]
    assert "own contents of argument(s) 1" in timing["method"]
    assert len(copies) == 2 * 202 and set(copies) == {1.0, 0.66}
    before_set, after_set = abrecord.placement(s.record.data)
    assert after_set / before_set - 1 == pytest.approx(-0.013 / 1.013, abs=0.005)  # only where the buffers lie
    from ktrace.report.ab_report import ab_lines

    assert any("each with its own contents of argument(s) 1" in line for line in ab_lines(s.record))


def test_identical_contents_are_not_copied(tmp_path, monkeypatch):
    copies = []
    s, _, _ = _fake_session(tmp_path, monkeypatch, (), pairs=20, copies=copies)
    assert copies == [] and s.record.data["timing"]["own_contents"] == []


def test_arguments_that_do_not_match_are_not_shared():
    from types import SimpleNamespace

    from ktrace.capture import BUFFER
    from ktrace.capture.ab import sharing_problem

    k = lambda *args: SimpleNamespace(args=args)  # noqa: E731
    assert sharing_problem(k(BUFFER, FakeArray(0), 3), k(BUFFER, FakeArray(1), 4)) == ""
    big = FakeArray(0)
    big.shape = (32,)
    assert "same dtype and shape" in sharing_problem(k(BUFFER, FakeArray(0)), k(BUFFER, big))
    assert "2 and 3 arguments" in sharing_problem(k(BUFFER, 1), k(BUFFER, 1, 2))
    assert "cannot see" in sharing_problem(k(BUFFER, object()), k(BUFFER, object()))


def test_run_ab_wants_one_profiled_launch_per_driver(tmp_path, monkeypatch):
    from ktrace.capture import _cuda, ab, runner, settings

    monkeypatch.setattr(_cuda, "ensure_context", lambda: None)
    monkeypatch.setattr(runner, "run_driver", lambda path, argv: [])
    d = tmp_path / "work.py"
    d.write_text("")
    with pytest.raises(InputError, match="profiled 0 launch"):
        ab.run_ab(DriverCall(d), DriverCall(d), pairs=20)
    assert settings.current().suffix == ""


def test_an_outlier_pair_is_left_out_of_the_t_test_and_said_so():
    b, a = _pairs(change=0.01, sd=0.3)
    a[52] = 4223.9  # a launch that hit a hiccup (seen on an H200)
    t = paired_test(b, a)
    assert t.excluded == (52,) and t.change == "slower" and "1 outlier pair" in t.text
    assert t.relative_ci[0] < 0.01 < t.relative_ci[1]
    b, a = _pairs(change=0.0, sd=0.3)
    assert paired_test(b, a).excluded == ()  # normal noise: none left out
