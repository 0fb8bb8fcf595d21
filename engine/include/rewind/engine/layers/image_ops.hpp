// rewind engine: the per-index work of the convolution and normalization layers, as plain-data
// functors with a __host__ __device__ call operator. An executor runs them through its `each`
// primitive (a loop on the CPU and in the tests, a kernel on the GPU), so each is written once.
//
// Layout (rwd::tensor_shape): a sample of shape c x h x w is one column of the batch, positions
// in row-major order, the c channels of a position contiguous; n samples are a c x (h w n)
// column-major matrix. A convolution's patch matrix ("columns") has one column per position of
// every sample, c K K rows in the order (channel, ky, kx), which is the order of a weight
// row of torch.nn.Conv2d, so W (out x c K K, stored as its transpose) times the patches is the
// convolution of the whole batch in one GEMM.
#pragma once

#include <cmath>
#include <cstddef>

#include <span>
#include <string>
#include <vector>

#include <rewind/config.hpp>
#include <rewind/diagnostics.hpp>
#include <rewind/tensor_shape.hpp>

namespace rwd {

/// The geometry of a same-padded K x K convolution's input: c channels of h x w positions.
struct patch_geometry {
  std::size_t c = 0, h = 0, w = 0, k = 1;
  REWIND_HOST_DEVICE std::size_t rows() const { return c * k * k; }
};

/// Patch column `col` (a position of a sample) from the input x: rows (channel, ky, kx), zero
/// outside the image.
template <class T>
struct im2col_op {
  const T* x;
  T* cols;
  patch_geometry g;
  REWIND_HOST_DEVICE void operator()(std::size_t col) const {
    const std::size_t hw = g.h * g.w, p = col % hw, base = col - p, k = g.k, c = g.c;
    const long long y = static_cast<long long>(p / g.w), x0 = static_cast<long long>(p % g.w), r = static_cast<long long>(k / 2);
    T* out = cols + col * g.rows();
    for (std::size_t ky = 0; ky < k; ++ky)
      for (std::size_t kx = 0; kx < k; ++kx) {
        const long long yy = y + static_cast<long long>(ky) - r, xx = x0 + static_cast<long long>(kx) - r;
        const bool inside = yy >= 0 && xx >= 0 && yy < static_cast<long long>(g.h) && xx < static_cast<long long>(g.w);
        const T* src = inside ? x + (base + static_cast<std::size_t>(yy) * g.w + static_cast<std::size_t>(xx)) * c : nullptr;
        for (std::size_t ch = 0; ch < c; ++ch) out[(ch * k + ky) * k + kx] = inside ? src[ch] : T(0);
      }
  }
};

/// The input cotangent at position `col` from the patches' cotangent: the sum, over the taps
/// that read this position, of their entries (a gather: no two indices write the same place).
template <class T>
struct col2im_op {
  const T* dcols;
  T* dx;
  patch_geometry g;
  REWIND_HOST_DEVICE void operator()(std::size_t col) const {
    const std::size_t hw = g.h * g.w, p = col % hw, base = col - p, k = g.k, c = g.c, rows = g.rows();
    const long long y = static_cast<long long>(p / g.w), x0 = static_cast<long long>(p % g.w), r = static_cast<long long>(k / 2);
    T* out = dx + col * c;
    for (std::size_t ch = 0; ch < c; ++ch) out[ch] = T(0);
    for (std::size_t ky = 0; ky < k; ++ky)
      for (std::size_t kx = 0; kx < k; ++kx) {
        // the patch centred at (y - ky + r, x - kx + r) reads this position through tap (ky, kx)
        const long long yy = y - static_cast<long long>(ky) + r, xx = x0 - static_cast<long long>(kx) + r;
        if (yy < 0 || xx < 0 || yy >= static_cast<long long>(g.h) || xx >= static_cast<long long>(g.w)) continue;
        const T* src = dcols + (base + static_cast<std::size_t>(yy) * g.w + static_cast<std::size_t>(xx)) * rows + ky * k + kx;
        for (std::size_t ch = 0; ch < c; ++ch) out[ch] += src[ch * k * k];
      }
  }
};

/// The geometry of a group normalization: c channels in `groups` groups, hw positions.
struct group_geometry {
  std::size_t c = 0, hw = 0, groups = 1;
  REWIND_HOST_DEVICE std::size_t per_group() const { return c / groups; }
  REWIND_HOST_DEVICE std::size_t count() const { return per_group() * hw; }
};

/// The epsilon added to a group's variance (torch.nn.GroupNorm's default).
inline constexpr double group_norm_eps = 1e-5;

/// Group i = (sample i / groups, group i % groups): its mean and 1/sqrt(variance + eps) into
/// stats[2i], stats[2i + 1] (two passes: the variance of the centred values), and, where y is
/// set, y = (x - mean) rstd gamma + beta over the group.
template <class T>
struct group_norm_op {
  const T* x;
  T* y;
  const T* gamma;  // then beta, c further on
  T* stats;
  group_geometry g;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    using std::sqrt;
    const std::size_t b = i / g.groups, first = (i % g.groups) * g.per_group(), cg = g.per_group();
    const T* xs = x + b * g.hw * g.c + first;
    T sum = 0;
    for (std::size_t p = 0; p < g.hw; ++p)
      for (std::size_t ch = 0; ch < cg; ++ch) sum += xs[p * g.c + ch];
    const T mean = sum / static_cast<T>(g.count());
    T var = 0;
    for (std::size_t p = 0; p < g.hw; ++p)
      for (std::size_t ch = 0; ch < cg; ++ch) {
        const T d = xs[p * g.c + ch] - mean;
        var += d * d;
      }
    const T rstd = T(1) / sqrt(var / static_cast<T>(g.count()) + static_cast<T>(group_norm_eps));
    if (stats) stats[2 * i] = mean, stats[2 * i + 1] = rstd;
    if (!y) return;
    T* ys = y + b * g.hw * g.c + first;
    for (std::size_t p = 0; p < g.hw; ++p)
      for (std::size_t ch = 0; ch < cg; ++ch)
        ys[p * g.c + ch] = (xs[p * g.c + ch] - mean) * rstd * gamma[first + ch] + gamma[g.c + first + ch];
  }
};

