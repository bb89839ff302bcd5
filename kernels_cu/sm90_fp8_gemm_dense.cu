// sm90_fp8_gemm_dense.cu: the dense GEMM mainloop, C = (A·As) @ (B·Bs)^T for M > 64, built the way
// DeepGEMM's SM90 1D2D kernel is (bench/NOTES.md "The dense mainloop" says why: the general
// kernel's cost per K block lay in its contract, not in a knob).
//
// What the loop has constant: N and the number of K blocks are template arguments (one
// instantiation per weight shape, as DeepGEMM's `compiled_dims="nk"`), so the trip count, the
// B-scale buffer and the tile count along N fold; M stays a runtime value. No global load in the
// K loop: the tile's As column of each K block arrives by TMA with its stage, and the tile's Bs (one or
// two 128-row blocks of Bs, ceil(K/128) floats each) is copied into shared memory once per tile by
// the math threads, double-buffered by tile parity so that one barrier orders it.
//
// As layouts: M-major (the layout `quantize_per_token_group(..., m_major_scales=True)` writes, and
// DeepGEMM's) comes as a box {BLOCK_M, 1}: the stage holds the column. K-major (our quantizer's
// default, kSfaKMajor) comes as a window, box {kSfaWindow, BLOCK_M}: kSfaWindow (4 or 8; 16 or 32, swizzled,
// under FP8GEMM_DENSE_SFA_WIDE_WINDOW: kSfaSwizzled) K blocks'
// scales of every row, loaded with the stage of every kSfaWindow-th K block into a ring of its own
// (kSfaSlots windows), read at column kb % kSfaWindow (a constant in the unrolled loop). TMA's
// inner box must span 16 bytes and its inner coordinate must be a multiple of 16 bytes (a window
// starting at any kb raised cudaErrorIllegalInstruction on the H100, session 37). NOTES (session
// 38): a {4, BLOCK_M} window with every stage ran 5% (256 x 128) to 25% (128 x 128) slower than the
// M-major column: BLOCK_M row requests of 16 bytes per stage beside A's BLOCK_M; the ring issues
// them once per kSfaWindow stages. A window is reused only after every math thread released the
// stage of its last K block (the producer's empty wait kSfaSlots - 1 windows later covers it: see
// kSfaSlots). The row stride must be a multiple of 16 bytes (K / 128 blocks a multiple of 4 in a
// packed As, else a padded buffer: the window reads past K / 128 as zeros), except in a packed As
// of at most 8 K blocks, which comes flat, the whole K in one window (kSfaFlat); the host falls
// back to the general kernel where neither holds.
//
// Warps: kMathWGs math warpgroups (1 for 64-row tiles, 2 otherwise) first, then one producer
// warpgroup whose thread kMathThreads issues every TMA load. A math warpgroup owns rows
// [64 wg, 64 wg + 64) of each 128-row wave; a 256-row tile is two waves per warpgroup over the
// same B stage. Per K block and wave: 4 wgmma m64nBLOCK_Nk32 into one accumulator, wait, then
// promote into the wave's sum with As x Bs (one accumulator, as DeepGEMM: the other warpgroup's
// wgmma keeps the tensor core busy meanwhile).
//
// Tiles whose columns straddle two 128-column Bs blocks (BLOCK_N = 48, 96, 112, 144, 160, 192,
// ...): the first `former` columns take Bs row n0 / 128, the rest the next row. Where the number of
// distinct `former` values is small the loop is instantiated once per value so that the choice
// per accumulator is a compile-time constant (with_former).
//
// Clusters (kCluster == 2, `__cluster_dims__`): the two CTAs of a pair take consecutive tile
// indices, which the raster places on the same M block (kMulticastA: they share A) or the same
// N block (they share B). CTA rank 0 loads the shared operand (and, sharing A, its As column)
// once and multicasts it to both; each CTA loads the other operand itself. Each stage's empty
// barrier counts both CTAs' math warps (every math warp's lanes 0 and 1 arrive on CTA 0's and
// CTA 1's barrier), so neither producer refills a stage its peer still reads. A pair's last tile
// may have no partner (odd tile counts): the raster then gives it a group of one (no multicast),
// and where the peer has run out of tiles its arrivals go to its own CTA only. Before a producer
// exits it waits for one more round of empty barriers, so that no remote arrival is still in
// flight towards a CTA that has left.
//
// Epilogue: bf16 / fp16 through the 128B-swizzled TMA-store staging of epilogue.cuh (64B-swizzled
// chunks where a tile row is 64 * odd bytes: 96 columns), one buffer per (warpgroup, wave); masked
// direct stores where a tile row is not whole 64-byte chunks or C's layout refuses TMA. FP32 out: the grouped mode only, promoted per K block (precise_fp32=False);
// the plain matmul's FP32 out stays with the general kernel (it promotes after every wgmma).
#include "common/pipeline.cuh"
#include "common/types.cuh"
#include "ptx/cluster.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "epilogue.cuh"
#include "scheduler.cuh"

