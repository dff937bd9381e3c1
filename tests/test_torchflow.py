"""ktrace.capture.torchflow without a GPU: a fake backend (numpy buffer, a clock the fake kernels advance)
stands for torch; the saved buffers and sidecars are read back by ktrace's own readers."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from ktrace.capture import record_runs
from ktrace.capture import torchflow
from ktrace.decoding.encode import place_records
from ktrace.core.errors import EnvironmentMissing, InputError
from ktrace.core.sidecar import read_sidecar

EVENTS = ["prefill", "decode", "reduction"]


class FakeBackend:
    """Events read a GPU clock that the fake kernels advance; the buffer is a numpy array."""

    def __init__(self):
        self.now_us = 0.0
        self.calls: list[str] = []
        self.dirty_before: list[bool] = []  # per profiled call: did the buffer hold anything already

    def synchronize(self):
        self.calls.append("sync")

    def event(self):
        return {"t": None}

    def record(self, ev):
        ev["t"] = self.now_us

    @staticmethod
    def elapsed_us(a, b):
        return b["t"] - a["t"]

    def spin(self, us):
        self.now_us += us

    @staticmethod
    def length(buf):
        return len(buf)

    def zero(self, buf):
        self.calls.append("zero")
        buf[:] = 0

    @staticmethod
    def to_host(buf, n):
        return buf[:n].copy()

    @staticmethod
    def nonzero_after(buf, n):
        return int(np.count_nonzero(buf[n:]))

    @staticmethod
    def device_facts():
        return {"index": 0, "name": "Fake GPU", "compute_capability": [9, 0], "multiprocessors": 4,
                "backend": "fake"}


def _kernel_words(blocks=4, groups=1, capacity=6):
    """A small FlashInfer-layout buffer: each lane one prefill and one decode slice."""
    lanes = blocks * groups
    block = np.repeat(np.arange(blocks), groups * 4)
    group = np.tile(np.repeat(np.arange(groups), 4), blocks)
    seq = np.tile(np.arange(4), lanes)
    ev = np.tile([0, 0, 1, 1], lanes)
    typ = np.tile([0, 1, 0, 1], lanes)
    tag = (block << 12) | (ev << 2) | typ
    ts = 1000 + seq * 64 + block * 32
    return place_records(blocks, groups, block, group, seq, tag, ts, capacity)


def _setup(total=200, **kw):
    be = FakeBackend()
    buf = np.zeros(total, dtype=np.uint64)
    words = _kernel_words(**kw)
    runs = []

    def profiled():
        be.dirty_before.append(bool(buf.any()))
        buf[: len(words)] = words
        be.now_us += 12.0
        runs.append("p")

    def control():
        be.now_us += 10.0
        runs.append("c")

    return be, buf, profiled, control, runs


def test_timing_interleaves_and_keeps_every_rep(tmp_path):
    be, buf, prof, ctrl, runs = _setup()
    rec = record_runs(prof, ctrl, buf, runs=2, reps=6, warmup=2, event_names=EVENTS, name="ba", out_dir=tmp_path,
                      keep_entries=64, backend=be, spin_us=5)
    assert runs[:4] == ["p", "c", "c", "p"]  # A B, B A after the warm-up pairs too
    assert len(runs) == 2 * (6 + 2) + 2
    t = rec.timing
    assert t.with_profiler.median_us == pytest.approx(12.0)
    assert t.without_profiler.median_us == pytest.approx(10.0)
    assert t.with_profiler.reps == 6 and t.with_profiler.warmup == 2
    side = read_sidecar(rec.sidecars[0])
    assert side["checks"]["timing_reps_us"]["with_profiler"] == [12.0] * 6
    assert side["checks"]["timing_reps_us"]["without_profiler"] == [10.0] * 6
    assert side["timing"]["overhead_ratio"] == pytest.approx(1.2)


def test_runs_are_saved_with_sidecars_that_ktrace_reads(tmp_path):
    be, buf, prof, ctrl, _ = _setup()
    wl = {"kv_lens": [600] * 3, "page_size": 1, "q_data_type": "torch.bfloat16"}
    rec = record_runs(prof, ctrl, buf, runs=3, reps=4, warmup=1, event_names=EVENTS, name="fi_ba", out_dir=tmp_path,
                      keep_entries=64, backend=be, workload=wl, ground_truth={"per_cta_items": [1, 1, 1, 1]},
                      num_blocks=4, num_groups=1, kernel="BatchAttention", grid=[1, 4, 1], spin_us=1)
    assert [p.name for p in rec.bins] == ["fi_ba_run1.bin", "fi_ba_run2.bin", "fi_ba_run3.bin"]
    assert [p.name for p in rec.sidecars] == ["fi_ba_run1.json", "fi_ba_run2.json", "fi_ba_run3.json"]
    assert rec.headers == [(4, 1)] * 3 and rec.records == [16] * 3 and rec.records_past_kept == [0] * 3
    raw = np.fromfile(rec.bins[1], dtype="<u8")
    assert len(raw) == 64 and np.array_equal(raw, buf[:64])
    side = read_sidecar(rec.sidecars[1])
    assert side["sample"] == "fi_ba_run2" and side["producer"] == "flashinfer"
    assert side["event_names"] == EVENTS and "group_names" not in side
    assert side["num_blocks"] == 4 and side["num_groups"] == 1 and side["grid"] == [1, 4, 1]
    assert side["buffer"]["header_matches_launch"] is True and side["buffer"]["entries"] == 64
    assert side["buffer"]["file"] == "fi_ba_run2.bin" and side["buffer"]["records_written"] == 16
    assert side["ground_truth"] == {"per_cta_items": [1, 1, 1, 1], "workload": wl}
    assert side["checks"]["run"] == 2 and side["checks"]["runs"] == 3
    assert side["checks"]["header_word"] == "0x0000000100000004"
    assert side["device"]["name"] == "Fake GPU" and side["host_launch_unix_ns"] > 0
    # each captured run starts from a zeroed buffer (the timed calls before them did not)
    assert be.calls.count("zero") == 3 and be.dirty_before[-3:] == [False] * 3 and any(be.dirty_before[:-3])

    import ktrace

    d = ktrace.decode(rec.bins[0])
    assert d.launch.num_blocks == 4 and d.launch.kernel == "BatchAttention"
    assert d.launch.names_source == "sidecar" and list(d.launch.event_names) == EVENTS
    assert d.launch.producer == "flashinfer" and d.launch.control_median_us == pytest.approx(10.0)
    assert len(d.slices) == 8


def test_two_groups_and_a_header_that_disagrees(tmp_path):
    be, buf, prof, _, _ = _setup(groups=2)
    rec = record_runs(prof, None, buf, runs=1, event_names=["a", "b"], group_names=["load", "compute"], name="mla",
                      out_dir=tmp_path, backend=be, num_blocks=4, num_groups=1)
    side = read_sidecar(rec.sidecars[0])
    assert rec.timing is None and "timing" not in side and "timing_reps_us" not in side["checks"]
    assert side["group_names"] == ["load", "compute"]
    assert rec.headers == [(4, 2)]
    assert side["buffer"]["header_matches_launch"] is False  # the launch said 1 group, the kernel wrote 2
    assert side["buffer"]["entries"] == 200  # keep_entries defaults to the whole buffer


def test_records_past_the_kept_words_are_counted(tmp_path):
    be, buf, prof, _, _ = _setup(total=200)
    rec = record_runs(prof, None, buf, runs=1, event_names=EVENTS, name="short", out_dir=tmp_path, backend=be,
                      keep_entries=10)
    assert rec.records_past_kept == [16 + 1 - 10]
    assert read_sidecar(rec.sidecars[0])["checks"]["records_past_kept_words"] == 7


def test_compressed_runs_are_deterministic_gzip(tmp_path):
    be, buf, prof, _, _ = _setup()
    a = record_runs(prof, None, buf, runs=2, event_names=EVENTS, name="gz", out_dir=tmp_path / "a", backend=be,
                    keep_entries=64, compress=True)
    b = record_runs(prof, None, buf, runs=1, event_names=EVENTS, name="gz", out_dir=tmp_path / "b", backend=be,
                    keep_entries=64, compress=True)
    assert a.bins[0].name == "gz_run1.bin.gz" and a.sidecars[0].name == "gz_run1.json"
    assert a.bins[0].read_bytes() == a.bins[1].read_bytes() == b.bins[0].read_bytes()  # mtime 0, no file name
    assert np.array_equal(np.frombuffer(gzip.decompress(a.bins[0].read_bytes()), dtype="<u8"), buf[:64])
    assert read_sidecar(a.sidecars[0])["buffer"]["file"] == "gz_run1.bin.gz"


def test_runs_of_the_same_inputs_diff_as_one_kernel(tmp_path):
    """ktrace reads the saved runs like its own captures: the .bin.gz with its sidecar, and diff sees one
    kernel (named after the capture, not the run) with the control timings."""
    import ktrace

    be, buf, prof, ctrl, _ = _setup()
    rec = record_runs(prof, ctrl, buf, runs=2, reps=4, warmup=1, event_names=EVENTS, name="same", out_dir=tmp_path,
                      backend=be, keep_entries=64, compress=True, spin_us=1)
    d = ktrace.decode(rec.bins[0])
    assert d.launch.kernel == "same" and list(d.launch.event_names) == EVENTS and len(d.slices) == 8
    diff = ktrace.diff(rec.bins[0], rec.bins[1])
    assert diff.before_kernel == diff.after_kernel == "same"


def test_bad_arguments_are_input_errors(tmp_path):
    be, buf, prof, ctrl, _ = _setup()
    with pytest.raises(InputError):
        record_runs(prof, ctrl, buf, runs=0, event_names=EVENTS, name="x", out_dir=tmp_path, backend=be)
    with pytest.raises(InputError):
        record_runs(prof, ctrl, buf, event_names=[], name="x", out_dir=tmp_path, backend=be)
    with pytest.raises(InputError):
        record_runs(prof, ctrl, buf, event_names=EVENTS, name="x", out_dir=tmp_path, backend=be, keep_entries=10**6)


def test_sidecar_keeps_to_the_schema(tmp_path):
    """Every key is one docs/sidecar.md names; free-form data only under ground_truth and checks."""
    be, buf, prof, ctrl, _ = _setup()
    rec = record_runs(prof, ctrl, buf, runs=1, reps=2, warmup=0, event_names=EVENTS, name="s", out_dir=tmp_path,
                      backend=be, workload={"a": 1}, kernel="k", grid=[1, 4, 1], block=[128, 1, 1],
                      group_of_thread="threadIdx.x == 0", timer={"tick_ns": 32}, spin_us=0)
    side = json.loads(rec.sidecars[0].read_text())
    proto = (torchflow.Path(__file__).resolve().parent.parent / "proto" / "ktrace" / "launch.proto").read_text()
    for key in side:
        assert f" {key} = " in proto, key
    for key in side["buffer"]:
        assert f" {key} = " in proto, key
    for key in side["timing"]["with_profiler"]:
        assert f" {key} = " in proto, key
    assert side["timer"] == {"tick_ns": 32}


def test_calibration_cache_gives_the_timer(tmp_path, monkeypatch):
    from ktrace.capture.tick import Calibration, cache_file

    monkeypatch.setenv("KTRACE_CACHE_DIR", str(tmp_path / "cache"))
    dev = {"name": "Fake GPU", "pci_bus_id": "0000:1b:00.0", "driver_version": 13000}
    assert torchflow.cached_timer(dev) is None
    cal = Calibration("Fake GPU", "0000:1B:00.0", 13000, 32, {32: 10}, 100, 1980.0, {"flashinfer": 11.5},
                      {"flashinfer": 22.2}, {}, 123)
    f = cache_file(type("D", (), {"name": cal.device, "pci_bus_id": cal.pci_bus_id, "driver_version": 13000}))
    f.parent.mkdir(parents=True)
    f.write_text(json.dumps(cal.as_dict()))
    t = torchflow.cached_timer(dev)
    assert t["tick_ns"] == 32 and t["probe_cost_ns"] == 11.5 and t["calibration_unix_ns"] == 123


def test_without_torch_it_is_an_environment_error(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(EnvironmentMissing) as e:
        torchflow.TorchBackend()
    assert e.value.exit_code == 3


def test_torch_backend_on_cpu_tensors():
    """The host-side conversions with a real torch, where it is installed (no GPU needed)."""
    torch = pytest.importorskip("torch")
    be = object.__new__(torchflow.TorchBackend)
    be.torch = torch
    t = torch.zeros(8, dtype=torch.int64)
    t[0] = (1 << 32) | 4
    t[3] = -1  # all ones: the top bit set survives as uint64
    host = be.to_host(t, 5)
    assert host.dtype == np.dtype("<u8") and int(host[0]) == (1 << 32) | 4 and int(host[3]) == 2**64 - 1
    assert be.nonzero_after(t, 3) == 1 and be.nonzero_after(t, 4) == 0
    if hasattr(torch, "uint64"):
        u = torch.zeros(4, dtype=torch.uint64)
        assert be.to_host(u, 4).tolist() == [0, 0, 0, 0]


def _script():
    import importlib.util

    path = torchflow.Path(__file__).resolve().parent.parent / "scripts" / "capture_flashinfer.py"
    spec = importlib.util.spec_from_file_location("capture_flashinfer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Pinned:
    """Stands for the wrappers' pinned int workspace: int32 arrays placed at 16-byte aligned offsets."""

    def __init__(self, size=1 << 14):
        self.raw = np.zeros(size, dtype=np.uint8)
        self.at = 256

    def put(self, vals) -> int:
        a = np.asarray(vals, dtype=np.int32)
        off = self.at
        self.raw[off:off + a.nbytes] = a.view(np.uint8)
        self.at += (a.nbytes + 15) // 16 * 16 + 16
        return off

    def numpy(self):
        return self.raw


