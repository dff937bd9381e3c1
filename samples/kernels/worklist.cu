// A persistent work list: one CTA per SM pulls tile indices from a global atomic counter until the tiles run
// out (no grid barrier), 'fetch' (the tile's data into shared memory) then 'compute' per tile. Every
// heavy_every-th tile (t % heavy_every == 0) costs heavy_mult times the compute, so CTAs take different
// numbers of tiles. The counter is taken outside the probes: a CTA's instances are exactly its tiles. A CTA
// takes at most max_tiles tiles (the profiler buffer holds that many per lane); the grid's cap is far above
// the tile count, so every tile is done. ctr[0]: next tile, ctr[1]: CTAs done; the last CTA out resets both
// for the next launch. Ground truth: tiles_per_cta[b], tile_cta[t] (the CTA that did tile t).
#include <stdint.h>

using namespace flashinfer;
#include "shapes_common.cuh"

struct ProfilerClosure {
  PROFILER_CLOSURE_PARAMS_DECL
};
struct ProfilerParams {
  uint64_t* profiler_buffer;
};

enum : uint32_t { EV_FETCH = 0, EV_COMPUTE = 1 };

extern "C" __global__ void worklist(uint64_t* profiler_buffer, unsigned* ctr, const float4* __restrict__ src, float* out,
                                    uint64_t* begin_ns, uint64_t* end_ns, int* block_smid, int* tiles_per_cta,
                                    int* tile_cta, int ntiles, int max_tiles, int tile_n4, int compute_base,
                                    int heavy_every, int heavy_mult) {
  extern __shared__ float4 smem[];
  __shared__ int s_tile;
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  gt_block_begin(begin_ns, block_smid);
  PROFILER_INIT(params, smem, closure, 0, 1, threadIdx.x == 0);
  const unsigned b = blockIdx.x;
  int taken = 0;
  float acc = 0.f;
  while (true) {
    if (threadIdx.x == 0) s_tile = taken < max_tiles ? (int)atomicAdd(ctr, 1u) : ntiles;
    __syncthreads();
    const int t = s_tile;
    __syncthreads();
    if (t >= ntiles) break;

    PROFILER_EVENT_START(closure, EV_FETCH);
    const float4* p = src + (size_t)t * tile_n4;
    for (int i = threadIdx.x; i < tile_n4; i += blockDim.x) smem[i] = p[i];
    __syncthreads();
    PROFILER_EVENT_END(closure, EV_FETCH);

    PROFILER_EVENT_START(closure, EV_COMPUTE);
    const float4 v = smem[threadIdx.x];
    const int n = compute_base * (t % heavy_every == 0 ? heavy_mult : 1);
    acc = gt_fma_chain(acc + v.x + v.y + v.z + v.w, n);
    __syncthreads();
    PROFILER_EVENT_END(closure, EV_COMPUTE);
    if (threadIdx.x == 0) tile_cta[t] = (int)b;
    ++taken;
  }
  out[(size_t)b * blockDim.x + threadIdx.x] = acc;
  if (threadIdx.x == 0) tiles_per_cta[b] = taken;
  gt_block_end(end_ns);
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(ctr + 1, 1u) == gridDim.x - 1) {  // every CTA has taken its last index: reset
      ctr[0] = 0u;
      ctr[1] = 0u;
      __threadfence();
    }
  }
}
