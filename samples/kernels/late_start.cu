// Equal work on every block, and one block that starts late: one block per SM, one pass of 'compute' then
// 'store', no barrier. Block late_block spins (thread 0, %globaltimer) for spin_ns after its start before its
// first probe, so it ends last because it started late, not because it worked longer.
#include <stdint.h>

using namespace flashinfer;
#include "shapes_common.cuh"

struct ProfilerClosure {
  PROFILER_CLOSURE_PARAMS_DECL
};
struct ProfilerParams {
  uint64_t* profiler_buffer;
};

enum : uint32_t { EV_COMPUTE = 0, EV_STORE = 1 };

extern "C" __global__ void late_start(uint64_t* profiler_buffer, float* out, uint64_t* begin_ns, uint64_t* end_ns,
                                      int* block_smid, int compute_fmas, int late_block, unsigned spin_ns) {
  extern __shared__ float4 smem[];
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  gt_block_begin(begin_ns, block_smid);
  PROFILER_INIT(params, smem, closure, 0, 1, threadIdx.x == 0);
  const unsigned b = blockIdx.x;
  if ((int)b == late_block && threadIdx.x == 0) {
    const uint64_t t0 = gt_now_ns();
    while (gt_now_ns() - t0 < spin_ns) {
    }
  }
  __syncthreads();

  PROFILER_EVENT_START(closure, EV_COMPUTE);
  const float x = gt_fma_chain((float)threadIdx.x, compute_fmas);
  __syncthreads();
  PROFILER_EVENT_END(closure, EV_COMPUTE);

  PROFILER_EVENT_START(closure, EV_STORE);
  out[(size_t)b * blockDim.x + threadIdx.x] = x;
  __syncthreads();
  PROFILER_EVENT_END(closure, EV_STORE);
  gt_block_end(end_ns);
}
