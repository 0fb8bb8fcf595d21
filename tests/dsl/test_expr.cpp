// The expression language: literals, canonical forms, printing, structural queries.
#include <doctest/doctest.h>

#include <type_traits>

#include "blocks.hpp"

using namespace test_blocks;
using rwd::constant;
template <class A, class B>
inline constexpr bool same = std::is_same_v<std::remove_cvref_t<A>, std::remove_cvref_t<B>>;

// literals are exact rationals, parsed at compile time
static_assert(same<decltype(0.9_c), constant<9, 10>>);
static_assert(same<decltype(2_c), constant<2>>);
static_assert(same<decltype(0.25_c), constant<1, 4>>);
static_assert(same<decltype(1.50_c), constant<3, 2>>);
static_assert(same<decltype(-0.1_c), constant<-1, 10>>);
static_assert(same<decltype(0.9_c * 0.9_c), constant<81, 100>>);
static_assert(same<decltype(1_c / 3_c), constant<1, 3>>);

// canonical forms: equal mathematics, equal types
static_assert(same<decltype(-(-x)), decltype(x)>);
static_assert(same<decltype(v * 0.9_c), decltype(0.9_c * v)>);           // constants to the left
static_assert(same<decltype(2_c * (3_c * v)), decltype(6_c * v)>);       // c1*(c2*e) => (c1*c2)*e
static_assert(same<decltype(1_c * v), decltype(v)>);                     // 1*e => e
static_assert(same<decltype(x + -v), decltype(x - v)>);                  // a + (-b) => a - b
static_assert(same<decltype(x - -v), decltype(x + v)>);
static_assert(same<decltype(v / 2_c), decltype(0.5_c * v)>);
static_assert(!same<decltype(0_c * x), rwd::zero>);  // 0*x stays as written, for E002

// structural queries
static_assert(rwd::reads<std::remove_cv_t<decltype(x)>>(v + f(x)));
static_assert(!rwd::reads<std::remove_cv_t<decltype(x)>>(v + f(w)));
static_assert(rwd::is_scalar(0.9_c * mu + 1_c));
static_assert(!rwd::is_scalar(mu * v));
static_assert(rwd::scalar_value(0.5_c * mu + 1_c, rwd::env{}.set("mu", 3)) == 2.5);

TEST_CASE("expressions print in the notation of the mathematics") {
  CHECK(rwd::to_string(0.9_c * v + f(x)) == "0.9*v + f(x)");
  CHECK(rwd::to_string(x - (v + w)) == "x - (v + w)");
  CHECK(rwd::to_string(-(x + v)) == "-(x + v)");
  CHECK(rwd::to_string(0.5_c * (x - v)) == "0.5*(x - v)");
  CHECK(rwd::to_string(x + rwd::tanh(v) / 3_c) == "x + (1/3)*tanh(v)");
  CHECK(rwd::to_string(x * rwd::exp(s(x2))) == "x*exp(s(x2))");
  CHECK(rwd::to_string(-1.5_c * v) == "-1.5*v");
}

TEST_CASE("runtime scalars print their bound value when one is given") {
  const rwd::env e = rwd::env{}.set("mu", 0.75);
  CHECK(rwd::to_string(mu * v) == "mu*v");
  CHECK(rwd::to_string(mu * v, {&e}) == "0.75*v");
  CHECK_THROWS_WITH_AS(rwd::scalar_value(mu, rwd::env{}), doctest::Contains("mu"), rwd::error);
}

TEST_CASE("variables_of and calls_of list what an expression reads, in order") {
  constexpr auto vars = rwd::variables_of(x + f(v) - 0.5_c * x + g(w));
  static_assert(boost::hana::length(vars) == boost::hana::size_c<3>);
  constexpr auto calls = rwd::calls_of(f(x + g(v)) + g(v));
  static_assert(boost::hana::length(calls) == boost::hana::size_c<2>);  // inner call first
  static_assert(same<std::remove_cvref_t<decltype(boost::hana::front(calls))>::type, decltype(g(v))>);
  CHECK(rwd::to_string(f(x + g(v)) + g(v)) == "f(x + g(v)) + g(v)");
}

TEST_CASE("maps know their shapes, parameter counts and intermediates") {
  using M = std::remove_cv_t<decltype(f)>;
  constexpr auto shape = M::shape(784);
  static_assert(shape.size() == 3 && shape[0].parameters == 784 * 16 + 16 && shape[0].in == 784 && shape[0].out == 16);
  static_assert(shape[1].parameters == 0 && shape[2].out == 784);
  static_assert(M::parameter_count(784) == 784 * 16 + 16 + 16 * 784 + 784);
  static_assert(M::intermediate_count(784) == 16);
  CHECK(M::describe(784) == "784 -> 16 -> tanh -> 784");
  CHECK(M::describe() == "W -> 16 -> tanh -> W");
  static_assert(!M::slope_declared);
  constexpr auto declared = f.slope(-1_c, -0.1_c);
  static_assert(decltype(declared)::slope_lo() == -1.0 && decltype(declared)::slope_hi() == -0.1);
  static_assert(decltype(f.lipschitz(2_c))::slope_lo() == -2.0);
}
