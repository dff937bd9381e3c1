// ktrace/profiler.cuh: per-block / per-warp-group phase timestamps, written by CUDA kernels.
//
// Macro-compatible with FlashInfer's include/flashinfer/profiler.cuh: a kernel written against its macros
// (PROFILER_CLOSURE_PARAMS_DECL, PROFILER_PARAMS_DECL, PROFILER_INIT, PROFILER_EVENT_START / _END / _INSTANT)
// compiles against this header unchanged, and the macros compile to nothing unless
// FLASHINFER_ENABLE_PROFILER is defined. The records have FlashInfer's format; what this header adds:
//
//   * PROFILER_EVENT_INSTANT advances the write pointer (FlashInfer's overwrites the instant with the next
//     record), so every instant lands.
//   * A per-lane capacity guard: a lane never writes past its last slot; records that do not fit are counted
//     in the lane's overflow word instead (the writer stores its running drop count there).
//   * The tag's 12-bit block field is masked (block & 0xFFF), so the SM byte is always the true %smid; the
//     true block index is the record's position in the buffer.
//   * One 64-bit %globaltimer read per launch (block 0, thread 0, at PROFILER_INIT): the anchor that lets the
//     decoder unwrap the 32-bit timestamps and place them in Unix time exactly.
//
// Buffer (uint64, little-endian), with lanes = num_blocks * num_groups and C = capacity (records per lane):
//   word 0                         header: num_blocks | num_groups << 32
//   word 1 + k*lanes + lane        record k of lane (block * num_groups + group), k < C
//   word 1 + C*lanes + lane        the lane's overflow count: records dropped because the lane was full
//   word 1 + C*lanes + lanes       the anchor: %globaltimer (Unix-epoch ns) when block 0 ran PROFILER_INIT
// Record: %globaltimer_lo << 32 | tag; tag = smid << 24 | (block & 0xFFF) << 12 | event << 2 | type,
// type 0 begin, 1 end, 2 instant; event is 10 bits.
//
// The capacity is a __constant__ variable, `ktrace_profiler_capacity` (extern "C", so the host finds it by that
// name: cuModuleGetGlobal / pycuda's Module.get_global), set by the host before the launch; ktrace's
// capture does it. Its initial value is KTRACE_PROFILER_CAPACITY (define it when compiling to fix the
// capacity at build time), 0 by default: a launch whose host forgot to set it writes nothing and counts
// every record as overflow, which the decoder reports.
//
// Use: `params.profiler_buffer` is the uint64_t* buffer, zeroed by the host; one writer thread per lane
// (the write_thread_predicate), as with FlashInfer's header.
//
//   struct ProfilerClosure { PROFILER_CLOSURE_PARAMS_DECL };
//   struct Params { PROFILER_PARAMS_DECL /* ... */ };
//   __global__ void k(Params params) {
//     ProfilerClosure closure;
//     PROFILER_INIT(params, smem, closure, /*group*/ 0, /*num_groups*/ 1, threadIdx.x == 0);
//     PROFILER_EVENT_START(closure, 0); /* phase 0 */ PROFILER_EVENT_END(closure, 0);
//   }

#ifndef KTRACE_PROFILER_CUH_
#define KTRACE_PROFILER_CUH_

#ifdef FLASHINFER_PROFILER_CUH_
#error "flashinfer/profiler.cuh is already included: include either it or ktrace/profiler.cuh, not both"
#endif
// Stand in for FlashInfer's header: a later #include <flashinfer/profiler.cuh> is skipped by its guard.
#define FLASHINFER_PROFILER_CUH_

#include <stdint.h>

