// The README's quick start: a momentum block written like the mathematics, its budget checked at
// compile time, its derivation printed.
#include <iostream>
#include <rewind/rewind.hpp>

using namespace rwd::literals;  // 0.9_c: the exact rational 9/10

namespace net {
inline constexpr rwd::var<"x"> x;  // state variables
inline constexpr rwd::var<"v"> v;
// a learned map whose shape is part of the type: width -> 16 -> tanh -> width
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);

inline constexpr auto momentum = rwd::block(v = 0.9_c * v + f(x),  // updates read like the math
                                            x = x + v);
}  // namespace net

static_assert(rwd::invertible<std::remove_cv_t<decltype(net::momentum)>>);
static_assert(rwd::budget<float>(net::momentum).layers == 151);  // napkin, slope 0
// rwd::block(net::x = net::x + net::f(net::x));  // does not compile: "rewind E001 (rule 3): ..."
// rwd::network<float>(rwd::stack<200>(net::momentum));  // "rewind E007 (budget): ..."

int main() {
  std::cout << rwd::explain(net::momentum, {}, "momentum");
  constexpr auto network = rwd::network<float>(rwd::stack<64>(net::momentum));
  std::cout << "a float32 network of depth " << network.depth << " is within its budget of "
            << network.budget.layers << " layers\n";
}
