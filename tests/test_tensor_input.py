"""Buffers held as tensors (FlashInfer keeps its profiler buffer in an int64 torch.Tensor, on the GPU) and the
one set of decoding option names. torch is not needed: the fakes below expose exactly what ktrace reads of a
tensor (detach, dtype, device, cpu, contiguous, numpy), of a DLPack producer and of an ``__array__`` object;
tests/gpu/test_torch_gpu.py decodes a real CUDA tensor on a GPU machine."""

import numpy as np
import pytest

import ktrace
from ktrace import InputError, decode
from ktrace.decoding import BufferDecoder
from ktrace.decoding.encode import phase_buffer


def _buf():
    begin = np.arange(2 * 2).reshape(2, 2) * 1000 + 1000
    return phase_buffer(begin, begin + 100, [0, 1])


class _Device:
    def __init__(self, type_):
        self.type = type_

    def __str__(self):
        return f"{self.type}:0" if self.type != "cpu" else "cpu"


class FakeTensor:
    """What torch.Tensor offers that ktrace uses; ``cpu()`` calls are counted (each is a device-to-host copy)."""

    copies = 0

    def __init__(self, arr, device="cuda", dtype=None):
        self._arr, self.device = arr, _Device(device)
        self.dtype = dtype or f"torch.{arr.dtype}"

    def detach(self):
        return self

    def cpu(self):
        if self.device.type != "cpu":
            FakeTensor.copies += 1
        return FakeTensor(self._arr.copy(), "cpu", self.dtype)

    def contiguous(self):
        return self

    def numpy(self):
        if self.device.type != "cpu":
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() first")
        return self._arr


class DlpackOnly:
    def __init__(self, arr, device_type=1):
        self._arr, self._dev = arr, device_type

    def __dlpack__(self, **kw):
        return self._arr.__dlpack__(**kw)

    def __dlpack_device__(self):
        return (self._dev, 0)


class ArrayOnly:
    def __init__(self, arr):
        self._arr = arr

    def __array__(self, dtype=None, copy=None):
        return self._arr


def test_cuda_tensor_decodes_after_one_copy_to_the_host():
    FakeTensor.copies = 0
    t = FakeTensor(_buf().view(np.int64), "cuda")
    d = decode(t)
    assert d.slices.dur_ns.tolist() == [100] * 4
    assert FakeTensor.copies == 1
    assert "cuda:0" in str(d.source)


def test_cuda_tensor_convert_and_analyze_copy_once(tmp_path):
    FakeTensor.copies = 0
    r = ktrace.convert(FakeTensor(_buf().view(np.int64)), tmp_path / "t.perfetto-trace")
    assert r.path.stat().st_size > 0 and r.summary.slices == 4
    assert FakeTensor.copies == 1
    FakeTensor.copies = 0
    a = ktrace.analyze(FakeTensor(_buf().view(np.int64)), events=["load", "compute"])
    assert set(a.phases.phase.tolist()) == {"load", "compute"}
    assert FakeTensor.copies == 1


@pytest.mark.parametrize("dtype", ["torch.uint64", "torch.int64"])
def test_cpu_tensor_of_either_64bit_dtype(dtype):
    t = FakeTensor(_buf().view(np.int64 if dtype.endswith("int64") and "u" not in dtype else np.uint64), "cpu", dtype)
    FakeTensor.copies = 0
    assert len(decode(t).slices) == 4 and FakeTensor.copies == 0


def test_float_tensor_is_refused_with_its_dtype():
    with pytest.raises(InputError, match=r"torch.float32 is not an integer buffer"):
        decode(FakeTensor(np.zeros(8, np.float32), "cuda"))


def test_dlpack_and_array_objects():
    assert len(decode(DlpackOnly(_buf())).slices) == 4
    assert len(decode(ArrayOnly(_buf().view(np.int64))).slices) == 4
    with pytest.raises(InputError, match="on a device .*copy it to the host"):
        decode(DlpackOnly(_buf(), device_type=2))


def test_event_names_is_the_same_option_as_events():
    buf = _buf()
    a = decode(buf, events=["load", "compute"])
    b = decode(buf, event_names=["load", "compute"], group_names=["g"])
    assert a.launch.event_names == b.launch.event_names == ("load", "compute")
    assert b.launch.group_names == ("g",)
    with pytest.raises(InputError, match="disagree"):
        decode(buf, events=["a", "b"], event_names=["c", "d"])


@pytest.mark.parametrize("call", [
    lambda b: ktrace.decode(b, event_name=["x"]),
    lambda b: BufferDecoder(b, evnts=["x"]),
    lambda b: ktrace.convert(b, "/nonexistent/x.perfetto-trace", evnts=["x"]),
    lambda b: ktrace.analyze(b, evnts=["x"]),
    lambda b: ktrace.inspect(b, evnts=["x"]),
])
def test_unknown_option_is_an_input_error_listing_the_accepted_ones(call):
    with pytest.raises(InputError, match=r"unknown option .*accepted: sidecar, events, groups.*event_names \(= events\)"):
        call(_buf())
