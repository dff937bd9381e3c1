"""The multi-GPU capture machinery without a GPU: device lists, offset interpolation, the sidecar's clock
keys (and their schema), the launch barrier between processes, and ``run_on_devices`` with stand-in clock
measurements and stand-in drivers."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

import ktrace.capture.multigpu as mg
from ktrace.capture.clocksync import ClockOffset, ClockSync, interpolate_offset
from ktrace.core.errors import InputError

from test_capture_cpu import KERNELS, ROOT, _message_class, _run, no_gpu

BUS0, BUS1 = "0000:00:06.0", "0000:00:07.0"
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def sync(at_ns: int, offset: int, spread: int) -> ClockSync:
    return ClockSync((ClockOffset(0, "NVIDIA H200", BUS0, 0, 0, 150_000, (0, 0)),
                      ClockOffset(1, "NVIDIA H200", BUS1, offset, spread, 166_000, (offset - 1, offset + 1))),
                     rounds=2, measured_unix_ns=at_ns, duration_ns=1_000_000)


T = 1_795_976_000_000_000_000
BEFORE, AFTER = sync(T, 16_000, 500), sync(T + 10_000_000_000, 21_000, 700)  # drifted 5 us in 10 s


@pytest.mark.parametrize("text,want", [("0", [0]), ("0,1", [0, 1]), ("1,0", [1, 0]), ("0-3", [0, 1, 2, 3]),
                                       (" 2, 0 ", [2, 0])])
def test_device_lists(text, want):
    assert mg.parse_devices(text) == want


@pytest.mark.parametrize("text", ["", "a", "0,0", "-1", "1-0x"])
def test_bad_device_lists(text):
    with pytest.raises(InputError, match="--device"):
        mg.parse_devices(text)


def test_offsets_are_interpolated_to_the_capture_between_the_measurements():
    assert interpolate_offset(BEFORE, AFTER, BUS1, T + 5_000_000_000) == (18_500, 700)
    assert interpolate_offset(BEFORE, AFTER, BUS1, T - 1) == (16_000, 700)  # clamped to the measurements
    assert interpolate_offset(BEFORE, AFTER, BUS1, T + 99_000_000_000) == (21_000, 700)
    assert interpolate_offset(BEFORE, None, BUS1, T + 5_000_000_000) == (16_000, 500)
    assert interpolate_offset(BEFORE, AFTER, BUS0, T + 5_000_000_000) == (0, 0)
    assert interpolate_offset(BEFORE, AFTER, "0000:00:99.0", T) is None
    assert ClockSync.from_dict(BEFORE.as_dict()) == BEFORE


def _sidecar(tmp_path: Path, name: str, bus: str, anchor: int) -> Path:
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps({"schema": "ktrace.launch/1", "event_names": ["a"], "host_launch_unix_ns": anchor - 9,
                             "timer": {"tick_ns": 32, "anchor_ns": anchor},
                             "device": {"index": int(bus[-3]) - 6, "name": "NVIDIA H200", "pci_bus_id": bus}}))
    return p


def test_sidecar_clock_keys_follow_the_schema(tmp_path):
    record = {"before": BEFORE.as_dict(), "after": AFTER.as_dict()}
    side = _sidecar(tmp_path, "x_gpu1", BUS1, T + 2_500_000_000)
    timer = mg.apply_clock_sync(side, record)
    assert timer["offset_to_reference_ns"] == 17_250 and timer["offset_spread_ns"] == 700
    cs = timer["clock_sync"]
    assert cs["id"] == BEFORE.id and cs["reference_pci_bus_id"] == BUS0 and cs["devices"] == [0, 1]
    assert cs["offset_ns"] == [16_000, 21_000] and cs["interpolated_at_unix_ns"] == T + 2_500_000_000
    from google.protobuf import json_format

    msg = _message_class(tmp_path)()
    json_format.Parse(side.read_text(), msg)  # every new key is in proto/ktrace/launch.proto
    assert msg.timer.offset_to_reference_ns == 17_250 and msg.timer.clock_sync.rounds == 2
    assert msg.device.index == 1


_CHILD = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from ktrace.capture import multigpu as mg
    d, out = int(os.environ["KTRACE_DEVICE"]), Path(sys.argv[1])
    time.sleep(0.4 * d)             # the second process is late: the first waits for it
    mg.launch_barrier()
    t = time.time_ns()
    mg.launch_barrier()             # a second captured launch: a second generation
    bus = "0000:00:0%d.0" % (6 + d)
    side = out / f"cap_gpu{d}.json"
    side.write_text(json.dumps({"timer": {"anchor_ns": t, **mg.sidecar_clock(bus, t)},
                                "device": {"index": d, "pci_bus_id": bus}}))
    (out / f"cap_gpu{d}.bin").write_bytes(b"")
    mg.write_manifest([out / f"cap_gpu{d}.bin"])
    print(t)
""")


@pytest.mark.slow
def test_run_on_devices_releases_the_launches_together_and_writes_the_offsets(tmp_path, monkeypatch):
    measured = iter([BEFORE, AFTER])
    monkeypatch.setattr(mg, "measure_clock_offsets", lambda devices, rounds: next(measured))
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    run = mg.run_on_devices([0, 1], lambda d: [sys.executable, str(script), str(tmp_path)], tmp_path, env=ENV)
    assert [r.returncode for r in run.runs] == [0, 0], [r.stderr for r in run.runs]
    released = [int(r.stdout) for r in run.runs]
    assert abs(released[0] - released[1]) < 20_000_000  # both left the barrier at one host time
    assert [r.saved for r in run.runs] == [(tmp_path / "cap_gpu0.bin",), (tmp_path / "cap_gpu1.bin",)]
    record = json.loads(run.sync_file.read_text())
    assert set(record) == {"before", "after"}
    metas = [json.loads((tmp_path / f"cap_gpu{d}.json").read_text())["timer"] for d in (0, 1)]
    assert metas[0]["offset_to_reference_ns"] == 0
    # Each process wrote the 'before' offset; the parent replaced it with the one at the capture's anchor.
    frac = (released[1] - T) / 10_000_000_000
    assert metas[1]["offset_to_reference_ns"] == round(16_000 + max(0.0, min(1.0, frac)) * 5_000)
    assert metas[1]["clock_sync"]["measured_unix_ns"] == [T, T + 10_000_000_000]


def test_the_barrier_is_a_no_op_outside_a_multi_gpu_run(monkeypatch):
    monkeypatch.delenv(mg.ENV_BARRIER, raising=False)
    monkeypatch.delenv(mg.ENV_SYNC, raising=False)
    mg.launch_barrier()
    assert mg.sidecar_clock(BUS0, T) == {}


@pytest.mark.slow
def test_run_on_several_devices_with_bad_options_exits_2(tmp_path):
    rc, _, err = _run("run", "--device", "0,0", KERNELS / "imbalance.py")
    assert rc == 2 and "distinct device indices" in err
    rc, _, err = _run("run", "--device", "0,1", "--sync-rounds", "0", KERNELS / "imbalance.py")
    assert rc == 2 and "--sync-rounds" in err
    rc, _, err = _run("calibrate", "--device", "0,1")
    assert rc == 2 and "one --device" in err


@no_gpu
@pytest.mark.slow
def test_run_on_several_devices_without_gpu_exits_3(tmp_path):
    rc, out, err = _run("run", "--device", "0,1", "--out", tmp_path, KERNELS / "imbalance.py", cwd=tmp_path)
    assert rc == 3, (out, err)
    assert "Traceback" not in err and not list(tmp_path.glob("*.bin"))