namespace fp8gemm {

namespace dense {
constexpr uint32_t BLOCK_K = 128;
constexpr uint32_t kProducerRegs = 40;
constexpr uint32_t kMathBarrier = 1;           // every math thread: the tile's Bs copy is complete
constexpr uint32_t kEpilogueBarrier0 = 2;      // + warpgroup: its staging buffers' threads
constexpr uint32_t kRuntimeFormer = 0xffffffffu;

/// mbarrier.try_wait.parity with a suspend-time hint: a thread whose phase has not completed
/// sleeps in the hardware up to the hint instead of spinning on the barrier (DeepGEMM's CUTLASS
/// barrier passes the same 0x989680 ticks; its SASS retries through NANOSLEEP.SYNCS). Here and not
/// in ptx/mbarrier.cuh until measured in the other kernels.
__device__ __forceinline__ void wait_parity(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(bar), "r"(parity), "r"(0x989680u) : "memory");
}

template <uint32_t BLOCK_M>
struct Shape {
    static_assert(BLOCK_M == 64 || BLOCK_M == 128 || BLOCK_M == 256, "tiles of 64, 128 or 256 rows");
    static constexpr uint32_t kMathWGs = BLOCK_M == 64 ? 1 : 2;
    static constexpr uint32_t kMathThreads = kMathWGs * kWarpgroupThreads;
    static constexpr uint32_t kThreads = kMathThreads + kWarpgroupThreads;
    static constexpr uint32_t kWaves = BLOCK_M / (kMathWGs * kWgmmaM);     // 64-row waves per warpgroup
    static constexpr uint32_t kWaveRows = kMathWGs * kWgmmaM;              // rows between a warpgroup's waves
    // NOTES: 248 with one math warpgroup, 232 with two (DeepGEMM's split): 40 * 128 + 232 * 256 = 64512.
    static constexpr uint32_t kMathRegs = kMathWGs == 1 ? 248 : 232;
};

/// A compile-time `former` (columns of the tile on the first Bs row, in 8-column groups), or
/// kRuntimeFormer where the loop reads it from a register.
template <uint32_t kValue>
struct Former {
    static constexpr uint32_t value = kValue;
};

/// Call f(Former<v>) for the v in {kFirst, kFirst + kStep, ..., kLast} equal to `former`. The
/// caller passes every value `former` can take, so kLast is taken without a compare. NOTES: no
/// runtime fallback (DeepGEMM's dispatch has none): an f(Former<kRuntimeFormer>) never reached was
/// still one more copy of the K loop, and at 128 x 192 its per-group scale selects and products
/// raised the register pressure of the whole math path (the tile state live across it spilled).
template <uint32_t kFirst, uint32_t kStep, uint32_t kLast, typename F>
__device__ __forceinline__ void with_former(uint32_t former, const F& f) {
    static_assert(kStep > 0 && kFirst <= kLast && (kLast - kFirst) % kStep == 0, "a nonempty range");
    if constexpr (kFirst == kLast) {
        f(Former<kLast>{});
    } else {
        if (former == kFirst) {
            f(Former<kFirst>{});
            return;
        }
        with_former<kFirst + kStep, kStep, kLast>(former, f);
    }
}

/// smem_desc_from_lo built as a register pair (mov.b64 {lo, hi}, as DeepGEMM's GmmaDescriptor
/// union compiles), not in 64-bit arithmetic (cvt + or.b64). NOTES: where the stage of each K block
/// of the unrolled loop is known at compile time and the body visits a stage twice (4 stages, 8 K
/// blocks unrolled, a tile's K blocks a multiple of 4), ptxas reuses the first visit's descriptors:
/// as 64-bit values (32 of them) it kept them in pairs of regular registers and took the function
/// off the uniform datapath (barrier, Bs and descriptor addresses in regular registers), and
/// 128 x 192 spilled; as pairs it keeps the 32-bit low halves in uniform registers (0 spills).
__device__ __forceinline__ uint64_t desc_from_lo(uint32_t lo) {
    uint64_t desc;
    asm("mov.b64 %0, {%1, %2};" : "=l"(desc) : "r"(lo), "r"(kSmemDescK128bHi));
    return desc;
}

__host__ __device__ constexpr uint32_t gcd(uint32_t a, uint32_t b) { return b == 0 ? a : gcd(b, a % b); }

/// The persistent raster: tile index t = round * gridDim.x + blockIdx.x, grouped kGroup at a time
/// along N (kAlongN: consecutive indices walk N inside a group, so the two CTAs of a pair share an
/// M block) or along M. A group's odd count is split into an even part and a group of one, so that
/// a pair never straddles two groups (DeepGEMM's scheduler, gemm.cuh).
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kShapeN, uint32_t kCluster, bool kAlongN, uint32_t kGroup>
struct Raster {
    static constexpr uint32_t kNumNBlocks = (kShapeN + BLOCK_N - 1) / BLOCK_N;
    static_assert(kCluster == 1 || kGroup % 2 == 0, "a pair inside one raster group");
    uint32_t num_m_blocks, num_tiles;
    uint32_t round = 0;
    bool peer_alive = true;      // the pair's other CTA has a tile this round
    bool shared = false;         // ... and it is the partner of this one (multicast)

    __device__ __forceinline__ explicit Raster(uint32_t M)
        : num_m_blocks((M + BLOCK_M - 1) / BLOCK_M), num_tiles(num_m_blocks * kNumNBlocks) {}

    __device__ __forceinline__ bool next(uint32_t& m_block, uint32_t& n_block) {
        const uint32_t t = round++ * gridDim.x + blockIdx.x;
        if (t >= num_tiles) return false;
        const uint32_t primary = kAlongN ? kNumNBlocks : num_m_blocks;
        const uint32_t secondary = kAlongN ? num_m_blocks : kNumNBlocks;
        const uint32_t per_group = secondary * kGroup;
        const uint32_t group = t / per_group;
        uint32_t first = group * kGroup, in_group = t - group * per_group;
        uint32_t count = min(kGroup, primary - first);
        if constexpr (kCluster > 1) {
            peer_alive = kNumNBlocks % 2 == 0 || num_m_blocks % 2 == 0 || (t ^ 1u) < num_tiles;
            if (count % 2 != 0) {
                const uint32_t even = count - 1;
                if (in_group < even * secondary) {
                    count = even;
                } else {
                    in_group -= even * secondary;
                    first += even;
                    count = 1;
                }
            }
            shared = count > 1;
        }
        const uint32_t along = in_group / count, across = in_group - along * count;
        m_block = kAlongN ? along : first + across;
        n_block = kAlongN ? first + across : along;
        return true;
    }
};
}  // namespace dense

