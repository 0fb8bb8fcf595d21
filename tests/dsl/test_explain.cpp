// explain(): the derivation as text.
#include <doctest/doctest.h>

#include <string>

#include "blocks.hpp"

using namespace test_blocks;

static bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_CASE("explain(momentum) shows the forward, the derived inverse, the adjoint and the budgets") {
  const std::string text = rwd::explain(momentum);
  CAPTURE(text);
  CHECK(contains(text, "v <- 0.9*v + f(x)\n  x <- x + v\n"));
  CHECK(contains(text, "x <- x - v\n  v <- (v - f(x)) / 0.9\n"));  // in this order
  CHECK(contains(text, "xbar += J_f(x)^T vbar"));
  CHECK(contains(text, "vbar <- 0.9*vbar"));
  CHECK(contains(text, "class: dissipative"));
  CHECK(contains(text, "float32   eps 1.19e-07  L* 151 layers"));
  CHECK(contains(text, "float64   eps 2.22e-16  L* 342 layers"));
  CHECK(contains(text, "bfloat16  eps 0.00781   L* 46 layers"));
  CHECK(contains(text, "assumes slope 0"));
  CHECK(contains(text, "map f: W -> 16 -> tanh -> W"));
  // 0.152 bits a layer: 155.6 bits at depth 1024, at most 9 full words and one more
  CHECK(contains(text, "the ledger gains 0.152 bits per element per layer: 19.456 bytes per element at depth 1024, held in at most 28"));
}

TEST_CASE("explain(leapfrog) says conservative, with no finite budget") {
  const std::string text = rwd::explain(leapfrog);
  CAPTURE(text);
  CHECK(contains(text, "class: conservative"));
  CHECK(contains(text, "float32   eps 1.19e-07  L* unlimited"));
  CHECK(!contains(text, "layers ("));
}

TEST_CASE("explain with declared slopes, runtime scalars and data-dependent alphas") {
  const std::string sloped = rwd::explain(rwd::momentum(x, v, 0.9_c, f.slope(-1_c, -0.1_c)));
  CHECK(contains(sloped, "f' in [-1, -0.1]"));
  CHECK(contains(sloped, "L* 302 layers"));
  CHECK(!contains(sloped, "assumes slope 0"));

  const std::string unbound = rwd::explain(runtime_mu);
  CHECK(contains(unbound, "v <- mu*v + f(x)"));
  CHECK(contains(unbound, "runtime scalar mu (unbound)"));
  CHECK(contains(unbound, "depend on the runtime scalars"));
  const rwd::env e = rwd::env{}.set("mu", 0.6);
  const std::string bound = rwd::explain(runtime_mu, e);
  CHECK(contains(bound, "v <- (v - f(x)) / 0.6"));
  CHECK(contains(bound, "L* 31 layers"));

  const std::string data = rwd::explain(affine);
  CHECK(contains(data, "class: data-dependent"));
  CHECK(contains(data, "x1 <- (x1 - t(x2)) / exp(s(x2))"));
  CHECK(contains(data, "alpha = exp(s(x2)) of x1 (from the data) ranges over [0.3679, 2.718]; the analysis takes 0.3679"));
  CHECK(contains(data, "float32   eps 1.19e-07  L* 15 layers"));
  const std::string gate = rwd::explain(half_gate);
  CHECK(contains(gate, "alpha = 0.5 + 0.5*sigmoid(t(v)) of x (from the data) ranges over [0.5, 1]; the analysis takes 0.5"));
  CHECK(contains(gate, "L* 23 layers"));
  const std::string unbounded = rwd::explain(gated);
  CHECK(contains(unbounded, "alpha = exp(v) of x (from the data) ranges over [0, inf], which contains zero"));
  CHECK(contains(unbounded, "refuses to rewind the block (E014)"));
  CHECK(!contains(unbounded, "L* "));
  const std::string declared = rwd::explain(rwd::block(x = rwd::exp(f.range(-2_c, 0_c)(v)) * x + g(v), v = v + g(x)));
  CHECK(contains(declared, "map f: W -> 16 -> tanh -> W (W = state width), output in [-2, 0]"));
  CHECK(contains(declared, "ranges over [0.1353, 1]"));
  CHECK(contains(declared, "L* 7 layers"));

  const std::string expands = rwd::explain(expansive);
  CHECK(contains(expands, "class: expansive"));
  CHECK(contains(expands, "the forward pass amplifies"));
}
