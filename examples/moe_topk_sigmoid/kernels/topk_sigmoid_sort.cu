// MoE top-k sigmoid routing for NVIDIA sm_80+ by sorting networks in each thread: EXPERTS / PT threads per token
// (consecutive lanes), PT experts per thread (8, 16, 32 or 64; topk_sigmoid_cuda.py picks by shape), fp32, fp16 or
// bf16 logits, with or without a bias. A thread loads its PT logits at once (16-byte vectors, its token's lanes taking
// neighbouring ones), makes one 32-bit key per expert (the logit's bits, then 255 - expert: equal logits, the lower
// expert first; fp32, the bits above the token's largest logit's less 2^(32 - log2(experts)) - 1, then the expert, in
// the pruned kernel the top 24 bits, exact where the merges' best key left out shows no tie at the k-th, else once
// more on the bits above the k-th's top 24 bits; with a bias the packed-key kernel's keys of the score moved into
// [1, 4), each expert's shift read from a table its warp makes once in shared memory; 64-bit exact keys where those
// are not exact) and keeps its best K keys sorted: each vector's
// eight keys are sorted by a network (19 compare-exchanges at k 8; two networks of four at k 4) and merged into the
// list by the bitonic top-k merge (the larger of the list and the reversed chunk, then a bitonic sorter). The token's
// lanes merge their lists through xor shuffles, and its first lanes (up to K) write the weights and ids, each its share
// (each weight from its key where the key holds the logit's bits, else from the chosen logit read again; with a bias
// divided by their sum). The selection is integer min and max alone (VIMNMX): no REDUX (but two per warp for the
// bias's range), no rounds, no shared memory but the bias's shifts (and, in the pruned kernel with a bias, the
// chunks' keys). Without a bias, where a token has fewer than K positive logits (the signed keys order only those
// exactly) the warp selects again on exact keys (the 16-bit order keys), the row loaded again.
//
// Analysis build: nvcc -arch=sm_90 -O3 -cubin -DMOE_SORT -DMOE_EXPERTS=128 -DMOE_K=8 -DMOE_PT=64 -DMOE_DTYPE=__nv_bfloat16 topk_sigmoid_sort.cu
#ifndef MOE_TOPK_SIGMOID_SORT_CU
#define MOE_TOPK_SIGMOID_SORT_CU
#include "topk_sigmoid_keys.cu"