// FP8GEMM_DENSE_IMPLICIT_CLUSTER (defined by dispatch/dense.py's prelude for an unpaired tile, by
// default; FP8GEMM_DENSE_IMPLICIT_CLUSTER=0 leaves it out): no cluster attribute, so the launch is a
// plain one (each CTA its own implicit cluster), as DeepGEMM launches its unpaired tiles; without
// it an instantiation carries __cluster_dims__(kCluster, 1, 1), 1 x 1 x 1 included, and is launched
// as a cluster kernel, which ran one-wave unpaired 64- and 128-row tiles 8-30% slower on the H100
// (bench/NOTES.md, session 44). Every cluster operation of the kernel sits behind kCluster > 1.
#ifdef FP8GEMM_DENSE_IMPLICIT_CLUSTER
#define FP8GEMM_DENSE_CLUSTER_DIMS(n)
#else
#define FP8GEMM_DENSE_CLUSTER_DIMS(n) __cluster_dims__(n, 1, 1)
#endif
// FP8GEMM_DENSE_SHORT_A_BOX (a prelude dispatch/dense.py adds by default; =0 in the environment: the full box):
// where M is below one row tile (and not grouped) the host's A map has a box of round_up(M, 8) rows
// (dispatch/dense.py: a_box_rows) and the full barrier expects that many bytes, so no stage carries
// out-of-bounds A rows (a 64-row box at M = 32 moves 8 KiB a stage for 4 KiB of A). DeepGEMM takes
// 32- and 16-row tiles at M <= 32 / 16 for that reason ("smaller block M can avoid TMA L2 OOB
// bound"); at 32 x 1536 x 1024 it ran 3.62 us against our 64 x 16 tile's 4.13-4.51 (H100, session
// 44). The rows past the box keep stale shared memory: they feed only the wgmma rows >= M, which
// are never stored (the TMA store clips at M, direct stores mask at row_end) and reach no other row.
// FP8GEMM_DENSE_SFB_AHEAD (lab: dispatch/dense.py's prelude under FP8GEMM_DENSE_SFB_AHEAD=1): the
// next tile's Bs load is issued before this tile's Bs store and barrier (the math loop says why).
// FP8GEMM_DENSE_SKIP_IDLE_WG (lab: dispatch/dense.py's prelude under FP8GEMM_DENSE_SKIP_IDLE_WG=1): a
// math warpgroup with no row below the tile's end runs no wgmma for that tile (the math loop says why).
// FP8GEMM_DENSE_SHORT_SFA_BOX (lab: dispatch/dense.py's prelude under FP8GEMM_DENSE_SHORT_SFA_BOX=1):
// where M is below one row tile (and not grouped) the K-major As window's box has round_up(M, 8)
// rows (the host's map; dispatch/dense.py: sfa_box_rows) and the full barrier expects that many
// bytes: the short A box's reasoning for the scales (a window of 64 rows at M = 24 zero-fills 40
// rows per load, and TMA fills past the map slowly). Rows past the box keep stale shared memory,
// read only for rows >= M, never stored. The flat As (K <= 1024) is one run and keeps its boxes.
// FP8GEMM_DENSE_A_BOX_SHIFT (dispatch/dense.py's prelude; on by default, =0 lab A/B): a
// row tile whose A box would reach past A's last row (the last row tile of M, when M has rows above
// it) loads its box moved up by whole 8-row swizzle atoms, to end less than 8 rows past A, and its
// math warpgroups start their wgmma descriptors that many rows into the stage (the general kernel's
// GeneralTiles::a_box). TMA zero-fills rows past the map, but slowly: the general kernel's grouped
// GEMM took 1.5x as long with 80 of 128 rows past the end, and the H100 tune of session 48 has this
// kernel's 128 x 64 tile at 8192 x 4096 taking 38.0 us at M = 158 (98 rows past the end) against
// 20.1 at M = 256 (the same tiles, none past) and the general kernel's 128 x 64 20.4 / 20.5. Every
// stored row stays in the box; a warpgroup's rows past the stage are read from what follows it in
// shared memory (at most kMaxBoxShift rows: the B stages and the staging after the last A stage) and
// feed only rows past M, never stored. The As window stays at the tile's first row. 64- and
// 128-row tiles only (a_box_shift says why).
// FP8GEMM_DENSE_ELECT_PRODUCER (a prelude the launcher adds by default; =0 in the environment leaves
// it out, the earlier producer, for the lab A/B): the
// producer is one lane of the first producer warp by elect.sync, and its K loop is unrolled by 8,
// as DeepGEMM's: 25-30 SASS instructions per stage against 54-66 (each TMA issue under the plain
// `threadIdx.x ==` test sat in an ELECT / BRA.U.ANY loop of its own; bench/NOTES.md, session 41:
// the narrow 64-row tiles' gap to DeepGEMM fits ~1 ns per producer instruction per stage).
#ifdef FP8GEMM_DENSE_ELECT_PRODUCER
#define FP8GEMM_DENSE_PRODUCER_UNROLL _Pragma("unroll 8")
#else
#define FP8GEMM_DENSE_PRODUCER_UNROLL _Pragma("unroll 1")
#endif

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, uint32_t kShapeN, uint32_t kShapeK, int kOutType,
          bool kTmaStore, uint32_t kCluster, bool kMulticastA, uint32_t kGroup, bool kTwoAccum = false,
          bool kSfaKMajor = false, bool kGrouped = false, uint32_t kSfaWindowK = 4,
          bool kSfaFlatWide = false>
__global__ void __launch_bounds__(dense::Shape<BLOCK_M>::kThreads, 1) FP8GEMM_DENSE_CLUSTER_DIMS(kCluster)
sm90_fp8_gemm_dense_kernel(const __grid_constant__ TmaDescriptor tmap_a,   // A [M, K], box {128, BLOCK_M}, 128B swizzle
                           const __grid_constant__ TmaDescriptor tmap_b,   // B [N, K], box {128, BLOCK_N}, 128B swizzle
                           const __grid_constant__ TmaDescriptor tmap_c,   // C [M, N], box {128 B, 64} (kTmaStore)
                           const float* __restrict__ a_scale, int64_t sa_stride_m, int64_t sa_stride_k,  // by tmap_sa
                           const float* __restrict__ b_scale, int64_t sb_stride_n, int64_t sb_stride_k,
                           void* __restrict__ out, int64_t ldc, uint32_t M, uint32_t N,
                           // As M-major: inner dimension M, box {BLOCK_M, 1}; K-major: inner
                           // dimension K / 128, box {kSfaWindow, BLOCK_M}; flat: one row of
                           // M * K / 128 floats, box {kSfaFlatBox, 1}
                           const __grid_constant__ TmaDescriptor tmap_sa,
                           // kGrouped: int32 offsets [G + 1] (group_rows 0) or counts [G] (masked:
                           // group g's rows start at g * group_rows); B holds G weight matrices of
                           // kShapeN rows, Bs one [ceil(N / 128), K / 128] block each, sb_stride_g apart
                           const int32_t* __restrict__ groups, uint32_t num_groups, uint32_t group_rows,
                           int64_t sb_stride_g) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace dense;
    using S = Shape<BLOCK_M>;
    using Mma = WgmmaFp8<BLOCK_N>;
    constexpr OutType kOut = static_cast<OutType>(kOutType);
    constexpr uint32_t kNumKBlocks = (kShapeK + BLOCK_K - 1) / BLOCK_K;
    // fp32 out: promoted per 128-wide K block like bf16 / fp16, so only where the caller takes
    // that (the grouped GEMMs' precise_fp32=False, fp8gemm.moe's L1 intermediate); the plain
    // matmul's fp32 out promotes after every wgmma (the general kernel).
    static_assert(kOut != OutType::kFP32 || kGrouped, "fp32 out: the grouped mode's coarse promotion only");
    static_assert(BLOCK_N % 8 == 0 && BLOCK_N >= 16 && BLOCK_N <= 256, "wgmma widths 16..256");
    // A tile reaches at most two Bs rows: widths up to 128, or 128 < BLOCK_N <= 256 starting on a
    // 128-column boundary only where BLOCK_N - 128 divides 128 (DeepGEMM's rule).
    static_assert(BLOCK_N <= 128 || gcd(BLOCK_N, 128) == BLOCK_N - 128, "at most two Bs rows per tile");
    static_assert(kCluster == 1 || kCluster == 2, "pairs at most");
#ifdef FP8GEMM_DENSE_IMPLICIT_CLUSTER
    static_assert(kCluster == 1, "no cluster attribute: unpaired tiles only");
