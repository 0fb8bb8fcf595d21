// The information ledger: bit-exact round trips of multiplication by n/d, negative values too,
// thousands of layers deep with spills, the ledger empty again at the end.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
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
    rwd::cpu::ledger l(t, elements, {rwd::rational{n, d}});
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
  for (const auto& nd : {std::pair<std::int64_t, std::int64_t>{9, 10}, {3, 10}, {99, 100}, {7, 3}}) {
    const std::int64_t n = nd.first, d = nd.second;  // not a structured binding: clang 14 cannot capture one
    const std::size_t elements = 256;
    rwd::cpu::ledger l(t, elements, {rwd::rational{n, d}});
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
  rwd::cpu::ledger l(t, 1, {rwd::rational{9, 10}});
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
  rwd::cpu::ledger l(t, 1, {rwd::rational{1, 65536}});
  std::int64_t s = 12345;
  for (std::size_t k = 0; k < rwd::cpu::ledger::max_planes + 8; ++k) s = rwd::cpu::multiply_exact(s, 1, 65536, l, 0);  // 16 bits a layer
  CHECK(l.planes() == rwd::cpu::ledger::max_planes);
  CHECK_THROWS_WITH_AS(l.settle(), doctest::Contains("the ledger is full"), rwd::error);
}

namespace {
// A test case runs once with each copy of the loops this build carries and the CPU runs (a
// build for any x86-64 carries AVX-512 and AVX2 copies chosen at run time, besides its own); the
// choice is put back at the end, also when a check throws.
struct each_copy_of_the_loops {
  std::string was{rwd::cpu::exact_loops()};
  each_copy_of_the_loops() {
    std::vector<const char*> here;  // the copies in this build that this CPU runs
    for (const char* copy : {"avx512", "avx2", "portable"}) {
      try {
        rwd::cpu::use_exact_loops(copy);
        here.push_back(copy);
      } catch (const rwd::error&) {
      }
    }
    rwd::cpu::use_exact_loops(was);
    for (const char* copy : here)
      SUBCASE(copy) { rwd::cpu::use_exact_loops(copy); }
  }
  ~each_copy_of_the_loops() { rwd::cpu::use_exact_loops(was); }
  each_copy_of_the_loops(const each_copy_of_the_loops&) = delete;
  each_copy_of_the_loops& operator=(const each_copy_of_the_loops&) = delete;
};

// One layer of the scalar reference: each element through multiply_exact / divide_exact.
void reference_layer(std::vector<std::int64_t>& s, const std::vector<float>& g, std::vector<float>& shadow, rwd::cpu::fixed_point fp,
                     const rwd::cpu::exact_ratio& a, rwd::cpu::ledger& l, std::size_t first, bool forward) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    std::int64_t out;
    const std::int64_t G = fp.round(static_cast<double>(g[i]), out);
    s[i] = forward ? rwd::cpu::multiply_exact(s[i], a, l, first + i) + G : rwd::cpu::divide_exact(s[i] - G, a, l, first + i);
    shadow[i] = fp.value<float>(s[i]);
  }
}
}  // namespace

