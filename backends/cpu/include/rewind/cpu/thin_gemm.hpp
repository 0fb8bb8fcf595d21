// rewind cpu: C = op(A) op(B) (+ C) in float, C's rows a multiple of 16, for the products that
// Eigen's AVX-512 kernel runs at half its rate: those with few rows (every convolution with 16-64
// output channels, the MLP's 16-wide layer: 60-110 GFLOP/s a core against 150-170 for wide ones,
// as it works on 48 rows of C at a time) and those with a shallow k. A register tile is up to 64
// rows of C (one to four vectors) by 6 to 16 columns; each step of k is one vector load of A per
// 16 rows and one broadcast of B per column. Where the CPU has no AVX-512 (or the compiler cannot
// build the copy for it), map_ops runs Eigen.
//
// Every element of C is one chain of fused multiply-adds over k in order (starting from C where it
// is added to), whatever n is and wherever the column falls in a tile: the same inputs give the
// same bits in any batch split.
#pragma once

#include <algorithm>
#include <cstddef>

#include "vector_target.hpp"

// Where the build targets AVX-512 the kernel is compiled as it is; built for any x86-64 with GCC
// or clang (an application that sets no -march), it is compiled for AVX-512 as a copy
// (vector_target.hpp) and runs where the CPU has it (thin_gemm_runs, checked once), as the exact
// mode's tiles do.
#if !defined(__CUDACC__) && defined(__x86_64__) && (defined(__AVX512F__) || defined(REWIND_TARGET_COPIES))
#include <immintrin.h>
#define REWIND_THIN_GEMM 1
#ifndef __AVX512F__
#define REWIND_THIN_GEMM_DISPATCH 1
#endif
#endif

namespace rwd::cpu::detail {

/// Whether this process runs thin_gemm: a build that targets AVX-512, or a GCC build for any
/// x86-64 on a CPU with AVX-512F (a test turns it off).
inline bool thin_gemm_runs = [] {
#if defined(REWIND_THIN_GEMM_DISPATCH)
  __builtin_cpu_init();  // this may run among the static initialisers, before libgcc's own
  return __builtin_cpu_supports("avx512f") != 0;
#elif defined(REWIND_THIN_GEMM)
  return true;
#else
  return false;
#endif
}();

/// Whether thin_gemm runs a product whose result has m rows: a multiple of 16, where it runs
/// at all (measured on the shipped networks' products: 1.04-1.8x Eigen's rate).
inline bool thin_gemm_takes(std::size_t m) { return thin_gemm_runs && m % 16 == 0 && m >= 16; }

#ifdef REWIND_THIN_GEMM
#ifdef REWIND_THIN_GEMM_DISPATCH
REWIND_TARGET_PUSH("avx512f")
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 headers (bug 105593)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#endif
namespace thin {

// Every loop over a register array (a tile's accumulators, a block being transposed) is unrolled
// whatever the optimisation level: GCC unrolls them at -O3 only, and at -O2 (CMake's
// RelWithDebInfo, what most applications build with) the arrays lived on the stack and every
// product ran at a third of its rate.
#define REWIND_UNROLLED _Pragma("GCC unroll 16")

/// The operands of one block of k: A k-major (A(i, kk) = a[kk lda + i]), B(kk, j) = b[kk sk + j sj],
/// C column-major with ldc; `add` starts from C's values, else from `bias` down every column
/// (its rows), else from zero.
struct operands {
  const float* a;
  std::size_t lda;
  const float* b;
  std::size_t sk, sj;
  float* c;
  std::size_t ldc;
  std::size_t k;
  bool add;
  const float* bias;
};

/// C(16 MB rows, NB columns) from A and B's first NB columns.
template <int MB, int NB>
inline void tile(const operands& o) {
  __m512 acc[MB][NB];
  if (o.add) {
    REWIND_UNROLLED for (int j = 0; j < NB; ++j)
      REWIND_UNROLLED for (int i = 0; i < MB; ++i) acc[i][j] = _mm512_loadu_ps(o.c + j * o.ldc + 16 * i);
  } else {
    __m512 start[MB];
    REWIND_UNROLLED for (int i = 0; i < MB; ++i) start[i] = o.bias ? _mm512_loadu_ps(o.bias + 16 * i) : _mm512_setzero_ps();
    REWIND_UNROLLED for (int j = 0; j < NB; ++j)
      REWIND_UNROLLED for (int i = 0; i < MB; ++i) acc[i][j] = start[i];
  }
  for (std::size_t kk = 0; kk < o.k; ++kk) {
    __m512 av[MB];
    REWIND_UNROLLED for (int i = 0; i < MB; ++i) av[i] = _mm512_loadu_ps(o.a + kk * o.lda + 16 * i);
    const float* bk = o.b + kk * o.sk;
    REWIND_UNROLLED for (int j = 0; j < NB; ++j) {
      const __m512 bv = _mm512_set1_ps(bk[j * o.sj]);
      REWIND_UNROLLED for (int i = 0; i < MB; ++i) acc[i][j] = _mm512_fmadd_ps(av[i], bv, acc[i][j]);
    }
  }
  REWIND_UNROLLED for (int j = 0; j < NB; ++j)
    REWIND_UNROLLED for (int i = 0; i < MB; ++i) _mm512_storeu_ps(o.c + j * o.ldc + 16 * i, acc[i][j]);
}

/// n columns in tiles of NB, the rest in tiles of NB / 2, NB / 4, ... down to one column.
template <int MB, int NB>
inline void columns(operands o, std::size_t n) {
  std::size_t j = 0;
  for (; j + NB <= n; j += NB) {
    tile<MB, NB>(o);
    o.b += NB * o.sj, o.c += NB * o.ldc;
  }
  if constexpr (NB > 1)
    if (j < n) columns<MB, NB / 2>(o, n - j);
}

/// Columns per tile: enough independent accumulators to keep both FMA units busy, few enough to
/// stay in registers; with B's columns far apart (sj > 1) fewer, which its loads favour.
template <int MB>
inline void rows(const operands& o, std::size_t n) {
  if constexpr (MB == 1) o.sj == 1 ? columns<1, 16>(o, n) : columns<1, 8>(o, n);
  else if constexpr (MB == 2) columns<2, 12>(o, n);
  else if constexpr (MB == 3) columns<3, 8>(o, n);
  else columns<4, 6>(o, n);
}

/// Transposes a 16 x 16 block in registers: r[i] holds row i on entry, column i on exit.
inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16], u[16];
  REWIND_UNROLLED for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  // u[4g + c], 128-bit lane q: rows 4g .. 4g + 3 of column 4q + c
  REWIND_UNROLLED for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  REWIND_UNROLLED for (int c = 0; c < 4; ++c) {  // column 4q + c: lane q of u[c], u[4 + c], u[8 + c], u[12 + c]
    const __m512 even_a = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), even_b = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 odd_a = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD), odd_b = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(even_a, even_b, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(even_a, even_b, 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(odd_a, odd_b, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(odd_a, odd_b, 0xDD);
  }
}

/// Rows r0 .. r0 + rows of op(A) = A^T (A stored k x m, column-major: op(A)(i, kk) = a[i k + kk])
/// for kk in [k0, k0 + kn), k-major into `packed` (packed[kk' rows + i']), in 16 x 16 blocks
/// transposed in registers.
inline void pack_transposed(const float* a, std::size_t k, std::size_t r0, std::size_t rows, std::size_t k0, std::size_t kn, float* packed) {
  for (std::size_t i = 0; i < rows; i += 16) {
    const float* from = a + (r0 + i) * k + k0;
    std::size_t kk = 0;
    for (; kk + 16 <= kn; kk += 16) {
      __m512 block[16];
      REWIND_UNROLLED for (std::size_t r = 0; r < 16; ++r) block[r] = _mm512_loadu_ps(from + r * k + kk);
      transpose16(block);  // block[c]: column kk + c of the 16 rows
      REWIND_UNROLLED for (std::size_t c = 0; c < 16; ++c) _mm512_storeu_ps(packed + (kk + c) * rows + i, block[c]);
    }
    for (; kk < kn; ++kk)
      for (std::size_t r = 0; r < 16; ++r) packed[kk * rows + i + r] = from[r * k + kk];
  }
}

#undef REWIND_UNROLLED
}  // namespace thin

