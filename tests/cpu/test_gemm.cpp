// The CPU executor's GEMM (map_ops::gemm): Eigen, or thin_gemm for products whose result has a
// multiple of 16 rows where the CPU has AVX-512 and the call runs on one thread (Eigen's setting,
// or inside a team; the tests set Eigen's to one). The portable build runs thin_gemm's copy
// chosen at run time. Every shape class either takes is held to a double-precision loop:
// rows in and out of thin_gemm's register tiles and 64-row slices, columns that leave ragged
// tiles, k over several of its blocks, A or B transposed, C replaced (whatever it held) or added to;
// gemm_bias, whose chains start from the bias; and the bias fused into an activation.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <rewind/cpu/maps.hpp>

namespace {

struct product {
  bool ta, tb;
  std::size_t m, n, k;
};

std::vector<float> random_values(std::size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = d(rng);
  return v;
}

// op(A)(i, kk) and op(B)(kk, j) as map_ops reads them (column-major, BLAS's conventions)
double a_at(const product& p, const std::vector<float>& a, std::size_t i, std::size_t kk) { return p.ta ? a[i * p.k + kk] : a[kk * p.m + i]; }
double b_at(const product& p, const std::vector<float>& b, std::size_t kk, std::size_t j) { return p.tb ? b[kk * p.n + j] : b[j * p.k + kk]; }

// C's worst error against the double loop, in units of k eps (|A| |B| <= 1 elementwise); with
// `bias`, through gemm_bias (C replaced by A B + a bias down every column)
double worst_error(const product& p, bool add, std::mt19937& rng, bool bias = false) {
  const auto a = random_values(p.m * p.k, rng), b = random_values(p.k * p.n, rng), c0 = random_values(p.m * p.n, rng);
  const auto rows = bias ? random_values(p.m, rng) : std::vector<float>(p.m, 0.0f);
  std::vector<float> c = c0;
  if (!add) std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());  // replaced, never read
  if (bias) rwd::cpu::map_ops<float>{}.gemm_bias(p.m, p.n, p.k, a.data(), b.data(), rows.data(), c.data());
  else rwd::cpu::map_ops<float>{}.gemm(p.ta, p.tb, p.m, p.n, p.k, a.data(), b.data(), add ? 1.0f : 0.0f, c.data());
  double worst = 0;
  for (std::size_t j = 0; j < p.n; ++j)
    for (std::size_t i = 0; i < p.m; ++i) {
      double want = add ? c0[j * p.m + i] : rows[i];
      for (std::size_t kk = 0; kk < p.k; ++kk) want += a_at(p, a, i, kk) * b_at(p, b, kk, j);
      const double got = c[j * p.m + i];
      worst = std::isfinite(got) ? std::max(worst, std::abs(got - want)) : std::numeric_limits<double>::infinity();
    }
  return worst / (static_cast<double>(p.k + 1) * std::numeric_limits<float>::epsilon());
}

}  // namespace

TEST_CASE("gemm: every shape class against a double loop, replacing or adding to C, through thin_gemm and through Eigen") {
  const bool runs = rwd::cpu::detail::thin_gemm_runs;
  const std::string where = std::string("thin_gemm on this CPU in this build: ") + (runs ? "yes" : "no (Eigen only)");
  MESSAGE(where);
  const rwd::cpu::detail::one_gemm_thread alone(true);  // map_ops then takes thin_gemm where it fits
  std::mt19937 rng(7);
  for (bool thin : {runs, false}) {
    rwd::cpu::detail::thin_gemm_runs = thin;
    for (const auto& op : {std::pair{false, false}, {true, false}, {false, true}})
      for (std::size_t m : {1u, 16u, 17u, 32u, 48u, 64u, 80u, 144u})
        for (std::size_t n : {1u, 7u, 37u, 64u, 130u})
          for (std::size_t k : {0u, 1u, 5u, 300u})
            for (bool add : {false, true}) {
              const product p{op.first, op.second, m, n, k};
              CAPTURE(thin);
              CAPTURE(p.ta);
              CAPTURE(p.tb);
              CAPTURE(m);
              CAPTURE(n);
              CAPTURE(k);
              CAPTURE(add);
              CHECK(worst_error(p, add, rng) < 1.0);
            }
  }
  rwd::cpu::detail::thin_gemm_runs = runs;
}

