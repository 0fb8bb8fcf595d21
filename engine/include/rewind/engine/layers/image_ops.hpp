// rewind engine: the per-index work of the convolution and normalization layers, as plain-data
// functors with a __host__ __device__ call operator. An executor runs them through its `each`
// primitive (a loop on the CPU and in the tests, a kernel on the GPU), so each is written once.
//
// Layout (rwd::tensor_shape): a sample of shape c x h x w is one column of the batch, positions
// in row-major order, the c channels of a position contiguous; n samples are a c x (h w n)
// column-major matrix. A convolution's patch matrix ("columns") has one column per position of
// every sample, K K c rows in the order (ky, kx, channel): each tap's c channels are a
// contiguous copy of one input position. The weights are held in that order (out, ky, kx, in),
// so W (out x K K c, stored as its transpose) times the patches is the convolution of the whole
// batch in one GEMM.
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

/// Where patch column `col` (a position of a sample) sits in a batch of c x h x w samples.
struct patch_site {
  std::size_t base = 0, h = 0, w = 0, c = 0;  // base: the sample's first column
  long long y = 0, x = 0;
  /// The c values at offset (dy, dx) from the site in v (one sample after another, a position's
  /// channels contiguous), or nullptr outside the image.
  template <class T>
  REWIND_HOST_DEVICE const T* at(const T* v, long long dy, long long dx) const {
    const long long yy = y + dy, xx = x + dx;
    if (yy < 0 || xx < 0 || yy >= static_cast<long long>(h) || xx >= static_cast<long long>(w)) return nullptr;
    return v + (base + static_cast<std::size_t>(yy) * w + static_cast<std::size_t>(xx)) * c;
  }
};

/// The geometry of a same-padded K x K convolution's input: c channels of h x w positions.
struct patch_geometry {
  std::size_t c = 0, h = 0, w = 0, k = 1;
  REWIND_HOST_DEVICE std::size_t rows() const { return c * k * k; }
  REWIND_HOST_DEVICE patch_site site(std::size_t col) const {
    const std::size_t p = col % (h * w);
    return {col - p, h, w, c, static_cast<long long>(p / w), static_cast<long long>(p % w)};
  }
  /// Tap t's offset (t - k / 2) along one axis.
  REWIND_HOST_DEVICE long long offset(std::size_t t) const { return static_cast<long long>(t) - static_cast<long long>(k / 2); }
};

/// Patch column `first + i` (a position of a sample) from the input x, into column i of cols:
/// rows (ky, kx, channel), zero outside the image.
template <class T>
struct im2col_op {
  const T* x;
  T* cols;
  patch_geometry g;
  std::size_t first = 0;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    const patch_site site = g.site(first + i);
    const std::size_t k = g.k, c = g.c;
    T* out = cols + i * g.rows();
    for (std::size_t ky = 0; ky < k; ++ky)
      for (std::size_t kx = 0; kx < k; ++kx) {
        const T* src = site.at(x, g.offset(ky), g.offset(kx));
        T* to = out + (ky * k + kx) * c;
        if (src) {
          REWIND_SIMD for (std::size_t ch = 0; ch < c; ++ch) to[ch] = src[ch];
        } else {
          REWIND_SIMD for (std::size_t ch = 0; ch < c; ++ch) to[ch] = T(0);
        }
      }
  }
};

/// Patch column `first + i` of the output cotangent g (c = g's channels), into column i of cols,
/// laid out for the input cotangent as one GEMM with the weights as they are held: rows
/// (channel, ky, kx), row ch K K + ky K + kx holding g's channel ch at the position whose patch
/// reads this one through tap (ky, kx), zero outside the image. The weights (out, K, K, in), read
/// as a column-major in x (out K K) matrix, times these patches are the input cotangent: the
/// transposed convolution as a GEMM as deep as the forward one, with nothing to add up after it.
/// (The same walk as im2col_op's, mirrored, with each channel's taps contiguous instead of each
/// tap's channels: one loop for both ran it a third slower.)
template <class T>
struct cotangent_patches_op {
  const T* g;
  T* cols;
  patch_geometry geo;
  std::size_t first = 0;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    const patch_site site = geo.site(first + i);
    const std::size_t k = geo.k, kk = k * k, c = geo.c;
    T* out = cols + i * geo.rows();
    for (std::size_t ky = 0; ky < k; ++ky)
      for (std::size_t kx = 0; kx < k; ++kx) {
        // the patch centred at (y - ky + r, x - kx + r) reads this position through tap (ky, kx)
        const T* src = site.at(g, -geo.offset(ky), -geo.offset(kx));
        T* to = out + ky * k + kx;
        if (src) {
          REWIND_SIMD for (std::size_t ch = 0; ch < c; ++ch) to[ch * kk] = src[ch];
        } else {
          REWIND_SIMD for (std::size_t ch = 0; ch < c; ++ch) to[ch * kk] = T(0);
        }
      }
  }
};

