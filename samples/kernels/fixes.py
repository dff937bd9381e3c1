"""The measured fixes: one kernel per finding kind, before and after the fix a kernel engineer would make.

    ktrace run --ab "samples/kernels/fixes.py --case worklist --variant before" \\
                    "samples/kernels/fixes.py --case worklist --variant after"
    scripts/capture_fixes.sh          # every case, into samples/fixes/<case>/

Cases (one block per SM unless said; the fix in the tables the driver prepares, or in a launch parameter):

  straggler    8 grid-synchronized 'compute' phases, block 17 has 3x the work -> its extra work split over all
  late_start   block 17 runs 20 us of set-up alone before 4 grid-synchronized phases -> the set-up shared by all
  worklist     1056 items of skewed cost dealt round-robin -> the same items dealt longest-first (LPT)
  serial_tail  4 grid-synchronized phases, then block 0 alone runs 'combine' -> 'combine' split over all blocks
  barrier      24 short phases, a grid barrier whose waiters sleep 8 us between polls -> a tight spin
  waves        4 blocks per SM, 3.25 waves of slots -> the same work in 3 waves (bigger blocks)
  pipeline     producer-bound warp groups, produce 4x consume -> part of produce's work moved to consume
  memory       memory-bound sum, block 17 reads 4x the bytes -> every block its fair share (sidecar work.bytes)

Each capture records apart from the profiler every block's %globaltimer at entry and exit and its %smid
(``ground_truth``), the case's tables, and the facts the before was built to show.
"""

from __future__ import annotations

import argparse
import heapq

import numpy as np

from ktrace.capture import BUFFER, CudaKernel, device, profile
from sample_checks import sm_field_checks
from shapes_common import (HERE, THREADS, BlockClock, clock_checks, clock_truth, decode_saved, finish,
                           one_block_per_sm_smem)

CASES = ("straggler", "late_start", "worklist", "serial_tail", "barrier", "waves", "pipeline", "memory")
SLOW_BLOCK = 17
FMA_NS = 2.0  # about one dependent FMA on an H100 / H200 (4 cycles near 2 GHz): the descriptions' figures


def split_evenly(total: int, parts: int) -> np.ndarray:
    """``total`` as ``parts`` whole shares that differ by at most one."""
    q, r = divmod(int(total), parts)
    return np.array([q + 1] * r + [q] * (parts - r), np.int64)


def worklist_costs(items: int, seed: int = 7) -> np.ndarray:
    """Skewed item costs (dependent FMAs): log-normal around 1000, a few up to 6x, fixed by the seed."""
    rng = np.random.default_rng(seed)
    return np.clip(np.round(1000 * rng.lognormal(0.0, 0.8, items)), 200, 6000).astype(np.int32)


def round_robin(costs: np.ndarray, blocks: int) -> list[list[int]]:
    return [list(range(b, len(costs), blocks)) for b in range(blocks)]


def longest_first(costs: np.ndarray, blocks: int) -> list[list[int]]:
    """LPT: items by cost, longest first (ties by index), each to the block with the least work so far."""
    heap = [(0, b) for b in range(blocks)]
    out: list[list[int]] = [[] for _ in range(blocks)]
    for i in sorted(range(len(costs)), key=lambda i: (-int(costs[i]), i)):
        load, b = heapq.heappop(heap)
        out[b].append(i)
        heapq.heappush(heap, (load + int(costs[i]), b))
    return out


class Common:
    """What every case records: the clock arrays, the description, the tables, the checks."""

    def __init__(self, case: str, variant: str, name: str):
        self.case, self.variant, self.name = case, variant, name
        self.dev = device()
        self.sms = self.dev.multiprocessors

    def save(self, cap, clk: BlockClock, capacity: int, groups: int, description: str, **facts) -> None:
        group_of_thread = ("threadIdx.x / 128; write predicate threadIdx.x % 128 == 0" if groups > 1 else
                           "0; write predicate threadIdx.x == 0")
        begin, end, smid = clk.read()
        truth = clock_truth(begin, end, smid)
        truth.update(description=description, case=self.case, variant=self.variant, **facts)
        cap.meta.update(block_smid=smid.tolist(), ground_truth=truth,
                        group_of_thread=group_of_thread)
        cap.save()
        d = decode_saved(cap)
        checks = clock_checks(cap, d, begin, end, smid, capacity)
        if groups > 1:
            checks.update(sm_field_checks(cap.words, capacity, len(begin), groups, smid))
        ok = checks["all_blocks_within_clock"] and checks["decoded_sm_equals_block_smid"]
        finish(cap, checks, ok, f"{self.case} {self.variant}: kernel {truth['kernel_span_ns_by_clock'] / 1e3:.1f} us "
               f"by the clock, last block {truth['last_block_by_clock']}")


