// A producer-bound warp-specialized pipeline: one block per SM, 2 warp groups of 128 threads, `tiles` tiles
// handed from group 0 ('produce': produce_fmas dependent FMAs on its input, the result written into a
// shared-memory slot) to group 1 ('consume': consume_fmas dependent FMAs on the slot, the result stored to
// global memory) through 2 slots guarded by named barriers: FULL[s] (id 1 + s) and EMPTY[s] (id 3 + s), each
// 256 threads, bar.arrive by the group that signals and bar.sync by the group that waits. produce_fmas is
// well above consume_fmas, so the consumer waits at FULL for every tile (outside its probes) and the producer
// never waits at EMPTY: the producer bounds the block. Each group is one profiler lane (write predicate: the
// group's first thread), as in warpgroups.cu.
//
// Apart from the profiler, each group's first thread reads %globaltimer just inside its phase's probes and
// around its barrier wait: work_ns[((block * 2 + group) * tiles + tile) * 2 + j] (j = 0 begin, 1 end) and
// wait_ns[((block * 2 + group) * tiles + tile) * 2 + j] (before and after the bar.sync; equal where there is
// none: the producer's first 2 tiles).
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

enum : uint32_t { EV_PRODUCE = 0, EV_CONSUME = 1 };
constexpr int kGroup = 128, kSlots = 2, kFull = 1, kEmpty = 1 + kSlots;

// Barrier ids as immediates (a register id makes ptxas reserve all 16 of the block's barriers).
template <int kId>
__device__ __forceinline__ void named_sync() {
  asm volatile("bar.sync %0, 256;" ::"n"(kId) : "memory");
}
template <int kId>
__device__ __forceinline__ void named_arrive() {
  asm volatile("bar.arrive %0, 256;" ::"n"(kId) : "memory");
}

extern "C" __global__ void __launch_bounds__(2 * kGroup)
    pipeline(uint64_t* profiler_buffer, const float* __restrict__ src, float* out, uint64_t* begin_ns,
             uint64_t* end_ns, int* block_smid, uint64_t* work_ns, uint64_t* wait_ns, int tiles, int produce_fmas,
             int consume_fmas) {
  extern __shared__ float4 smem_dyn[];  // only to hold one block per SM
  __shared__ float slot[kSlots][kGroup];
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  const unsigned group = threadIdx.x / kGroup, t = threadIdx.x % kGroup, b = blockIdx.x;
  gt_block_begin(begin_ns, block_smid);
  PROFILER_INIT(params, smem_dyn, closure, group, 2, t == 0);
  const size_t lane = (size_t)b * 2 + group;
  uint64_t* work = work_ns + lane * tiles * 2;
  uint64_t* wait = wait_ns + lane * tiles * 2;
  __syncthreads();
  for (int k = 0; k < tiles; ++k) {
    const int s = k % kSlots;
    const size_t idx = ((size_t)b * tiles + k) * kGroup + t;
    uint64_t w0, w1, c0, c1;
    if (group == 0) {
      w0 = pin_clock_ns();
      // the consumer is done with this slot's tile k - 2
      if (k >= kSlots) s ? named_sync<kEmpty + 1>() : named_sync<kEmpty>();
      w1 = pin_clock_ns();
      PROFILER_EVENT_START(closure, EV_PRODUCE);
      c0 = pin_clock_ns();
      pin_chain(src + idx, &slot[s][t], produce_fmas);
      c1 = pin_clock_ns();
      PROFILER_EVENT_END(closure, EV_PRODUCE);
      s ? named_arrive<kFull + 1>() : named_arrive<kFull>();
    } else {
      w0 = pin_clock_ns();
      // the producer has written tile k: the consumer's wait, outside its probes
      s ? named_sync<kFull + 1>() : named_sync<kFull>();
      w1 = pin_clock_ns();
      PROFILER_EVENT_START(closure, EV_CONSUME);
      c0 = pin_clock_ns();
      pin_chain(&slot[s][t], out + idx, consume_fmas);
      c1 = pin_clock_ns();
      PROFILER_EVENT_END(closure, EV_CONSUME);
      if (k + kSlots < tiles) s ? named_arrive<kEmpty + 1>() : named_arrive<kEmpty>();
    }
    if (t == 0) {
      wait[2 * k] = w0;
      wait[2 * k + 1] = w1;
      work[2 * k] = c0;
      work[2 * k + 1] = c1;
    }
  }
  gt_block_end(end_ns);
}
