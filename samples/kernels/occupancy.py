"""How many blocks of a kernel fit on an SM, asked three ways, for the verdict drivers (slots.py, cluster.py):
the driver's occupancy API (cuOccupancyMaxActiveBlocksPerMultiprocessor and cuOccupancyMaxActiveClusters,
called through ctypes on the instrumented build's cubin, since PyCUDA wraps neither), the same figure
computed from the function's and the device's attributes, and what the 64-bit clock arrays show: the most
blocks that ran on one SM at once."""

from __future__ import annotations

import ctypes

import numpy as np

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
MAX_SHARED_CARVEOUT = 100  # percent: the largest shared-memory carveout of the unified L1


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


def _libcuda():
    lib = ctypes.CDLL("libcuda.so.1")
    p, vp, i, sz = ctypes.POINTER, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    lib.cuModuleLoadData.argtypes = [p(vp), ctypes.c_char_p]
    lib.cuModuleGetFunction.argtypes = [p(vp), vp, ctypes.c_char_p]
    lib.cuModuleUnload.argtypes = [vp]
    lib.cuFuncSetAttribute.argtypes = [vp, i, i]
    lib.cuOccupancyMaxActiveBlocksPerMultiprocessor.argtypes = [p(i), vp, i, sz]
    lib.cuOccupancyMaxActiveClusters.argtypes = [p(i), vp, p(_LaunchConfig)]
    lib.cuGetErrorString.argtypes = [i, p(ctypes.c_char_p)]
    return lib


def _check(lib, rc: int, what: str) -> None:
    if rc:
        msg = ctypes.c_char_p()
        lib.cuGetErrorString(rc, ctypes.byref(msg))
        raise RuntimeError(f"{what} failed: CUDA error {rc} ({(msg.value or b'?').decode()})")


def set_max_shared_carveout(kern) -> str:
    """Ask for the largest shared-memory carveout on both builds (so that shared memory alone sets the
    occupancy); returns what was done, for the sidecar (a driver without the attribute keeps its default)."""
    import pycuda.driver as cuda

    attr = getattr(cuda.function_attribute, "PREFERRED_SHARED_MEMORY_CARVEOUT", None)
    if attr is None:
        return "not set: this PyCUDA has no PREFERRED_SHARED_MEMORY_CARVEOUT (the driver's default carveout)"
    try:
        for f in (kern.instrumented, kern.control):
            f.set_attribute(attr, MAX_SHARED_CARVEOUT)
    except cuda.Error as e:
        return f"not set: {e} (the driver's default carveout)"
    return f"{MAX_SHARED_CARVEOUT}% (PREFERRED_SHARED_MEMORY_CARVEOUT on both builds)"


def occupancy_api(kern, threads: int, shared_bytes: int, *, cluster_grid: int | None = None,
                  carveout: int | None = MAX_SHARED_CARVEOUT) -> dict:
    """The driver's answer for the instrumented build: ``blocks_per_sm`` (and ``max_active_clusters`` for a
    grid of ``cluster_grid`` blocks, the cluster shape being the kernel's own __cluster_dims__); on any
    failure the figures are None and ``error`` says why (the driver records it and goes on)."""
    out: dict = {"blocks_per_sm": None, "source": "cuOccupancyMaxActiveBlocksPerMultiprocessor (libcuda via "
                 "ctypes) on the instrumented build's cubin, recompiled through pycuda.compiler.compile"}
    try:
        from pycuda.compiler import compile as nvcc_compile

        spec = kern.spec
        cubin = nvcc_compile(spec.text(), options=spec.nvcc_options(True), no_extern_c=True, arch=kern.arch,
                             include_dirs=spec.all_include_dirs())
        lib = _libcuda()
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        _check(lib, lib.cuModuleLoadData(ctypes.byref(mod), cubin), "cuModuleLoadData")
        try:
            _check(lib, lib.cuModuleGetFunction(ctypes.byref(fn), mod, spec.name.encode()), "cuModuleGetFunction")
            if shared_bytes > 48 * 1024:
                _check(lib, lib.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes),
                       "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
            if carveout is not None:
                _check(lib, lib.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout),
                       "cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)")
                out["carveout_percent"] = carveout
            n = ctypes.c_int(-1)
            try:
                _check(lib, lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), fn, threads,
                                                                            shared_bytes),
                       "cuOccupancyMaxActiveBlocksPerMultiprocessor")
                out["blocks_per_sm"] = int(n.value)
            except RuntimeError as e:
                out["error"] = str(e)
            if cluster_grid is not None:
                out["max_active_clusters"] = None
                cfg = _LaunchConfig(cluster_grid, 1, 1, threads, 1, 1, shared_bytes, None, None, 0)
                c = ctypes.c_int(-1)
                try:
                    _check(lib, lib.cuOccupancyMaxActiveClusters(ctypes.byref(c), fn, ctypes.byref(cfg)),
                           "cuOccupancyMaxActiveClusters")
                    out["max_active_clusters"] = int(c.value)
                except RuntimeError as e:
                    out["clusters_error"] = str(e)
        finally:
            lib.cuModuleUnload(mod)
    except Exception as e:  # noqa: BLE001 - the figure is a record of the run, not needed to go on
        out["error"] = f"{type(e).__name__}: {e}"
    return out