def case_phases(c: Common) -> None:
    """straggler, late_start, serial_tail, barrier: fx_phases with the case's tables."""
    import pycuda.gpuarray as gpuarray

    nb, before = c.sms, c.variant == "before"
    iters, base, backoff = {"straggler": (8, 2500, 0), "late_start": (4, 5000, 0), "serial_tail": (4, 5000, 0),
                            "barrier": (24, 1000, 8000)}[c.case]
    compute = np.full((iters, nb), base, np.int32)
    tail = np.zeros(nb, np.int32)
    spin = np.zeros(nb, np.uint32)
    if c.case == "straggler":
        extra = 2 * base  # block 17's 3x: two more shares of the phase's work
        if before:
            compute[:, SLOW_BLOCK] += extra
        else:
            compute += split_evenly(extra, nb).astype(np.int32)[None, :]
        what = (f"{iters} phases of 'compute' ({base} FMAs a block), a grid barrier after each; " +
                (f"block {SLOW_BLOCK} has {base + extra} FMAs (3x): the others wait for it at every barrier"
                 if before else f"block {SLOW_BLOCK}'s extra {extra} FMAs split evenly over all {nb} blocks"))
    elif c.case == "late_start":
        setup = 20000
        if before:
            spin[SLOW_BLOCK] = setup
        else:
            spin[:] = split_evenly(setup, nb).astype(np.uint32)
        what = (f"{iters} phases of 'compute' ({base} FMAs a block), a grid barrier after each; " +
                (f"block {SLOW_BLOCK} runs {setup} ns of set-up (unprofiled) alone before its first probe: every "
                 "block waits for it at the first barrier" if before else
                 f"the {setup} ns of set-up shared by all {nb} blocks before their first probe"))
    elif c.case == "serial_tail":
        combine = 20000
        if before:
            tail[0] = combine
        else:
            tail[:] = split_evenly(combine, nb).astype(np.int32)
        what = (f"{iters} phases of 'compute' ({base} FMAs a block), a grid barrier after each, then 'combine' "
                f"({combine} FMAs) " + ("by block 0 alone while the others have left" if before else
                                        f"split over all {nb} blocks"))
    else:
        if not before:
            backoff = 0
        what = (f"{iters} phases of 'compute' ({base} FMAs a block), a grid barrier after each whose waiters " +
                (f"sleep {backoff} ns (__nanosleep) between polls: the release reaches each up to that late"
                 if before else "spin on the generation (a tight barrier)"))
    smem = one_block_per_sm_smem()
    kern = CudaKernel.from_file(HERE / "fixes.cu", "fx_phases", shared_bytes=smem)
    rng = np.random.default_rng(0)
    src = gpuarray.to_gpu(rng.random(nb * THREADS, dtype=np.float32))
    out = gpuarray.zeros(nb * THREADS, np.float32)
    bar = gpuarray.zeros(4, np.uint32)
    clk = BlockClock(nb)
    compute_d, tail_d, spin_d = gpuarray.to_gpu(compute.ravel()), gpuarray.to_gpu(tail), gpuarray.to_gpu(spin)
    events = ["compute", "combine"]
    capacity = 2 * iters + 4

    def reset():
        clk.reset()
        bar.fill(np.uint32(0))

    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), shared_bytes=smem,
                  args=[BUFFER, bar, src, out, *clk.args, compute_d, tail_d, spin_d, np.int32(iters),
                        np.uint32(backoff)],
                  max_events_per_lane=capacity, event_names=events, name=c.name, before_capture=reset)
    gave_up = int(bar.get()[2])
    c.save(cap, clk, capacity, 1, f"{nb} blocks x {THREADS} threads, one per SM: {what}", num_blocks=nb,
           iterations=iters, compute_fmas=compute.tolist(), tail_fmas=tail.tolist(), start_spin_ns=spin.tolist(),
           barrier_backoff_max_ns=int(backoff), barrier_gave_up=bool(gave_up),
           fma_ns_about=FMA_NS)