TEST_CASE("ledger: the vectorised loop is the scalar arithmetic, on one thread or two, blocks partial, slots offset") {
  [[maybe_unused]] const each_copy_of_the_loops copies;
  rwd::cpu::memory_tracker t;
  const std::size_t elements = 20000 + 77;  // past the threaded size, the last block partial
  const auto fp = rwd::cpu::fixed_point::of(30);
  for (const auto& nd : {std::pair<std::int64_t, std::int64_t>{9, 10}, {3, 10}, {99, 100}, {7, 3}, {65535, 65536}}) {
    const std::int64_t n = nd.first, d = nd.second;
    // a shrinking factor: layers for 40 bits of growth (two spills and refills; 9/10 spills every
    // ~100 layers), at least 40; ratios near 1 (99/100: 0.015 bits a layer) never spill, 40 layers
    const double spill_depth = std::ceil(40 / std::log2(static_cast<double>(d) / static_cast<double>(n)));
    const int depth = n > d ? 10 : spill_depth <= 400 ? std::max(40, static_cast<int>(spill_depth)) : 40;
    std::mt19937_64 rng(static_cast<unsigned>(n + d));
    std::vector<std::int64_t> start(elements);
    const int bits = n > d ? 24 : 32;  // 7/3 leaves the range 2^51 after about 30 bits of growth
    for (auto& v : start) v = static_cast<std::int64_t>(rng() % (1ull << bits)) - (std::int64_t{1} << (bits - 1));
    std::vector<std::vector<float>> g(static_cast<std::size_t>(depth), std::vector<float>(elements));
    std::normal_distribution<float> normal;
    for (auto& layer : g)
      for (auto& x : layer) x = 0.25f * normal(rng);
    // the reference in slot 0, the loop on one and on two threads in slot 1 of their ledgers
    std::vector<std::unique_ptr<rwd::cpu::ledger>> books;
    for (int k = 0; k < 3; ++k) books.push_back(std::make_unique<rwd::cpu::ledger>(t, 2 * elements, std::vector<rwd::rational>{{n, d}}));
    std::vector<std::vector<std::int64_t>> s(3, start);
    std::vector<std::vector<float>> shadow(3, std::vector<float>(elements));
    const rwd::cpu::exact_ratio a(n, d, *books[0]);
    auto run = [&](bool forward, int layer) {
      reference_layer(s[0], g[static_cast<std::size_t>(layer)], shadow[0], fp, a, *books[0], 0, forward);
      for (int k = 1; k < 3; ++k)
        CHECK(rwd::cpu::scale_add_exact(s[k].data(), g[static_cast<std::size_t>(layer)].data(), shadow[k].data(), elements, fp, a,
                                        *books[static_cast<std::size_t>(k)], elements, forward, k));
    };
    bool same = true;
    for (int layer = 0; layer < depth; ++layer) {
      run(true, layer);
      same = same && s[1] == s[0] && s[2] == s[0] && shadow[1] == shadow[0] && shadow[2] == shadow[0];
    }
    CAPTURE(n);
    CAPTURE(d);
    CHECK(same);
    CHECK(books[1]->planes() == books[0]->planes());
    if (std::log2(static_cast<double>(d) / static_cast<double>(n)) * depth > 16) CHECK(books[1]->planes() > 0);
    for (int layer = depth; layer-- > 0;) {
      run(false, layer);
      same = same && s[1] == s[0] && s[2] == s[0];
    }
    CHECK(same);
    for (int k = 0; k < 3; ++k) {
      CHECK(s[static_cast<std::size_t>(k)] == start);
      CHECK(books[static_cast<std::size_t>(k)]->empty());
    }
  }
}