def occupancy_from_limits(fn, threads: int, shared_bytes: int) -> dict:
    """Blocks per SM computed from the device's per-SM limits and the function's attributes: shared memory
    (dynamic + static + the per-block reservation), threads, registers (256-register allocation units per
    warp) and the blocks-per-SM cap; ``blocks_per_sm`` is the smallest."""
    import pycuda.driver as cuda

    a = cuda.Context.get_device().get_attributes()
    da, fa = cuda.device_attribute, cuda.function_attribute

    def dev(name: str) -> int:
        key = getattr(da, name, None)
        return int(a.get(key, 0)) if key is not None else 0

    static = int(fn.get_attribute(fa.SHARED_SIZE_BYTES))
    regs = int(fn.get_attribute(fa.NUM_REGS))
    reserved = dev("RESERVED_SHARED_MEMORY_PER_BLOCK")
    smem_sm = dev("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR")
    per_block = shared_bytes + static + reserved
    warps = -(-threads // 32)
    regs_per_warp = -(-max(regs, 1) * 32 // 256) * 256
    limits = {
        "shared_memory": smem_sm // per_block if per_block else None,
        "threads": dev("MAX_THREADS_PER_MULTIPROCESSOR") // threads,
        "registers": dev("MAX_REGISTERS_PER_MULTIPROCESSOR") // (regs_per_warp * warps),
        "blocks": dev("MAX_BLOCKS_PER_MULTIPROCESSOR"),
    }
    known = {k: v for k, v in limits.items() if v}
    return {
        "blocks_per_sm": min(known.values()) if known else None,
        "limited_by": min(known, key=known.get) if known else None,
        "limits": limits,
        "dynamic_shared_bytes": shared_bytes,
        "static_shared_bytes": static,
        "reserved_shared_bytes_per_block": reserved,
        "shared_bytes_per_block_total": per_block,
        "shared_bytes_per_sm": smem_sm,
        "registers_per_thread": regs,
    }


def concurrent_on_sm(begin: np.ndarray, end: np.ndarray, smid: np.ndarray) -> np.ndarray:
    """For each block: how many blocks (itself included) were running on its SM when it began, by the
    64-bit clock; a block is running over [begin, end), so one that begins on the tick another ended is not
    counted with it."""
    same = smid[:, None] == smid[None, :]
    live = (begin[None, :] <= begin[:, None]) & (begin[:, None] < end[None, :])
    return (same & live).sum(axis=1)


def max_concurrent_per_sm(begin, end, smid, sms: int) -> np.ndarray:
    """The most blocks running at once on each SM (0 for an SM no block ran on)."""
    smid = np.asarray(smid)
    c = concurrent_on_sm(np.asarray(begin), np.asarray(end), smid)
    out = np.zeros(max(sms, int(smid.max()) + 1), np.int64)
    np.maximum.at(out, np.asarray(smid), c)
    return out


__all__ = ["concurrent_on_sm", "max_concurrent_per_sm", "occupancy_api", "occupancy_from_limits",
           "set_max_shared_carveout"]
