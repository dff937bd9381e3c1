// Thread-block clusters of 2 (__cluster_dims__(2, 1, 1)), one block per SM (the launch asks for more than half
// an SM's shared memory; an SM pair of a GPC holds a cluster), persistent: every block runs `iters` iterations of
// 'compute' (compute_fmas dependent FMAs, slow_mult times as many on slow_block; the result stored in its own
// shared memory) then 'exchange' (read the partner block's result through distributed shared memory, store
// to global memory), with a cluster barrier (barrier.cluster via cooperative_groups) after each phase,
// outside the probes. No grid barrier: only slow_block's partner waits for it, at the barrier after
// 'compute', every iteration; the other clusters' blocks finish together and do not wait.
//
// Apart from the profiler, thread 0 records its cluster (%clusterid.x, %cluster_ctarank, %cluster_nctarank)
// and %globaltimer just before and just after each cluster barrier: sync_ns[(block * iters + it) * 4 + j],
// j = 0, 1 around the barrier after 'compute', 2, 3 around the one after 'exchange'.
#include <stdint.h>
#include <cooperative_groups.h>

using namespace flashinfer;
#include "shapes_common.cuh"
#include "pinned_work.cuh"

namespace cg = cooperative_groups;

struct ProfilerClosure {
  PROFILER_CLOSURE_PARAMS_DECL
};
struct ProfilerParams {
  uint64_t* profiler_buffer;
};

enum : uint32_t { EV_COMPUTE = 0, EV_EXCHANGE = 1 };
constexpr int kThreads = 128;

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kThreads)
    cluster_pairs(uint64_t* profiler_buffer, float* out, uint64_t* begin_ns, uint64_t* end_ns, int* block_smid,
                  int* block_cluster, uint64_t* sync_ns, int iters, int compute_fmas, int slow_block, int slow_mult) {
  extern __shared__ float4 smem_dyn[];  // only to hold one block per SM
  __shared__ float seed[kThreads];
  __shared__ float result[kThreads];
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  gt_block_begin(begin_ns, block_smid);
  PROFILER_INIT(params, smem_dyn, closure, 0, 1, threadIdx.x == 0);
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned b = blockIdx.x, t = threadIdx.x;
  const unsigned rank = cluster.block_rank();
  if (t == 0) {
    unsigned id, ctarank, nctarank;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(id));
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(ctarank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nctarank));
    block_cluster[3 * b] = (int)id;
    block_cluster[3 * b + 1] = (int)ctarank;
    block_cluster[3 * b + 2] = (int)nctarank;
  }
  seed[t] = 1e-3f * (float)t;
  __syncthreads();
  const float* peer = cluster.map_shared_rank(result, rank ^ 1u);
  const int n = compute_fmas * ((int)b == slow_block ? slow_mult : 1);
  float acc = 0.f;
  for (int it = 0; it < iters; ++it) {
    uint64_t* mark = sync_ns + ((size_t)b * iters + it) * 4;

    PROFILER_EVENT_START(closure, EV_COMPUTE);
    pin_chain(seed + t, result + t, n);
    __syncthreads();
    PROFILER_EVENT_END(closure, EV_COMPUTE);

    const uint64_t c0 = pin_clock_ns();
    cluster.sync();  // the partner's result is ready: its wait is outside the probes
    const uint64_t c1 = pin_clock_ns();

    PROFILER_EVENT_START(closure, EV_EXCHANGE);
    acc += *(const volatile float*)(peer + t);
    out[((size_t)b * iters + it) * kThreads + t] = acc;
    seed[t] = 1e-3f * acc;
    __syncthreads();
    PROFILER_EVENT_END(closure, EV_EXCHANGE);

    const uint64_t x0 = pin_clock_ns();
    cluster.sync();  // the partner has read this block's result: the next 'compute' may overwrite it
    const uint64_t x1 = pin_clock_ns();
    if (t == 0) {
      mark[0] = c0;
      mark[1] = c1;
      mark[2] = x0;
      mark[3] = x1;
    }
  }
  gt_block_end(end_ns);
}