def test_batch_attention_plan_is_read_per_cta():
    """HolisticPlanInfo<2>'s vector and arrays as scheduler.cuh lays them out: 4 CTAs, request 0 (prefill) split
    into two chunks on CTAs 0 and 2, five decode items."""
    cf = _script()
    pin = _Pinned()
    info = [1, 4]
    tasks = [dict(q=[0, 0], kv=[0, 0], part=[0, 17], ql=[17, 17], kl=[1000, 1000], qs=[0, 0], ks=[0, 512],
                  ke=[512, 1000], kh=[0, 0], wi=[0, 1, 1, 2, 2]),
             dict(q=[17, 18, 19, 17, 18], kv=[0] * 5, part=[0] * 5, ql=[1] * 5, kl=[100] * 5, qs=[0] * 5,
                  ks=[0] * 5, ke=[100] * 5, kh=[0, 0, 0, 1, 1], wi=[0, 1, 3, 4, 5])]
    for t in tasks:
        info += [pin.put(t[k]) for k in ("q", "kv", "part", "ql", "kl", "qs", "ks", "ke", "kh", "wi")]
    info += [pin.put([256, 1024]), 0, 0, pin.put([0, 2, 4]), pin.put([0, 1]), pin.put([17])]
    wr = type("W", (), {"_plan_info": info, "page_locked_int_workspace_buffer": pin})()
    tr = cf.ba_plan_truth(wr, [17, 1, 1, 1], [1000, 100, 100, 100], 1, 7)
    assert tr["grid"] == [1, 4, 1] and tr["kv_len_limit_per_task"] == {"prefill": 256, "decode": 1024}
    assert tr["items_per_cta"] == [2, 2, 2, 1] and tr["kv_tokens_per_cta"] == [612, 200, 588, 100]
    assert tr["tasks"]["prefill"]["split_requests"] == [0] and tr["tasks"]["decode"]["items_per_cta"] == [1, 2, 1, 1]
    assert tr["tasks"]["decode"]["work_list"]["request"] == [1, 2, 3, 1, 2]
    assert tr["planned_cost_per_cta"] == [2 * 128 + 512 + 32 + 100, 2 * (32 + 100), 256 + 488 + 132, 132]
    assert tr["heaviest_cta"] == 0 and tr["reduction_has_work"] and tr["idle_ctas"] == []
    json.dumps(tr)  # goes into the sidecar as is


