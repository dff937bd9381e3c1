// A persistent kernel: one block per SM, `iters` iterations of three phases (load, compute, reduce), each
// followed by a software grid barrier whose wait lies OUTSIDE the probes, so it shows up as idle time.
// One block per iteration gets `slow_mult` times the compute: block (slow_block + it * slow_step) % nblocks.
// slow_step 0 keeps the same slow block every iteration (imbalance.py); a nonzero step moves it
// (moving_straggler.py).
//
// Written against FlashInfer's profiler macros; ktrace's build puts the profiler header (FlashInfer's or
// ktrace's) in front of this source. The profiler buffer is the first argument in both builds, so the
// instrumented kernel and its control take the same arguments.
#include <stdint.h>

using namespace flashinfer;

struct ProfilerClosure {
  PROFILER_CLOSURE_PARAMS_DECL
};
struct ProfilerParams {
  uint64_t* profiler_buffer;
};

enum : uint32_t { EV_LOAD = 0, EV_COMPUTE = 1, EV_REDUCE = 2 };

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// bar[0]: arrivals, bar[1]: generation, bar[2]: set to 1 if a block gave up waiting (the grid was not
// co-resident): the kernel then finishes instead of hanging, and the host reports it.
__device__ __forceinline__ void grid_barrier(unsigned* bar, unsigned nblocks) {
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
      const uint64_t t0 = now_ns();
      while (*gen == g && !*gave_up) {
        if (now_ns() - t0 > 2000000000ull) {
          atomicExch(bar + 2, 1u);
          break;
        }
      }
    }
    __threadfence();
  }
  __syncthreads();
}

extern "C" __global__ void persistent_phases(uint64_t* profiler_buffer, unsigned* bar, const float4* __restrict__ src,
                                             float* out, int* block_smid, int iters, int load_n4, int compute_base,
                                             int slow_mult, int slow_block, int slow_step) {
  extern __shared__ float4 smem[];
  float* red = reinterpret_cast<float*>(smem);
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  PROFILER_INIT(params, smem, closure, 0, 1, threadIdx.x == 0);
  const unsigned nb = gridDim.x, b = blockIdx.x;
  if (threadIdx.x == 0) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    block_smid[b] = (int)s;
  }
  float acc = 0.f;
  for (int it = 0; it < iters; ++it) {
    const unsigned slow = (unsigned)(slow_block + it * slow_step) % nb;

    PROFILER_EVENT_START(closure, EV_LOAD);
    const float4* p = src + (size_t)b * load_n4;
    for (int i = threadIdx.x; i < load_n4; i += blockDim.x) {
      const float4 v = p[i];
      acc += v.x + v.y + v.z + v.w;
    }
    __syncthreads();
    PROFILER_EVENT_END(closure, EV_LOAD);
    grid_barrier(bar, nb);

    PROFILER_EVENT_START(closure, EV_COMPUTE);
    const int n = compute_base * (b == slow ? slow_mult : 1);
    float x = acc + (float)threadIdx.x;
    for (int i = 0; i < n; ++i) x = fmaf(x, 0.9999999f, 0.5f);
    acc = x;
    __syncthreads();
    PROFILER_EVENT_END(closure, EV_COMPUTE);
    grid_barrier(bar, nb);

    PROFILER_EVENT_START(closure, EV_REDUCE);
    red[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out + it, red[0]);
    __syncthreads();
    PROFILER_EVENT_END(closure, EV_REDUCE);
    grid_barrier(bar, nb);
  }
}
