// rewind cpu: learned maps on the CPU: the engine's map runner (rewind/engine/map_runner.hpp)
// over Eigen. A dense layer is one GEMM; its bias and the activation after it are vectorised
// passes. A product whose result has a multiple of 16 rows runs through thin_gemm where the CPU
// has it (faster than Eigen's on every such product of the shipped networks) when it runs on one
// thread: inside a team, or where Eigen has one (else Eigen splits it over its threads).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>

#include <rewind/diagnostics.hpp>
#include <rewind/engine/map_runner.hpp>

#include "lower.hpp"
#include "thin_gemm.hpp"
#include "threads.hpp"

namespace rwd::cpu {

/// The map primitives (rwd::map_executor) in Eigen, on the calling thread's Eigen settings.
template <class T>
struct map_ops {
  using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  using vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;
  using array = Eigen::Array<T, Eigen::Dynamic, 1>;
  using index = Eigen::Index;

  void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, T beta, T* c) const {
#ifdef REWIND_THIN_GEMM
    if constexpr (std::is_same_v<T, float>) {
      if (!(ta && tb) && thin(m)) {
        if (tb) detail::thin_gemm(ta, m, n, k, a, b, n, 1, beta != T(0), c);  // B(kk, j) = b[kk n + j]
        else detail::thin_gemm(ta, m, n, k, a, b, 1, k, beta != T(0), c);
        return;
      }
    }
#endif
    eigen_gemm(ta, tb, m, n, k, a, b, beta, c);
  }
  /// C = A B + bias down every column (A m x k, B k x n): a dense layer with its bias in one pass,
  /// where thin_gemm runs it (its chains of multiply-adds start from the bias); else gemm, then
  /// bias.
  void gemm_bias(std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, const T* bias_of_rows, T* c) const {
#ifdef REWIND_THIN_GEMM
    if constexpr (std::is_same_v<T, float>) {
      if (thin(m)) {
        detail::thin_gemm(false, m, n, k, a, b, 1, k, false, c, bias_of_rows);
        return;
      }
    }
#endif
    gemm(false, false, m, n, k, a, b, T(0), c);
    bias<void>(c, bias_of_rows, m, n);
  }
  /// Whether a product with m rows runs through thin_gemm: where it takes m, on one thread (a
  /// team's, or Eigen's set to one; Eigen's own threads are faster for a whole batch).
  static bool thin(std::size_t m) { return detail::thin_gemm_takes(m) && (detail::in_team() || Eigen::nbThreads() == 1); }
  /// gemm through Eigen's products alone (on Eigen's threads, outside a team).
  static void eigen_gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a, const T* b, T beta, T* c) {
    if (ta && tb) throw error("rewind: map_ops::gemm: op(A) and op(B) cannot both be transposed");
    const auto im = static_cast<index>(m), in = static_cast<index>(n), ik = static_cast<index>(k);
    Eigen::Map<const matrix> A(a, ta ? ik : im, ta ? im : ik), B(b, tb ? in : ik, tb ? ik : in);
    Eigen::Map<matrix> C(c, im, in);
    const auto run = [&](const auto& product) {
      if (beta == T(0)) C.noalias() = product;
      else C.noalias() += product;
    };
    if (ta) run(A.transpose() * B);
    else if (tb) run(A * B.transpose());
    else run(A * B);
  }
  template <class Fn>
  void bias(T* y, const T* b, std::size_t rows, std::size_t cols) const {
    Eigen::Map<matrix> Y(y, static_cast<index>(rows), static_cast<index>(cols));
    Eigen::Map<const vector> B(b, static_cast<index>(rows));
    if constexpr (std::is_void_v<Fn>) Y.colwise() += B;
    else {
      // the bias, then the function over the whole block as one array: Eigen evaluates a
      // function of a broadcast (Y.colwise() + B) one element at a time, through the scalar tanh
      // (ten times slower on a 16 x 32 block, the same bits), and column by column it peels each
      // short column to its alignment in scalars
      Y.colwise() += B;
      activation<Fn>(y, y, rows * cols);
    }
  }
  template <class Fn>
  void activation(const T* x, T* y, std::size_t n) const {
    Eigen::Map<array>(y, static_cast<index>(n)) = Fn::value(detail::array_view<T>(x, static_cast<index>(n)));
  }
  void bias_gradient(const T* g, T* gb, std::size_t rows, std::size_t cols) const {
    Eigen::Map<vector>(gb, static_cast<index>(rows)) += Eigen::Map<const matrix>(g, static_cast<index>(rows), static_cast<index>(cols)).rowwise().sum();
  }
  template <class Fn>
  void activation_backward(T* g, const T* y, T* copy, std::size_t n) const {
    Eigen::Map<array> G(g, static_cast<index>(n));
    G *= Fn::derivative_from_output(detail::array_view<T>(y, static_cast<index>(n)));
    if (copy) Eigen::Map<array>(copy, static_cast<index>(n)) = G;
  }
  /// Columns per tile of a convolution's patch matrix with `rows` rows: about 512 KB of it, so
  /// that the patches are written, packed and read back in the core's cache, not in memory.
  std::size_t patch_tile_columns(std::size_t rows) const { return std::max<std::size_t>(128, (std::size_t{512} << 10) / (rows * sizeof(T))); }
  template <class Op>
  void each(const Op& op, std::size_t n) const {
    for (std::size_t i = 0; i < n; ++i) op(i);
  }
};

/// Runs map M forward and backward over caller-provided buffers on the CPU.
template <class M, class T>
using map_runner = rwd::map_runner<M, T, map_ops<T>>;

}  // namespace rwd::cpu