TEST_CASE("ledger: the vectorised loop is the scalar arithmetic at the ends of the fixed-point range") {
  // The loops divide by a reciprocal and round by adding 1.5 2^52: states up to 2^51 in
  // magnitude, multiples of the divisor and their neighbours (where a quotient one off would
  // show), k m for k at the top of a binade (where a product with a reciprocal rounded down
  // falls below k), g up to 2^46; divisors that are powers of two, small, 2^16 - 1, and 65433,
  // whose double reciprocal is the furthest below 1/m of any m <= 2^16 (by 0.99 ulp).
  [[maybe_unused]] const each_copy_of_the_loops copies;
  rwd::cpu::memory_tracker t;
  const auto fp = rwd::cpu::fixed_point::of(0);
  const std::int64_t top = (std::int64_t{1} << 51) - 1;
  for (const auto& nd : {std::pair<std::int64_t, std::int64_t>{9, 10}, {1, 2}, {3, 7}, {65535, 65536}, {1, 65535}, {7, 3},
                         {65536, 65535}, {65432, 65433}, {65433, 65432}, {65433, 3}}) {
    const std::int64_t n = nd.first, d = nd.second;
    CAPTURE(n);
    CAPTURE(d);
    // the largest state whose image (n/d) s + g stays in range
    const auto most = static_cast<std::int64_t>(static_cast<double>(top - (std::int64_t{1} << 46)) * std::min(1.0, static_cast<double>(d) / n));
    std::mt19937_64 rng(static_cast<unsigned>(n * 31 + d));
    std::vector<std::int64_t> start;
    for (const std::int64_t m : {n, d})
      for (std::int64_t j = -2; j <= 2; ++j) {
        const std::int64_t multiple = most / m * m;
        for (const std::int64_t v : {multiple + j - (j > 0 ? m : 0), most - (j + 2), static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(most))}) {
          start.push_back(v);
          start.push_back(-v);
        }
      }
    for (const std::int64_t m : {n, d})
      for (std::int64_t k = 1; k <= most / m; k = 2 * k + 1)  // 2^e - 1
        for (const std::int64_t v : {k * m, k * m - 1}) {
          start.push_back(v);
          start.push_back(-v);
        }
    while (start.size() % 8 != 5) start.push_back(static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(2 * most)) - most);
    const std::size_t elements = start.size();
    std::vector<float> g(elements);
    std::uniform_real_distribution<float> uniform(-0x1p46f, 0x1p46f);
    for (std::size_t i = 0; i < elements; ++i) g[i] = i % 3 == 0 ? 0.0f : uniform(rng);
    // the reference, the loop, and the loop without a shadow (of a variable nothing reads)
    rwd::cpu::ledger reference(t, elements, {{n, d}}), book(t, elements, {{n, d}}), unshadowed(t, elements, {{n, d}});
    const rwd::cpu::exact_ratio a(n, d, reference);
    std::vector<std::int64_t> s0 = start, s1 = start, s2 = start;
    std::vector<float> shadow0(elements), shadow1(elements);
    for (const bool forward : {true, false}) {
      reference_layer(s0, g, shadow0, fp, a, reference, 0, forward);
      CHECK(rwd::cpu::scale_add_exact(s1.data(), g.data(), shadow1.data(), elements, fp, a, book, 0, forward, 1));
      CHECK(rwd::cpu::scale_add_exact(s2.data(), g.data(), static_cast<float*>(nullptr), elements, fp, a, unshadowed, 0, forward, 1));
      CHECK(s1 == s0);
      CHECK(s2 == s0);
      CHECK(shadow1 == shadow0);
    }
    CHECK(s1 == start);
    CHECK(book.empty());
    CHECK(unshadowed.empty());
    // A rewind alone, of states whose s - g passes 2^51 (no forward leaves one; the rewind of
    // n/d > 1 can, and its result is in range where d/n < 31/32): still the arithmetic.
    if (32 * d < 31 * n) {
      for (std::size_t i = 0; i < elements; ++i) s0[i] = (g[i] > 0 ? -1 : 1) * (top - static_cast<std::int64_t>(i % 1000));
      s1 = s0;
      reference_layer(s0, g, shadow0, fp, a, reference, 0, false);
      CHECK(rwd::cpu::scale_add_exact(s1.data(), g.data(), shadow1.data(), elements, fp, a, book, 0, false, 1));
      CHECK(s1 == s0);
      CHECK(shadow1 == shadow0);
    }
  }
}

