// Instant events between phases. Each lane runs:
//   INSTANT(inst_first) START(phase) work INSTANT(inst_mid) work END(phase) START(phase) work END(phase)
//   INSTANT(inst_last_a) INSTANT(inst_last_b)
// FlashInfer's header writes an instant without advancing the write pointer, so the next record overwrites
// it and only the trailing instant survives: B E B E I(inst_last_b). ktrace's header keeps all eight.
#include <stdint.h>

using namespace flashinfer;

struct ProfilerClosure {
  PROFILER_CLOSURE_PARAMS_DECL
};
struct ProfilerParams {
  uint64_t* profiler_buffer;
};

enum : uint32_t { EV_PHASE = 0, EV_FIRST = 1, EV_MID = 2, EV_LAST_A = 3, EV_LAST_B = 4 };

__device__ __forceinline__ float work(float x, int n) {
  for (int i = 0; i < n; ++i) x = fmaf(x, 0.9999999f, 0.5f);
  return x;
}

extern "C" __global__ void instant_events(uint64_t* profiler_buffer, float* out, int* block_smid, int n) {
  [[maybe_unused]] ProfilerParams params{profiler_buffer};
  [[maybe_unused]] ProfilerClosure closure;
  PROFILER_INIT(params, nullptr, closure, 0, 1, threadIdx.x == 0);
  if (threadIdx.x == 0) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    block_smid[blockIdx.x] = (int)s;
  }
  float x = (float)threadIdx.x;
  PROFILER_EVENT_INSTANT(closure, EV_FIRST);
  PROFILER_EVENT_START(closure, EV_PHASE);
  x = work(x, n);
  PROFILER_EVENT_INSTANT(closure, EV_MID);
  x = work(x, n);
  PROFILER_EVENT_END(closure, EV_PHASE);
  PROFILER_EVENT_START(closure, EV_PHASE);
  x = work(x, n);
  PROFILER_EVENT_END(closure, EV_PHASE);
  PROFILER_EVENT_INSTANT(closure, EV_LAST_A);
  PROFILER_EVENT_INSTANT(closure, EV_LAST_B);
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
