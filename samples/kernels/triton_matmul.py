"""Tiled fp16 matmul over several waves, under Proton's instrumentation (DSL scopes, outside the K loop).

    python3 samples/kernels/triton_matmul.py --out samples/proton

C[M, N] = A[M, K] @ B[K, N], 128x128 tiles, one program per tile (M/128 * N/128 programs, several per SM
over several waves), 8 warps (2 warp groups); scopes: tile (the whole program) holding mainloop (the K
loop) and epilogue (the store). Ground truth apart from Proton: each program's %globaltimer at start and end
and its %smid; the waves, by that clock, are the ``ground_truth.waves`` count (the most programs one SM ran
one after another) and ``programs_per_sm``.
"""

import torch
import triton
import triton.language as tl
import triton.profiler.language as pl

from triton_common import arguments, capture, now_ns, program_truth, smid

M = N = 4096
K = 1024
BM, BN, BK = 128, 128, 64


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, t_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    t0 = now_ns(pid)
    sm = smid(pid)
    pl.enter_scope("tile")
    grid_n = tl.cdiv(N, BN)
    pm = pid // grid_n
    pn = pid % grid_n
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * K + rk[None, :]
    b = b_ptr + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    with pl.scope("mainloop"):
        for k in range(0, K, BK):
            acc += tl.dot(tl.load(a), tl.load(b))
            a += BK
            b += BK * N
    with pl.scope("epilogue"):
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))
    pl.exit_scope("tile")
    t1 = now_ns(tl.sum(acc).to(tl.int32))
    tl.store(t_ptr + pid * 3, t0)
    tl.store(t_ptr + pid * 3 + 1, t1)
    tl.store(t_ptr + pid * 3 + 2, sm.to(tl.int64))


if __name__ == "__main__":
    args = arguments(__doc__, "triton_matmul")
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    programs = (M // BM) * (N // BN)
    t = torch.zeros(programs * 3, dtype=torch.int64, device="cuda")
    run = lambda: matmul_kernel[(programs,)](a, b, c, t, M, N, K, BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=3)
    run()
    torch.cuda.synchronize()
    ok = torch.allclose(c.float(), (a.float() @ b.float()), atol=0.5, rtol=0.05)
    n = torch.cuda.get_device_properties(0).multi_processor_count

    def truth():
        g = program_truth(t)
        per_sm = {}
        for p, s in enumerate(g["program_smid"]):
            per_sm.setdefault(s, []).append(p)
        # programs of one SM that ran one after another: the most that overlap none before them in a chain
        waves = 0
        for ps in per_sm.values():  # waves on an SM: its programs over the most of them resident at once
            most = max(sum(1 for q in ps if g["program_begin_ns"][q] <= g["program_begin_ns"][p] < g["program_end_ns"][q])
                       for p in ps)
            waves = max(waves, -(-len(ps) // most))
        g["programs_per_sm"] = {str(k): len(v) for k, v in sorted(per_sm.items())}
        g["most_resident_per_sm"] = max(
            max(sum(1 for q in ps if g["program_begin_ns"][q] <= g["program_begin_ns"][p] < g["program_end_ns"][q])
                for p in ps) for ps in per_sm.values())
        g["waves"] = waves
        return g

    capture(args, run, kernel="matmul_kernel", grid=(programs,), num_warps=8, ground_truth=truth,
            facts={"M": M, "N": N, "K": K, "tile": [BM, BN, BK], "programs": programs, "result_ok": bool(ok),
                   "waves_if_one_per_sm": -(-programs // n),
                   "description": f"{programs} programs of 128x128 tiles on {n} SMs: several waves"})