TEST_CASE("ledger: the vectorised loop moves words for neighbours whose stacks have different heights") {
  // The heads of a batch grow alike, so the vector loop usually moves a word for all its lanes at
  // one height; here element i first takes (i mod 11) * 7 extra operations of its own, so
  // lanes side by side spill and refill at different layers and heights.
  [[maybe_unused]] const each_copy_of_the_loops copies;
  rwd::cpu::memory_tracker t;
  const std::size_t elements = 1000 + 3;
  const auto fp = rwd::cpu::fixed_point::of(30);
  for (const auto& nd : {std::pair<std::int64_t, std::int64_t>{9, 10}, {3, 10}, {7, 3}}) {
    const std::int64_t n = nd.first, d = nd.second;
    CAPTURE(n);
    CAPTURE(d);
    const int depth = n > d ? 12 : 300;  // 7/3 multiplies the state by 2^1.22 a layer
    std::mt19937_64 rng(static_cast<unsigned>(7 * n + d));
    std::vector<std::int64_t> start(elements);
    for (auto& v : start) v = static_cast<std::int64_t>(rng() % (1ull << 24)) - (std::int64_t{1} << 23);
    std::vector<std::vector<float>> g(static_cast<std::size_t>(depth), std::vector<float>(elements));
    std::normal_distribution<float> normal;
    for (auto& layer : g)
      for (auto& x : layer) x = 0.25f * normal(rng);
    rwd::cpu::ledger reference(t, elements, {{n, d}}), book(t, elements, {{n, d}});
    const rwd::cpu::exact_ratio a(n, d, reference);
    // the extra operations grow each element's ledger: multiplications where n/d < 1, divisions where n/d > 1
    const auto stagger = [&](std::vector<std::int64_t>& s, rwd::cpu::ledger& l, bool undo) {
      for (std::size_t i = 0; i < elements; ++i)
        for (std::size_t k = 0; k < (i % 11) * 7; ++k)
          s[i] = (a.forward_grows != undo) ? rwd::cpu::multiply_exact(s[i], a, l, i) : rwd::cpu::divide_exact(s[i], a, l, i);
    };
    std::vector<std::int64_t> s0 = start, s1 = start;
    stagger(s0, reference, false);
    stagger(s1, book, false);
    const std::vector<std::int64_t> staggered = s0;
    CHECK(s1 == s0);
    std::vector<float> shadow0(elements), shadow1(elements);
    const std::vector<std::uint32_t> heights(book.heights(), book.heights() + elements);
    bool same = true;
    for (int layer = 0; layer < depth; ++layer) {
      reference_layer(s0, g[static_cast<std::size_t>(layer)], shadow0, fp, a, reference, 0, true);
      CHECK(rwd::cpu::scale_add_exact(s1.data(), g[static_cast<std::size_t>(layer)].data(), shadow1.data(), elements, fp, a, book, 0, true, 1));
      same = same && s1 == s0 && shadow1 == shadow0;
    }
    CHECK(same);
    CHECK(book.planes() == reference.planes());
    CHECK(std::equal(book.heights(), book.heights() + elements, reference.heights()));
    const auto [low, high] = std::minmax_element(book.heights(), book.heights() + elements);
    CHECK(*low < *high);  // the stacks do have different heights
    CHECK(!std::equal(heights.begin(), heights.end(), book.heights()));  // and words moved
    for (int layer = depth; layer-- > 0;) {
      reference_layer(s0, g[static_cast<std::size_t>(layer)], shadow0, fp, a, reference, 0, false);
      CHECK(rwd::cpu::scale_add_exact(s1.data(), g[static_cast<std::size_t>(layer)].data(), shadow1.data(), elements, fp, a, book, 0, false, 1));
      same = same && s1 == s0;
    }
    CHECK(same);
    CHECK(s1 == staggered);
    stagger(s1, book, true);
    CHECK(s1 == start);
    CHECK(book.empty());
  }
}

#ifdef REWIND_TEST_PORTABLE
TEST_CASE("exact: a build for any x86-64 carries AVX-512 and AVX2 copies of its loops and runs the widest") {
#if !defined(REWIND_EXACT_DISPATCH) || !defined(REWIND_EXACT_DISPATCH_AVX2)
  FAIL("rewind/cpu/exact.hpp compiled no AVX-512 or no AVX2 copy of the exact mode's loops");
#else
  const std::string widest = __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")
                                 ? "avx512"
                             : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "avx2"
                                                                                                 : "portable";
  CHECK(rwd::cpu::exact_loops() == widest);
  MESSAGE("this CPU runs the " << widest << " copy");
  const std::string was{rwd::cpu::exact_loops()};
  rwd::cpu::use_exact_loops("portable");
  CHECK(rwd::cpu::exact_loops() == "portable");
  rwd::cpu::use_exact_loops(was);
#endif
  CHECK_THROWS_WITH_AS(rwd::cpu::use_exact_loops("avx1024"), doctest::Contains("no \"avx1024\" copy"), rwd::error);
}
#endif