def case_worklist(c: Common) -> None:
    import pycuda.gpuarray as gpuarray

    nb = c.sms
    n = 8 * nb
    costs = worklist_costs(n)
    lists = round_robin(costs, nb) if c.variant == "before" else longest_first(costs, nb)
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in lists])]).astype(np.int32)
    items = np.concatenate([np.asarray(x, np.int32) for x in lists]).astype(np.int32)
    totals = np.array([int(costs[x].sum()) for x in lists], np.int64)
    smem = one_block_per_sm_smem()
    kern = CudaKernel.from_file(HERE / "fixes.cu", "fx_worklist", shared_bytes=smem)
    rng = np.random.default_rng(0)
    src = gpuarray.to_gpu(rng.random(n * THREADS, dtype=np.float32))
    out = gpuarray.zeros(n * THREADS, np.float32)
    clk = BlockClock(nb)
    capacity = 2 * int(max(len(x) for x in lists)) + 4
    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), shared_bytes=smem,
                  args=[BUFFER, src, out, *clk.args, gpuarray.to_gpu(offsets), gpuarray.to_gpu(items),
                        gpuarray.to_gpu(costs)],
                  max_events_per_lane=capacity, event_names=["compute"], name=c.name, before_capture=clk.reset)
    how = ("dealt round-robin (item i to block i mod blocks)" if c.variant == "before" else
           "dealt longest-first (LPT: by cost, each to the block with the least work so far)")
    c.save(cap, clk, capacity, 1, f"{nb} blocks x {THREADS} threads, one per SM, a static work list of {n} items "
           f"of skewed cost (log-normal around 1000 dependent FMAs, 200 to 6000), {how}; one 'compute' per item",
           num_blocks=nb, items=n, item_fmas=costs.tolist(), items_of_block=[list(map(int, x)) for x in lists],
           block_total_fmas=totals.tolist(), block_total_max_over_mean=round(float(totals.max() / totals.mean()), 4),
           fma_ns_about=FMA_NS)


def case_memory(c: Common) -> None:
    import pycuda.gpuarray as gpuarray

    nb = c.sms
    threads = 512
    share = 1 << 17  # float4 a block: 2 MiB
    shares = np.full(nb, share, np.int64)
    shares[SLOW_BLOCK] = 4 * share
    total = int(shares.sum())
    if c.variant == "after":
        shares = split_evenly(total, nb)
    chunk = np.concatenate([[0], np.cumsum(shares)]).astype(np.int64)
    smem = one_block_per_sm_smem()
    kern = CudaKernel.from_file(HERE / "fixes.cu", "fx_stream", shared_bytes=smem)
    src = gpuarray.empty(total * 4, np.float32)
    src.fill(np.float32(1.0))
    out = gpuarray.zeros(nb, np.float32)
    clk = BlockClock(nb)
    capacity = 4 + 4
    cap = profile(kern, grid=(nb, 1, 1), block=(threads, 1, 1), shared_bytes=smem,
                  args=[BUFFER, src, out, *clk.args, gpuarray.to_gpu(chunk)],
                  max_events_per_lane=capacity, event_names=["load", "store"], name=c.name, before_capture=clk.reset)
    nbytes = total * 16 + nb * 4
    cap.meta["work"] = {"bytes": nbytes}
    how = (f"block {SLOW_BLOCK} reads 4x the bytes of the others" if c.variant == "before" else
           "every block reads an even share of the bytes")
    c.save(cap, clk, capacity, 1, f"{nb} blocks x {threads} threads, one per SM, a memory-bound sum of "
           f"{total * 16} bytes (float4 loads, 4 in flight a thread) by a chunk map: {how}; 'load' then 'store' "
           "(the block's sum)", num_blocks=nb, chunk_float4=chunk.tolist(), block_bytes=(shares * 16).tolist(),
           dram_bytes=nbytes)


