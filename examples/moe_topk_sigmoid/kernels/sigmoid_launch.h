// The host side of the sigmoid kernels (topk_sigmoid_warp.cu, topk_sigmoid_keys.cu, topk_sigmoid_sort.cu): which
// kernel an algorithm number names (topk_sigmoid_cuda.ALGOS), its grid and its launch. Included after the kernel
// files inside a namespace that defines
//   T                                                 the logits' type
//   sm_count()                                        the device's SMs
//   resident_blocks<KERNEL>(threads)                  blocks of `threads` of KERNEL that fit on one SM at once
//   MOE_LAUNCH(kernel, blocks, threads, stream, ...)  a launch of `kernel` on `blocks` blocks of `threads`
//   MOE_FAIL(message)                                 the call refused
// by topk_sigmoid_cuda.py's units (CUDA launches) and by the CPU emulation (emulation/router_host.cpp), so that
// both launch alike.

struct SigmoidArgs {
  const T* x;
  const float* bias;   // null without a bias
  float* w;
  int* ids;
  int tokens;
};

// The sorting-network kernel at PT experts a thread (pruned or not): E / PT threads a token, blocks of 128.
template <int E, int NK, bool B, int PT, bool PRUNE = false>
void launch_sort(const SigmoidArgs& a, cudaStream_t stream) {
  constexpr auto kernel = moe::topk_sigmoid_sort<T, E, NK, PT, B, PRUNE>;
  const int blocks = (int)(((int64_t)a.tokens * (E / PT) + 127) / 128);
  MOE_LAUNCH(kernel, blocks, 128, stream, a.x, B ? a.bias : nullptr, a.w, a.ids, a.tokens);
}

template <int E, int NK, bool B>
void launch_sigmoid(int algo, int blocks_per_sm, const SigmoidArgs& a, cudaStream_t stream) {
  const int tokens = a.tokens;
  if (tokens == 0) return;
  const float* bp = B ? a.bias : nullptr;
  switch (algo) {   // sorting networks: algo 3 to 9's experts a thread (6, 7, 8 pruned)
    case 3: return launch_sort<E, NK, B, 16>(a, stream);
    case 4: return launch_sort<E, NK, B, 32>(a, stream);
    case 5: return launch_sort<E, NK, B, 64>(a, stream);
    case 6: return launch_sort<E, NK, B, 16, true>(a, stream);
    case 7: return launch_sort<E, NK, B, 32, true>(a, stream);
    case 8: return launch_sort<E, NK, B, 64, true>(a, stream);
    case 9: return launch_sort<E, NK, B, 8>(a, stream);
  }
  if (algo == 0) {          // one token per warp, 8 warps per block
    constexpr auto kernel = moe::topk_sigmoid_warp<T, E, NK, B>;
    MOE_LAUNCH(kernel, (tokens + 7) / 8, 256, stream, a.x, bp, a.w, a.ids, tokens);
  } else {                  // E/8 or E/16 lanes per token, 4 warps per block
    // A block's pass covers per_pass tokens; `passes` of them share one tail (the writes), as many as the kernel
    // allows while the grid still has eight blocks per SM to give out (fewer warps hid less of the latency at
    // 8,192 tokens on the H200).
    constexpr int per_pass = moe::tokens_per_pass<T, E, NK, B>();
    const int sms = sm_count();
    int passes = moe::max_passes<T, E, NK, B>();
    while (passes > 1 && (tokens + per_pass * passes - 1) / (per_pass * passes) < 8 * sms) passes /= 2;
    int blocks = (tokens + per_pass * passes - 1) / (per_pass * passes);
    constexpr auto kernel = moe::topk_sigmoid_keys<T, E, NK, B>;
    if (algo == 2) {        // at most as many blocks as fit on the GPU at once
      blocks = std::min(blocks, std::min(blocks_per_sm, resident_blocks<kernel>(32 * moe::WARPS_PER_BLOCK)) * sms);
    }
    MOE_LAUNCH(kernel, blocks, 32 * moe::WARPS_PER_BLOCK, stream, a.x, bp, a.w, a.ids, tokens, passes);
  }
}

template <int E, int NK>
void sigmoid_by_bias(int algo, int bps, bool b, const SigmoidArgs& a, cudaStream_t stream) {
  return b ? launch_sigmoid<E, NK, true>(algo, bps, a, stream) : launch_sigmoid<E, NK, false>(algo, bps, a, stream);
}

template <int E>
void sigmoid_by_k(int algo, int bps, int k, bool b, const SigmoidArgs& a, cudaStream_t stream) {
  if (k == 4) return sigmoid_by_bias<E, 4>(algo, bps, b, a, stream);
  if (k == 8) return sigmoid_by_bias<E, 8>(algo, bps, b, a, stream);
  MOE_FAIL("k must be 4 or 8");
}

// Routes a call: algorithm `algo` (topk_sigmoid_cuda.ALGOS), `bps` blocks per SM at most for the persistent grid.
inline void dispatch_sigmoid(int algo, int bps, int experts, int k, bool b, const SigmoidArgs& a,
                             cudaStream_t stream) {
  switch (experts) {
    case 64: return sigmoid_by_k<64>(algo, bps, k, b, a, stream);
    case 128: return sigmoid_by_k<128>(algo, bps, k, b, a, stream);
    case 256: return sigmoid_by_k<256>(algo, bps, k, b, a, stream);
    default: MOE_FAIL("experts must be 64, 128 or 256");
  }
}