/// A group normalization's workspace per sample, in units of its channel count c: per channel
/// its group's mean and 1/std, and four sums of the backward pass.
inline constexpr std::size_t group_norm_workspace = 6;

/// The geometry of a group normalization: c channels in `groups` groups, hw positions.
struct group_geometry {
  std::size_t c = 0, hw = 0, groups = 1;
  REWIND_HOST_DEVICE std::size_t per_group() const { return c / groups; }
  REWIND_HOST_DEVICE std::size_t count() const { return per_group() * hw; }
};

/// The epsilon added to a group's variance (torch.nn.GroupNorm's default).
inline constexpr double group_norm_eps = 1e-5;

/// Each group's sum of v over its cg channels (of c), times `scale`, written to every channel of it.
template <class T>
REWIND_HOST_DEVICE void spread_over_groups(T* v, T scale, std::size_t c, std::size_t cg) {
  for (std::size_t first = 0; first < c; first += cg) {
    T sum = 0;
    for (std::size_t ch = first; ch < first + cg; ++ch) sum += v[ch];
    for (std::size_t ch = first; ch < first + cg; ++ch) v[ch] = sum * scale;
  }
}

/// Sample b's group statistics, per channel: ws[ch] = its group's mean, ws[c + ch] = its group's
/// 1/sqrt(variance + eps) (ws: the sample's workspace); the variance is that of the centred
/// values (two passes). Where y is set, also y = (x - mean) rstd gamma + beta. Every pass runs
/// over the sample's positions with the c channels of a position contiguous.
template <class T>
struct group_norm_op {
  const T* x;
  T* y;
  const T* gamma;  // then beta, c further on
  T* work;
  group_geometry g;
  REWIND_HOST_DEVICE void operator()(std::size_t b) const {
    using std::sqrt;
    const std::size_t c = g.c, cg = g.per_group();
    const T* xs = x + b * g.hw * c;
    T* mean = work + b * group_norm_workspace * c;
    T* rstd = mean + c;
    for (std::size_t ch = 0; ch < c; ++ch) mean[ch] = T(0), rstd[ch] = T(0);
    for (std::size_t p = 0; p < g.hw; ++p)
      REWIND_SIMD for (std::size_t ch = 0; ch < c; ++ch) mean[ch] += xs[p * c + ch];
    spread_over_groups(mean, T(1) / static_cast<T>(g.count()), c, cg);  // the group's mean on each of its channels
    for (std::size_t p = 0; p < g.hw; ++p)
      REWIND_SIMD for (std::size_t ch = 0; ch < c; ++ch) {
        const T d = xs[p * c + ch] - mean[ch];
        rstd[ch] += d * d;
      }
    spread_over_groups(rstd, T(1) / static_cast<T>(g.count()), c, cg);
    for (std::size_t ch = 0; ch < c; ++ch) rstd[ch] = T(1) / sqrt(rstd[ch] + static_cast<T>(group_norm_eps));
    if (!y) return;
    T* ys = y + b * g.hw * c;
    for (std::size_t p = 0; p < g.hw; ++p)
      REWIND_SIMD for (std::size_t ch = 0; ch < c; ++ch) ys[p * c + ch] = (xs[p * c + ch] - mean[ch]) * rstd[ch] * gamma[ch] + gamma[c + ch];
  }
};

/// Sample b's input cotangent: dx = rstd (gy gamma - mean(gy gamma) - xhat mean(gy gamma xhat)),
/// the means over each group, from the statistics group_norm_op left; on the way, the sample's
/// parameter gradients per channel, sum of gy and of gy xhat, into its workspace (ws[2c + ch],
/// ws[3c + ch]) for group_norm_parameter_gradient_op. dx may be gy itself: each element is read
/// before it is written.
template <class T>
struct group_norm_backward_op {
  const T* x;
  const T* gy;
  const T* gamma;
  T* work;
  T* dx;
  group_geometry g;
  REWIND_HOST_DEVICE void operator()(std::size_t b) const {
    const std::size_t c = g.c, cg = g.per_group(), at = b * g.hw * c;
    T* ws = work + b * group_norm_workspace * c;
    const T *mean = ws, *rstd = ws + c;
    T *dbeta = ws + 2 * c, *dgamma = ws + 3 * c, *s1 = ws + 4 * c, *s2 = ws + 5 * c;
    for (std::size_t ch = 0; ch < c; ++ch) dbeta[ch] = T(0), dgamma[ch] = T(0);
    for (std::size_t p = 0; p < g.hw; ++p)
      REWIND_SIMD for (std::size_t ch = 0; ch < c; ++ch) {
        const std::size_t e = at + p * c + ch;
        dbeta[ch] += gy[e];
        dgamma[ch] += gy[e] * (x[e] - mean[ch]) * rstd[ch];
      }
    for (std::size_t ch = 0; ch < c; ++ch) s1[ch] = dbeta[ch] * gamma[ch], s2[ch] = dgamma[ch] * gamma[ch];
    spread_over_groups(s1, T(1) / static_cast<T>(g.count()), c, cg);
    spread_over_groups(s2, T(1) / static_cast<T>(g.count()), c, cg);
    for (std::size_t p = 0; p < g.hw; ++p)
      REWIND_SIMD for (std::size_t ch = 0; ch < c; ++ch) {
        const std::size_t e = at + p * c + ch;
        const T xhat = (x[e] - mean[ch]) * rstd[ch];
        dx[e] = rstd[ch] * (gy[e] * gamma[ch] - s1[ch] - xhat * s2[ch]);
      }
  }
};

