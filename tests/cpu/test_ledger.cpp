// The information ledger: bit-exact round trips of multiplication by n/d, negative values too,
// thousands of layers deep with spills, the ledger empty again at the end.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <rewind/cpu.hpp>
#include <vector>

TEST_CASE("ledger: many random rationals, values of both signs, round trips bit for bit") {
  rwd::cpu::memory_tracker t;
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 60; ++trial) {
    const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 97), d = 1 + static_cast<std::int64_t>(rng() % 97);
    const double growth = std::log2(static_cast<double>(n) / static_cast<double>(d));
    const int depth = growth > 0 ? static_cast<int>(15 / growth) : 300;  // stay inside the fixed-point range 2^51
    const std::size_t elements = 32;
    rwd::cpu::ledger l(t, elements, std::lcm(n, d));
    std::vector<std::int64_t> s(elements);
    for (auto& v : s) v = static_cast<std::int64_t>(rng() % (1ull << 36)) - (std::int64_t{1} << 35);
    const auto original = s;
    for (int k = 0; k < depth; ++k)
      for (std::size_t i = 0; i < elements; ++i) s[i] = rwd::cpu::multiply_exact(s[i], n, d, l, i) + (k % 7) - 3;
    for (int k = depth; k-- > 0;)
      for (std::size_t i = 0; i < elements; ++i) s[i] = rwd::cpu::divide_exact(s[i] - ((k % 7) - 3), n, d, l, i);
    CAPTURE(n);
    CAPTURE(d);
    CHECK(s == original);
    CHECK(l.empty());
  }
}

TEST_CASE("ledger: 5000 layers of mu = 9/10 and 3/10, negative values, spills, ledger empty after") {
  rwd::cpu::memory_tracker t;
  for (auto [n, d] : {std::pair<std::int64_t, std::int64_t>{9, 10}, {3, 10}, {99, 100}, {7, 3}}) {
    const std::size_t elements = 256;
    rwd::cpu::ledger l(t, elements, std::lcm(n, d));
    std::mt19937_64 rng(static_cast<unsigned>(n * 131 + d));
    std::vector<std::int64_t> s(elements);
    for (auto& v : s) v = static_cast<std::int64_t>(rng() % (1ull << 36)) - (std::int64_t{1} << 35);
    const auto original = s;
    const int depth = n > d ? 12 : 5000;  // an expanding factor leaves the fixed-point range (2^51) sooner
    std::vector<std::int64_t> added(static_cast<std::size_t>(depth) * elements);
    for (int k = 0; k < depth; ++k)
      for (std::size_t i = 0; i < elements; ++i) {
        const std::int64_t g = static_cast<std::int64_t>(rng() % 2001) - 1000;  // a map output, in fixed point
        added[static_cast<std::size_t>(k) * elements + i] = g;
        s[i] = rwd::cpu::multiply_exact(s[i], n, d, l, i) + g;
      }
    if (n < d) CHECK(l.planes() > 1);  // it spilled past the head
    for (int k = depth; k-- > 0;)
      for (std::size_t i = 0; i < elements; ++i)
        s[i] = rwd::cpu::divide_exact(s[i] - added[static_cast<std::size_t>(k) * elements + i], n, d, l, i);
    CAPTURE(n);
    CAPTURE(d);
    CHECK(s == original);
    CHECK(l.empty());
  }
}

TEST_CASE("ledger: floor semantics for negative values") {
  std::int64_t q, r;
  rwd::cpu::floor_divmod(-7, 10, q, r);
  CHECK(q == -1);
  CHECK(r == 3);
  rwd::cpu::memory_tracker t;
  rwd::cpu::ledger l(t, 1, 90);
  for (std::int64_t v : {-1LL, -10LL, -11LL, -123456789LL, 0LL, 9LL}) {
    const std::int64_t m = rwd::cpu::multiply_exact(v, 9, 10, l, 0);
    CHECK(rwd::cpu::divide_exact(m, 9, 10, l, 0) == v);
    CHECK(l.empty());
  }
}

TEST_CASE("rationalise: runtime coefficients become exact rationals") {
  CHECK(rwd::cpu::rationalise(0.9) == rwd::rational{9, 10});
  CHECK(rwd::cpu::rationalise(0.3) == rwd::rational{3, 10});
  CHECK(rwd::cpu::rationalise(0.999) == rwd::rational{999, 1000});
  CHECK(rwd::cpu::rationalise(1.0) == rwd::rational{1, 1});
  CHECK(rwd::cpu::rationalise(2.5) == rwd::rational{5, 2});
}

TEST_CASE("ledger: a ledger that fills up says so instead of losing bits") {
  rwd::cpu::memory_tracker t;
  rwd::cpu::ledger l(t, 1, 65536);
  std::int64_t s = 12345;
  for (std::size_t k = 0; k < rwd::cpu::ledger::max_planes + 8; ++k) s = rwd::cpu::multiply_exact(s, 1, 65536, l, 0);  // 16 bits a layer
  CHECK(l.planes() == rwd::cpu::ledger::max_planes);
  CHECK_THROWS_WITH_AS(l.settle(), doctest::Contains("the ledger is full"), rwd::error);
}
