// rewind: the catalogue of diagnostics. Every message the library emits, at compile time
// (static_assert) or at run time (exceptions), starts with "rewind" and a stable code, and
// says which rule of DESIGN.md section 1 was broken, in the user's own terms.
//
// Rules of invertibility (an update is `s = alpha*s + g(others)`):
//   1. the right-hand side is affine in its own target;
//   2. alpha is not zero;
//   3. g does not read the target;
//   4. every variable read or written is a state variable of the block;
//   5. a block is invertible iff each update is, a stack iff each block is.
#pragma once

#include <stdexcept>
#include <string>

// --- compile-time messages (static_assert needs string literals) -------------------------------
#define REWIND_E001                                                                              \
  "rewind E001 (rule 3): the update reads its own target through a learned map, as in "        \
  "x = x + f(x); the right-hand side must be alpha*x + g(others) with g not reading x "         \
  "(apply the map to another state variable: x = x + f(v))"
#define REWIND_E002                                                                              \
  "rewind E002 (rule 2): the coefficient alpha of the target is zero, as in x = 0*x + f(v) or " \
  "x = x - x + f(v); the old value of x would be lost, so the update cannot be inverted"
#define REWIND_E003                                                                              \
  "rewind E003 (rule 2): the update overwrites its target without reading it, as in x = f(v); " \
  "alpha is zero and the old value of x is lost (write x = x + f(v), or x = a*x + f(v))"
#define REWIND_E004                                                                              \
  "rewind E004 (rule 3): the update reads its own target through an elementwise function, as " \
  "in x = x + tanh(x); g must not read the target"
#define REWIND_E005                                                                              \
  "rewind E005 (rule 1): the right-hand side is not affine in its target: it multiplies the "  \
  "target by an expression that reads the target, as in x = x * x"
#define REWIND_E006                                                                              \
  "rewind E006 (rule 4): the update reads a variable that is not a state variable of the "     \
  "block (no update of the block writes it); every variable read must be part of the state"
#define REWIND_E007                                                                              \
  "rewind E007 (budget): the network is deeper than the rewind budget L* of its scalar type: " \
  "the reversible gradient would be rounding noise; reduce the depth, use a wider scalar, "    \
  "store the state every few layers with policy::checkpointed, rewind in fixed point with "   \
  "policy::exact, or say so with policy::lossy"
#define REWIND_E008                                                                              \
  "rewind E008 (map shape): the last dense layer or convolution of a learned map must be "     \
  "dense_same or conv_same, so that the map's output has the width (channels) of the state "   \
  "it is added to"
#define REWIND_E009                                                                              \
  "rewind E009 (rule 5): a block needs at least one update, and a stack at least one block"
#define REWIND_E011                                                                              \
  "rewind E011: a constant must be a decimal literal such as 0.9_c or 2_c (no exponent, no "   \
  "hexadecimal), small enough to be held as an exact rational"
#define REWIND_E012                                                                              \
  "rewind E012: a learned map needs at least one layer (dense<N>, dense_same, conv<N, K>, "     \
  "conv_same<K>, group_norm<G> or an activation)"
#define REWIND_E013                                                                              \
  "rewind E013 (rule 4): the left of an update must be a state variable (rwd::var<\"x\">), "     \
  "as in x = x + f(v); a map call, an expression, a param or a constant cannot be assigned to"
#define REWIND_E014                                                                              \
  "rewind E014 (budget): a coefficient alpha computed from the data may come arbitrarily close "  \
  "to zero (its range, from the ranges of its functions and maps, contains zero), so the "       \
  "rewind budget is unknown and the strict policy refuses to rewind the block: bound alpha away " \
  "from zero (0.5_c + 0.5_c * rwd::sigmoid(s(w)), or a map with a declared .range(lo, hi)), "   \
  "store the state every few layers with policy::checkpointed, or say so with policy::lossy"
#define REWIND_E015                                                                              \
  "rewind E015: the budget analysis of a block handles at most 32 distinct learned maps and "    \
  "elementwise functions (one slope variable each, however often it is called); share maps "      \
  "between updates"
#define REWIND_E016                                                                              \
  "rewind E016: a stem or a transition (rwd::stem, rwd::transition) has no dropout: its "        \
  "backward pass recomputes it outside the step's dropout key, so its masks could not be drawn " \
  "again; put dropout in the blocks' maps"

namespace rwd {

/// Run-time errors of the library: the message starts with "rewind" and a code.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Run-time twin of E002: a runtime scalar alpha turned out to be zero when the network was built.
inline std::string e002_runtime(const std::string& update_text) {
  return "rewind E002 (rule 2): the coefficient alpha of the target is zero at run time in " +
         update_text + "; the update cannot be inverted";
}

/// Run-time twin of E002 for a data-dependent alpha: elements of it that are zero, denormal or
/// not finite, or outside the range its budget was derived from (`range_text`, "[0.5, 1]"), as
/// the engine computed them in one layer.
inline std::string e002_elements(const std::string& update_text, const std::string& range_text, std::size_t layer,
                                 std::size_t bad, std::size_t total) {
  return "rewind E002 (rule 2): the coefficient alpha of the target is zero, denormal or not finite, or outside its range " +
         range_text + ", at " + std::to_string(bad) + " of " + std::to_string(total) + " elements in layer " +
         std::to_string(layer) + ", update " + update_text +
         "; the update cannot be inverted there, or not within its budget (mode::stored never divides by alpha)";
}

}  // namespace rwd
