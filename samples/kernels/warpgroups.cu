// Two warp groups per block, producer and consumer, double-buffered through shared memory: group 0
// (warps 0-3) copies tile t+1 from global memory while group 1 (warps 4-7) runs an FMA loop over tile t.
// Each group is one profiler lane (write predicate: the group's first thread), so load(t+1) overlaps
// mma(t) on the two lanes of a block. The tag's block field holds the block; the group is known only from
// the record's position in the buffer.
#include <stdint.h>

using namespace flashinfer;

struct ProfilerClosure {
  PROFILER_CLOSURE_PARAMS_DECL
};
struct ProfilerParams {
  uint64_t* profiler_buffer;
};

enum : uint32_t { EV_LOAD = 0, EV_MMA = 1 };
constexpr int kTileFloat4 = 1024;  // 16 KiB

extern "C" __global__ void warpgroups(uint64_t* profiler_buffer, const float4* __restrict__ src, float* out,
                                      int* block_smid, int tiles, int mma_reps) {
  __shared__ float4 tile[2][kTileFloat4];
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  const unsigned group = threadIdx.x / 128, t128 = threadIdx.x % 128;
  PROFILER_INIT(params, tile, closure, group, 2, t128 == 0);
  if (threadIdx.x == 0) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    block_smid[blockIdx.x] = (int)s;
  }
  const float4* base = src + (size_t)blockIdx.x * tiles * kTileFloat4;
  if (group == 0) {
    PROFILER_EVENT_START(closure, EV_LOAD);
    for (int i = t128; i < kTileFloat4; i += 128) tile[0][i] = base[i];
    PROFILER_EVENT_END(closure, EV_LOAD);
  }
  __syncthreads();
  float acc = 0.f;
  for (int t = 0; t < tiles; ++t) {
    if (group == 0) {
      if (t + 1 < tiles) {
        PROFILER_EVENT_START(closure, EV_LOAD);
        const float4* p = base + (size_t)(t + 1) * kTileFloat4;
        for (int i = t128; i < kTileFloat4; i += 128) tile[(t + 1) & 1][i] = p[i];
        PROFILER_EVENT_END(closure, EV_LOAD);
      }
    } else {
      PROFILER_EVENT_START(closure, EV_MMA);
      for (int r = 0; r < mma_reps; ++r) {
        for (int i = t128; i < kTileFloat4; i += 128) {
          const float4 v = tile[t & 1][i];
          acc = fmaf(acc, v.x, v.y);
          acc = fmaf(acc, v.z, v.w);
        }
      }
      PROFILER_EVENT_END(closure, EV_MMA);
    }
    __syncthreads();
  }
  if (group == 1) atomicAdd(out + blockIdx.x, acc);
}
