// The router's host side: which kernel of topk_router.cu a call takes and at which shape (moe::merge_shape,
// moe::router_shape), its grid, and its launch. Included after topk_router.cu inside a namespace that defines
//   T, ROUTER                                         the unit's logit type and router (moe::Router)
//   resident_blocks(kernel)                           blocks of moe::kRouterThreads threads of `kernel` that fit on
//                                                     the GPU at once
//   MOE_LAUNCH(kernel, blocks, threads, stream, ...)  a launch of `kernel` on `blocks` blocks of `threads`
//   MOE_FAIL(message)                                 the call refused
// by routing_cuda.py's units (CUDA launches) and by the CPU emulation (emulation/router_host.cpp: the same
// kernels run as host code), so that both dispatch alike.

struct Args {
  const T* x;
  const float* bias;
  float* w;
  int* ids;
  int tokens, experts, k, renormalize, n_group, topk_group;
};

// The grid for KERNEL at W lanes a token: as many blocks as the tokens need; with a bias at most as many as fit
// on the device at once (the kernel's warps stride over the tokens, so that the bias's work is done once per
// block; the occupancy is looked up once per kernel). Without a bias there is no such work to share, and every
// warp takes its tokens once.
template <auto KERNEL, int W>
int grid_blocks(const Args& a) {
  const int blocks = (int)(((int64_t)a.tokens * W + moe::kRouterThreads - 1) / moe::kRouterThreads);
  if constexpr (ROUTER == moe::BIASED || ROUTER == moe::GROUPED) {
    static const int fit = resident_blocks(KERNEL);
    return std::min(blocks, fit);
  } else {
    return blocks;
  }
}

// The rounds kernel at (W, P), its rows' 16-byte loads where the lanes cover the experts exactly.
template <int W, int P>
void launch(const Args& a, cudaStream_t stream) {
  constexpr auto kernel = moe::topk_router<T, W, P, ROUTER>;
  const int vector_rows = W * P == a.experts && (a.experts * (int)sizeof(T)) % 16 == 0 &&
                          reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  MOE_LAUNCH(kernel, (grid_blocks<kernel, W>(a)), moe::kRouterThreads, stream, a.x, a.bias, a.w, a.ids, a.tokens,
             a.experts, a.k, a.renormalize, a.n_group, a.topk_group, vector_rows);
}

// The merge kernel (k up to 8) at (W, C). Its chunks' loads (moe::ChunkLoads), with the logits 16-byte aligned:
// whole 16-byte vectors where the experts and groups are multiples of 8, pieces of 4 experts where they are
// multiples of 4 (60 experts; 160 in 8 groups of 20), else element by element.
template <int W, int C, int G = 1>
void launch_merge(const Args& a, cudaStream_t stream) {
  constexpr auto kernel = moe::topk_router_merge<T, W, C, ROUTER, G>;
  const int per = ROUTER == moe::GROUPED ? a.experts / a.n_group : a.experts;
  const bool aligned = reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const int vector_rows = !aligned                                 ? moe::ELEMENTS
                          : a.experts % 8 == 0 && per % 8 == 0     ? moe::VECTORS
                          : a.experts % 4 == 0 && per % 4 == 0     ? moe::PIECES
                                                                   : moe::ELEMENTS;
  MOE_LAUNCH(kernel, (grid_blocks<kernel, W>(a)), moe::kRouterThreads, stream, a.x, a.bias, a.w, a.ids, a.tokens,
             a.experts, a.k, a.renormalize, a.n_group, a.topk_group, vector_rows);
}

// The merge kernel at (W, C), built only where moe::merge_shape gives this unit's router that shape: false
// elsewhere.
template <int W, int C>
bool merge(const Args& a, cudaStream_t stream) {
  if constexpr (ROUTER != moe::GROUPED && C * 8 <= moe::merge_most((int)sizeof(T), ROUTER)) {
    launch_merge<W, C>(a, stream);
    return true;
  } else {
    return false;
  }
}

#define MOE_MERGE_CASE(W, C) \
  case W * 100 + C: return merge<W, C>(a, stream);
#define MOE_GROUPED_MERGE_CASE(W, C) \
  case W * 100 + C: return launch_merge<W, C>(a, stream), true;
#define MOE_GROUPS_A_LANE_CASE(W, C, G) \
  case (G * 100 + W) * 100 + C: return launch_merge<W, C, G>(a, stream), true;