def case_waves(c: Common) -> None:
    import pycuda.gpuarray as gpuarray
    from occupancy import occupancy_api, set_max_shared_carveout

    smem, per_sm, fmas = 48 * 1024, 4, 10000
    slots = c.sms * per_sm
    work = int(round(3.25 * slots)) * fmas  # the kernel's work: 3.25 waves of blocks of `fmas`
    nb = int(round(3.25 * slots)) if c.variant == "before" else 3 * slots
    block_fmas = int(round(work / nb))
    kern = CudaKernel.from_file(HERE / "slots.cu", "slots", shared_bytes=smem)
    set_max_shared_carveout(kern)
    api = occupancy_api(kern, THREADS, smem)
    load_n4 = 16384 // 16
    src = gpuarray.to_gpu(np.random.default_rng(0).random(nb * load_n4 * 4, dtype=np.float32))
    out = gpuarray.zeros(nb * THREADS, np.float32)
    clk = BlockClock(nb)
    capacity = 4 + 2
    cap = profile(kern, grid=(nb, 1, 1), block=(THREADS, 1, 1), shared_bytes=smem,
                  args=[BUFFER, src, out, *clk.args, np.int32(load_n4), np.int32(block_fmas)],
                  max_events_per_lane=capacity, event_names=["load", "compute"], name=c.name,
                  before_capture=clk.reset)
    how = (f"{nb} blocks: 3.25 waves, the last a quarter full" if c.variant == "before" else
           f"{nb} blocks: 3 full waves, each block {block_fmas / fmas:.4f}x the work")
    c.save(cap, clk, capacity, 1, f"slots.cu: {THREADS} threads and {smem} B shared memory a block, {per_sm} "
           f"blocks per SM ({slots} slots), the same total work ({work} FMAs a thread over the grid) in {how}; "
           "'load' (16 KiB) then 'compute'", num_blocks=nb, slots=slots, waves_in_slots=round(nb / slots, 4),
           block_fmas=block_fmas, blocks_per_sm_by_occupancy_api=api["blocks_per_sm"], fma_ns_about=FMA_NS)


def case_pipeline(c: Common) -> None:
    import pycuda.gpuarray as gpuarray

    nb, tiles, groups = c.sms, 8, 2
    produce, consume = (6000, 1500) if c.variant == "before" else (3750, 3750)
    smem = one_block_per_sm_smem()
    kern = CudaKernel.from_file(HERE / "pipeline.cu", "pipeline", shared_bytes=smem)
    src = gpuarray.to_gpu(np.random.default_rng(0).random(nb * tiles * THREADS, dtype=np.float32))
    out = gpuarray.zeros(nb * tiles * THREADS, np.float32)
    work_ns = gpuarray.zeros(nb * groups * tiles * 2, np.uint64)
    wait_ns = gpuarray.zeros(nb * groups * tiles * 2, np.uint64)
    clk = BlockClock(nb)
    capacity = 2 * tiles + 4
    events = ["produce", "consume"]
    cap = profile(kern, grid=(nb, 1, 1), block=(groups * THREADS, 1, 1), shared_bytes=smem, groups=groups,
                  args=[BUFFER, src, out, *clk.args, work_ns, wait_ns, np.int32(tiles), np.int32(produce),
                        np.int32(consume)],
                  max_events_per_lane=capacity, event_names=events, group_names=events, name=c.name,
                  before_capture=clk.reset)
    how = ("produce 4x consume: the consumer waits on the producer every tile" if c.variant == "before" else
           "part of produce's work moved into consume (the stages even): 3750 FMAs each")
    c.save(cap, clk, capacity, groups, f"pipeline.cu: {nb} blocks, 2 warp groups (group 0 'produce', group 1 "
           f"'consume'), {tiles} tiles through 2 shared-memory slots and named barriers; {how}", num_blocks=nb,
           tiles=tiles, produce_fmas=produce, consume_fmas=consume, fma_ns_about=FMA_NS)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=CASES, required=True)
    ap.add_argument("--variant", choices=("before", "after"), required=True)
    ap.add_argument("--name", default=None, help="the captures' stem (default: the case)")
    a = ap.parse_args()
    c = Common(a.case, a.variant, a.name or a.case)
    {"worklist": case_worklist, "memory": case_memory, "waves": case_waves,
     "pipeline": case_pipeline}.get(a.case, case_phases)(c)


if __name__ == "__main__":
    main()