/// Channel ch's parameter gradients over `batch` samples: dgamma += sum of gy xhat, dbeta += sum
/// of gy (grads: dgamma then dbeta), from the stats group_norm_op left.
template <class T>
struct group_norm_parameter_gradient_op {
  const T* x;
  const T* gy;
  const T* stats;
  T* grads;
  group_geometry g;
  std::size_t batch;
  REWIND_HOST_DEVICE void operator()(std::size_t ch) const {
    const std::size_t group = ch / g.per_group();
    T dgamma = 0, dbeta = 0;
    for (std::size_t b = 0; b < batch; ++b) {
      const T mean = stats[2 * (b * g.groups + group)], rstd = stats[2 * (b * g.groups + group) + 1];
      const std::size_t at = b * g.hw * g.c + ch;
      for (std::size_t p = 0; p < g.hw; ++p) {
        const T d = gy[at + p * g.c];
        dgamma += d * (x[at + p * g.c] - mean) * rstd;
        dbeta += d;
      }
    }
    grads[ch] += dgamma;
    grads[g.c + ch] += dbeta;
  }
};

/// Group i's input cotangent: dx = rstd (gy gamma - mean(gy gamma) - xhat mean(gy gamma xhat)).
/// dx may be gy itself: each element is read before it is written.
template <class T>
struct group_norm_backward_op {
  const T* x;
  const T* gy;
  const T* gamma;
  const T* stats;
  T* dx;
  group_geometry g;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t b = i / g.groups, first = (i % g.groups) * g.per_group(), cg = g.per_group(), at = b * g.hw * g.c + first;
    const T mean = stats[2 * i], rstd = stats[2 * i + 1];
    T s1 = 0, s2 = 0;
    for (std::size_t p = 0; p < g.hw; ++p)
      for (std::size_t ch = 0; ch < cg; ++ch) {
        const std::size_t e = at + p * g.c + ch;
        const T d = gy[e] * gamma[first + ch];
        s1 += d;
        s2 += d * (x[e] - mean) * rstd;
      }
    const T n = static_cast<T>(g.count());
    s1 /= n;
    s2 /= n;
    for (std::size_t p = 0; p < g.hw; ++p)
      for (std::size_t ch = 0; ch < cg; ++ch) {
        const std::size_t e = at + p * g.c + ch;
        dx[e] = rstd * (gy[e] * gamma[first + ch] - s1 - (x[e] - mean) * rstd * s2);
      }
  }
};

/// The shape space_to_depth makes of s: 4c x h/2 x w/2.
constexpr tensor_shape squeezed(tensor_shape s) { return {4 * s.c, s.h / 2, s.w / 2}; }

/// Space to depth by 2 (Glow's and i-RevNet's squeeze; torch.nn.functional.pixel_unshuffle(x, 2)):
/// a c x h x w sample (h, w even) becomes 4c x h/2 x w/2, input channel ch at (2y + dy, 2x + dx)
/// going to channel 4 ch + 2 dy + dx at (y, x). A permutation: nothing is lost, nothing stored.
/// Per output position `col` of every sample; with `forward` false it undoes itself
/// (depth_to_space, pixel_shuffle), reading `out` and writing `in`.
template <class T>
struct squeeze_op {
  T* in;  // c x h x w per sample
  T* out; // 4c x h/2 x w/2 per sample
  tensor_shape s;
  bool forward = true;
  REWIND_HOST_DEVICE void operator()(std::size_t col) const {
    const std::size_t h2 = s.h / 2, w2 = s.w / 2, q = col % (h2 * w2), b = col / (h2 * w2), y = q / w2, x = q % w2;
    for (std::size_t dy = 0; dy < 2; ++dy)
      for (std::size_t dx = 0; dx < 2; ++dx) {
        T* from = in + (b * s.h * s.w + (2 * y + dy) * s.w + 2 * x + dx) * s.c;
        T* to = out + col * 4 * s.c + 2 * dy + dx;
        for (std::size_t ch = 0; ch < s.c; ++ch) {
          if (forward) to[4 * ch] = from[ch];
          else from[ch] = to[4 * ch];
        }
      }
  }
};

/// A batch of `batch` samples of shape s squeezed (on the host): the 4c x h/2 x w/2 samples.
/// Refuses an odd height or width, or a batch of the wrong size.
template <class T>
std::vector<T> space_to_depth(std::span<const T> in, tensor_shape s, std::size_t batch) {
  if (s.h % 2 || s.w % 2) throw error("rewind: squeeze needs an even height and width, not " + s.text());
  if (in.size() != s.size() * batch)
    throw error("rewind: squeeze: " + std::to_string(in.size()) + " values are not " + std::to_string(batch) + " samples of " + s.text());
  std::vector<T> out(in.size());
  const squeeze_op<T> op{const_cast<T*>(in.data()), out.data(), s, true};  // forward: reads `in` only
  for (std::size_t col = 0, n = squeezed(s).positions() * batch; col < n; ++col) op(col);
  return out;
}

}  // namespace rwd
