// The kernels of the measured fixes (fixes.py, samples/fixes/): each case's before and after run the same
// kernel, the fix in its tables (the data a driver prepares) or in a scalar, as a kernel engineer would make it.
//
// fx_phases: persistent, one block per SM, `iters` phases of 'compute' (compute_fmas[it * nblocks + b]
//   dependent FMAs), each followed by a software grid barrier outside the probes; before its first probe each
//   block spins start_spin_ns[b] (unprofiled set-up work); after the last barrier a block with tail_fmas[b] > 0
//   runs 'combine' (that many FMAs) while the others have left. backoff_ns > 0: the barrier's waiters sleep
//   about backoff_ns (__nanosleep) between polls of the generation (a slow release); 0: a tight spin.
// fx_worklist: one block per SM, a static work list: block b runs items items[offsets[b] .. offsets[b+1]), each
//   one 'compute' of cost[item] dependent FMAs.
// fx_stream: one block per SM, 'load' sums src[chunk[b] .. chunk[b+1]) (float4), then 'store' writes the
//   block's sum: memory-bound, each block's share of the bytes from its chunk map.
//
// Every kernel records apart from the profiler each block's %globaltimer at entry and exit and its %smid
// (shapes_common.cuh). Its work stays inside its probes: a chain's input is loaded after the START probe and
// its result stored before the END probe (pinned_work.cuh).
#include <stdint.h>

using namespace flashinfer;
#include "shapes_common.cuh"
#include "pinned_work.cuh"

struct ProfilerClosure {
  PROFILER_CLOSURE_PARAMS_DECL
};
struct ProfilerParams {
  uint64_t* profiler_buffer;
};

// gt_grid_barrier with a backed-off wait: the waiters sleep about backoff_ns between polls of the generation
// (to spare the memory system), so each sees the release up to that much late.
__device__ __forceinline__ void fx_grid_barrier(unsigned* bar, unsigned nblocks, unsigned backoff_ns) {
  if (backoff_ns == 0) {
    gt_grid_barrier(bar, nblocks);
    return;
  }
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
        __nanosleep(backoff_ns);
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

extern "C" __global__ void fx_phases(uint64_t* profiler_buffer, unsigned* bar, const float* __restrict__ src,
                                     float* out, uint64_t* begin_ns, uint64_t* end_ns, int* block_smid,
                                     const int* __restrict__ compute_fmas, const int* __restrict__ tail_fmas,
                                     const unsigned* __restrict__ start_spin_ns, int iters, unsigned backoff_ns) {
  extern __shared__ float4 smem[];
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  gt_block_begin(begin_ns, block_smid);
  PROFILER_INIT(params, smem, closure, 0, 1, threadIdx.x == 0);
  const unsigned nb = gridDim.x, b = blockIdx.x;
  const size_t me = (size_t)b * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0 && start_spin_ns[b] > 0) {
    uint64_t t[2];
    pin_spin(start_spin_ns[b], t);
  }
  __syncthreads();
  for (int it = 0; it < iters; ++it) {
    PROFILER_EVENT_START(closure, 0);
    pin_chain(it == 0 ? src + me : out + me, out + me, compute_fmas[it * nb + b]);
    __syncthreads();
    PROFILER_EVENT_END(closure, 0);
    fx_grid_barrier(bar, nb, backoff_ns);
  }
  if (tail_fmas[b] > 0) {
    PROFILER_EVENT_START(closure, 1);
    pin_chain(out + me, out + me, tail_fmas[b]);
    __syncthreads();
    PROFILER_EVENT_END(closure, 1);
  }
  gt_block_end(end_ns);
}

extern "C" __global__ void fx_worklist(uint64_t* profiler_buffer, const float* __restrict__ src, float* out,
                                       uint64_t* begin_ns, uint64_t* end_ns, int* block_smid,
                                       const int* __restrict__ offsets, const int* __restrict__ items,
                                       const int* __restrict__ cost) {
  extern __shared__ float4 smem[];
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  gt_block_begin(begin_ns, block_smid);
  PROFILER_INIT(params, smem, closure, 0, 1, threadIdx.x == 0);
  const unsigned b = blockIdx.x;
  for (int k = offsets[b]; k < offsets[b + 1]; ++k) {
    const int item = items[k];
    const size_t at = (size_t)item * blockDim.x + threadIdx.x;
    PROFILER_EVENT_START(closure, 0);
    pin_chain(src + at, out + at, cost[item]);
    __syncthreads();
    PROFILER_EVENT_END(closure, 0);
  }
  gt_block_end(end_ns);
}

extern "C" __global__ void fx_stream(uint64_t* profiler_buffer, const float4* __restrict__ src, float* out,
                                     uint64_t* begin_ns, uint64_t* end_ns, int* block_smid,
                                     const long long* __restrict__ chunk) {
  extern __shared__ float4 smem[];
  float* red = reinterpret_cast<float*>(smem);
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  gt_block_begin(begin_ns, block_smid);
  PROFILER_INIT(params, smem, closure, 0, 1, threadIdx.x == 0);
  const unsigned b = blockIdx.x;
  const long long lo = chunk[b], hi = chunk[b + 1];
  PROFILER_EVENT_START(closure, 0);
  float a0 = 0.f, a1 = 0.f, a2 = 0.f, a3 = 0.f;
  long long i = lo + threadIdx.x;
  const long long step = blockDim.x;
  for (; i + 3 * step < hi; i += 4 * step) {
    const float4 v0 = src[i], v1 = src[i + step], v2 = src[i + 2 * step], v3 = src[i + 3 * step];
    a0 += v0.x + v0.y + v0.z + v0.w;
    a1 += v1.x + v1.y + v1.z + v1.w;
    a2 += v2.x + v2.y + v2.z + v2.w;
    a3 += v3.x + v3.y + v3.z + v3.w;
  }
  for (; i < hi; i += step) {
    const float4 v = src[i];
    a0 += v.x + v.y + v.z + v.w;
  }
  red[threadIdx.x] = (a0 + a1) + (a2 + a3);
  __syncthreads();
  PROFILER_EVENT_END(closure, 0);
  PROFILER_EVENT_START(closure, 1);
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[b] = red[0];
  __syncthreads();
  PROFILER_EVENT_END(closure, 1);
  gt_block_end(end_ns);
}