namespace moe {

// The largest of a chunk's eight keys.
template <typename Key>
__device__ inline Key chunk_max(const Key (&keys)[8]) {
  return max(max(max(keys[0], keys[1]), max(keys[2], keys[3])), max(max(keys[4], keys[5]), max(keys[6], keys[7])));
}

// best_keys over only the chunks that can hold a token's best K keys: the K chunks whose largest keys are the
// token's K largest chunk maxima. (A key of the best K lies in a chunk whose maximum is at least that key; were
// K other chunks' maxima above that maximum, K keys would be above it.) maximum_of(v) gives this lane's chunk v's
// maximum (first expert (v * TPT + t) * 8), or any key that orders the chunks as their maxima do and whose low
// byte is 255 less an expert of the chunk; the token's best K of those are selected as its keys are, into every
// lane; lane t then takes the chunks of the maxima t, t + TPT, ..., chunk_keys(key, keys) making the keys of the
// chunk that holds the expert of `key`'s low byte, and the lists are merged once more. With TRACK, `below` is the
// token's best key left out: the larger of the best left out of the chunks taken and the (K + 1)-th maximum.
template <typename Key, int K, int TPT, int CHUNKS, bool TRACK = false, typename MaximumOf, typename ChunkKeys>
__device__ inline void best_keys_pruned(int t, MaximumOf maximum_of, ChunkKeys chunk_keys, Key (&top)[K],
                                        Key& below) {
  Key maxima[CHUNKS];
#pragma unroll
  for (int v = 0; v < CHUNKS; ++v) maxima[v] = maximum_of(v);
  Key best[K];   // the token's best K chunk maxima (padding with the least key folds away)
  Key below_maxima;
  best_keys<Key, K, TPT, (CHUNKS + 7) / 8, TRACK>([&](int g, Key (&keys)[8]) {
#pragma unroll
    for (int j = 0; j < 8; ++j) keys[j] = g * 8 + j < CHUNKS ? maxima[g * 8 + j] : least_key<Key>();
  }, best, below_maxima);
  __syncwarp();   // chunks kept in shared memory by maximum_of are seen by the token's other lanes
  best_keys<Key, K, TPT, (K + TPT - 1) / TPT, TRACK>([&](int j, Key (&keys)[8]) {
    Key pick = best[j * TPT];
#pragma unroll
    for (int s = 1; s < TPT; ++s) {
      if (j * TPT + s < K && t == s) pick = best[j * TPT + s];
    }
    chunk_keys(pick, keys);
    if (j * TPT + t >= K) {   // no chunk left for this lane
#pragma unroll
      for (int i = 0; i < 8; ++i) keys[i] = least_key<Key>();
    }
  }, top, below);
  if constexpr (TRACK) below = max(below, below_maxima);
}

// The first expert of the chunk of 8 that holds the expert of a key's low byte (255 - expert).
template <typename Key>
__device__ inline unsigned chunk_of(Key key) {
  return (255u - ((unsigned)key & 0xffu)) & ~7u;
}

// The best K exact 64-bit keys (the value's order key, then 255 - expert) of the values values_of(v, x) gives for
// this lane's chunk v, whose first expert is first(v); into `top`, their low words (the index byte the tail reads).
template <int K, int TPT, int CHUNKS, typename ValuesOf, typename First>
__device__ inline void best_exact(ValuesOf values_of, First first, unsigned (&top)[K]) {
  unsigned long long top64[K];
  best_keys<unsigned long long, K, TPT, CHUNKS>([&](int v, unsigned long long (&keys)[8]) {
    float x[8];
    values_of(v, x);
#pragma unroll
    for (int j = 0; j < 8; ++j) keys[j] = exact_key(x[j], first(v) + j);
  }, top64);
#pragma unroll
  for (int j = 0; j < K; ++j) top[j] = (unsigned)top64[j];
}

// The weights and ids of a token's best K keys (every lane of the token holds them), shared by its first L lanes
// (L divides K; t is the lane's place in its token): lane t's share is keys (t % L) * J ... + J - 1 (J = K / L),
// its weights and ids written as one vector each. chosen(key, e) gives a key's expert (into e) and the sigmoid of
// its logit, which it rebuilds from the key's bits or reads again. With a bias the weights are divided by their sum
// (over the L lanes by xor shuffles, every lane of the warp taking part). `write` says whether this lane's token is
// one to store.
template <int K, int L, bool HAS_BIAS, typename Key, typename Chosen>
__device__ inline void write_token(const Key (&top)[K], Chosen chosen, int t, bool write, float* __restrict__ wrow,
                                   int* __restrict__ irow) {
  static_assert(L >= 1 && K % L == 0, "L lanes share K weights evenly");
  constexpr int J = K / L;
  constexpr bool EVERY_LANE = HAS_BIAS && L > 1;   // the sum's shuffles need every lane
  if (!EVERY_LANE && !(write && t < L)) return;
  const int share = t % L;
  float w[J];
  int e[J];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < J; ++i) {
    Key pick = top[i];
#pragma unroll
    for (int s = 1; s < L; ++s) {
      if (share == s) pick = top[s * J + i];
    }
    // The key through an opaque move: without it nvcc 13's cicc crashes (segmentation fault) on some builds of
    // this kernel, alone or beside the packed-key one.
    const unsigned key = opaque((unsigned)pick);
    w[i] = chosen(key, e[i]);
    sum += w[i];
  }
  if constexpr (HAS_BIAS) {
#pragma unroll
    for (int d = 1; d < L; d *= 2) sum += __shfl_xor_sync(FULL, sum, d);
  }
  if (!write || t >= L) return;
  const float scale = HAS_BIAS ? 1.0f / sum : 1.0f;
#pragma unroll
  for (int i = 0; i < J; ++i) w[i] *= scale;
  store_vector<J>(wrow + share * J, w);
  store_vector<J>(irow + share * J, e);
}

