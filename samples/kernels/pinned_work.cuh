// Work that stays inside the phase it is written in, and clock reads that stay where they are written, for
// the verdict kernels (slots.cu, cluster.cu, untimed.cu, pipeline.cu). Included after shapes_common.cuh.
//
// A dependent FMA chain lives in registers: nothing stops the compiler from hoisting it above a START probe
// or sinking it below an END probe (the probes' fences order memory, not arithmetic). pin_chain loads its
// input after the START probe's fence and stores its result before the END probe's fence, so the chain,
// which needs the one and feeds the other, runs between the two probes.
#pragma once
#include <stdint.h>

// %globaltimer (64-bit ns) with a memory clobber: no load or store of the caller moves across it.
__device__ __forceinline__ uint64_t pin_clock_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

// n dependent FMAs on *in, the result stored to *out (shared or global memory); returns it.
__device__ __forceinline__ float pin_chain(const volatile float* in, volatile float* out, int n) {
  float x = *in;
  for (int i = 0; i < n; ++i) x = fmaf(x, 0.9999999f, 0.5f);
  *out = x;
  return x;
}

// Thread 0 spins until spin_ns have passed on %globaltimer; returns when it started and stopped in t[0], t[1].
__device__ __forceinline__ void pin_spin(unsigned spin_ns, uint64_t* t) {
  const uint64_t t0 = pin_clock_ns();
  uint64_t now = t0;
  while (now - t0 < spin_ns) now = pin_clock_ns();
  t[0] = t0;
  t[1] = now;
}
