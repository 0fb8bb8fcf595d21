// Affine decomposition, the rules of invertibility, the derived inverse and adjoint.
#include <doctest/doctest.h>

#include <string>
#include <type_traits>

#include "blocks.hpp"

using namespace test_blocks;
using rwd::diagnosis;
namespace hana = boost::hana;
using X = std::remove_cv_t<decltype(x)>;
using V = std::remove_cv_t<decltype(v)>;
template <class A, class B>
inline constexpr bool same = std::is_same_v<std::remove_cvref_t<A>, std::remove_cvref_t<B>>;

template <class Assignment>
constexpr diagnosis diagnose(Assignment) {
  return rwd::diagnose<Assignment>();
}

// the decomposition finds alpha and g symbolically
using momentum_v = decltype(rwd::decompose<V>(0.9_c * v + f(x)));
static_assert(same<momentum_v::alpha, decltype(0.9_c)> && same<momentum_v::g, decltype(f(x))>);
using scattered = decltype(rwd::decompose<X>(0.5_c * x + v + 0.25_c * x - f(v)));
static_assert(same<scattered::alpha, decltype(0.75_c)> && same<scattered::g, decltype(v - f(v))>);
using scaled_sum = decltype(rwd::decompose<X>(2_c * (x + v)));
static_assert(same<scaled_sum::alpha, decltype(2_c)> && same<scaled_sum::g, decltype(2_c * v)>);
using runtime = decltype(rwd::decompose<V>(mu * v + f(x)));
static_assert(same<runtime::alpha, decltype(mu)>);
using data = decltype(rwd::decompose<std::remove_cv_t<decltype(x1)>>(x1 * rwd::exp(s(x2)) + t(x2)));
static_assert(same<data::alpha, decltype(rwd::exp(s(x2)))> && same<data::g, decltype(t(x2))>);

// rules 1 to 3, one code each
static_assert(diagnose(x = x + f(x)) == diagnosis::e001_map_reads_target);
static_assert(diagnose(x = x + 0.5_c * v + g(v) - f(x)) == diagnosis::e001_map_reads_target);
static_assert(diagnose(x = x + rwd::tanh(x)) == diagnosis::e004_function_reads_target);
static_assert(diagnose(x = x * x) == diagnosis::e005_not_affine);
static_assert(diagnose(x = x * rwd::tanh(x + v)) == diagnosis::e005_not_affine);
static_assert(diagnose(x = f(v)) == diagnosis::e003_overwrite);
static_assert(diagnose(x = 0_c * x + f(v)) == diagnosis::e002_alpha_zero);
static_assert(diagnose(x = x - x + f(v)) == diagnosis::e002_alpha_zero);
static_assert(diagnose(x = 0.5_c * x - 0.5_c * x) == diagnosis::e002_alpha_zero);
static_assert(diagnose(v = 0.9_c * v + f(x)) == diagnosis::ok);
static_assert(diagnose(x += v) == diagnosis::ok);
static_assert(diagnose(x -= f(v)) == diagnosis::ok);

// the concepts, one per rule, and rule 4 on whole blocks
static_assert(!rwd::rhs_does_not_read_target<decltype(x = x + f(x))>);
static_assert(!rwd::rhs_is_affine_in_target<decltype(x = x * x)>);
static_assert(!rwd::coefficient_nonzero<decltype(x = f(v))>);
static_assert(rwd::invertible_update<decltype(v = 0.9_c * v + f(x))>);
static_assert(rwd::invertible_assignments<decltype(v = 0.9_c * v + f(x)), decltype(x = x + v)>);
static_assert(!rwd::invertible_assignments<decltype(v = v + f(w))>);  // w is not state
static_assert(!rwd::invertible_assignments<decltype(v = v + f(x)), decltype(x = x + f(x))>);
static_assert(!rwd::invertible_assignments<>);

// every accepted block is invertible (rule 5) and knows its state
static_assert(rwd::invertible<std::remove_cv_t<decltype(momentum)>>);
static_assert(rwd::invertible<std::remove_cv_t<decltype(leapfrog)>>);
static_assert(rwd::invertible<std::remove_cv_t<decltype(coupling)>>);
static_assert(rwd::invertible<std::remove_cv_t<decltype(three)>>);
static_assert(rwd::invertible<std::remove_cv_t<decltype(runtime_mu)>>);
static_assert(rwd::invertible<std::remove_cv_t<decltype(two_maps)>>);
static_assert(rwd::invertible<std::remove_cv_t<decltype(expansive)>>);
static_assert(rwd::invertible<std::remove_cv_t<decltype(long_sum)>>);
static_assert(rwd::invertible<std::remove_cv_t<decltype(affine)>>);
static_assert(decltype(three)::state_size == 3 && decltype(leapfrog)::size == 3);
static_assert(decltype(runtime_mu)::has_runtime_scalars && !decltype(momentum)::has_runtime_scalars);
static_assert(hana::length(decltype(two_maps)::maps()) == hana::size_c<2>);
static_assert(hana::length(decltype(leapfrog)::maps()) == hana::size_c<1>);  // both kicks share F

