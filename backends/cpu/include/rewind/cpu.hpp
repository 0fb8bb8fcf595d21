// rewind: the CPU backend (Eigen). Includes the dsl.
#pragma once

#include <rewind/engine/parameter_file.hpp>
#include "cpu/exact.hpp"
#include "cpu/memory.hpp"
#include "cpu/model.hpp"
#include "cpu/staged_model.hpp"
#include "cpu/optim.hpp"
#include "cpu/threads.hpp"