// Whether the merge kernel takes a call: k 4 to 8 from kMergeTokens for more than 32 experts (or with groups); up
// to 32 experts (one lane a token, moe::merge_shape) k 1 to 8, from kOneLaneTokens for rows of at most 32 bytes
// and from kOneLaneWideRowTokens for wider ones (fp32 above 8 experts, 16-bit above 16). Timed against the rounds
// on every router case (results/moe_routers_merge_ab.json) the merge kernel lost at k 1 (its eight kept keys and
// networks for one) and on up to 3,000 tokens, and won on the large ones. One lane a token against the rounds
// (results/moe_routers_ab_fp32_small.json, 8,192 and 100,000 tokens): Mixtral's 8 experts 0.93 to 0.96 of the
// time at 8,192 and 0.63 to 0.65 at 100,000, Llama 4 Scout's 16 about even in 16-bit at 8,192 and 0.74 to 0.80 at
// 100,000, but fp32 at 8,192 1.15 (a thread a token leaves too few threads to a wide row's loads); the thresholds
// keep to where it was measured faster or about even (16-bit Llama 4 Scout at 8,192: 1.02). (routing_cuda.py reads
// these constants, for the token counts its tests route.)
constexpr int kMergeTokens = 4096;
// The grouped router's fewest lanes a token on the merge kernel (moe::grouped_merge_shape). 4: 8 groups of 8 experts
// take 4 lanes of 2 groups, where 8 lanes of one chunk each spend most of their work merging the lanes' lists; the
// other grouped shapes keep a group to a lane or more, as at 8. Timed against 8 on every grouped router case of 8,192
// and 100,000 tokens (gpu_session.sh's step moe-grouped-lanes, results/moe_routers_grouped_lanes_h100.json): the
// 64-expert groups 0.72 (bf16) and 0.81 (fp32) of the time, the other shapes unchanged.
constexpr int kGroupedMergeLeastLanes = 4;
// Groups of 4n experts (n odd) a lane on the grouped merge kernel: 1, one group a lane (8 lanes for 8 groups); 2, with
// kGroupedMergeLeastLanes 4, 8 such groups of 4, 12 or 20 experts two a lane on 4 lanes, each group's chunks from its
// first expert (grouped_best_keys_lanes): for 160 experts in groups of 20, 8 merges of lanes' lists a token against
// 24 and 4 more of a lane's lists, at 80 registers (16-bit logits) against 64. Timed against 1 on every grouped
// router case of 8,192 and 100,000 tokens (gpu_session.sh's step moe-piece-groups,
// results/moe_routers_piece_groups_h100.json): 160 experts in groups of 20 at 100,000 tokens 0.84 (bf16) and 0.87
// (fp32) of the time, the other shapes unchanged.
constexpr int kGroupedPieceGroupsALane = 2;
constexpr int kOneLaneTokens = 8192;
constexpr int kOneLaneWideRowTokens = 65536;
// Calls of fewer tokens than this (and at least kMergeTokens) on the merge kernel take twice its lanes a token and
// half its chunks a lane where moe::wide_merge_shape gives a shape: at 8,192 tokens a grid of 4 or 8 lanes a token
// leaves each SM 8 to 16 warps, and a warp's single pass over its tokens (its latency) sets the time; 0, never
// (and the wider shapes are not built). gpu_session.sh's step moe-merge-wide times 0 against wider shapes at every
// token count.
constexpr int kMergeWideTokens = 0;

inline bool merge_serves(const Args& a, int size) {
  if (a.k > 8) return false;
  if (ROUTER == moe::GROUPED || a.experts > 32) return a.k >= 4 && a.tokens >= kMergeTokens;
  return a.tokens >= (a.experts * size <= 32 ? kOneLaneTokens : kOneLaneWideRowTokens);
}

