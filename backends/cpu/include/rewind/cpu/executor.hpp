// rewind cpu: the step executor (rewind/engine/step.hpp) over Eigen. An expression is lowered to
// one Eigen array expression and evaluated in one fused, vectorised pass (lower.hpp); maps run on
// Eigen's GEMM (maps.hpp).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include <rewind/engine/step.hpp>

#include "lower.hpp"
#include "maps.hpp"

namespace rwd::cpu {

template <class T>
struct executor {
  using array = Eigen::Array<T, Eigen::Dynamic, 1>;
  using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
  const env* bindings = nullptr;  // the model's runtime scalars, for alpha's range

  map_ops<T> maps() const { return {}; }

  template <class Layout, class E, class Frame>
  void assign(const Frame& f, T* out, std::size_t n) const {
    const auto len = static_cast<Eigen::Index>(n);
    Eigen::Map<array>(out, len) = lower<Layout, E, T>(f, len);
  }
  template <class Layout, class E, class Frame>
  void accumulate(const Frame& f, T* out, std::size_t n) const {
    const auto len = static_cast<Eigen::Index>(n);
    Eigen::Map<array>(out, len) += lower<Layout, E, T>(f, len);
  }
  void copy(T* dst, const T* src, std::size_t n) const { std::copy_n(src, n, dst); }

  /// target <- Rhs (update U's right-hand side or its inverse's). Each element reads only itself,
  /// so the target may be one of Rhs's operands. For an alpha that reads the data, in pieces that
  /// stay in the cache, alpha is evaluated per element first and counted where it is zero,
  /// denormal, not finite or outside its range (alpha_bounds); any such element is rewind E002
  /// naming the update and the layer (the state is then void, as the step that throws).
  template <class Layout, class U, class Rhs, class Frame>
  void update(const Frame& f, T* target, std::size_t count, update_site at) const {
    const auto n = static_cast<Eigen::Index>(count);
    Eigen::Map<array> s(target, n);
    if constexpr (coefficient_kind_of<U>() != coefficient_kind::data_dependent) {
      s = lower<Layout, Rhs, T>(f, n);
    } else {
      const auto alpha = lower<Layout, typename U::alpha, T>(f, n);
      const auto rhs = lower<Layout, Rhs, T>(f, n);
      const alpha_bounds<T> bounds = alpha_bounds_of<T, U>(*bindings);
      constexpr Eigen::Index piece = 512;
      Eigen::Array<T, piece, 1> a;
      Eigen::Index bad = 0;
      for (Eigen::Index i = 0; i < n; i += piece) {
        const Eigen::Index len = std::min(piece, n - i);
        auto ai = a.head(len);
        ai = alpha.segment(i, len);
        bad += len - (ai.abs() >= std::numeric_limits<T>::min() && ai.abs() <= std::numeric_limits<T>::max() && ai >= bounds.lo &&
                      ai <= bounds.hi)
                         .count();
        s.segment(i, len) = rhs.segment(i, len);
      }
      if (bad > 0) [[unlikely]]
        throw error(rwd::e002_elements(U::text(), to_string(range_of(typename U::alpha{}, *bindings)), at.layer,
                                       static_cast<std::size_t>(bad), count));
    }
  }

  /// Softmax cross-entropy per column of z (classes x count): loss[j] = -log p[label], and z
  /// becomes dloss/dz = (p - onehot) / batch.
  void softmax_cross_entropy(T* z, const int* labels, double* loss, std::size_t classes, std::size_t count, std::size_t batch) const {
    Eigen::Map<matrix> Z(z, static_cast<Eigen::Index>(classes), static_cast<Eigen::Index>(count));
    for (std::size_t j = 0; j < count; ++j) {
      auto col = Z.col(static_cast<Eigen::Index>(j));
      const int label = labels[j];
      const T top = col.maxCoeff();
      col = (col.array() - top).exp();
      col /= col.sum();
      loss[j] = -std::log(std::max(static_cast<double>(col(label)), 1e-300));
      col(label) -= T(1);
      col /= static_cast<T>(batch);
    }
  }
};

}  // namespace rwd::cpu
