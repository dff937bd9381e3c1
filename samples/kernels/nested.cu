// Nested phases in a persistent kernel: one block per SM, `iters` iterations; each iteration is an 'outer'
// phase holding 'inner_a' (a load), then unprofiled work (gap_fmas dependent FMAs: a gap inside 'outer'
// between the two inner slices), then 'inner_b' (compute); the software grid barrier follows, outside
// 'outer' (its wait outside every probe).
#include <stdint.h>

using namespace flashinfer;
#include "shapes_common.cuh"

struct ProfilerClosure {
  PROFILER_CLOSURE_PARAMS_DECL
};
struct ProfilerParams {
  uint64_t* profiler_buffer;
};

enum : uint32_t { EV_OUTER = 0, EV_INNER_A = 1, EV_INNER_B = 2 };

extern "C" __global__ void nested(uint64_t* profiler_buffer, unsigned* bar, const float4* __restrict__ src, float* out,
                                  uint64_t* begin_ns, uint64_t* end_ns, int* block_smid, int iters, int load_n4,
                                  int gap_fmas, int compute_fmas) {
  extern __shared__ float4 smem[];
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  gt_block_begin(begin_ns, block_smid);
  PROFILER_INIT(params, smem, closure, 0, 1, threadIdx.x == 0);
  const unsigned nb = gridDim.x, b = blockIdx.x;
  float acc = 0.f;
  for (int it = 0; it < iters; ++it) {
    PROFILER_EVENT_START(closure, EV_OUTER);

    PROFILER_EVENT_START(closure, EV_INNER_A);
    const float4* p = src + (size_t)b * load_n4;
    for (int i = threadIdx.x; i < load_n4; i += blockDim.x) {
      const float4 v = p[i];
      acc += v.x + v.y + v.z + v.w;
    }
    __syncthreads();
    PROFILER_EVENT_END(closure, EV_INNER_A);

    acc = gt_fma_chain(acc, gap_fmas);  // unprofiled: the gap inside 'outer'
    __syncthreads();

    PROFILER_EVENT_START(closure, EV_INNER_B);
    acc = gt_fma_chain(acc + (float)threadIdx.x, compute_fmas);
    __syncthreads();
    PROFILER_EVENT_END(closure, EV_INNER_B);

    PROFILER_EVENT_END(closure, EV_OUTER);
    gt_grid_barrier(bar, nb);
  }
  out[(size_t)b * blockDim.x + threadIdx.x] = acc;
  gt_block_end(end_ns);
}
