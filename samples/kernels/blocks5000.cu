// More than 4096 blocks: FlashInfer's tag has a 12-bit block field that it does not mask, so for
// block >= 4096 bit 12 of the block index is OR-ed into the SM byte. ktrace's header masks the field; the
// true block is the record's position either way. Each block runs two phases, 'work' (an FMA loop whose
// length depends on block % 8) and 'store'; blocks run in several waves.
#include <stdint.h>

using namespace flashinfer;

struct ProfilerClosure {
  PROFILER_CLOSURE_PARAMS_DECL
};
struct ProfilerParams {
  uint64_t* profiler_buffer;
};

enum : uint32_t { EV_WORK = 0, EV_STORE = 1 };

extern "C" __global__ void many_blocks(uint64_t* profiler_buffer, float* out, int* block_smid, int n) {
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  PROFILER_INIT(params, nullptr, closure, 0, 1, threadIdx.x == 0);
  if (threadIdx.x == 0) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    block_smid[blockIdx.x] = (int)s;
  }
  PROFILER_EVENT_START(closure, EV_WORK);
  float x = (float)threadIdx.x;
  const int reps = n * (1 + (int)(blockIdx.x % 8));
  for (int i = 0; i < reps; ++i) x = fmaf(x, 0.9999999f, 0.5f);
  __syncthreads();
  PROFILER_EVENT_END(closure, EV_WORK);
  PROFILER_EVENT_START(closure, EV_STORE);
  out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = x;
  __syncthreads();
  PROFILER_EVENT_END(closure, EV_STORE);
}