template <typename T, int EXPERTS, int K, int PT, bool HAS_BIAS, bool PRUNE = false>
__global__ __launch_bounds__(128, 8) void topk_sigmoid_sort(const T* __restrict__ logits, const float* __restrict__ bias,
                                                          float* __restrict__ weights, int* __restrict__ ids, int tokens) {
  static_assert(K == 4 || K == 8, "K must be 4 or 8");
  static_assert(PT % 8 == 0 && EXPERTS % PT == 0 && EXPERTS / PT <= 32, "PT: a multiple of 8 dividing EXPERTS");
  constexpr int TPT = EXPERTS / PT;            // threads per token
  constexpr int CHUNKS = PT / 8;               // chunks of 8 experts per thread
  constexpr int CV = 8 * (int)sizeof(T) / 16;  // 16-byte vectors per chunk (1, or 2 for fp32)
  const int t = threadIdx.x % TPT;
  const int token = (blockIdx.x * blockDim.x + threadIdx.x) / TPT;
  const bool live = token < tokens;
  // A thread's chunks are v * TPT + t of the row (neighbouring lanes, neighbouring bytes); threads past the last
  // token read its row and write nothing (the shuffles need every lane).
  const T* row = logits + (size_t)(live ? token : tokens - 1) * EXPERTS;
  const uint4* vec = reinterpret_cast<const uint4*>(row) + t * CV;
  uint4 raw[CHUNKS * CV];
#pragma unroll
  for (int v = 0; v < CHUNKS; ++v) {
#pragma unroll
    for (int c = 0; c < CV; ++c) raw[v * CV + c] = __ldg(vec + v * TPT * CV + c);
  }
  const auto first = [&](int v) { return (v * TPT + t) * 8; };   // the first expert of this lane's chunk v
  const auto index_byte = [&](int v) { return 255u - 8u * (unsigned)(v * TPT + t); };   // first(v)'s, 255 - it
  unsigned top[K];
  bool exact = false;
  // fp32 logits without a bias, unpruned: log2(EXPERTS) and the token's B (below), which the tail rebuilds the
  // chosen logits from.
  constexpr int IB = EXPERTS == 64 ? 6 : EXPERTS == 128 ? 7 : 8;
  int b0 = 0;
  if constexpr (!HAS_BIAS && sizeof(T) == 4) {
    // fp32, pruned: signed keys of the logit's top 24 bits, then the index byte; they order the positive logits
    // exactly where no two of a token's best K share those bits and the best key left out (tracked through the
    // merges) does not share the K-th one's. Otherwise the warp selects again, on 32-bit keys of the bits above
    // the K-th's top 24 or, where a token has fewer than K positive logits, on 64-bit exact keys (the order key,
    // then the index). Unpruned: exact 32-bit keys the first time (below).
    const auto floats_of = [&](int v, float (&x)[8]) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        x[4 * c] = __uint_as_float(raw[2 * v + c].x);
        x[4 * c + 1] = __uint_as_float(raw[2 * v + c].y);
        x[4 * c + 2] = __uint_as_float(raw[2 * v + c].z);
        x[4 * c + 3] = __uint_as_float(raw[2 * v + c].w);
      }
    };
    if constexpr (PRUNE) {
      int next;   // the best key left out
      // A chunk's largest logit bits (signed, as the keys order them) cut to 24, then its index byte; the chunks
      // of the best K read again (from L1) and selected.
      best_keys_pruned<int, K, TPT, CHUNKS, true>(t, [&](int v) {
        const uint4 a = raw[2 * v], b = raw[2 * v + 1];
        const int m = max(max(max((int)a.x, (int)a.y), max((int)a.z, (int)a.w)),
                          max(max((int)b.x, (int)b.y), max((int)b.z, (int)b.w)));
        return (int)(((unsigned)m & 0xffffff00u) | (255u - 8u * (unsigned)(v * TPT + t)));
      }, [&](int key, int (&keys)[8]) {
        const unsigned first = chunk_of(key);
        const uint4* q = reinterpret_cast<const uint4*>(row + first);
        const uint4 a = __ldg(q), b = __ldg(q + 1);
        const unsigned w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int j = 0; j < 8; ++j) keys[j] = top24_key(__uint_as_float(w[j]), 255u - first - (unsigned)j);
      }, reinterpret_cast<int(&)[K]>(top), next);
      bool alike = (int)top[K - 1] < 0x100 || (top[K - 1] >> 8) == ((unsigned)next >> 8);   // not positive, or a tie
