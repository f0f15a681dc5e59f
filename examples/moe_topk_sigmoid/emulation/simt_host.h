// CUDA's device built-ins for host C++ (g++), so that a kernel's own source runs on the CPU, thread by thread:
// each thread of a block is a fiber (ucontext) on one OS thread, and a warp collective (shuffle, vote, ballot) or
// a block barrier switches fibers until every thread it waits for has arrived. Blocks run one after another, so
// `__shared__` variables are function statics (one copy, reused by the next block).
//
// What it is for: checking a kernel's logic (its selections, shuffles, barriers, index arithmetic) where there is
// no GPU. It says nothing about speed, and the hardware's approximate math (ex2.approx, __fdividef) is the host's
// exact math here, so results can differ from a GPU's in the last bits of a float. Collectives take the full warp
// only (mask 0xffffffff, every thread of the warp alive), as the router kernels use them; anything else is
// refused with a message. Built with -fsanitize=alignment, a load or store off its type's alignment (a 16-byte
// vector at an address the GPU would fault on with "misaligned address", which x86 reads without complaint) fails
// the launch with its source line: see __ubsan_handle_type_mismatch_v1 below.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <ucontext.h>
#include <vector_functions.h>
#include <vector_types.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

// The CUDA headers leave these empty on a host compiler; shared memory becomes one static copy.
#undef __shared__
#define __shared__ static
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif

namespace simt {

struct Dim { unsigned x = 1, y = 1, z = 1; };

enum class Wait { None, Warp, Block, Done };

struct Fiber {
  ucontext_t ctx;
  Dim tid;
  Wait wait = Wait::None;
  long warp_seq = 0;    // warp collectives entered
  long block_seq = 0;   // block barriers entered
};

// One warp's exchange slots, double-buffered by the collective's parity: a lane that has read collective n and
// gone on to write n + 1 cannot overwrite what a slower lane still reads of n (n + 1 completes only once every
// lane has entered it, after reading n).
struct Warp {
  uint64_t value[2][32];
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::vector<std::vector<char>> stacks;
  ucontext_t scheduler;
  const std::function<void()>* body = nullptr;
  std::string error;   // what a thread threw (its fiber's stack has no handler above the body)
};

inline Block& block() {
  static Block b;
  return b;
}
inline Fiber*& current() {
  static Fiber* f = nullptr;
  return f;
}
inline Dim& block_idx() {
  static Dim d;
  return d;
}
inline Dim& block_dim() {
  static Dim d;
  return d;
}
inline Dim& grid_dim() {
  static Dim d;
  return d;
}

[[noreturn]] inline void fail(const std::string& why) { throw std::runtime_error("simt: " + why); }

// Back to the scheduler, which resumes this fiber once what it waits for holds.
inline void yield() {
  Block& b = block();
  swapcontext(&current()->ctx, &b.scheduler);
}

inline int lane() { return (int)(current()->tid.x % 32); }

// This lane's value entered into the warp's next collective; returns the 32 lanes' values once all have.
inline const uint64_t* exchange(uint64_t v, unsigned mask) {
  if (mask != 0xffffffffu) fail("only full-warp collectives are emulated (mask 0xffffffff)");
  Fiber* f = current();
  Warp& w = block().warps[f->tid.x / 32];
  const long seq = ++f->warp_seq;
  w.value[seq & 1][lane()] = v;
  f->wait = Wait::Warp;
  yield();
  return w.value[seq & 1];
}

template <typename V>
uint64_t bits_of(V v) {
  static_assert(sizeof(V) <= 8, "values of 8 bytes at most");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(V));
  return u;
}

template <typename V>
V value_of(uint64_t u) {
  V v;
  std::memcpy(&v, &u, sizeof(V));
  return v;
}

// Whether fiber i may run: its warp's lanes have all entered its collective, or the block's threads its barrier.
inline bool ready(const Block& b, const Fiber& f) {
  switch (f.wait) {
    case Wait::None:
      return true;
    case Wait::Done:
      return false;
    case Wait::Warp: {
      const size_t first = f.tid.x / 32 * 32;
      for (size_t l = first; l < first + 32 && l < b.fibers.size(); ++l) {
        const Fiber& o = b.fibers[l];
        if (o.warp_seq >= f.warp_seq) continue;   // entered it (and may have left the kernel since)
        if (o.wait == Wait::Done) fail("a warp collective waits on a thread that has exited");
        return false;
      }
      return true;
    }
    case Wait::Block:
      for (const Fiber& o : b.fibers) {
        if (o.wait != Wait::Done && o.block_seq < f.block_seq) return false;
      }
      return true;
  }
  return false;
}

