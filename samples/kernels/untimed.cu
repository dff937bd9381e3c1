// Uninstrumented work inside a lane, and a late starter: one block per SM, one pass of 'a' then 'b' (a_fmas and
// b_fmas dependent FMAs, the same on every block) with untimed_fmas[block] dependent FMAs between them, outside
// any probe, on every block; no synchronization between blocks at all. Block late_block also spins (thread 0,
// %globaltimer) for spin_ns before its first probe: its lane starts late; its work is the same as any block's.
//
// Apart from the profiler, thread 0 reads %globaltimer around the spin (marks[4 * block + 0, 1]; 0 where the
// block does not spin) and around the untimed work (marks[4 * block + 2, 3]).
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

enum : uint32_t { EV_A = 0, EV_B = 1 };

extern "C" __global__ void untimed(uint64_t* profiler_buffer, float* out, uint64_t* begin_ns, uint64_t* end_ns,
                                   int* block_smid, uint64_t* marks, const int* untimed_fmas, int a_fmas,
                                   int b_fmas, int late_block, unsigned spin_ns) {
  extern __shared__ float smem_f[];
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  gt_block_begin(begin_ns, block_smid);
  PROFILER_INIT(params, smem_f, closure, 0, 1, threadIdx.x == 0);
  const unsigned b = blockIdx.x, t = threadIdx.x, n = blockDim.x;
  uint64_t* mark = marks + 4 * (size_t)b;
  const int u_fmas = untimed_fmas[b];  // loaded here, so the gap holds the FMAs and no global load
  smem_f[t] = 1e-3f * (float)t;
  if ((int)b == late_block && t == 0) pin_spin(spin_ns, mark);
  __syncthreads();

  PROFILER_EVENT_START(closure, EV_A);
  pin_chain(smem_f + t, smem_f + n + t, a_fmas);
  __syncthreads();
  PROFILER_EVENT_END(closure, EV_A);

  const uint64_t u0 = pin_clock_ns();
  pin_chain(smem_f + n + t, smem_f + 2 * n + t, u_fmas);  // untimed: no probe, no wait
  __syncthreads();
  const uint64_t u1 = pin_clock_ns();

  PROFILER_EVENT_START(closure, EV_B);
  pin_chain(smem_f + 2 * n + t, out + (size_t)b * n + t, b_fmas);
  __syncthreads();
  PROFILER_EVENT_END(closure, EV_B);
  if (t == 0) {
    mark[2] = u0;
    mark[3] = u1;
  }
  gt_block_end(end_ns);
}