namespace ktrace {
namespace profiler {

constexpr uint32_t kBegin = 0x0;
constexpr uint32_t kEnd = 0x1;
constexpr uint32_t kInstant = 0x2;
constexpr uint32_t kEventShift = 2;
constexpr uint32_t kBlockShift = 12;
constexpr uint32_t kSmShift = 24;
constexpr uint32_t kEventMask = 0x3FF;
constexpr uint32_t kBlockMask = 0xFFF;

__device__ __forceinline__ uint32_t block_idx() {
  return (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
}
__device__ __forceinline__ uint32_t num_blocks() { return gridDim.x * gridDim.y * gridDim.z; }
__device__ __forceinline__ uint32_t thread_idx() {
  return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ uint32_t smid() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t timer_lo() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint64_t timer() {
  uint64_t r;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(r));
  return r;
}
__device__ __forceinline__ uint32_t tag(uint32_t sm, uint32_t block, uint32_t event, uint32_t type) {
  return (sm << kSmShift) | ((block & kBlockMask) << kBlockShift) | ((event & kEventMask) << kEventShift) | type;
}

// One writer's state, all of it set once at PROFILER_INIT so a probe only reads the timer, stores and
// advances: where its next record goes, the tag's SM and block fields, and a count that says whether the
// lane has room.
struct Lane {
  uint64_t* slot;      // the next record's address; advances by `stride` on every record, stored or not
  uint32_t* overflow;  // low word of this lane's overflow count, in the trailer
  uint32_t stride;     // lanes: distance between a lane's consecutive records
  int32_t ahead;       // records so far minus the capacity: <= 0 while the lane had room for the last one,
                       // else the number dropped
  uint32_t tag_base;   // smid and block fields
  bool writer;         // this thread writes the lane's records
};

}  // namespace profiler
}  // namespace ktrace

#ifdef FLASHINFER_ENABLE_PROFILER

#ifndef KTRACE_PROFILER_CAPACITY
#define KTRACE_PROFILER_CAPACITY 0
#endif
extern "C" {
__constant__ uint32_t ktrace_profiler_capacity = KTRACE_PROFILER_CAPACITY;
}

namespace ktrace {
namespace profiler {

__device__ __forceinline__ void init(Lane& l, uint64_t* buf, uint32_t group, uint32_t ngroups, bool writer) {
  const uint32_t nb = num_blocks(), b = block_idx();
  const uint64_t lanes = (uint64_t)nb * ngroups;
  // Constant memory, not a global load: the first probe's predicate waits for this read, and the
  // constant cache serves every block after the first on an SM (nvcc never folds a __constant__ variable
  // to its initial value: the host may write it between launches). docs/probe-cost.md has the figures.
  uint32_t cap32 = ktrace_profiler_capacity;
  cap32 = cap32 > 0x7FFFFFFFu ? 0x7FFFFFFFu : cap32;  // `ahead` is signed
  const uint64_t cap = cap32;
  const uint64_t lane = (uint64_t)b * ngroups + group;
  if (b == 0 && thread_idx() == 0) {
    buf[0] = (uint64_t)nb | ((uint64_t)ngroups << 32);
    buf[1 + cap * lanes + lanes] = timer();
  }
  l.slot = buf + 1 + lane;
  l.overflow = (uint32_t*)(buf + 1 + cap * lanes + lane);  // little-endian: the word's low half
  l.stride = (uint32_t)lanes;
  l.ahead = -(int32_t)cap32;
  l.tag_base = tag(smid(), b, 0, 0);
  l.writer = writer;
}

// No branch: both stores are predicated, on "writer and room" for the record and "writer and no room" for
// the overflow word, so ptxas emits straight-line code with nothing to reconverge (a branch around the probe
// costs a BSSY/BSYNC pair and the divergence of the writer's warp), and the timer read (one CS2R.32) feeds
// the record's store directly. Written in PTX because nvcc otherwise either branches or moves the timer
// through the uniform datapath (S2UR, a NOP and a move). A full lane stores its running drop count (`ahead`, > 0 there) in its overflow word: one
// writer per lane and a zeroed buffer, so that store is the increment. docs/probe-cost.md has the SASS and
// the measurements against FlashInfer's probe.
__device__ __forceinline__ void record(Lane& l, uint32_t event, uint32_t type) {
  const uint32_t tg = l.tag_base | ((event & kEventMask) << kEventShift) | type;
  l.ahead += 1;
  asm volatile(
      "{\n\t.reg .pred pw, ps, pc;\n\t.reg .b32 t;\n\t"
      "setp.ne.b32 pw, %0, 0;\n\t"
      "setp.le.and.s32 ps, %1, 0, pw;\n\t"
      "setp.gt.and.s32 pc, %1, 0, pw;\n\t"
      "mov.u32 t, %%globaltimer_lo;\n\t"
      "@ps st.global.v2.b32 [%2], {%3, t};\n\t"
      "@pc st.global.b32 [%4], %1;\n\t}"
      :
      : "r"((uint32_t)l.writer), "r"(l.ahead), "l"(l.slot), "r"(tg), "l"(l.overflow)
      : "memory");
  l.slot += l.stride;
}

}  // namespace profiler
}  // namespace ktrace

#define PROFILER_CLOSURE_PARAMS_DECL ::ktrace::profiler::Lane ktrace_lane;
#define PROFILER_CLOSURE_FUNC_PARAMS , ProfilerClosure& profiler_closure
#define PROFILER_FUNC_PARAMS , ffi::Tensor profiler_buffer
#define PROFILER_PARAMS_DECL uint64_t* profiler_buffer;

#define PROFILER_INIT(params, smem_storage, closure, group_idx, num_groups, write_thread_predicate) \
  ::ktrace::profiler::init((closure).ktrace_lane, (params).profiler_buffer, (group_idx), (num_groups), \
                           (write_thread_predicate))

// The block-scope fences keep the timer reads ordered with the phase's work, as FlashInfer's header does:
// after a START's write, before an END's, around an INSTANT's.
#define PROFILER_EVENT_START(closure, event)                                          \
  ::ktrace::profiler::record((closure).ktrace_lane, (uint32_t)(event), ::ktrace::profiler::kBegin); \
  __threadfence_block();

#define PROFILER_EVENT_END(closure, event) \
  __threadfence_block();                   \
  ::ktrace::profiler::record((closure).ktrace_lane, (uint32_t)(event), ::ktrace::profiler::kEnd);

#define PROFILER_EVENT_INSTANT(closure, event)                                                        \
  __threadfence_block();                                                                              \
  ::ktrace::profiler::record((closure).ktrace_lane, (uint32_t)(event), ::ktrace::profiler::kInstant); \
  __threadfence_block();

#else  // FLASHINFER_ENABLE_PROFILER

#define PROFILER_CLOSURE_PARAMS_DECL
#define PROFILER_CLOSURE_FUNC_PARAMS
#define PROFILER_FUNC_PARAMS
#define PROFILER_PARAMS_DECL
#define PROFILER_INIT(params, smem_storage, closure, group_idx, num_groups, write_thread_predicate)
#define PROFILER_EVENT_START(closure, event)
#define PROFILER_EVENT_END(closure, event)
#define PROFILER_EVENT_INSTANT(closure, event)

#endif  // FLASHINFER_ENABLE_PROFILER

// FlashInfer's helper names, for kernels that live in `namespace flashinfer` or say `using namespace
// flashinfer;` (FlashInfer's macros need one or the other).
namespace flashinfer {
__device__ __forceinline__ uint32_t get_block_idx() { return ::ktrace::profiler::block_idx(); }
__device__ __forceinline__ uint32_t get_num_blocks() { return ::ktrace::profiler::num_blocks(); }
__device__ __forceinline__ uint32_t get_thread_idx() { return ::ktrace::profiler::thread_idx(); }
__device__ __forceinline__ uint32_t get_timestamp() { return ::ktrace::profiler::timer_lo(); }
__device__ __forceinline__ uint32_t encode_tag(uint32_t sm_id, uint32_t block_id, uint32_t event_idx,
                                               uint32_t event_type) {
  return ::ktrace::profiler::tag(sm_id, block_id, event_idx, event_type);
}
constexpr uint32_t EVENT_IDX_MASK = ::ktrace::profiler::kEventMask;
constexpr uint32_t BEGIN_END_MASK = 0x3;
constexpr uint32_t EVENT_IDX_SHIFT = ::ktrace::profiler::kEventShift;
constexpr uint32_t BLOCK_GROUP_IDX_SHIFT = ::ktrace::profiler::kBlockShift;
constexpr uint32_t SM_ID_SHIFT = ::ktrace::profiler::kSmShift;
constexpr uint32_t EVENT_BEGIN = ::ktrace::profiler::kBegin;
constexpr uint32_t EVENT_END = ::ktrace::profiler::kEnd;
constexpr uint32_t EVENT_INSTANT = ::ktrace::profiler::kInstant;
}  // namespace flashinfer

#endif  // KTRACE_PROFILER_CUH_