TEST_CASE("ledger: a grow spills once per 16 bits of growth, not back and forth") {
  // 9/10 grows 0.152 bits a layer: 16 bits take about 105 layers, so 1000 layers of one element
  // move about 9 words to the stack. Each move is one plane's worth of height; count them.
  rwd::cpu::memory_tracker t;
  rwd::cpu::ledger l(t, 1, {rwd::rational{9, 10}});
  const rwd::cpu::exact_ratio a(9, 10, l);
  std::int64_t s = 123456789, moves = 0;
  std::size_t height = 0;
  for (int k = 0; k < 1000; ++k) {
    s = rwd::cpu::multiply_exact(s, a, l, 0) + 1000;
    const auto now = static_cast<std::size_t>(l.heights()[0]);
    moves += now != height;
    height = now;
  }
  CHECK(height == 9);
  CHECK(moves == 9);  // never a word out and back in the same layer or the next
}

TEST_CASE("ledger: coefficients it cannot hold are refused") {
  rwd::cpu::memory_tracker t;
  CHECK_THROWS_WITH_AS(rwd::cpu::ledger(t, 1, {rwd::rational{-1, 2}}), doctest::Contains("positive"), rwd::error);
  CHECK_THROWS_WITH_AS(rwd::cpu::ledger(t, 1, {rwd::rational{1, 70000}}), doctest::Contains("at most 65536"), rwd::error);
  CHECK_THROWS_WITH_AS(rwd::cpu::ledger(t, 1, {rwd::rational{65521, 65536}, rwd::rational{65519, 65535}}), doctest::Contains("2^33"),
                       rwd::error);
}

TEST_CASE("fixed point: the loops report a value out of range instead of wrapping") {
  [[maybe_unused]] const each_copy_of_the_loops copies;
  rwd::cpu::memory_tracker t;
  rwd::cpu::ledger l(t, 4, {rwd::rational{9, 10}});
  const rwd::cpu::exact_ratio a(9, 10, l);
  const auto fp = rwd::cpu::fixed_point::of(40);  // range +-2^11
  std::vector<std::int64_t> s(4, 0);
  std::vector<float> shadow(4);
  CHECK(rwd::cpu::scale_add_exact(s.data(), std::vector<float>{1, 2, 3, 4}.data(), shadow.data(), 4, fp, a, l, 0, true, 1));
  CHECK_FALSE(rwd::cpu::scale_add_exact(s.data(), std::vector<float>{1, 5000, 3, 4}.data(), shadow.data(), 4, fp, a, l, 0, true, 1));
  s.assign(4, 0);
  CHECK_FALSE(rwd::cpu::scale_add_exact(s.data(), std::vector<float>{1, 2, -5000, 4}.data(), shadow.data(), 4, fp, a, l, 0, true, 1));
  s.assign(4, 0);
  CHECK_FALSE(rwd::cpu::scale_add_exact(s.data(), std::vector<float>{1, 2, 3, NAN}.data(), shadow.data(), 4, fp, a, l, 0, true, 1));
  for (const float sign : {1.0f, -1.0f}) {  // g in range, the result (9/10) s + g not
    s.assign(4, 0);
    s[1] = static_cast<std::int64_t>(sign) * (static_cast<std::int64_t>(0x1p51) - 1);
    CHECK_FALSE(rwd::cpu::scale_add_exact(s.data(), std::vector<float>{0, sign * 2000, 0, 0}.data(), shadow.data(), 4, fp, a, l, 0, true, 1));
  }
  s.assign(4, 0);
  CHECK_FALSE(rwd::cpu::add_exact(s.data(), std::vector<float>{0, 0, NAN, 0}.data(), shadow.data(), 4, fp, true, 1));
  s.assign(4, 0);  // what a loop that failed leaves is not defined (the step that ran it fails)
  CHECK(rwd::cpu::add_exact(s.data(), std::vector<float>{0, 0, 1, 0}.data(), shadow.data(), 4, fp, true, 1));
  std::vector<std::int64_t> near(4, static_cast<std::int64_t>(0x1p51) - 1);
  CHECK_FALSE(rwd::cpu::add_exact(near.data(), std::vector<float>{0, 0, 0, 1}.data(), shadow.data(), 4, fp, true, 1));
}

