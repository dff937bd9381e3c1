// Several blocks resident per SM, in waves of slots: 128 threads and 48 KiB of dynamic shared memory a block,
// so exactly 4 blocks fit on an SM (shared memory is the limit: 5 x (48 KiB + 1 KiB reserved) is more than an
// H200 SM's 228 KiB); the grid is 3.25 waves of those slots. Every block does the same work, one pass of
// 'load' (load_n4 float4 from global memory into shared memory) then 'compute' (compute_fmas dependent FMAs,
// pinned inside its probes), no barrier between blocks: the last wave fills a quarter of the slots.
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

enum : uint32_t { EV_LOAD = 0, EV_COMPUTE = 1 };

extern "C" __global__ void slots(uint64_t* profiler_buffer, const float4* __restrict__ src, float* out,
                                 uint64_t* begin_ns, uint64_t* end_ns, int* block_smid, int load_n4,
                                 int compute_fmas) {
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
  pin_chain(reinterpret_cast<volatile float*>(smem) + threadIdx.x, out + (size_t)b * blockDim.x + threadIdx.x,
            compute_fmas);
  __syncthreads();
  PROFILER_EVENT_END(closure, EV_COMPUTE);
  gt_block_end(end_ns);
}
