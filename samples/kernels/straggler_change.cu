// persistent.cu with the slow block chosen per iteration from a table: one block per SM, `iters` iterations
// of load / compute / reduce, a software grid barrier after each phase (its wait outside the probes).
// Block slow_of_iter[it] gets slow_mult times the compute in iteration it (straggler_change.py: block 17 in
// iterations 0-7, block 90 in 8-15).
#include <stdint.h>

using namespace flashinfer;
#include "shapes_common.cuh"

struct ProfilerClosure {
  PROFILER_CLOSURE_PARAMS_DECL
};
struct ProfilerParams {
  uint64_t* profiler_buffer;
};

enum : uint32_t { EV_LOAD = 0, EV_COMPUTE = 1, EV_REDUCE = 2 };

extern "C" __global__ void persistent_table(uint64_t* profiler_buffer, unsigned* bar, const float4* __restrict__ src,
                                            float* out, uint64_t* begin_ns, uint64_t* end_ns, int* block_smid,
                                            const int* __restrict__ slow_of_iter, int iters, int load_n4,
                                            int compute_base, int slow_mult) {
  extern __shared__ float4 smem[];
  float* red = reinterpret_cast<float*>(smem);
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  gt_block_begin(begin_ns, block_smid);
  PROFILER_INIT(params, smem, closure, 0, 1, threadIdx.x == 0);
  const unsigned nb = gridDim.x, b = blockIdx.x;
  float acc = 0.f;
  for (int it = 0; it < iters; ++it) {
    PROFILER_EVENT_START(closure, EV_LOAD);
    const float4* p = src + (size_t)b * load_n4;
    for (int i = threadIdx.x; i < load_n4; i += blockDim.x) {
      const float4 v = p[i];
      acc += v.x + v.y + v.z + v.w;
    }
    __syncthreads();
    PROFILER_EVENT_END(closure, EV_LOAD);
    gt_grid_barrier(bar, nb);

    PROFILER_EVENT_START(closure, EV_COMPUTE);
    const int n = compute_base * ((int)b == slow_of_iter[it] ? slow_mult : 1);
    acc = gt_fma_chain(acc + (float)threadIdx.x, n);
    __syncthreads();
    PROFILER_EVENT_END(closure, EV_COMPUTE);
    gt_grid_barrier(bar, nb);

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
    gt_grid_barrier(bar, nb);
  }
  gt_block_end(end_ns);
}
