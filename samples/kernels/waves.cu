// A NON-persistent kernel over several waves: one block per SM (the launch asks for more than half an SM's
// shared memory), gridDim = waves x SMs, each block one pass of load / compute / store and no grid barrier.
// Blocks >= heavy_from do heavy_mult times the compute: they are dispatched last, in the last wave, so the
// kernel ends in a long tail where only those few SMs are busy.
#include <stdint.h>

using namespace flashinfer;
#include "shapes_common.cuh"

struct ProfilerClosure {
  PROFILER_CLOSURE_PARAMS_DECL
};
struct ProfilerParams {
  uint64_t* profiler_buffer;
};

enum : uint32_t { EV_LOAD = 0, EV_COMPUTE = 1, EV_STORE = 2 };

extern "C" __global__ void waves(uint64_t* profiler_buffer, const float4* __restrict__ src, float* out,
                                 uint64_t* begin_ns, uint64_t* end_ns, int* block_smid, int load_n4,
                                 int compute_base, int heavy_from, int heavy_mult) {
  extern __shared__ float4 smem[];
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  gt_block_begin(begin_ns, block_smid);
  PROFILER_INIT(params, smem, closure, 0, 1, threadIdx.x == 0);
  const unsigned b = blockIdx.x;

  PROFILER_EVENT_START(closure, EV_LOAD);
  const float4* p = src + (size_t)b * load_n4;
  for (int i = threadIdx.x; i < load_n4; i += blockDim.x) smem[i] = p[i];
  __syncthreads();
  PROFILER_EVENT_END(closure, EV_LOAD);

  PROFILER_EVENT_START(closure, EV_COMPUTE);
  const float4 v = smem[threadIdx.x];
  const int n = compute_base * ((int)b >= heavy_from ? heavy_mult : 1);
  const float x = gt_fma_chain(v.x + v.y + v.z + v.w, n);
  __syncthreads();
  PROFILER_EVENT_END(closure, EV_COMPUTE);

  PROFILER_EVENT_START(closure, EV_STORE);
  out[(size_t)b * blockDim.x + threadIdx.x] = x;
  __syncthreads();
  PROFILER_EVENT_END(closure, EV_STORE);
  gt_block_end(end_ns);
}