// The merge kernel at moe::merge_shape's shapes for this logit type (with groups, moe::grouped_merge_shape's;
// SIZE = sizeof(T), a template parameter so that the other sizes' shapes are not built) where merge_serves: true
// if it took the call.
template <int SIZE>
bool route_merge(const Args& a, cudaStream_t stream) {
  if (!merge_serves(a, SIZE)) return false;
  if constexpr (ROUTER == moe::GROUPED) {
    moe::RouterShape g =
        moe::grouped_merge_shape(a.experts, a.n_group, kGroupedMergeLeastLanes, kGroupedPieceGroupsALane);
    if constexpr (kMergeWideTokens > 0) {   // a wider shape is one of those built below
      const moe::RouterShape wide = moe::wide_merge_shape(g, a.experts / a.n_group);
      if (a.tokens < kMergeWideTokens && wide.w != 0) g = wide;
    }
    if (g.g > 1) {
      switch ((g.g * 100 + g.w) * 100 + g.p) {
        MOE_GROUPS_A_LANE_CASE(4, 2, 2) MOE_GROUPS_A_LANE_CASE(4, 4, 2) MOE_GROUPS_A_LANE_CASE(4, 6, 2)
      }
      return false;
    }
    switch (g.w * 100 + g.p) {
      MOE_GROUPED_MERGE_CASE(4, 1) MOE_GROUPED_MERGE_CASE(4, 2) MOE_GROUPED_MERGE_CASE(4, 3)
      MOE_GROUPED_MERGE_CASE(4, 4) MOE_GROUPED_MERGE_CASE(4, 5) MOE_GROUPED_MERGE_CASE(4, 6)
      MOE_GROUPED_MERGE_CASE(8, 1) MOE_GROUPED_MERGE_CASE(8, 2) MOE_GROUPED_MERGE_CASE(8, 3)
      MOE_GROUPED_MERGE_CASE(8, 4) MOE_GROUPED_MERGE_CASE(8, 5) MOE_GROUPED_MERGE_CASE(8, 6)
      MOE_GROUPED_MERGE_CASE(16, 1) MOE_GROUPED_MERGE_CASE(16, 2) MOE_GROUPED_MERGE_CASE(16, 3)
      MOE_GROUPED_MERGE_CASE(16, 4) MOE_GROUPED_MERGE_CASE(16, 5) MOE_GROUPED_MERGE_CASE(16, 6)
    }
    return false;
  }
  const moe::RouterShape s = moe::merge_shape(a.experts, SIZE, ROUTER);
  if constexpr (kMergeWideTokens > 0) {
    const moe::RouterShape wide = moe::wide_merge_shape(s);
    if (a.tokens < kMergeWideTokens && wide.w != 0) {
      if constexpr (SIZE == 4) {   // of 4 lanes of up to 32 experts
        switch (wide.w * 100 + wide.p) { MOE_MERGE_CASE(8, 1) MOE_MERGE_CASE(8, 2) }
      } else {
        switch (wide.w * 100 + wide.p) {
          MOE_MERGE_CASE(8, 1) MOE_MERGE_CASE(8, 2) MOE_MERGE_CASE(8, 3) MOE_MERGE_CASE(8, 4)
          MOE_MERGE_CASE(16, 2) MOE_MERGE_CASE(16, 3) MOE_MERGE_CASE(16, 4)
        }
      }
    }
  }
  switch (s.w * 100 + s.p) { MOE_MERGE_CASE(1, 1) MOE_MERGE_CASE(1, 2) MOE_MERGE_CASE(1, 3) MOE_MERGE_CASE(1, 4) }
  if constexpr (SIZE == 4) {   // 4 lanes of up to 32 experts
    switch (s.w * 100 + s.p) { MOE_MERGE_CASE(4, 2) MOE_MERGE_CASE(4, 3) MOE_MERGE_CASE(4, 4) }
  } else {
    switch (s.w * 100 + s.p) {
      MOE_MERGE_CASE(4, 2) MOE_MERGE_CASE(4, 3) MOE_MERGE_CASE(4, 4) MOE_MERGE_CASE(4, 5) MOE_MERGE_CASE(4, 6)
      MOE_MERGE_CASE(4, 8) MOE_MERGE_CASE(8, 4) MOE_MERGE_CASE(8, 5) MOE_MERGE_CASE(8, 6) MOE_MERGE_CASE(8, 8)
      MOE_MERGE_CASE(16, 4)
    }
  }
  return false;
}
#undef MOE_MERGE_CASE
#undef MOE_GROUPED_MERGE_CASE
#undef MOE_GROUPS_A_LANE_CASE

// Routes a call of at least one token: the merge kernel where it serves, else the rounds kernel at
// moe::router_shape's shape.
inline void dispatch(const Args& a, cudaStream_t stream) {
  if (route_merge<(int)sizeof(T)>(a, stream)) return;
  const moe::RouterShape s = moe::router_shape(a.experts, ROUTER == moe::GROUPED ? a.n_group : 1);
  switch (s.w * 100 + s.p) {
    case 401: return launch<4, 1>(a, stream);
    case 402: return launch<4, 2>(a, stream);
    case 404: return launch<4, 4>(a, stream);
    case 408: return launch<4, 8>(a, stream);
    case 808: return launch<8, 8>(a, stream);
    case 810: return launch<8, 10>(a, stream);
    case 812: return launch<8, 12>(a, stream);
    case 816: return launch<8, 16>(a, stream);
    case 1610: return launch<16, 10>(a, stream);
    case 1612: return launch<16, 12>(a, stream);
    case 1616: return launch<16, 16>(a, stream);
    case 1620: return launch<16, 20>(a, stream);
    case 1624: return launch<16, 24>(a, stream);
    case 1632: return launch<16, 32>(a, stream);
  }
  if constexpr (ROUTER == moe::GROUPED) {
    switch (s.w * 100 + s.p) {   // groups wider than router_shape's W for the experts
      case 801: return launch<8, 1>(a, stream);
      case 802: return launch<8, 2>(a, stream);
      case 804: return launch<8, 4>(a, stream);
      case 1601: return launch<16, 1>(a, stream);
      case 1602: return launch<16, 2>(a, stream);
      case 1604: return launch<16, 4>(a, stream);
      case 1608: return launch<16, 8>(a, stream);
    }
    MOE_FAIL("no grouped kernel for this expert count and n_group");
  } else {
    MOE_FAIL("no kernel for this expert count");
  }
}