inline void fiber_main() {
  Block& b = block();
  try {
    (*b.body)();
  } catch (const std::exception& e) {
    b.error = e.what();
  }
  current()->wait = Wait::Done;   // uc_link returns to the scheduler
}

constexpr size_t kStack = 256 * 1024;

// Runs body as every thread of a grid of `blocks` blocks of `threads` (1-D), block after block.
inline void launch(unsigned blocks, unsigned threads, const std::function<void()>& body) {
  if (threads == 0 || threads % 32 != 0 || threads > 1024) fail("blocks of 32 to 1024 threads, whole warps");
  Block& b = block();
  grid_dim() = Dim{blocks, 1, 1};
  block_dim() = Dim{threads, 1, 1};
  b.body = &body;
  b.error.clear();
  b.stacks.resize(threads);
  for (auto& s : b.stacks) s.resize(kStack);
  for (unsigned blk = 0; blk < blocks; ++blk) {
    block_idx() = Dim{blk, 0, 0};
    b.fibers.assign(threads, Fiber{});
    b.warps.assign(threads / 32, Warp{});
    for (unsigned t = 0; t < threads; ++t) {
      Fiber& f = b.fibers[t];
      f.tid = Dim{t, 0, 0};
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = b.stacks[t].data();
      f.ctx.uc_stack.ss_size = kStack;
      f.ctx.uc_link = &b.scheduler;
      makecontext(&f.ctx, fiber_main, 0);
    }
    unsigned live = threads;
    while (live > 0) {
      bool ran = false;
      for (Fiber& f : b.fibers) {
        if (!ready(b, f)) continue;
        f.wait = Wait::None;
        current() = &f;
        swapcontext(&b.scheduler, &f.ctx);
        current() = nullptr;
        if (!b.error.empty()) throw std::runtime_error(b.error);
        if (f.wait == Wait::Done) --live;
        ran = true;
      }
      if (!ran) fail("deadlock: threads wait on collectives or barriers that others never reach");
    }
  }
}

}  // namespace simt

// GCC's -fsanitize=alignment calls this where an access is off its type's alignment; defined here (hidden, so the
// library's own calls bind to it, not to libubsan's) to fail the launch as the GPU would, naming the type and the
// source line. The layouts are those GCC's instrumentation passes.
namespace simt {
struct SourceLocation {
  const char* file;
  uint32_t line, column;
};
struct TypeDescriptor {
  uint16_t kind, info;
  char name[1];
};
struct TypeMismatchData {
  SourceLocation loc;
  const TypeDescriptor* type;
  unsigned char log_alignment, type_check_kind;
};
}  // namespace simt

extern "C" __attribute__((visibility("hidden"))) void __ubsan_handle_type_mismatch_v1(simt::TypeMismatchData* data,
                                                                                   uintptr_t pointer) {
  const uintptr_t align = (uintptr_t)1 << data->log_alignment;
  if (pointer == 0 || pointer % align == 0) return;
  simt::Block& b = simt::block();
  if (!b.error.empty()) return;
  char why[512];
  std::snprintf(why, sizeof why, "simt: misaligned address: %s at %#lx needs %lu-byte alignment (%s:%u:%u)",
                data->type->name, (unsigned long)pointer, (unsigned long)align, data->loc.file, data->loc.line,
                data->loc.column);
  b.error = why;   // the scheduler fails the launch when the thread yields
}

#define threadIdx (::simt::current()->tid)
#define blockIdx (::simt::block_idx())
#define blockDim (::simt::block_dim())
#define gridDim (::simt::grid_dim())

// Warp collectives.
template <typename V>
inline V __shfl_sync(unsigned mask, V v, int src, int width = 32) {
  const uint64_t* all = simt::exchange(simt::bits_of(v), mask);
  const int l = simt::lane();
  return simt::value_of<V>(all[(l & ~(width - 1)) + (src & (width - 1))]);
}

template <typename V>
inline V __shfl_xor_sync(unsigned mask, V v, int lane_mask, int width = 32) {
  const uint64_t* all = simt::exchange(simt::bits_of(v), mask);
  const int l = simt::lane(), src = l ^ lane_mask;
  // A source in a later segment of `width` lanes gives the lane its own value (CUDA's rule).
  return simt::value_of<V>(src >= (l & ~(width - 1)) + width ? all[l] : all[src]);
}