TEST_CASE("fixed point: the vectorised adds flag the one element that leaves the range, at either end, in any lane") {
  [[maybe_unused]] const each_copy_of_the_loops copies;
  const auto fp = rwd::cpu::fixed_point::of(0);
  const std::int64_t top = (std::int64_t{1} << 51) - 1;
  const std::size_t n = 21;  // vectors of 8 and 4, and a rest
  for (std::size_t at = 0; at < n; ++at)
    for (const std::int64_t sign : {1, -1}) {
      CAPTURE(at);
      CAPTURE(sign);
      // every element at the end of the range; element `at` is moved one past it
      std::vector<std::int64_t> s(n, sign * (top - 1)), t(n, sign);
      std::vector<float> g(n, static_cast<float>(sign)), shadow(n);
      CHECK(rwd::cpu::add_exact(s.data(), g.data(), shadow.data(), n, fp, true, 1));  // to +-top: in range
      CHECK(s == std::vector<std::int64_t>(n, sign * top));
      g.assign(n, 0.0f);
      g[at] = static_cast<float>(sign);
      CHECK_FALSE(rwd::cpu::add_exact(s.data(), g.data(), shadow.data(), n, fp, true, 1));
      std::vector<std::int64_t> u(n, -sign * top);  // and the rewind's subtraction from the other end
      CHECK_FALSE(rwd::cpu::add_exact(u.data(), g.data(), static_cast<float*>(nullptr), n, fp, false, 1));
      std::vector<std::int64_t> x(n, sign * top);
      t.assign(n, 0);
      t[at] = sign;
      CHECK_FALSE(rwd::cpu::add_state_exact(x.data(), t.data(), static_cast<float*>(nullptr), n, fp, true, 1));
      x.assign(n, -sign * top);
      CHECK_FALSE(rwd::cpu::add_state_exact(x.data(), t.data(), shadow.data(), n, fp, false, 1));
      x.assign(n, sign * (top - 1));
      CHECK(rwd::cpu::add_state_exact(x.data(), t.data(), shadow.data(), n, fp, true, 1));  // the one element to +-top
    }
}

TEST_CASE("fixed point: a state variable is added as its fixed point, not as its float shadow") {
  [[maybe_unused]] const each_copy_of_the_loops copies;
  const auto fp = rwd::cpu::fixed_point::of(40);
  const std::size_t n = 1000 + 3;  // a partial tile
  std::vector<std::int64_t> x(n), v(n);
  std::vector<float> shadow(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<std::int64_t>(i * 7919) - 4000000;
    v[i] = (std::int64_t{1} << 30) + static_cast<std::int64_t>(i);  // more bits than a float holds
  }
  const std::vector<std::int64_t> start = x;
  for (int threads : {1, 2}) {
    CHECK(rwd::cpu::add_state_exact(x.data(), v.data(), shadow.data(), n, fp, true, threads));
    bool exact = true;
    for (std::size_t i = 0; i < n; ++i) exact = exact && x[i] == start[i] + v[i] && shadow[i] == fp.value<float>(x[i]);
    CHECK(exact);
    CHECK(rwd::cpu::add_state_exact(x.data(), v.data(), shadow.data(), n, fp, false, threads));
    CHECK(x == start);
  }
  std::vector<std::int64_t> near(n, static_cast<std::int64_t>(0x1p51) - 1);
  CHECK_FALSE(rwd::cpu::add_state_exact(near.data(), v.data(), shadow.data(), n, fp, true, 1));
}