def test_mla_plan_is_read_per_cluster_and_block():
    """MLAPlanInfo's 18 words: 3 clusters of 2 CTAs; cluster 1 gets nothing; request 1 split in two."""
    cf = _script()
    pin = _Pinned()
    v = dict(q=[0, 1, 1], kv=[0, 0, 0], part=[-1, 0, 64], ql=[1, 1, 1], kl=[100, 3000, 3000], qs=[0, 0, 0],
             ks=[0, 0, 2048], ke=[100, 2048, 3000])
    info = [2, 3, pin.put(v["q"]), pin.put(v["kv"]), pin.put(v["part"]), pin.put([0, 5, 0, 0, 0, 0]),
            pin.put([0, 9, 0, 0, 0, 0]), pin.put([0] * 6), pin.put([0] * 6), pin.put([0] * 6), pin.put(v["ql"]),
            pin.put(v["kl"]), pin.put(v["qs"]), pin.put(v["ks"]), pin.put(v["ke"]), pin.put([0, 2, 2, 3]), 0, 0]
    backend = type("B", (), {"_plan_info": info, "_pin_memory_int_workspace_buffer": pin})()
    wr = type("W", (), {"_planned_backend": backend})()
    tr = cf.mla_plan_truth(wr, [1, 1, 1], [100, 3000, 3000], 128)
    assert tr["grid"] == [2, 3, 1] and tr["work_items"] == 3 and tr["split_requests"] == [1]
    assert tr["items_per_cluster"] == [2, 0, 1] and tr["items_per_block"] == [2, 2, 0, 0, 1, 1]
    assert tr["kv_tokens_per_block"] == [2148, 2148, 0, 0, 952, 952]
    assert tr["idle_blocks"] == [2, 3] and tr["merge_ctas"] == 1 and tr["heaviest_cluster"] == 0
    assert cf.statements("mla", {"kv_lens": [1024] * 4}, tr)[-1].startswith("the plan leaves 2 CTA(s) without work")
    json.dumps(tr)
