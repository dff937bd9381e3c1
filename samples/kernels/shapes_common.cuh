// Ground truth the shape kernels (waves.cu, straggler_change.cu, worklist.cu, nested.cu, late_start.cu) record
// apart from the profiler: each block's %smid and its 64-bit %globaltimer when thread 0 starts and ends the
// block, in arrays of their own (never the profiler buffer); and the software grid barrier of persistent.cu.
// Included after the profiler header, which the build puts in front of each kernel source.
#pragma once
#include <stdint.h>

__device__ __forceinline__ uint64_t gt_now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread 0, before the block's first probe: its start time and SM.
__device__ __forceinline__ void gt_block_begin(uint64_t* begin_ns, int* block_smid) {
  if (threadIdx.x == 0) {
    begin_ns[blockIdx.x] = gt_now_ns();
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    block_smid[blockIdx.x] = (int)s;
  }
}

// Thread 0, after the block's last probe: its end time.
__device__ __forceinline__ void gt_block_end(uint64_t* end_ns) {
  __syncthreads();
  if (threadIdx.x == 0) end_ns[blockIdx.x] = gt_now_ns();
}

// bar[0]: arrivals, bar[1]: generation, bar[2]: set to 1 if a block gave up waiting (the grid was not
// co-resident): the kernel then finishes instead of hanging, and the host reports it.
__device__ __forceinline__ void gt_grid_barrier(unsigned* bar, unsigned nblocks) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned* gen = bar + 1;
    volatile unsigned* gave_up = bar + 2;
    const unsigned g = *gen;
    __threadfence();
    if (atomicAdd(bar, 1u) == nblocks - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      const uint64_t t0 = gt_now_ns();
      while (*gen == g && !*gave_up) {
        if (gt_now_ns() - t0 > 2000000000ull) {
          atomicExch(bar + 2, 1u);
          break;
        }
      }
    }
    __threadfence();
  }
  __syncthreads();
}

// n dependent FMAs per thread: work whose length is set by n alone.
__device__ __forceinline__ float gt_fma_chain(float x, int n) {
  for (int i = 0; i < n; ++i) x = fmaf(x, 0.9999999f, 0.5f);
  return x;
}
