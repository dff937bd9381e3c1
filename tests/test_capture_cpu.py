"""The capture half without a GPU: exit 3 with the install hint, header discovery, the sidecar schema, the
profiler headers compiled with nvcc (where installed), and the committed captures decoded against the
ground truth their kernels were built to show."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import ktrace
from ktrace.capture import BuildSpec, LaunchCapture, buffer_words, find_flashinfer_include, resolve_header
from ktrace.core.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
KERNELS = SAMPLES / "kernels"
PROTO = ROOT / "proto" / "ktrace" / "launch.proto"
KERNEL_SOURCES = {"persistent.cu": "persistent_phases", "warpgroups.cu": "warpgroups",
                  "instants.cu": "instant_events", "blocks5000.cu": "many_blocks"}


def _has_gpu() -> bool:
    try:
        from ktrace.capture._cuda import ensure_context

        ensure_context()
    except Exception:  # noqa: BLE001 - anything short of a context means: no GPU here
        return False
    return True


def _capture_cmd() -> list[str]:
    from ktrace.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert "run" in sub.choices
    return [sys.executable, "-m", "ktrace"]


def _run(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    p = subprocess.run([*_capture_cmd(), *map(str, args)], capture_output=True, text=True, timeout=120, env=env,
                       cwd=cwd)
    return p.returncode, p.stdout, p.stderr


# -- no GPU: exit 3, clear message --------------------------------------------------------------------------

no_gpu = pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU: the no-GPU path cannot be seen here")


@no_gpu
def test_run_without_gpu_exits_3_naming_the_install(tmp_path):
    rc, out, err = _run("run", "--out", tmp_path, KERNELS / "imbalance.py", cwd=tmp_path)
    assert rc == 3, (out, err)
    assert "NVIDIA GPU with its driver" in err or "no usable CUDA GPU" in err or "no CUDA" in err
    assert "Traceback" not in err
    assert not list(tmp_path.glob("*.bin"))


@no_gpu
def test_calibrate_without_gpu_exits_3():
    rc, out, err = _run("calibrate")
    assert rc == 3 and "Traceback" not in err and err.startswith("ktrace: error:")


def test_run_missing_driver_exits_2(tmp_path):
    rc, _, err = _run("run", tmp_path / "nope.py")
    assert rc == 2 and "no such driver script" in err


def test_importing_capture_needs_no_pycuda():
    code = "import sys, ktrace.capture, ktrace.cli.capture; print('pycuda' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0 and p.stdout.strip() == "False"


def test_decode_and_export_never_import_capture():
    code = ("import sys, ktrace; ktrace.decode('samples/imbalance.bin'); "
            "print([m for m in sys.modules if m.startswith('ktrace.capture') or m.startswith('pycuda')])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stderr


# -- headers and buffers -------------------------------------------------------------------------------------

def test_header_choice(tmp_path, monkeypatch):
    monkeypatch.delenv("FLASHINFER_INCLUDE", raising=False)
    assert resolve_header("ktrace").producer == "ktrace"
    fi = tmp_path / "inc" / "flashinfer"
    fi.mkdir(parents=True)
    (fi / "profiler.cuh").write_text("// stand-in\n")
    for given in (tmp_path / "inc", fi):  # the include folder, or the flashinfer folder in it
        inc, source = find_flashinfer_include(given)
        assert inc == (tmp_path / "inc").resolve() and source == "--flashinfer-include"
        assert resolve_header("auto", given).producer == "flashinfer"
    monkeypatch.setenv("FLASHINFER_INCLUDE", str(tmp_path / "inc"))
    assert find_flashinfer_include()[1] == "FLASHINFER_INCLUDE"
    with pytest.raises(InputError, match="no flashinfer/profiler.cuh"):
        find_flashinfer_include(tmp_path)
    with pytest.raises(InputError, match="choose one of"):
        resolve_header("other")


def test_forcing_a_missing_flashinfer_header_is_an_input_error(monkeypatch):
    monkeypatch.delenv("FLASHINFER_INCLUDE", raising=False)
    if find_flashinfer_include()[0] is not None:
        pytest.skip("flashinfer-python is installed here")
    assert resolve_header("auto").producer == "ktrace"
    with pytest.raises(InputError, match="--flashinfer-include"):
        resolve_header("flashinfer")


def test_buffer_sizes():
    assert buffer_words("flashinfer", lanes=132, capacity=52) == 1 + 52 * 132
    assert buffer_words("ktrace", lanes=132, capacity=52) == 1 + 52 * 132 + 132 + 1
    with pytest.raises(InputError):
        LaunchCapture(blocks=0)
    with pytest.raises(InputError):
        LaunchCapture(blocks=4, producer="tvm")


def test_source_keeps_its_line_numbers():
    spec = BuildSpec("int x;\n", "k", resolve_header("ktrace"), filename="my.cu")
    text = spec.text().splitlines()
    assert text[0] == "#include <ktrace/profiler.cuh>" and text[1] == '#line 1 "my.cu"' and text[2] == "int x;"
    assert "-DFLASHINFER_ENABLE_PROFILER" in spec.nvcc_options(True)
    assert "-DFLASHINFER_ENABLE_PROFILER" not in spec.nvcc_options(False)


# -- the headers compile (nvcc, no GPU needed) ---------------------------------------------------------------

nvcc = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(nvcc is None, reason="nvcc is not installed")


def _choices():
    out = [resolve_header("ktrace")]
    inc, _ = find_flashinfer_include()
    if inc is not None:
        out.append(resolve_header("flashinfer"))
    return out


def _nvcc(tmp_path: Path, spec: BuildSpec, instrumented: bool, target: str = "--cubin") -> subprocess.CompletedProcess:
    tag = f"{spec.choice.producer}_{Path(spec.filename).stem}_{int(instrumented)}"
    src = tmp_path / f"{tag}.cu"
    src.write_text(spec.text())
    out = tmp_path / f"{tag}.{'ptx' if target == '-ptx' else 'o'}"
    cmd = [nvcc, target, "-arch=sm_90a", *spec.nvcc_options(instrumented),
           *[f"-I{d}" for d in spec.all_include_dirs()], str(src), "-o", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@needs_nvcc
@pytest.mark.slow
def test_sample_kernels_compile_against_each_header(tmp_path):
    from ktrace.capture.calibrate import PROBE_SRC

    jobs = []
    for choice in _choices():
        for fname, fn in KERNEL_SOURCES.items():
            spec = BuildSpec((KERNELS / fname).read_text(), fn, choice, fname, (str(KERNELS),))
            jobs += [(spec, True)] + ([(spec, False)] if choice.producer == "ktrace" else [])
        spec = BuildSpec(PROBE_SRC, "ktrace_probe_loop", choice, "probe_loop.cu")
        jobs += [(spec, True)]
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        results = list(pool.map(lambda j: (j, _nvcc(tmp_path, *j)), jobs))
    failed = [f"{s.choice.producer} {s.filename} instrumented={i}:\n{r.stderr}" for (s, i), r in results if r.returncode]
    assert not failed, "\n".join(failed)
    warned = [f"{s.filename}: {r.stderr}" for (s, i), r in results if "warning" in r.stderr]
    assert not warned, "\n".join(warned)


@pytest.mark.slow
@needs_nvcc
def test_ktrace_header_exports_its_capacity_and_reads_the_64bit_timer(tmp_path):
    src = (KERNELS / "instants.cu").read_text()
    spec = BuildSpec(src, "instant_events", resolve_header("ktrace"), "instants.cu")
    r = _nvcc(tmp_path, spec, True, "-ptx")
    assert r.returncode == 0, r.stderr
    ptx = (tmp_path / "ktrace_instants_1.ptx").read_text()
    # the host finds the capacity by this exact name (cuModuleGetGlobal), and the kernel reads it from constant
    # memory (never folded to its initial value)
    assert re.search(r"\.const \.align 4 \.u32 ktrace_profiler_capacity", ptx)
    assert re.search(r"ld\.const\.u32\s+%r\d+, \[ktrace_profiler_capacity\]", ptx)
    assert re.search(r"mov\.u64\s+%rd\d+, %globaltimer;", ptx)  # the anchor
    assert "%globaltimer_lo" in ptx
    r = _nvcc(tmp_path, spec, False, "-ptx")
    ptx = (tmp_path / "ktrace_instants_0.ptx").read_text()
    assert "globaltimer" not in ptx and "ktrace_profiler_capacity" not in ptx  # the control has no probes


@needs_nvcc
def test_headers_cannot_both_be_included(tmp_path):
    (tmp_path / "flashinfer").mkdir()
    (tmp_path / "flashinfer" / "profiler.cuh").write_text("#ifndef FLASHINFER_PROFILER_CUH_\n#define FLASHINFER_PROFILER_CUH_\n#endif\n")
    src = tmp_path / "both.cu"
    src.write_text("#include <flashinfer/profiler.cuh>\n#include <ktrace/profiler.cuh>\n")
    from ktrace.capture import ktrace_include

    r = subprocess.run([nvcc, "-E", f"-I{tmp_path}", f"-I{ktrace_include()}", str(src)], capture_output=True, text=True)
    assert r.returncode != 0 and "include either it or ktrace/profiler.cuh" in r.stderr


# -- the sidecar schema --------------------------------------------------------------------------------------

def _message_class(tmp_path):
    protoc = shutil.which("protoc")
    if protoc is None:
        pytest.skip("protoc is not installed")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    out = tmp_path / "launch.pb"
    r = subprocess.run([protoc, f"-I{PROTO.parent.parent}", "--include_imports", f"--descriptor_set_out={out}",
                        str(PROTO)], capture_output=True, text=True)
    if r.returncode and "struct.proto" in r.stderr:
        pytest.skip("protoc has no well-known types here")
    assert r.returncode == 0, r.stderr
    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("ktrace.LaunchMetadata"))


SIDECARS = sorted(SAMPLES.glob("*.json"))


def test_every_sidecar_follows_the_schema_and_round_trips(tmp_path):
    from google.protobuf import json_format

    Msg = _message_class(tmp_path)
    assert SIDECARS
    for f in SIDECARS:
        text = f.read_text()
        m = Msg()
        json_format.Parse(text, m)  # unknown keys fail here
        back = Msg()
        json_format.Parse(json_format.MessageToJson(m, preserving_proto_field_name=True), back)
        assert back == m, f
        raw = json.loads(text)
        assert m.event_names == raw["event_names"]
        if "timer" in raw and "anchor_ns" in raw["timer"]:
            assert m.timer.anchor_ns == raw["timer"]["anchor_ns"]


def test_schema_has_what_the_decoder_reads():
    text = PROTO.read_text()
    for name in ("event_names", "group_names", "tick_ns", "anchor_ns", "host_launch_unix_ns", "producer",
                 "records_per_lane_capacity", "trailer", "multiprocessors"):
        assert f" {name} = " in text, name


# -- the committed captures ------------------------------------------------------------------------------------

CAPTURES = sorted(p.stem for p in SAMPLES.glob("*.bin") if (SAMPLES / f"{p.stem}.json").exists()
                  and json.loads((SAMPLES / f"{p.stem}.json").read_text()).get("schema") == "ktrace.launch/1")


def _meta(name):
    return json.loads((SAMPLES / f"{name}.json").read_text())


@pytest.mark.parametrize("name", CAPTURES)
def test_committed_capture_decodes_completely(name):
    meta = _meta(name)
    d = ktrace.decode(SAMPLES / f"{name}.bin")
    assert d.accounted
    assert d.launch.num_blocks == meta["num_blocks"] and d.launch.num_groups == meta["num_groups"]
    assert d.launch.producer == meta["producer"]
    assert (SAMPLES / f"{name}.bin").stat().st_size < 2 << 20
    if meta["producer"] == "ktrace":
        assert d.time_origin == "kernel timer anchor"
        assert d.launch.timer_anchor_ns == meta["timer"]["anchor_ns"]
        assert not d.anomalies.counts()


def _last_finishers(d, event, n):
    s = d.slices
    out = []
    for k in range(n):
        m = (s.event == event) & (s.k == k)
        end, block = s.end_ns[m], s.block[m]
        out.append(int(block[end == end.max()].min()))
    return out


@pytest.mark.parametrize("name", [n for n in CAPTURES if n.startswith(("imbalance_", "moving_straggler_"))])
def test_committed_persistent_capture_shows_its_straggler(name):
    meta = _meta(name)
    gt = meta["ground_truth"]
    d = ktrace.decode(SAMPLES / f"{name}.bin")
    assert _last_finishers(d, 1, gt["iterations"]) == gt["slow_block_per_iter"]
    assert len(d.slices) == meta["num_blocks"] * 3 * gt["iterations"]


@pytest.mark.parametrize("name", [n for n in CAPTURES if n.startswith("warpgroups_")])
def test_committed_warpgroups_capture_keeps_groups_apart(name):
    d = ktrace.decode(SAMPLES / f"{name}.bin")
    s = d.slices
    assert (s.event[s.group == 0] == 0).all() and (s.event[s.group == 1] == 1).all()
    assert len(s) == _meta(name)["num_blocks"] * 2 * _meta(name)["ground_truth"]["tiles"]


@pytest.mark.parametrize("name", [n for n in CAPTURES if n.startswith(("instants_", "overflow_"))])
def test_committed_instants_capture(name):
    meta = _meta(name)
    d = ktrace.decode(SAMPLES / f"{name}.bin")
    landed = meta["checks"]["landed_per_lane"][0]
    assert len(d.instants) == sum(x.startswith("I:") for x in landed) * meta["num_blocks"]
    if name.startswith("overflow_"):
        assert d.notes.get("overflow") == meta["num_blocks"]


@pytest.mark.parametrize("name", [n for n in CAPTURES if n.startswith("blocks5000_")])
def test_committed_blocks5000_capture_has_every_block(name):
    meta = _meta(name)
    d = ktrace.decode(SAMPLES / f"{name}.bin")
    assert meta["num_blocks"] > 5000
    assert np.array_equal(np.unique(d.slices.block), np.arange(meta["num_blocks"]))
    sm = np.asarray(meta["block_smid"])[d.slices.block]
    if meta["producer"] == "ktrace":  # the SM byte is never aliased
        assert (d.slices.sm == sm).all()
    else:  # FlashInfer's: right, or marked untrusted (-1) where bit 12 of the block made it ambiguous
        assert ((d.slices.sm == sm) | (d.slices.sm == -1)).all()
        assert (d.slices.sm[d.slices.block < 4096] == sm[d.slices.block < 4096]).all()


def test_old_capture_names_still_import_with_a_warning():
    import ktrace.capture as cap

    with pytest.warns(DeprecationWarning, match="CudaKernel"):
        assert cap.Kernel is cap.CudaKernel
    with pytest.warns(DeprecationWarning, match="LaunchCapture"):
        assert cap.Capture is cap.LaunchCapture


# -- saving a read-back capture (no GPU: the device query is stubbed) ----------------------------------------

def test_capture_save_writes_buffer_and_sidecar_that_decode(tmp_path, monkeypatch):
    import time

    import ktrace
    from ktrace.capture import _cuda, tick
    from ktrace.capture.recording import LaunchCapture
    from ktrace.decoding.encode import phase_buffer

    dev = _cuda.DeviceInfo("NVIDIA H200", (9, 0), 132, 1980000, 3201000, 232448, "0000:00:00.0", 13000, (13, 0),
                           "stub")
    monkeypatch.setattr(_cuda, "device_info", lambda: dev)
    monkeypatch.setattr(_cuda, "device_index", lambda: 0)
    monkeypatch.setattr(tick, "cached", lambda: None)
    monkeypatch.setattr(tick, "measure_tick", lambda reads=0: (32, {32: 1}, None))
    cap = LaunchCapture(2, 1, 4, producer="flashinfer", name="saved", event_names=["load", "compute"])
    begin = np.arange(4).reshape(2, 2) * 1000 + 1000
    cap.words = phase_buffer(begin, begin + 100, [0, 1])
    cap.host_launch_unix_ns = time.time_ns()
    p = cap.save(tmp_path / "saved.bin")
    side = json.loads(p.with_suffix(".json").read_text())
    assert side["device"]["name"] == "NVIDIA H200" and side["event_names"] == ["load", "compute"]
    assert ktrace.decode(p).launch.event_names == ("load", "compute")


# -- what a machine without PyCUDA is told ---------------------------------------------------------------------

def test_missing_pycuda_message_says_what_is_really_needed(tmp_path):
    from ktrace.capture._cuda import missing_pycuda_message

    no_driver = missing_pycuda_message(False, "/usr/local/cuda")
    assert "no NVIDIA driver" in no_driver and "pip install" not in no_driver and "need neither" in no_driver
    with_toolkit = missing_pycuda_message(True, "/opt/cuda-13")
    assert "pip install 'ktrace[cuda]'" in with_toolkit and "/opt/cuda-13" in with_toolkit
    no_toolkit = missing_pycuda_message(True, None)
    assert "CUDA toolkit (nvcc and cuda.h)" in no_toolkit and "prebuilt pycuda wheel" in no_toolkit


def test_toolkit_is_found_by_cuda_home(tmp_path, monkeypatch):
    from ktrace.capture import _cuda

    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert _cuda._toolkit() == str(tmp_path)