TEST_CASE("gemm: thin_gemm gives a column the same bits whatever the other columns are") {
  if (!rwd::cpu::detail::thin_gemm_takes(32)) {
    MESSAGE("skipped: thin_gemm does not run here (no AVX-512), and Eigen makes no such promise");
    return;
  }
  const rwd::cpu::detail::one_gemm_thread alone(true);  // map_ops then takes thin_gemm where it fits
  // 130 columns run in tiles of 12, 6, 3 and 1 (A transposed: copied k-major in 16 x 16 blocks and
  // a ragged rest); each column alone runs in a tile of one
  std::mt19937 rng(11);
  for (const auto& op : {std::pair{false, false}, {true, false}, {false, true}}) {
    const bool ta = op.first, tb = op.second;  // not a structured binding: clang 14 cannot capture one (CAPTURE)
    CAPTURE(ta);
    CAPTURE(tb);
    const std::size_t m = 32, n = 130, k = 300;
    const auto a = random_values(m * k, rng), b = random_values(k * n, rng);
    std::vector<float> all(m * n), one(m);
    const rwd::cpu::map_ops<float> ops;
    ops.gemm(ta, tb, m, n, k, a.data(), b.data(), 0.0f, all.data());
    for (std::size_t j = 0; j < n; j += 9) {
      CAPTURE(j);
      std::vector<float> column(k);  // op(B)'s column j, as a k x 1 matrix
      for (std::size_t kk = 0; kk < k; ++kk) column[kk] = tb ? b[kk * n + j] : b[j * k + kk];
      ops.gemm(ta, false, m, 1, k, a.data(), column.data(), 0.0f, one.data());
      CHECK(std::equal(one.begin(), one.end(), all.begin() + static_cast<std::ptrdiff_t>(j * m)));
    }
  }
}

TEST_CASE("gemm_bias: C = A B + b down every column, through thin_gemm and through Eigen, against a double loop") {
  const bool runs = rwd::cpu::detail::thin_gemm_runs;
  const rwd::cpu::detail::one_gemm_thread alone(true);  // map_ops then takes thin_gemm where it fits
  std::mt19937 rng(13);
  for (bool thin : {runs, false}) {
    rwd::cpu::detail::thin_gemm_runs = thin;
    for (std::size_t m : {1u, 16u, 17u, 48u, 80u, 784u})
      for (std::size_t n : {1u, 7u, 37u})
        for (std::size_t k : {0u, 1u, 16u, 300u}) {
          CAPTURE(thin);
          CAPTURE(m);
          CAPTURE(n);
          CAPTURE(k);
          CHECK(worst_error(product{false, false, m, n, k}, false, rng, true) < 1.0);
        }
  }
  rwd::cpu::detail::thin_gemm_runs = runs;
}

TEST_CASE("bias with a function: y = fn(y + b) down every column, the same bits as Eigen's element-wise tanh, on any block") {
  // map_ops::bias<Fn> (a dense layer's bias fused into its activation) adds the bias and runs the
  // function over the block as one array; held here to the broadcast expression evaluated element
  // by element, bit for bit, on blocks that start off alignment, with rows under, at and over a
  // vector, and inputs from tiny (tanh(x) = x) to saturated
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> d(-6.0f, 6.0f);
  for (std::size_t rows : {1u, 5u, 16u, 33u, 784u})
    for (std::size_t cols : {1u, 3u, 32u})
      for (std::size_t skew : {0u, 1u, 3u}) {
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(skew);
        std::vector<float> storage(rows * cols + skew), bias(rows);
        for (auto& x : storage) x = d(rng);
        for (auto& x : bias) x = d(rng) / 4;
        for (std::size_t i = 0; i < storage.size(); i += 7) storage[i] = 1e-6f * storage[i];
        float* y = storage.data() + skew;
        Eigen::MatrixXf want = Eigen::Map<Eigen::MatrixXf>(y, static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
        const Eigen::Map<const Eigen::VectorXf> b(bias.data(), static_cast<Eigen::Index>(rows));
        for (Eigen::Index j = 0; j < want.cols(); ++j)
          for (Eigen::Index i = 0; i < want.rows(); ++i) want(i, j) = Eigen::numext::tanh(want(i, j) + b(i));
        rwd::cpu::map_ops<float>{}.bias<rwd::fn::tanh_fn>(y, bias.data(), rows, cols);
        CHECK(std::memcmp(want.data(), y, rows * cols * sizeof(float)) == 0);
      }
}