#endif
    static_assert(kNumStages >= 2, "double buffering at least");
    static_assert(!kTwoAccum || (Shape<BLOCK_M>::kWaves == 1 && 128 % BLOCK_N == 0),
                  "two accumulators: one-wave tiles (64 or 128 rows) inside one Bs row");
    static_assert(kShapeN % 8 == 0 || !kTmaStore, "TMA store: whole 16-byte rows");
    // Grouped tiles start at any row (a group's first), and a TMA box's inner coordinate must be a
    // multiple of 16 bytes: an M-major As box (inner coordinate = the row) cannot start there, a
    // K-major window can. A pair sharing A has the same rows, so the same group; a pair sharing B
    // (two row tiles) shares it only where both row tiles are one group's (the producer checks).
    static_assert(!kGrouped || kSfaKMajor, "grouped: As K-major");

    constexpr bool kUniformB = BLOCK_K % BLOCK_N == 0;         // the tile inside one Bs row always
    constexpr uint32_t kAStage = BLOCK_M * BLOCK_K;
    constexpr uint32_t kBStage = BLOCK_N * BLOCK_K;
    // As in shared memory: M-major, one column per stage; K-major, a ring of kSfaSlots windows of
    // kSfaWindow columns, a tile's window j loaded with the stage of its K block j * kSfaWindow.
    // Whole windows: window j's last column is read at pipeline step p_j + kSfaWindow - 1 and
    // released with it; window j + kSfaSlots is loaded at step p_j + kSfaSlots * kSfaWindow, after
    // the producer's empty wait for step p_j + kSfaSlots * kSfaWindow - kNumStages; so
    // (kSfaSlots - 1) * kSfaWindow + 1 >= kNumStages. A tile's last window partial (K / 128 not a
    // multiple of kSfaWindow: the next tile's first window follows sooner): a slot per stage.
    constexpr uint32_t kSfaWindow = kSfaKMajor ? kSfaWindowK : 1;
    // Flat K-major As (the window is the whole K, K / 128 not a multiple of 4): a packed As row
    // of K / 128 floats is not a 16-byte multiple, so TMA cannot read a {window, rows} box of it
    // (our quantizer's default at K = 256: 88 of the trace's shapes). Packed rows make the tile's
    // scales one contiguous run of BLOCK_M * K / 128 floats, in the window's own layout (row r at
    // r * kSfaWindow); it comes once per tile as kSfaFlatBoxes boxes of a one-row map over the
    // M * K / 128 floats (TMA zero-fills past the last row's). Its start, a multiple of 64 rows,
    // is a multiple of 256 bytes.
    // kSfaFlatWide (dispatch/dense.py's FLAT_WIDE_SWITCH, on by default): packed rows of 4 or 8 K blocks
    // read flat too, a few 256-float boxes instead of one box of BLOCK_M rows of 16 / 32 bytes (2-18%
    // less time at K = 1024, M <= 158 on the H100; which part of the box's cost that is: not profiled).
    constexpr bool kSfaFlat = kSfaKMajor && kSfaWindowK == kNumKBlocks && (kNumKBlocks % 4 != 0 || kSfaFlatWide);
    static_assert(!kSfaFlatWide || kSfaFlat, "the wide flat As: the whole K in one window");
    static_assert(kSfaWindow == 1 || kSfaWindow == 4 || kSfaWindow == 8 || kSfaWindow == 16 || kSfaWindow == 32
                      || kSfaFlat,
                  "K-major windows of 4, 8, 16 or 32 K blocks, or the whole K flat");
    // The wide windows (dispatch/dense.py: SFA_WIDE_WINDOW_SWITCH): 32 or 16 K blocks, rows of 128 or
    // 64 bytes that the host's map 128B- or 64B-swizzles (TMA XORs a row's 16-byte chunk index with
    // address bits 7-9 or 7-8: r % 8, or (r / 2) % 4), so that the 8 rows a warp reads of one column
    // (r0 .. r0 + 7 across lanes / 4) fall in 8 bank groups; unswizzled, 8 or 4 of them share a bank.
    // Row r's column c: r * W + ((c / 4) ^ x(r)) * 4 + c % 4, x(r) = r % 8 (W = 32) or (r / 2) % 4 (16).
    constexpr bool kSfaSwizzled = kSfaKMajor && !kSfaFlat && (kSfaWindow == 32 || kSfaWindow == 16);
    static_assert(!kSfaSwizzled || (kNumKBlocks % kSfaWindow == 0 && BLOCK_M <= 128),
                  "the wide window: whole windows, 64- or 128-row tiles");
    static_assert(!kSfaFlat || (kNumKBlocks <= 8 && !kGrouped), "flat As: K <= 1024 and tiles on 64-row boundaries");
    // boxes of at most 256 floats (TMA's box limit) in 256-byte units that divide the run
    constexpr uint32_t kSfaFlatUnits = BLOCK_M * kNumKBlocks / 64;
    constexpr uint32_t kSfaFlatBox =
        64 * (kSfaFlatUnits % 4 == 0 ? 4 : kSfaFlatUnits % 3 == 0 ? 3 : kSfaFlatUnits % 2 == 0 ? 2 : 1);
    constexpr uint32_t kSfaFlatBoxes = BLOCK_M * kNumKBlocks / kSfaFlatBox;
    constexpr uint32_t kSfaSlots = !kSfaKMajor                       ? kNumStages
                                   : kNumKBlocks % kSfaWindow == 0 ? 1 + (kNumStages - 1 + kSfaWindow - 1) / kSfaWindow
                                                                   : kNumStages;
    constexpr uint32_t kSfaSlotFloats = BLOCK_M * kSfaWindow;
    constexpr uint32_t kSfaBytes = kSfaSlotFloats * 4;           // one window (K-major) or column
    // Rows of whole 128-byte chunks: the 128B swizzle; else (96 bf16 columns: 192 bytes) 64-byte
    // chunks with the 64B swizzle, as DeepGEMM's kSwizzleDMode; rows of 16 or 32 bytes (8 / 16 bf16
    // columns) one unswizzled box (NarrowStaging; the host's C map matches: Dense.store_swizzle,
    // 0 there, and the Plan's store_box).
    constexpr uint32_t kRowBytes = BLOCK_N * (kOut == OutType::kFP32 ? 4 : 2);
    constexpr uint32_t kStoreSwizzle = kRowBytes % 128 == 0 ? 128 : kRowBytes % 64 == 0 ? 64 : 0;
    using Staging = typename SelectType<kStoreSwizzle != 0, SwizzledStaging<kOut, BLOCK_N, kStoreSwizzle ? kStoreSwizzle : 128>,
                                        NarrowStaging<kOut, BLOCK_N>>::type;
    static_assert(!kTmaStore || Staging::kSupported, "TMA store needs rows of 16, 32 or a multiple of 64 bytes");
    constexpr uint32_t kStagingBytes = kTmaStore ? S::kMathWGs * S::kWaves * Staging::kBytes : 0;
    constexpr uint32_t kSfbFloats = 2 * kNumKBlocks;           // a tile's two Bs rows
    constexpr uint32_t kSfbBytes = (2 * kSfbFloats * 4 + 15) / 16 * 16;   // two tiles' (tile parity)
    // [A stages | B stages | C staging | As stages | Bs x 2 | full bars | empty bars], 1024-aligned
    // (the host's dispatch/dense.py: Dense.smem_bytes computes the same sum).
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = smem_raw + (1024u - smem_addr(smem_raw) % 1024u) % 1024u;
    uint8_t* smem_a = smem;
    uint8_t* smem_b = smem_a + kNumStages * kAStage;
    uint8_t* smem_staging = smem_b + kNumStages * kBStage;
    float* smem_sfa = reinterpret_cast<float*>(smem_staging + kStagingBytes);
    // TMA's 128B swizzle is a function of the shared address: the window's slots start 1024-aligned
    // (every A / B stage and staging buffer is a multiple of 1024 bytes; each slot BLOCK_M * 128).
    static_assert(!kSfaSwizzled || (kNumStages * (kAStage + kBStage) + kStagingBytes) % 1024 == 0,
                  "the swizzled As window starts on a 1024-byte boundary");
    float* smem_sfb = smem_sfa + kSfaSlots * kSfaSlotFloats;
    Mbarrier* full_bar = reinterpret_cast<Mbarrier*>(reinterpret_cast<uint8_t*>(smem_sfb) + kSfbBytes);
    Mbarrier* empty_bar = full_bar + kNumStages;
    uint32_t* tile_prefix = reinterpret_cast<uint32_t*>(empty_bar + kNumStages);   // kGrouped: [G + 1]