// inverse: reversed, inverted updates; inverse(inverse(b)) is b, as a type
static_assert(same<decltype(rwd::inverse(rwd::inverse(momentum))), decltype(momentum)>);
static_assert(same<decltype(rwd::inverse(rwd::inverse(long_sum))), decltype(long_sum)>);
static_assert(same<decltype(rwd::inverse(rwd::inverse(affine))), decltype(affine)>);
static_assert(decltype(rwd::inverse(momentum))::is_inverse);
// the inverse's right-hand side is an expression an engine evaluates: (s - g) / alpha, a division
// by the coefficient as written (not a product with a rounded reciprocal), s - g when alpha is 1
namespace inverse_rhs {
using FX = decltype(f(x));
using momentum_inverse = std::remove_cv_t<decltype(rwd::inverse(momentum).updates())>;
static_assert(same<std::remove_cvref_t<decltype(hana::at_c<1>(momentum_inverse{}))>::rhs,
                   rwd::quotient<rwd::sub<V, FX>, rwd::constant<9, 10>>>);
static_assert(same<std::remove_cvref_t<decltype(hana::at_c<0>(momentum_inverse{}))>::rhs, rwd::sub<X, V>>);
static_assert(same<decltype(rwd::make_quotient(x, 1_c)), X>);
static_assert(same<decltype(rwd::make_quotient(3_c, 4_c)), rwd::constant<3, 4>>);
static_assert(same<decltype(rwd::make_quotient(rwd::zero{}, rwd::param<"mu">{})), rwd::zero>);
}  // namespace inverse_rhs

// chain: several blocks as one
static_assert(decltype(rwd::chain(momentum, coupling))::size == 4);
static_assert(decltype(rwd::chain(momentum, coupling))::state_size == 4);

TEST_CASE("the inverse of momentum is x <- x - v, then v <- (v - f(x)) / 0.9") {
  const auto inv = rwd::inverse(momentum).updates();
  CHECK(hana::at_c<0>(inv).text() == "x <- x - v");
  CHECK(hana::at_c<1>(inv).text() == "v <- (v - f(x)) / 0.9");
}

TEST_CASE("inverses of the other blocks") {
  const auto lf = rwd::inverse(leapfrog).updates();
  CHECK(hana::at_c<0>(lf).text() == "v <- v - 0.5*F(x)");
  CHECK(hana::at_c<1>(lf).text() == "x <- x - v");
  const auto af = rwd::inverse(affine).updates();
  CHECK(hana::at_c<1>(af).text() == "x1 <- (x1 - t(x2)) / exp(s(x2))");
  const auto ex = rwd::inverse(expansive).updates();
  CHECK(hana::at_c<1>(ex).text() == "x <- (x - f(v)) / 2");
  const rwd::env e = rwd::env{}.set("mu", 0.6);
  CHECK(hana::at_c<1>(rwd::inverse(runtime_mu).updates()).text({&e}) == "v <- (v - f(x)) / 0.6");
}

template <class Adjoint>
std::string steps_text(Adjoint a) {
  std::string out;
  hana::for_each(a.steps(), [&](auto s) { out += s.text() + "\n"; });
  return out;
}

TEST_CASE("the adjoint of momentum is the textbook one") {
  const auto adj = rwd::adjoint(momentum);
  CHECK(steps_text(hana::at_c<0>(adj)) == "vbar += xbar\n");
  CHECK(steps_text(hana::at_c<1>(adj)) ==
        "dtheta_f += (df(x)/dtheta)^T vbar\n"
        "xbar += J_f(x)^T vbar\n"
        "vbar <- 0.9*vbar\n");
}

TEST_CASE("adjoints of coupling, a data-dependent alpha and elementwise functions") {
  const auto cp = rwd::adjoint(coupling);
  CHECK(steps_text(hana::at_c<0>(cp)) == "dtheta_G += (dG(x1)/dtheta)^T x2bar\nx1bar += J_G(x1)^T x2bar\n");
  const auto af = rwd::adjoint(affine);
  CHECK(steps_text(hana::at_c<1>(af)) ==
        "dtheta_s += (ds(x2)/dtheta)^T (exp'(s(x2))*(x1*x1bar))\n"
        "dtheta_t += (dt(x2)/dtheta)^T x1bar\n"
        "x2bar += J_s(x2)^T (exp'(s(x2))*(x1*x1bar)) + J_t(x2)^T x1bar\n"
        "x1bar <- exp(s(x2))*x1bar\n");
  const auto ls = rwd::adjoint(long_sum);
  const std::string first = steps_text(hana::at_c<2>(ls));
  CAPTURE(first);
  CHECK(first.find("dtheta_f += (df(v)/dtheta)^T (-xbar)\n") != std::string::npos);
  CHECK(first.find("vbar += xbar + J_f(v)^T (-xbar) + tanh'(v)*xbar\n") != std::string::npos);
  CHECK(first.find("wbar += 0.5*xbar + J_g(w)^T xbar - 3*xbar\n") != std::string::npos);
}

TEST_CASE("each map step of the adjoint knows which intermediates it needs") {
  using Step = std::remove_cvref_t<decltype(hana::front(hana::at_c<1>(rwd::adjoint(momentum)).steps()))>;
  using Map = Step::call_type::map_type;
  static_assert(same<Step::call_type::argument, X>);          // the input: the state x
  static_assert(Map::activation_count == 1);                 // one activation output
  CHECK(Map::intermediate_count(784) == 16);                 // 16 scalars per sample
}
