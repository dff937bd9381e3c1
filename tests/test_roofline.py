"""The roofline: the work (sidecar ``work``, --bytes/--flops) against the device's peaks; no stake below it."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from conftest import run_ktrace
from ktrace import analyze
from ktrace.analysis.model.roofline import peaks_of

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
MLA = SAMPLES / "fi_mla_decode_run1.bin.gz"
MLA_KV_BYTES = 132 * 1024 * (512 + 64) * 2  # the plan's 132 requests of 1024 fp16 tokens of 576 values


@pytest.mark.parametrize("name, label, gbps", [("NVIDIA H200", "H200", 4800.0), ("NVIDIA H100 80GB HBM3", "H100 SXM", 3350.0),
                                               ("NVIDIA H100 PCIe", "H100 PCIe", 2000.0), ("NVIDIA B200", "B200", 8000.0),
                                               ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", 2039.0),
                                               ("NVIDIA A100-SXM4-40GB", "A100 40GB", 1555.0)])
def test_known_gpus_by_name(name, label, gbps):
    assert peaks_of(name)[:2] == (label, gbps)


def test_unknown_gpu_has_no_peaks():
    assert peaks_of("NVIDIA GeForce RTX 4090") is None
    assert peaks_of(None) is None


def test_achieved_bandwidth_against_the_h200():
    a = analyze(MLA, work_bytes=MLA_KV_BYTES)
    r = a.roofline
    wall = float(a.kernel.wall_ns)
    assert r.device == "H200" and r.peak_gbps == 4800.0
    assert r.achieved_gbps == pytest.approx(MLA_KV_BYTES / wall)
    assert r.floor_ns == pytest.approx(MLA_KV_BYTES / 4800.0)
    d = json.loads(a.to_json())["roofline"]
    assert d["bandwidth_share"] == pytest.approx(MLA_KV_BYTES / wall / 4800.0)
    assert "of the H200's peak 4.8 TB/s" in str(a)
    # the plan's bytes at the H200's peak take 32 µs of the 93 µs wall: the pipeline's replayed stake stands
    assert all("roofline_cap_ns" not in f.figures for f in a.findings)


def test_no_stake_below_the_roofline():
    """Bytes that leave the kernel 20 µs above its floor: no warning promises more than those 20 µs."""
    plain = analyze(MLA)
    wall = float(plain.kernel.wall_ns)
    top = max(f.impact_ns for f in plain.findings if f.severity == "warning")
    room = top - 5000.0  # less room than the top warning claims
    work = (wall - room) * 4800.0
    a = analyze(MLA, work_bytes=work)
    capped = [f for f in a.findings if f.figures.get("roofline_cap_ns") is not None]
    assert capped, "the top warning claims more than the roofline leaves"
    assert max(f.impact_ns for f in a.findings) <= room + 1
    assert all("the roofline" in f.message for f in capped)
    assert "capped by the roofline" in str(a)


def test_peak_override_moves_the_floor():
    a = analyze(MLA, work_bytes=MLA_KV_BYTES, peak_gbps=2000.0)
    assert a.roofline.floor_ns == pytest.approx(MLA_KV_BYTES / 2000.0)
    assert a.roofline.peaks_source == "given"


def test_flops_floor_when_compute_binds():
    a = analyze(MLA, work_bytes=1e6, work_flops=50e9, peak_tflops=1000.0)
    assert a.roofline.bound == "compute"
    assert a.roofline.floor_ns == pytest.approx(50e9 / 1000e12 * 1e9)  # 50 µs


def test_no_work_no_roofline():
    a = analyze(MLA)
    assert a.roofline is None and json.loads(a.to_json())["roofline"] is None
    assert "work:" not in str(a)


def _sample_with(tmp_path, work) -> Path:
    shutil.copy(SAMPLES / "imbalance_ktrace.bin", tmp_path / "cap.bin")
    meta = json.loads((SAMPLES / "imbalance_ktrace.json").read_text())
    meta["work"] = work
    (tmp_path / "cap.json").write_text(json.dumps(meta))
    return tmp_path / "cap.bin"


def test_sidecar_work_reaches_the_trace(tmp_path):
    """The sidecar's work is a launch fact: the trace written from the buffer carries it to the SQL engine."""
    buf = _sample_with(tmp_path, {"bytes": 4_000_000_000, "flops": 0})
    trace = tmp_path / "cap.perfetto-trace"
    rc, _, err = run_ktrace("convert", buf, "-o", trace)
    assert rc == 0, err
    a = analyze(trace)
    assert a.launch["work_bytes"] == 4_000_000_000
    assert a.roofline.bytes == 4e9