/// Channel ch's parameter gradients over `batch` samples, in sample order: dgamma += the sum of
/// gy xhat, dbeta += the sum of gy (grads: dgamma then dbeta), from each sample's sums that
/// group_norm_backward_op left.
template <class T>
struct group_norm_parameter_gradient_op {
  const T* work;
  T* grads;
  std::size_t c, batch;
  REWIND_HOST_DEVICE void operator()(std::size_t ch) const {
    T dgamma = 0, dbeta = 0;
    for (std::size_t b = 0; b < batch; ++b) {
      const T* ws = work + b * group_norm_workspace * c;
      dbeta += ws[2 * c + ch];
      dgamma += ws[3 * c + ch];
    }
    grads[ch] += dgamma;
    grads[c + ch] += dbeta;
  }
};

/// x[i] = value for every index i.
template <class T>
struct fill_op {
  T* x;
  T value;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const { x[i] = value; }
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
        REWIND_SIMD for (std::size_t ch = 0; ch < s.c; ++ch) {
          if (forward) to[4 * ch] = from[ch];
          else from[ch] = to[4 * ch];
        }
      }
  }
};

/// Average pooling over k x k windows with stride k of a batch of c x h x w samples, per output
/// position `col` of every sample (c x h/k x w/k each). With `forward` false, its adjoint per
/// input position `col`: dx = g / (k k) of the window holding it (a gather).
template <class T>
struct avg_pool_op {
  T* x;  // c x h x w per sample
  T* y;  // c x h/k x w/k per sample
  tensor_shape s;
  std::size_t k = 2;
  bool forward = true;
  REWIND_HOST_DEVICE void operator()(std::size_t col) const {
    const std::size_t hk = s.h / k, wk = s.w / k, c = s.c;
    const T scale = T(1) / static_cast<T>(k * k);
    if (forward) {
      const std::size_t q = col % (hk * wk), b = col / (hk * wk), oy = q / wk, ox = q % wk;
      T* to = y + col * c;
      for (std::size_t ch = 0; ch < c; ++ch) to[ch] = T(0);
      for (std::size_t dy = 0; dy < k; ++dy)
        for (std::size_t dx = 0; dx < k; ++dx) {
          const T* from = x + (b * s.h * s.w + (oy * k + dy) * s.w + ox * k + dx) * c;
          REWIND_SIMD for (std::size_t ch = 0; ch < c; ++ch) to[ch] += from[ch];
        }
      for (std::size_t ch = 0; ch < c; ++ch) to[ch] *= scale;
    } else {
      const std::size_t q = col % (s.h * s.w), b = col / (s.h * s.w), iy = q / s.w, ix = q % s.w;
      const T* from = y + (b * hk * wk + (iy / k) * wk + ix / k) * c;
      T* to = x + col * c;
      REWIND_SIMD for (std::size_t ch = 0; ch < c; ++ch) to[ch] = from[ch] * scale;
    }
  }
};

/// Global average pooling of a batch of c x h x w samples, per index j c + ch of the pooled
/// c x batch matrix: pooled[j c + ch] = the mean of sample j's channel ch over its positions.
/// With `forward` false, its adjoint per index i of the batch: x[i] = pooled[j c + ch] / (h w)
/// for sample j's channel ch at any position.
template <class T>
struct pool_op {
  T* x;       // c x h x w per sample
  T* pooled;  // c per sample
  tensor_shape s;
  bool forward = true;
  REWIND_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t n = s.size(), positions = s.h * s.w;
    if (forward) {
      const T* from = x + i / s.c * n + i % s.c;
      T sum = 0;
      for (std::size_t p = 0; p < positions; ++p) sum += from[p * s.c];
      pooled[i] = sum / static_cast<T>(positions);
    } else {
      x[i] = pooled[i / n * s.c + i % s.c] / static_cast<T>(positions);
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
