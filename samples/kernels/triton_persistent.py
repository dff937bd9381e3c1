"""Persistent Triton kernel with a loop of phases, under Proton's instrumentation (DSL scopes in the loop).

    python3 samples/kernels/triton_persistent.py --out samples/proton
    python3 samples/kernels/triton_persistent.py --tiles-per-program 200 --buffer-size 2048 --name triton_dropped

One program per SM walks tiles pid, pid + G, ... (TILES_PER_PROGRAM each); per tile: load, compute, store
scopes inside the loop (num_stages=1: no pipelining moves the loads across the probes). Every 7th tile has
4x the compute. Ground truth apart from Proton: each program's %globaltimer at start and end and %smid, the
tiles of each program and their work factor. With many tiles and a small Proton buffer (``--buffer-size``
bytes per CTA), Proton's circular buffer drops each warp's first events: the sidecar keeps the warnings.
"""

import argparse

import torch
import triton
import triton.language as tl
import triton.profiler as proton
import triton.profiler.language as pl

from triton_common import capture, now_ns, program_truth, smid

BLOCK, ITERS, HEAVY_EVERY, HEAVY = 256, 2000, 7, 4


@triton.jit
def persistent_kernel(x_ptr, y_ptr, t_ptr, tiles_per_program, n_iter, HEAVY_EVERY: tl.constexpr,
                      HEAVY: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    t0 = now_ns(pid)
    sm = smid(pid)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(tiles_per_program):
        tile = pid + i * G
        with pl.scope("load"):
            offs = tile * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs)
        iters = tl.where(tile % HEAVY_EVERY == 0, n_iter * HEAVY, n_iter)
        with pl.scope("compute"):
            for j in range(iters):
                x = x * 1.0000001 + 0.5
        with pl.scope("store"):
            tl.store(y_ptr + offs, x)
        acc += x
    t1 = now_ns(tl.sum(acc).to(tl.int32))
    tl.store(t_ptr + pid * 3, t0)
    tl.store(t_ptr + pid * 3 + 1, t1)
    tl.store(t_ptr + pid * 3 + 2, sm.to(tl.int64))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default="samples/proton")
    p.add_argument("--name", default="triton_persistent")
    p.add_argument("--tiles-per-program", type=int, default=8)
    p.add_argument("--iters", type=int, default=ITERS)
    p.add_argument("--buffer-size", type=int, default=0, help="Proton's buffer bytes per CTA (0: its default)")
    args = p.parse_args()
    n = torch.cuda.get_device_properties(0).multi_processor_count
    T = args.tiles_per_program
    x = torch.rand(n * T * BLOCK, device="cuda")
    y = torch.empty_like(x)
    t = torch.zeros(n * 3, dtype=torch.int64, device="cuda")
    run = lambda: persistent_kernel[(n,)](x, y, t, T, args.iters, HEAVY_EVERY=HEAVY_EVERY, HEAVY=HEAVY, BLOCK=BLOCK,
                                          num_warps=4, num_stages=1)
    run()
    torch.cuda.synchronize()
    mode = proton.mode.Default(buffer_size=args.buffer_size) if args.buffer_size else None

    def truth():
        g = program_truth(t)
        g["tiles"] = [[pid + i * n for i in range(T)] for pid in range(n)]
        g["heavy_tiles_per_program"] = [sum(1 for i in range(T) if (pid + i * n) % HEAVY_EVERY == 0) for pid in range(n)]
        g["last_program_by_clock"] = max(range(n), key=lambda q: g["program_end_ns"][q])
        return g

    capture(args, run, kernel="persistent_kernel", grid=(n,), num_warps=4, ground_truth=truth, mode=mode,
            facts={"tiles_per_program": T, "iters": args.iters, "heavy_every": HEAVY_EVERY, "heavy_factor": HEAVY,
                   "buffer_size": args.buffer_size,
                   "description": f"persistent: {n} programs x {T} tiles of load/compute/store, every "
                   f"{HEAVY_EVERY}th tile {HEAVY}x the compute"})
