#include <iostream>
#include <rewind/rewind.hpp>
using namespace rwd::literals;
inline constexpr rwd::var<"x"> x;
inline constexpr rwd::var<"v"> v;
inline constexpr auto f = rwd::map<"f">(rwd::dense<16>, rwd::tanh, rwd::dense_same);
int main() { std::cout << rwd::budget<float>(rwd::momentum(x, v, 0.9_c, f)).layers << "\n"; }