@pytest.mark.parametrize("work, words", [({"bytes": "lots"}, "'work.bytes'"), ({"bytes": -5}, "'work.bytes'"),
                                         ({"flops": 1e30}, "'work.flops'"), ([1, 2], "'work'"),
                                         ({"byte": 5}, "'work' has 'byte'")])
def test_nonsense_work_is_refused(tmp_path, work, words):
    buf = _sample_with(tmp_path, work)
    rc, out, err = run_ktrace("analyze", buf)
    assert rc == 2
    assert words in err and "cap.json" in err and "Traceback" not in err


@pytest.mark.parametrize("flag, value", [("--bytes", "-1"), ("--bytes", "nan"), ("--peak-gbps", "0"),
                                         ("--flops", "inf"), ("--peak-tflops", "x")])
def test_nonsense_options_are_refused(flag, value):
    rc, out, err = run_ktrace("analyze", SAMPLES / "imbalance_ktrace.bin", flag, value)
    assert rc == 2 and flag in err and "Traceback" not in err


def test_capture_script_fills_the_kv_bytes_from_the_plan():
    spec = importlib.util.spec_from_file_location("capture_flashinfer",
                                                  Path(__file__).resolve().parents[1] / "scripts" / "capture_flashinfer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    meta = json.loads((SAMPLES / "fi_mla_decode_run1.json").read_text())
    kv_lens = meta["ground_truth"]["workload"]["plan_args"]["kv_lens"]
    assert mod.kernel_work("mla", {"kv_lens": kv_lens}) == {"bytes": MLA_KV_BYTES}


def _sidecars() -> list[Path]:
    """Every committed capture's sidecar: a JSON beside a capture of the same stem (buffer, trace or log)."""
    return sorted(p for p in SAMPLES.rglob("*.json")
                  if any(q != p and not q.name.endswith(".json") for q in p.parent.glob(p.stem + ".*")))


def test_every_committed_sidecar_names_a_gpu_the_roofline_knows():
    from ktrace.core.sidecar import launch_fields

    found = {p.relative_to(SAMPLES).as_posix(): launch_fields(json.loads(p.read_text()))["device"] for p in _sidecars()}
    assert len(found) > 50
    unknown = {k: v for k, v in found.items() if peaks_of(v) is None}
    assert not unknown, f"peaks unknown for {sorted(unknown)[:5]}"


@pytest.mark.parametrize("shape", ["device object", "device name", "env.device name", "env.device object"])
def test_the_gpu_is_found_in_every_sidecar_shape(tmp_path, shape):
    """FlashInfer's torch captures name the GPU under ``env.device``, IKET and Proton as a bare ``device`` string:
    each reads the H200's peaks, not "unknown"."""
    meta = json.loads((SAMPLES / "fi_mla_decode_run1.json").read_text())
    dev = meta.pop("device")
    meta.update({"device object": {"device": dev}, "device name": {"device": dev["name"]},
                 "env.device name": {"env": {"device": dev["name"], "torch": "2.11.0"}},
                 "env.device object": {"env": {"device": dev}}}[shape])
    shutil.copy(MLA, tmp_path / "cap.bin.gz")
    (tmp_path / "cap.json").write_text(json.dumps(meta))
    rc, out, err = run_ktrace("analyze", tmp_path / "cap.bin.gz", "--bytes", MLA_KV_BYTES)
    assert rc == 0, err
    assert "of the H200's peak 4.8 TB/s" in out and "peaks are unknown" not in out


def test_a_device_name_under_env_is_checked_like_any_other(tmp_path):
    meta = json.loads((SAMPLES / "fi_mla_decode_run1.json").read_text())
    del meta["device"]
    meta["env"] = {"device": "NVIDIA\x00H200"}
    shutil.copy(MLA, tmp_path / "cap.bin.gz")
    (tmp_path / "cap.json").write_text(json.dumps(meta))
    rc, out, err = run_ktrace("analyze", tmp_path / "cap.bin.gz")
    assert rc == 2 and "'env.device'" in err and "cap.json" in err and "Traceback" not in err
