// rewind: the CPU backend (Eigen). Includes the dsl.
#pragma once

#include "cpu/memory.hpp"
#include "cpu/model.hpp"