#ifdef FP8GEMM_DENSE_SHORT_A_BOX
    const uint32_t a_stage_tx = (!kGrouped && M < BLOCK_M) ? (M + 7u) / 8u * 8u * BLOCK_K : kAStage;
#else
    constexpr uint32_t a_stage_tx = kAStage;
#endif
#ifdef FP8GEMM_DENSE_SHORT_SFA_BOX
    const uint32_t sfa_tx = (kSfaKMajor && !kSfaFlat && !kGrouped && M < BLOCK_M) ? (M + 7u) / 8u * 8u * kSfaWindow * 4u
                                                                                  : kSfaBytes;
#else
    constexpr uint32_t sfa_tx = kSfaBytes;
#endif
    // The rows the tile at row_base moves its A box up by (FP8GEMM_DENSE_A_BOX_SHIFT; 0 without it).
    // 256-row tiles keep their box: they hold two waves of accumulators per warpgroup, and the
    // shift's one more live value spilled 188 bytes in the pair sharing B at K = 768 (flat As; nvcc 13.0,
    // bench/NOTES.md session 50); their last tile's rows past A are a small part of the large M
    // they are picked for.
    const auto a_box_shift = [&](uint32_t row_base) -> uint32_t {
#ifdef FP8GEMM_DENSE_A_BOX_SHIFT
        if constexpr (BLOCK_M <= 128) {
            // at most what follows the last A stage, in whole 8-row atoms, below one tile
            constexpr uint32_t kAfter = (kNumStages * kBStage + kStagingBytes) / BLOCK_K;
            return box_shift_rows<BLOCK_M, (kAfter < BLOCK_M - 8 ? kAfter : BLOCK_M - 8) & ~7u>(row_base, M);
        }
#endif
        return 0u;
    };
    const uint32_t warp_idx = warp_idx_uniform();
    const uint32_t lane_idx = threadIdx.x % 32;
    const uint32_t rank = kCluster > 1 ? cluster_ctarank() : 0u;

    if (threadIdx.x == S::kMathThreads) {
        prefetch_tensormap(&tmap_a);
        prefetch_tensormap(&tmap_b);
        prefetch_tensormap(&tmap_sa);
        if constexpr (kTmaStore) prefetch_tensormap(&tmap_c);
#pragma unroll
        for (uint32_t s = 0; s < kNumStages; ++s) {
            mbarrier_init(&full_bar[s], 1);
            mbarrier_init(&empty_bar[s], kCluster * S::kMathThreads / 32);
        }
        fence_mbarrier_init();
    }
    // kGrouped: warp 0 writes the first row tile of each group (scheduler.cuh), published by the sync.
    if constexpr (kGrouped) group_tile_prefix<BLOCK_M>(groups, num_groups, group_rows, M, tile_prefix);
    // A pair: the peer's barriers are initialised before any multicast or remote arrival.
    if constexpr (kCluster > 1) cluster_sync();
    else __syncthreads();

    using Tiles = Raster<BLOCK_M, BLOCK_N, kShapeN, kCluster, kMulticastA, kGroup>;
    // The raster walks row tiles: grouped, every group's (a group's last one may be partial); a
    // row tile's first row, the row its stores stop at (its group's end, or M) and its group.
    const uint32_t tile_rows = kGrouped ? tile_prefix[num_groups] * BLOCK_M : M;
    const auto locate = [&](uint32_t m_block) {
        if constexpr (kGrouped) return locate_group_tile(m_block, groups, tile_prefix, num_groups, group_rows, M, BLOCK_M);
        else return TileRows{m_block * BLOCK_M, M, 0u};
    };

    if (warp_idx >= S::kMathThreads / 32) {
        // ================================ producer ================================
        setmaxnreg_dec<kProducerRegs>();
#ifdef FP8GEMM_DENSE_ELECT_PRODUCER
        if (warp_idx == S::kMathThreads / 32 && elect_one_sync()) {
#else
        if (threadIdx.x == S::kMathThreads) {
#endif
            Tiles tiles(tile_rows);
            PipelineState<kNumStages> pipe;
            uint32_t m_block, n_block;
            uint32_t sfa_slot = 0;          // K-major: the ring slot of the next As window
            constexpr uint16_t kPairMask = 0x3;
            while (tiles.next(m_block, n_block)) {
                bool share = kCluster > 1 && tiles.shared;
                const TileRows rows = locate(m_block);
                // Grouped pairs sharing B: the raster pairs row tiles m_block and m_block ^ 1 (an even
                // first, kGroup even); their groups' weights are one B only where the groups are one.
                // Both CTAs compare the same two tiles, so they agree; unshared, each loads its own B
                // (the empty barriers count both CTAs' math warps either way).
                if constexpr (kGrouped && kCluster > 1 && !kMulticastA)
                    share = share && group_of_tile(m_block ^ 1u, tile_prefix, num_groups) == rows.group;
                const uint32_t a_row = rows.row_base, b_row = rows.group * kShapeN + n_block * BLOCK_N;
                const int32_t a_box_row = static_cast<int32_t>(a_row - a_box_shift(a_row));   // A's box (As: a_row)
                FP8GEMM_DENSE_PRODUCER_UNROLL
                for (uint32_t kb = 0; kb < kNumKBlocks; ++kb, ++pipe) {
                    wait_parity(smem_addr(&empty_bar[pipe.stage]), pipe.empty_parity());
                    Mbarrier* bar = &full_bar[pipe.stage];
                    uint8_t* a_dst = smem_a + pipe.stage * kAStage;
                    uint8_t* b_dst = smem_b + pipe.stage * kBStage;
                    // K-major: a window with every kSfaWindow-th stage (its first K block: a
                    // 16-byte aligned inner coordinate); M-major: the column with every stage.
                    const bool sfa_load = !kSfaKMajor || kb % kSfaWindow == 0;
                    float* sfa_dst = smem_sfa + (kSfaKMajor ? sfa_slot : pipe.stage) * kSfaSlotFloats;
                    if (kSfaKMajor && sfa_load) sfa_slot = sfa_slot + 1 == kSfaSlots ? 0 : sfa_slot + 1;
                    const int32_t k = static_cast<int32_t>(kb * BLOCK_K);
                    // the As box's coordinates, inner first (flat: box j of the tile's run)
                    const int32_t sa_c0 = kSfaFlat     ? static_cast<int32_t>(a_row * kNumKBlocks)
                                          : kSfaKMajor ? static_cast<int32_t>(kb)
                                                       : static_cast<int32_t>(a_row);
                    const int32_t sa_c1 = kSfaFlat ? 0 : kSfaKMajor ? static_cast<int32_t>(a_row) : static_cast<int32_t>(kb);
                    const auto load_sfa = [&](bool multicast) {
#pragma unroll
                        for (uint32_t j = 0; j < (kSfaFlat ? kSfaFlatBoxes : 1u); ++j) {
                            const int32_t c0 = sa_c0 + static_cast<int32_t>(j * kSfaFlatBox);
                            if (multicast) tma_load_2d_multicast(sfa_dst + j * kSfaFlatBox, &tmap_sa, bar, c0, sa_c1, kPairMask);
                            else tma_load_2d(sfa_dst + j * kSfaFlatBox, &tmap_sa, bar, c0, sa_c1);
                        }
                    };
                    if (kMulticastA && share) {
                        if (rank == 0) {
                            tma_load_2d_multicast(a_dst, &tmap_a, bar, k, a_box_row, kPairMask);
                            if (sfa_load) load_sfa(true);
                        }
                    } else {
                        tma_load_2d(a_dst, &tmap_a, bar, k, a_box_row);
                        if (sfa_load) load_sfa(false);
                    }
                    if (!kMulticastA && share) {
                        if (rank == 0) tma_load_2d_multicast(b_dst, &tmap_b, bar, k, b_row, kPairMask);
                    } else {
                        tma_load_2d(b_dst, &tmap_b, bar, k, b_row);
                    }
                    mbarrier_arrive_expect_tx(bar, a_stage_tx + kBStage + (sfa_load ? sfa_tx : 0u));
                }
            }
            // A pair: every remote arrival on this CTA's empty barriers has landed before it exits.
            if constexpr (kCluster > 1) {
#pragma unroll 1
                for (uint32_t s = 0; s < kNumStages; ++s, ++pipe)
                    wait_parity(smem_addr(&empty_bar[pipe.stage]), pipe.empty_parity());
            }
        }
    } else {
        // ================================ math ====================================
        setmaxnreg_inc<S::kMathRegs>();
        const uint32_t wg = __shfl_sync(0xffffffffu, threadIdx.x / kWarpgroupThreads, 0);
        const uint32_t warp_in_wg = warp_idx % 4;
        const uint32_t r0 = warp_idx * 16 + lane_idx / 4;          // this thread's first row in a wave
        const uint32_t lo_a0 = smem_desc_k128b_lo(smem_a + wg * kWgmmaM * BLOCK_K);
        const uint32_t lo_b0 = smem_desc_k128b_lo(smem_b);
        const uint32_t full0 = smem_addr(full_bar), empty0 = smem_addr(empty_bar);
        // A stage read: lane r < kCluster arrives on CTA r's empty barrier (the peer's producer may
        // multicast into this CTA's stage); with no live peer, lanes 0 and 1 both arrive here.
        const auto release = [&](uint32_t stage, bool peer_alive) {
            if constexpr (kCluster > 1) {
                const uint32_t target = peer_alive ? lane_idx : rank;
                mbarrier_arrive_cluster_if(mapa_shared(empty0 + stage * 8u, target), lane_idx < kCluster);
            } else {
                mbarrier_arrive_if(empty0 + stage * 8u, lane_idx == 0);
            }
        };

        // The tile's Bs: row n0 / 128 into sfb[0, kNumKBlocks), the next row (where some column
        // of the tile reaches it) into sfb[kNumKBlocks, 2 kNumKBlocks): kCopy floats, kPer per math
        // thread, loaded from global memory one tile ahead into registers (their latency hides
        // behind a K loop) and stored at the tile's top, where one barrier orders them before the
        // loop's reads (two buffers by tile parity: a warpgroup reaches tile t + 2's store only
        // after every math thread has passed tile t + 1's barrier, so after its reads of tile t).
        constexpr uint32_t kCopy = kUniformB ? kNumKBlocks : kSfbFloats;
        constexpr uint32_t kPer = (kCopy + S::kMathThreads - 1) / S::kMathThreads;
        const auto load_sfb = [&](uint32_t nb, uint32_t group, float (&v)[kPer]) {
            const uint32_t n = nb * BLOCK_N;
            const uint32_t f = kUniformB ? BLOCK_N : min(BLOCK_N, BLOCK_K - n % BLOCK_K);
            const bool two = !kUniformB && f < min(BLOCK_N, kShapeN - n);
            const float* src = b_scale + static_cast<int64_t>(group) * sb_stride_g
                               + static_cast<int64_t>(n / BLOCK_K) * sb_stride_n;
#pragma unroll
            for (uint32_t j = 0; j < kPer; ++j) {
                const uint32_t i = threadIdx.x + j * S::kMathThreads, row = i >= kNumKBlocks, kb = i - row * kNumKBlocks;
                v[j] = i < kCopy && (row == 0 || two)
                           ? ld_nc_f32_pinned(src + row * sb_stride_n + static_cast<int64_t>(kb) * sb_stride_k)
                           : 0.0f;
            }
        };
        Tiles tiles(tile_rows);
        PipelineState<kNumStages> pipe;
        uint32_t m_block, n_block, parity = 0;
        // K-major As: the ring slot of the next window and the window of the current K block
        uint32_t sfa_slot = 0;
        const float* sfa_win = smem_sfa;
        // As of K block kb (read after its full wait, at its stage or window): row r's scale at
        // [r * kSfaWindow]. Swizzled, every row this thread reads is lane / 4 modulo 8 (r0, r0 + 8,
        // waves 64 rows apart), so x(r) is one value per thread and the column offset one per K
        // block. NOTES: written as c ^ (lane & 28) (the same value at W = 32) the 64 x 64
        // two-accumulator kernel had 64 more SASS instructions (2912 against 2848; the window of 8: 2800).
        const uint32_t sfa_xor = kSfaWindow == 32 ? lane_idx / 4 : lane_idx / 8 % 4;
        const auto sfa_at = [&](uint32_t kb, uint32_t stage) {
            if constexpr (kSfaKMajor) {
                if (kb % kSfaWindow == 0) {
                    sfa_win = smem_sfa + sfa_slot * kSfaSlotFloats;
                    sfa_slot = sfa_slot + 1 == kSfaSlots ? 0 : sfa_slot + 1;
                }
                if constexpr (kSfaSwizzled)
                    return static_cast<const float*>(sfa_win + (((kb % kSfaWindow / 4) ^ sfa_xor) * 4 + kb % 4));
                return static_cast<const float*>(sfa_win + kb % kSfaWindow);
            } else {
                return static_cast<const float*>(smem_sfa + stage * kSfaSlotFloats);
            }
        };
        float sfb_next[kPer];
        {
            Tiles peek = tiles;
            if (peek.next(m_block, n_block)) load_sfb(n_block, locate(m_block).group, sfb_next);
        }
        while (tiles.next(m_block, n_block)) {
            const bool peer_alive = tiles.peer_alive;
            const uint32_t n0 = n_block * BLOCK_N;
            float* sfb = smem_sfb + parity * kSfbFloats;
            parity ^= 1;
            const uint32_t former = kUniformB ? BLOCK_N : min(BLOCK_N, BLOCK_K - n0 % BLOCK_K);   // columns
#ifdef FP8GEMM_DENSE_SFB_AHEAD
            // The next tile's Bs load goes out before this tile's Bs store and barrier (its raster
            // step, a runtime division, overlaps the first tile's Bs round trip), so the first wgmma
            // follows the barrier directly: 25 SASS instructions from the barrier against 73
            // (DeepGEMM: 19). Unloaded slots stay 0 (the last tile has no next).
            float sfb_after[kPer];
            {
                Tiles peek = tiles;
                uint32_t m2, n2;
#pragma unroll
                for (uint32_t j = 0; j < kPer; ++j) sfb_after[j] = 0.0f;
                if (peek.next(m2, n2)) load_sfb(n2, locate(m2).group, sfb_after);
            }
#endif
#pragma unroll
            for (uint32_t j = 0; j < kPer; ++j)
                if (threadIdx.x + j * S::kMathThreads < kCopy) sfb[threadIdx.x + j * S::kMathThreads] = sfb_next[j];
            named_barrier_sync(kMathBarrier, S::kMathThreads);
#ifdef FP8GEMM_DENSE_SFB_AHEAD
#pragma unroll
            for (uint32_t j = 0; j < kPer; ++j) sfb_next[j] = sfb_after[j];
#else
            {
                Tiles peek = tiles;
                uint32_t m2, n2;
                if (peek.next(m2, n2)) load_sfb(n2, locate(m2).group, sfb_next);
            }
#endif

            const TileRows rows = locate(m_block);
            const uint32_t tile_row = rows.row_base, row_end = rows.row_end;
            // the A box's move (a_box_shift) in descriptor units (16 bytes): whole 1024-byte atoms
            const uint32_t lo_shift = a_box_shift(tile_row) * (BLOCK_K >> 4);
            // NOTES: a wave with no row below M still runs its wgmma on the zero-filled rows (DeepGEMM
            // too): a branch around each wave cost the loop 4 branches per K block; it only skips
            // its stores.
            bool live[S::kWaves];
#pragma unroll
            for (uint32_t w = 0; w < S::kWaves; ++w) live[w] = tile_row + w * S::kWaveRows + wg * kWgmmaM < row_end;
            float sum[S::kWaves][Mma::kNumAccum];
#pragma unroll
            for (uint32_t w = 0; w < S::kWaves; ++w)
#pragma unroll
                for (int i = 0; i < Mma::kNumAccum; ++i) sum[w][i] = 0.0f;

            const auto k_loop = [&](auto former_tag) {
                constexpr uint32_t kFormer = decltype(former_tag)::value;
                const uint32_t former_groups = kFormer == kRuntimeFormer ? former / 8 : kFormer;
                float accum[Mma::kNumAccum];
#pragma unroll 8
                for (uint32_t kb = 0; kb < kNumKBlocks; ++kb, ++pipe) {
                    const uint32_t stage = pipe.stage;
                    const float sb0 = sfb[kb];
                    const float sb1 = kUniformB ? 0.0f : sfb[kNumKBlocks + kb];
                    wait_parity(full0 + stage * 8u, pipe.full_parity());
                    const float* sfa = sfa_at(kb, stage);
#pragma unroll
                    for (uint32_t w = 0; w < S::kWaves; ++w) {
                        // Read before the stage is released (the next tile's loads may land there).
                        const float sa0 = sfa[(w * S::kWaveRows + r0) * kSfaWindow];
                        const float sa1 = sfa[(w * S::kWaveRows + r0 + 8) * kSfaWindow];
                        const uint32_t lo_a = lo_a0 + lo_shift + stage * (kAStage >> 4) + w * (S::kWaveRows * BLOCK_K >> 4);
                        const uint32_t lo_b = lo_b0 + stage * (kBStage >> 4);
                        wgmma_fence_operands(accum);
                        wgmma_fence();
#pragma unroll
                        for (uint32_t k = 0; k < BLOCK_K / kWgmmaKFp8; ++k)
                            Mma::mma(desc_from_lo(lo_a + k * (kWgmmaKFp8 >> 4)),
                                     desc_from_lo(lo_b + k * (kWgmmaKFp8 >> 4)), accum, k > 0 ? 1u : 0u);
                        wgmma_commit_group();
                        wgmma_wait<0>();
                        wgmma_fence_operands(accum);
                        if (w == S::kWaves - 1) {
                            __syncwarp();
                            release(stage, peer_alive);
                        }
                        {
                            const float s00 = sa0 * sb0, s10 = sa1 * sb0;
                            const float s01 = sa0 * sb1, s11 = sa1 * sb1;
#pragma unroll
                            for (int j = 0; j < Mma::kNumAccum / 4; ++j) {
                                const bool first = kUniformB || static_cast<uint32_t>(j) < former_groups;
                                sum[w][4 * j + 0] += (first ? s00 : s01) * accum[4 * j + 0];
                                sum[w][4 * j + 1] += (first ? s00 : s01) * accum[4 * j + 1];
                                sum[w][4 * j + 2] += (first ? s10 : s11) * accum[4 * j + 2];
                                sum[w][4 * j + 3] += (first ? s10 : s11) * accum[4 * j + 3];
                            }
                        }
                    }
                }
            };
            // NOTES: the pair loop is unrolled whole: unrolled by 4 (a runtime back edge), ptxas lost
            // track of which wgmma group the wait<1> retires and serialized every wgmma (C7514).
            // With straddling widths at K = 7168 it spilled, hence uniform widths only.
            // kTwoAccum (one-wave tiles; forced only, not yet measured): the general kernel's two
            // accumulators in turn, block kb's wgmma issued before block kb - 1 is promoted, so the
            // tensor core is not idle while this warpgroup promotes (bench/NOTES.md: one accumulator
            // was 2-15% slower in the general kernel; here 128 x 128 ran 1.29x DeepGEMM's time).
            const auto k_loop2 = [&](auto former_tag) {
                constexpr uint32_t kFormer = decltype(former_tag)::value;
                const uint32_t former_groups = kFormer == kRuntimeFormer ? former / 8 : kFormer;
                float acc0[Mma::kNumAccum], acc1[Mma::kNumAccum];
                float psa0 = 0.0f, psa1 = 0.0f, psb0 = 0.0f, psb1 = 0.0f;
                uint32_t pstage = 0;
                const auto promote = [&](float (&a)[Mma::kNumAccum]) {
                    const float s00 = psa0 * psb0, s10 = psa1 * psb0, s01 = psa0 * psb1, s11 = psa1 * psb1;
#pragma unroll
                    for (int j = 0; j < Mma::kNumAccum / 4; ++j) {
                        const bool first = kUniformB || static_cast<uint32_t>(j) < former_groups;
                        sum[0][4 * j + 0] += (first ? s00 : s01) * a[4 * j + 0];
                        sum[0][4 * j + 1] += (first ? s00 : s01) * a[4 * j + 1];
                        sum[0][4 * j + 2] += (first ? s10 : s11) * a[4 * j + 2];
                        sum[0][4 * j + 3] += (first ? s10 : s11) * a[4 * j + 3];
                    }
                };
                // Block kb into `cur`; then (kPromote) wait for block kb - 1 in `prev`, release its
                // stage and promote it with its scales (read before that release).
                const auto step = [&](float (&cur)[Mma::kNumAccum], float (&prev)[Mma::kNumAccum], uint32_t kb,
                                      auto promote_tag) {
                    const uint32_t stage = pipe.stage;
                    const float sb0 = sfb[kb];
                    const float sb1 = kUniformB ? 0.0f : sfb[kNumKBlocks + kb];
                    wait_parity(full0 + stage * 8u, pipe.full_parity());
                    const float* sfa = sfa_at(kb, stage);
                    const float sa0 = sfa[r0 * kSfaWindow], sa1 = sfa[(r0 + 8) * kSfaWindow];
                    const uint32_t lo_a = lo_a0 + lo_shift + stage * (kAStage >> 4), lo_b = lo_b0 + stage * (kBStage >> 4);
                    wgmma_fence_operands(cur);
                    wgmma_fence();
#pragma unroll
                    for (uint32_t k = 0; k < BLOCK_K / kWgmmaKFp8; ++k)
                        Mma::mma(desc_from_lo(lo_a + k * (kWgmmaKFp8 >> 4)),
                                 desc_from_lo(lo_b + k * (kWgmmaKFp8 >> 4)), cur, k > 0 ? 1u : 0u);
                    wgmma_commit_group();
                    if constexpr (decltype(promote_tag)::value) {
                        wgmma_wait<1>();
                        wgmma_fence_operands(prev);
                        __syncwarp();
                        release(pstage, peer_alive);
                        promote(prev);
                    }
                    psa0 = sa0, psa1 = sa1, psb0 = sb0, psb1 = sb1, pstage = stage;
                    ++pipe;
                };
                using Yes = Former<1>;
                using No = Former<0>;
                step(acc0, acc1, 0, No{});
#pragma unroll
                for (uint32_t kb = 1; kb + 1 < kNumKBlocks; kb += 2) {
                    step(acc1, acc0, kb, Yes{});
                    step(acc0, acc1, kb + 1, Yes{});
                }
                if constexpr (kNumKBlocks % 2 == 0) step(acc1, acc0, kNumKBlocks - 1, Yes{});
                wgmma_wait<0>();
                __syncwarp();
                release(pstage, peer_alive);
                if constexpr (kNumKBlocks % 2 == 0) {
                    wgmma_fence_operands(acc1);
                    promote(acc1);
                } else {
                    wgmma_fence_operands(acc0);
                    promote(acc0);
                }
            };
            const auto run_loop = [&](auto former_tag) {
                if constexpr (kTwoAccum) k_loop2(former_tag);
                else k_loop(former_tag);
            };
            // NOTES: DeepGEMM's bound: a compile-time `former` where the tile start takes at most 4
            // positions in a Bs row (gcd(BLOCK_N, 128) >= 32); a runtime compare per accumulator
            // group otherwise. The tile starts at a multiple of gcd(BLOCK_N, 128) in its Bs row, so
            // `former` is a multiple of it up to min(BLOCK_N, 128) (at most 128: 192 takes 64 or 128).
            constexpr uint32_t kGap = gcd(BLOCK_N, BLOCK_K) / 8;
            constexpr bool kFold = !kUniformB && BLOCK_K / gcd(BLOCK_N, BLOCK_K) <= 4;
#ifdef FP8GEMM_DENSE_SKIP_IDLE_WG
            // A warpgroup none of whose rows reaches row_end (the last row tile below M, or a grouped
            // tile's rows past its group's end: at about 192 rows per expert, the second 128-row tile
            // of most experts) runs no wgmma: it only keeps the ring's pace (each stage waited for,
            // released, the As window ring advanced), and the other warpgroup has the tensor cores to
            // itself. One branch per tile, none in the K loop (a branch per wave and K block cost the
            // loop, bench/NOTES.md). Its sums stay 0 and no store takes them (live[] is false).
            bool wg_live = false;
#pragma unroll
            for (uint32_t w = 0; w < S::kWaves; ++w) wg_live |= live[w];
            if (!wg_live) {
#pragma unroll 1
                for (uint32_t kb = 0; kb < kNumKBlocks; ++kb, ++pipe) {
                    wait_parity(full0 + pipe.stage * 8u, pipe.full_parity());
                    sfa_at(kb, pipe.stage);
                    __syncwarp();
                    release(pipe.stage, peer_alive);
                }
            } else
#endif
            if constexpr (kUniformB) run_loop(Former<BLOCK_N / 8>{});
            else if constexpr (kFold) with_former<kGap, kGap, (BLOCK_N < BLOCK_K ? BLOCK_N : BLOCK_K) / 8>(former / 8, run_loop);
            else run_loop(Former<kRuntimeFormer>{});

            // ---- epilogue: each live wave's 64 rows of this warpgroup ----
            // Grouped: a tile that reaches past its group's end (into the next group's rows, which
            // that group's tile writes) stores directly, masked at the end; whole tiles by TMA.
            const auto store_direct = [&]() {
#pragma unroll
                for (uint32_t w = 0; w < S::kWaves; ++w) {
                    if (!live[w]) continue;
                    const uint32_t row = tile_row + w * S::kWaveRows + wg * kWgmmaM;
                    store_fragments_direct<kOut, BLOCK_N>(sum[w], out, ldc, row_end, kShapeN,
                                                          row + warp_in_wg * 16 + lane_idx / 4, n0 + 2 * (lane_idx % 4));
                }
            };
            if constexpr (!kTmaStore) {
                store_direct();
            } else if (kGrouped && tile_row + BLOCK_M > row_end) {
                store_direct();
            } else {
                // NOTES: one wait for this warpgroup's previous tile's stores (issued a K loop ago),
                // every wave staged in its own buffer, then one burst of stores: per wave
                // (staged_store_tile) the second wave's wait stalled on the first wave's store just
                // issued (helper SASS comparison with DeepGEMM, bench/NOTES.md session 36).
                const bool leader = threadIdx.x % kWarpgroupThreads == 0;
                uint8_t* stage0 = smem_staging + wg * S::kWaves * Staging::kBytes;
                if (leader) tma_store_wait_read<0>();
                named_barrier_sync(kEpilogueBarrier0 + wg, kWarpgroupThreads);
#pragma unroll
                for (uint32_t w = 0; w < S::kWaves; ++w)
                    if (live[w]) Staging::write_fragments(stage0 + w * Staging::kBytes, warp_in_wg, lane_idx, sum[w]);
                fence_proxy_async_shared();             // generic-proxy writes -> TMA reads
                named_barrier_sync(kEpilogueBarrier0 + wg, kWarpgroupThreads);
                if (leader) {
#pragma unroll
                    for (uint32_t w = 0; w < S::kWaves; ++w) {
                        if (!live[w]) continue;
#pragma unroll
                        for (uint32_t c = 0; c < Staging::kNumChunks; ++c)
                            tma_store_2d(&tmap_c, stage0 + w * Staging::kBytes + c * Staging::kChunkBytes,
                                         n0 + c * Staging::kChunkElems, tile_row + w * S::kWaveRows + wg * kWgmmaM);
                    }
                    tma_store_commit_group();
                }
            }
        }
        if constexpr (kTmaStore) {
            if (threadIdx.x % kWarpgroupThreads == 0) tma_store_wait_read<0>();   // staging read before exit
        }
    }
#else
    asm volatile("trap;");
#endif
}

}  // namespace fp8gemm
