// rewind: the umbrella header of the language and its compile-time analysis.
// No Eigen, no CUDA: this layer compiles with g++, clang++ and nvcc alike.
//
// The C++ namespace is `rwd`: `rewind` itself cannot name a namespace, since <cstdio> declares
// the C function ::rewind(FILE*) at global scope.
#pragma once

#include "adjoint.hpp"
#include "block.hpp"
#include "budget.hpp"
#include "config.hpp"
#include "diagnostics.hpp"
#include "env.hpp"
#include "explain.hpp"
#include "expr.hpp"
#include "inverse.hpp"
#include "map.hpp"
#include "network.hpp"
#include "update.hpp"