#pragma unroll
      for (int j = 0; j + 1 < K; ++j) alike |= (top[j] >> 8) == (top[j + 1] >> 8);
      exact = __any_sync(FULL, alike);
      if (exact) {
        // Where the token's best K are positive and span less than 2^24 steps of the fp32 bits from the K-th's top
        // 24 bits (base) to the largest's, keys of the bits above base (plus one) and the index byte order every
        // logit of at least base exactly, and the best K have at least base's bits; logits below it get key 0.
        const unsigned base = top[K - 1] & 0xffffff00u, span = (top[0] | 0xffu) - base;
        const bool narrow = (int)top[K - 1] >= 0x100 && span < 0xffffffu;
        if (__all_sync(FULL, narrow)) {
          best_keys<unsigned, K, TPT, CHUNKS>([&](int v, unsigned (&keys)[8]) {
            float x[8];
            floats_of(v, x);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const int b = __float_as_int(x[j]);
              keys[j] = b >= (int)base ? (((unsigned)b - base + 1u) << 8) | (index_byte(v) - j) : 0u;
            }
          }, top);
        } else {
          best_exact<K, TPT, CHUNKS>(floats_of, first, top);
        }
      }
    } else {
      // Exact 32-bit keys the first time: a logit's bits above B, the token's largest logit's bits less 2^S - 1
      // (S = 32 - IB, IB = log2(EXPERTS)), in the top S bits, then EXPERTS - 1 - expert in the low IB; a logit at
      // or below B gets key 0. Exact wherever the largest logit's bits are 2^S or more (every negative logit is then
      // below B) and the token's K-th logit is above B (within 2^(S - 23) binades of the largest: 8, 4 or 2);
      // otherwise the warp selects again on 64-bit exact keys. No tie can make them wrong, so no second selection
      // for ties (at 8,192 tokens the last warp to take one ended the kernel).
      constexpr int SPAN = (int)((1u << (32 - IB)) - 1u);
      int m = least_key<int>();
#pragma unroll
      for (int c = 0; c < CHUNKS * CV; ++c) {
        m = max(m, max(max((int)raw[c].x, (int)raw[c].y), max((int)raw[c].z, (int)raw[c].w)));
      }
#pragma unroll
      for (int d = 1; d < TPT; d *= 2) m = max(m, __shfl_xor_sync(FULL, m, d));
      b0 = m - SPAN;   // B; the largest logit's key is SPAN << IB
      exact = !__all_sync(FULL, b0 >= 0);
      if (!exact) {
        best_keys<unsigned, K, TPT, CHUNKS>([&](int v, unsigned (&keys)[8]) {
          float x[8];
          floats_of(v, x);
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const int b = __float_as_int(x[j]);   // compared before the difference: b - b0 overflows for b < 0
            keys[j] = b > b0 ? ((unsigned)(b - b0) << IB) | (index_byte(v) - (256u - EXPERTS) - j) : 0u;
          }
        }, top);
        exact = __any_sync(FULL, top[K - 1] < (1u << IB));   // fewer than K logits above B
      }
      if (exact) best_exact<K, TPT, CHUNKS>(floats_of, first, top);
    }
  } else if constexpr (!HAS_BIAS) {
    // Index bytes of chunk v's experts: one base, less a constant per chunk.
    const unsigned base = (255u - 8u * (unsigned)t) * 0x01010101u;
    const auto words_of = [&](int v, unsigned (&w)[4], unsigned (&idx)[2]) {
      w[0] = raw[v].x; w[1] = raw[v].y; w[2] = raw[v].z; w[3] = raw[v].w;
      const unsigned b = base - 8u * TPT * v * 0x01010101u;
      idx[0] = b - 0x03020100u;
      idx[1] = b - 0x07060504u;
    };
    const auto keys_of = [&](int v, int (&keys)[8]) {
      unsigned w[4], idx[2];
      words_of(v, w, idx);
      keys_of_words(w, idx, reinterpret_cast<unsigned(&)[8]>(keys));
    };
    if constexpr (PRUNE) {
      // A chunk's largest 16-bit value by halves (VIMNMX.S16x2 as the signed keys order them), then its index
      // byte twice; the chunks of the best K read again (from L1) and selected.
      int below;
      best_keys_pruned<int, K, TPT, CHUNKS>(t, [&](int v) {
        const uint4 q = raw[v];
        const unsigned m4 = __vmaxs2(__vmaxs2(q.x, q.y), __vmaxs2(q.z, q.w));
        const unsigned m = __vmaxs2(m4, __byte_perm(m4, 0, 0x1032));
        return (int)__byte_perm(m, 255u - 8u * (unsigned)(v * TPT + t), 0x3244);
      }, [&](int key, int (&keys)[8]) {
        const unsigned first = chunk_of(key);
        const uint4 q = __ldg(reinterpret_cast<const uint4*>(row + first));
        const unsigned w[4] = {q.x, q.y, q.z, q.w};
        const unsigned b = (255u - first) * 0x01010101u;
        const unsigned idx[2] = {b - 0x03020100u, b - 0x07060504u};
        keys_of_words(w, idx, reinterpret_cast<unsigned(&)[8]>(keys));
      }, reinterpret_cast<int(&)[K]>(top), below);
    } else {
      best_keys<int, K, TPT, CHUNKS>(keys_of, reinterpret_cast<int(&)[K]>(top));
    }
    // Exact where every token's K-th key is a positive logit's; otherwise the warp selects again on exact keys,
    // the row loaded again (volatile loads: the compiler would keep the first ones' PT / 2 registers all along).
    exact = __any_sync(FULL, (int)top[K - 1] < POSITIVE_KEY);
    if (exact) {
#pragma unroll
      for (int v = 0; v < CHUNKS; ++v) {
#ifdef __CUDA_ARCH__
        asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(raw[v].x), "=r"(raw[v].y), "=r"(raw[v].z), "=r"(raw[v].w) : "l"(vec + v * TPT));
#else   // host C++ (emulation/simt_host.h)
        const volatile unsigned* at = reinterpret_cast<const volatile unsigned*>(vec + v * TPT);
        raw[v] = make_uint4(at[0], at[1], at[2], at[3]);
#endif
      }
      best_keys<unsigned, K, TPT, CHUNKS>([&](int v, unsigned (&keys)[8]) {
        unsigned w[4], idx[2];
        words_of(v, w, idx);
        keys_of_halves(w, idx, keys);
      }, top);
    }
  } else {
    // The bias's least value and span, over the warp (lane l holds experts (l % (EXPERTS / 8)) * 8 ...).
    float lo;
    bool wide;
    // Each expert's shift (1 - lo + bias) made once per warp, into the warp's table in shared memory.
    __shared__ float4 shift_table[128 / 32][EXPERTS / 4];
    float4* const shifts = shift_table[threadIdx.x / 32];
    {
      const int lane = threadIdx.x % 32, chunk = lane % (EXPERTS / 8);
      float b[8];
      load_row<float, 8>(bias + chunk * 8, b);
      wide = bias_low<8>(b, lo);
      if (lane < EXPERTS / 8) {
        shifts[2 * chunk] = make_float4(bias_shift(b[0], lo), bias_shift(b[1], lo), bias_shift(b[2], lo),
                                        bias_shift(b[3], lo));
        shifts[2 * chunk + 1] = make_float4(bias_shift(b[4], lo), bias_shift(b[5], lo), bias_shift(b[6], lo),
                                            bias_shift(b[7], lo));
      }
      __syncwarp();
    }
    // Chunk v's logits and shifted scores (sigmoid plus 1 - lo + bias, in [1, 4) where the bias is narrow).
    const auto scores_of = [&](int v, float (&s)[8]) {
      const T* x = reinterpret_cast<const T*>(&raw[v * CV]);
      const float4 a = shifts[first(v) / 4], c = shifts[first(v) / 4 + 1];
      const float shift[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) s[j] = sigmoid(to_float<T>(x[j])) + shift[j];
    };
    if (!wide) {   // 32-bit keys: the score's bits less 1.0's, then the index byte
      const auto keys_of = [&](int v, unsigned (&keys)[8]) {
        float s[8];
        scores_of(v, s);
#pragma unroll
        for (int j = 0; j < 8; ++j) keys[j] = biased_key(s[j], index_byte(v) - j);
      };
      if constexpr (PRUNE) {
        // Every chunk's keys kept in shared memory (16-byte halves, thread by thread: no bank conflicts on the
        // way in), its maximum taken; the chunks of the best K read back from the lanes that made them.
        __shared__ uint4 stash[2 * CHUNKS][128];
        const int me = threadIdx.x, lane0 = me - t;
        unsigned below;
        best_keys_pruned<unsigned, K, TPT, CHUNKS>(t, [&](int v) {
          unsigned keys[8];
          keys_of(v, keys);
          stash[2 * v][me] = make_uint4(keys[0], keys[1], keys[2], keys[3]);
          stash[2 * v + 1][me] = make_uint4(keys[4], keys[5], keys[6], keys[7]);
          return chunk_max(keys);
        }, [&](unsigned key, unsigned (&keys)[8]) {
          const unsigned c = chunk_of(key) / 8;   // the token's chunk c: lane c % TPT's chunk c / TPT
          const int v = (int)(c / TPT), from = lane0 + (int)(c % TPT);
          const uint4 a = stash[2 * v][from], b = stash[2 * v + 1][from];
          keys[0] = a.x; keys[1] = a.y; keys[2] = a.z; keys[3] = a.w;
          keys[4] = b.x; keys[5] = b.y; keys[6] = b.z; keys[7] = b.w;
        }, top, below);
      } else {
        best_keys<unsigned, K, TPT, CHUNKS>(keys_of, top);
      }
    } else {       // 64-bit keys, exact: the score's order key, then the index
      best_exact<K, TPT, CHUNKS>(scores_of, first, top);
    }
  }
  // The lanes that write a token's weights: min(TPT, K), the first lane's MUFU work for K sigmoids divided among
  // them; but one with a bias where TPT > K (there sharing the work was no faster than leaving it to the first
  // lane, and slower at 8,192 tokens: results/moe_variants_tail.json), and at most four in the pruned kernel with
  // fp32 logits (at its 64 registers eight spill 16 bytes: 256 experts, k 8, 32 experts per thread).
  constexpr int FIT = TPT < K ? TPT : K;
  constexpr int CAP = PRUNE && sizeof(T) == 4 ? 4 : K;
  constexpr int TAIL_LANES = HAS_BIAS && TPT > K ? 1 : FIT < CAP ? FIT : CAP;
  // A chosen key's expert and the sigmoid of its logit: without a bias, the logit rebuilt from the key (16-bit
  // logits: the bits above the index byte, or the order key's where `exact`; fp32, unpruned, on the exact 32-bit
  // keys: B plus the bits above the expert's); otherwise the logit read again.
  const auto chosen = [&](unsigned key, int& e) -> float {
    e = 255 - (int)(key & 0xffu);
    if constexpr (!HAS_BIAS && sizeof(T) == 2) {
      const unsigned h = key >> 16;
      return sigmoid(from_bits<T>(exact ? bits_of_order16(h) : h));
    } else if constexpr (!HAS_BIAS && !PRUNE) {   // fp32
      if (!exact) {
        e = EXPERTS - 1 - (int)(key & (EXPERTS - 1u));
        return sigmoid(__int_as_float(b0 + (int)(key >> IB)));
      }
    }
    return sigmoid(to_float<T>(row[e]));
  };
  write_token<K, TAIL_LANES, HAS_BIAS>(top, chosen, t, live, weights + (size_t)token * K, ids + (size_t)token * K);
}

}  // namespace moe

#ifdef MOE_SORT   // one instantiation for `kpilot isa analyze` (-D MOE_SORT, MOE_EXPERTS, MOE_K, MOE_PT, MOE_BIAS, MOE_PRUNE,
                 // MOE_DTYPE)
#ifndef MOE_PRUNE
#define MOE_PRUNE 0
#endif
template __global__ void moe::topk_sigmoid_sort<MOE_DTYPE, MOE_EXPERTS, MOE_K, MOE_PT, (bool)MOE_BIAS, (bool)MOE_PRUNE>(
    const MOE_DTYPE*, const float*, float*, int*, int);
#endif
#endif  // MOE_TOPK_SIGMOID_SORT_CU