template <typename V>
inline V __shfl_up_sync(unsigned mask, V v, unsigned delta, int width = 32) {
  const uint64_t* all = simt::exchange(simt::bits_of(v), mask);
  const int l = simt::lane(), first = l & ~(width - 1);
  return simt::value_of<V>(l - (int)delta >= first ? all[l - delta] : all[l]);
}

template <typename V>
inline V __shfl_down_sync(unsigned mask, V v, unsigned delta, int width = 32) {
  const uint64_t* all = simt::exchange(simt::bits_of(v), mask);
  const int l = simt::lane(), end = (l & ~(width - 1)) + width;
  return simt::value_of<V>(l + (int)delta < end ? all[l + delta] : all[l]);
}

inline unsigned __ballot_sync(unsigned mask, int pred) {
  const uint64_t* all = simt::exchange(pred != 0, mask);
  unsigned out = 0;
  for (int l = 0; l < 32; ++l) out |= (all[l] ? 1u : 0u) << l;
  return out;
}
// The warp's largest or smallest value (REDUX): signed for int, unsigned for unsigned, as CUDA's overloads.
template <typename V, bool MAX>
inline V warp_extreme(unsigned mask, V v) {
  const uint64_t* all = simt::exchange(simt::bits_of(v), mask);
  V out = v;
  for (int l = 0; l < 32; ++l) {
    const V o = simt::value_of<V>(all[l]);
    out = MAX ? std::max(out, o) : std::min(out, o);
  }
  return out;
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) { return warp_extreme<unsigned, true>(mask, v); }
inline int __reduce_max_sync(unsigned mask, int v) { return warp_extreme<int, true>(mask, v); }
inline unsigned __reduce_min_sync(unsigned mask, unsigned v) { return warp_extreme<unsigned, false>(mask, v); }
inline int __reduce_min_sync(unsigned mask, int v) { return warp_extreme<int, false>(mask, v); }
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == 0xffffffffu; }
inline void __syncwarp(unsigned mask = 0xffffffffu) { simt::exchange(0, mask); }

inline void __syncthreads() {
  simt::Fiber* f = simt::current();
  ++f->block_seq;
  f->wait = simt::Wait::Block;
  simt::yield();
}

// Loads and bit casts.
template <typename V>
inline V __ldg(const V* p) { return *p; }
inline unsigned __float_as_uint(float f) { return simt::value_of<unsigned>(simt::bits_of(f)); }
inline float __uint_as_float(unsigned u) { return simt::value_of<float>(simt::bits_of(u)); }
inline int __float_as_int(float f) { return simt::value_of<int>(simt::bits_of(f)); }
inline float __int_as_float(int i) { return simt::value_of<float>(simt::bits_of(i)); }

// Integer intrinsics, as the PTX manual defines them.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t both = ((uint64_t)y << 32) | x;
  unsigned out = 0;
  for (int i = 0; i < 4; ++i) out |= (unsigned)((both >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return out;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __ffs(int x) { return x ? __builtin_ctz((unsigned)x) + 1 : 0; }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline unsigned __vmaxu2(unsigned a, unsigned b) {
  const unsigned lo = std::max(a & 0xffffu, b & 0xffffu), hi = std::max(a >> 16, b >> 16);
  return (hi << 16) | lo;
}
inline unsigned __vminu2(unsigned a, unsigned b) {
  const unsigned lo = std::min(a & 0xffffu, b & 0xffffu), hi = std::min(a >> 16, b >> 16);
  return (hi << 16) | lo;
}
inline unsigned __vmaxs2(unsigned a, unsigned b) {
  const int lo = std::max((int)(int16_t)(a & 0xffffu), (int)(int16_t)(b & 0xffffu));
  const int hi = std::max((int)(int16_t)(a >> 16), (int)(int16_t)(b >> 16));
  return ((unsigned)(uint16_t)hi << 16) | (uint16_t)lo;
}
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }

// Float intrinsics: the host's exact math where the GPU's is approximate.
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline int __float2int_rz(float x) { return (int)x; }
inline unsigned __float2uint_rz(float x) { return (unsigned)x; }

// CUDA's min and max overloads (mixed signedness compares as unsigned, as CUDA's do).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
