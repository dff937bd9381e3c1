"""Triton kernel with one slow program, under Proton's instrumentation (DSL scopes).

    python3 samples/kernels/triton_imbalance.py --out samples/proton              # program 17 has 3x the compute
    python3 samples/kernels/triton_imbalance.py --balanced --name triton_balanced --out samples/proton

One program per SM (grid = SM count), 4 warps, scopes load / compute / store; program 17's compute loop runs
3x the iterations of the others' (--balanced: the same extra work spread over all programs). Ground truth
apart from Proton: each program's %globaltimer at start and end and its %smid (``ground_truth``), and the
slow program (``slow_program``), the last to finish by that clock.
"""

import sys

import torch
import triton
import triton.language as tl
import triton.profiler.language as pl

from triton_common import arguments, capture, now_ns, program_truth, smid

SLOW, FACTOR, ITERS, BLOCK = 17, 3, 20000, 512


@triton.jit
def imbalance_kernel(x_ptr, y_ptr, t_ptr, n_iter, extra, SLOW: tl.constexpr, FACTOR: tl.constexpr,
                     BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    t0 = now_ns(pid)
    sm = smid(pid)
    with pl.scope("load"):
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
    iters = tl.where(pid == SLOW, n_iter * FACTOR, n_iter) + extra
    with pl.scope("compute"):
        for i in range(iters):
            x = x * 1.0000001 + 0.5
    with pl.scope("store"):
        tl.store(y_ptr + offs, x)
    t1 = now_ns(tl.sum(x).to(tl.int32))
    tl.store(t_ptr + pid * 3, t0)
    tl.store(t_ptr + pid * 3 + 1, t1)
    tl.store(t_ptr + pid * 3 + 2, sm.to(tl.int64))


if __name__ == "__main__":
    balanced = "--balanced" in sys.argv
    args = arguments(__doc__, "triton_balanced" if balanced else "triton_imbalance")
    n = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.rand(n * BLOCK, device="cuda")
    y = torch.empty_like(x)
    t = torch.zeros(n * 3, dtype=torch.int64, device="cuda")
    slow, extra = (-1, (FACTOR - 1) * ITERS // n) if balanced else (SLOW, 0)
    run = lambda: imbalance_kernel[(n,)](x, y, t, ITERS, extra, SLOW=slow, FACTOR=FACTOR, BLOCK=BLOCK, num_warps=4)
    run()  # compiled before the session
    torch.cuda.synchronize()

    def truth():
        g = program_truth(t)
        g["last_program_by_clock"] = max(range(n), key=lambda p: g["program_end_ns"][p])
        g["longest_program_by_clock"] = max(range(n), key=lambda p: g["program_end_ns"][p] - g["program_begin_ns"][p])
        return g

    capture(args, run, kernel="imbalance_kernel", grid=(n,), num_warps=4, ground_truth=truth,
            facts={"slow_program": slow, "factor": FACTOR if not balanced else 1, "iters": ITERS,
                   "extra_iters_each": extra, "balanced": balanced,
                   "description": "one program per SM, scopes load/compute/store; "
                   + ("the slow program's extra work spread over all" if balanced
                      else f"program {SLOW} runs {FACTOR}x the compute iterations")})