/// C (m x n, column-major) = op(A) op(B), or += with `add`, or + bias (m values, added down
/// every column: each element's chain of multiply-adds starts from its row's bias); op(A) is
/// m x k, A column-major (transposed where ta: stored k x m); B(kk, j) = b[kk sk + j sj]; m a
/// multiple of 16. Blocks of k run one after another over all of C, in slices of at most 64 rows,
/// each slice's block of A (32 KB) in the L1 cache; a transposed A's is copied k-major first (on
/// the stack). Only where thin_gemm_runs.
inline void thin_gemm(bool ta, std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b, std::size_t sk, std::size_t sj, bool add,
                      float* c, const float* bias = nullptr) {
  constexpr std::size_t block = 64 * 128;  // floats: 32 KB
  alignas(64) float packed[block];
  const std::size_t kc = block / std::min<std::size_t>(m, 64);
  for (std::size_t k0 = 0; k0 < k || k0 == 0; k0 += kc) {  // once where k is 0: C zeroed, or left as it is
    const std::size_t kn = std::min(kc, k - k0);
    for (std::size_t r0 = 0; r0 < m; r0 += 64) {
      const std::size_t rows = std::min<std::size_t>(m - r0, 64);
      thin::operands o{a + k0 * m + r0, m, b + k0 * sk, sk, sj, c + r0, m, kn, add || k0 > 0, bias && !add ? bias + r0 : nullptr};
      if (ta) {
        thin::pack_transposed(a, k, r0, rows, k0, kn, packed);
        o.a = packed, o.lda = rows;
      }
      switch (rows / 16) {
        case 1: thin::rows<1>(o, n); break;
        case 2: thin::rows<2>(o, n); break;
        case 3: thin::rows<3>(o, n); break;
        default: thin::rows<4>(o, n); break;
      }
    }
  }
}
#ifdef REWIND_THIN_GEMM_DISPATCH
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
REWIND_TARGET_POP
#endif
#endif

}  // namespace rwd::cpu::detail
