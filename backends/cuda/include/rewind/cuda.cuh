// rewind: the CUDA backend (compile with nvcc): rwd::cuda::model and rwd::cuda::staged_model, the GPU engine.
#pragma once

#include "cuda/kernels.cuh"
#include "cuda/maps.cuh"
#include "cuda/model.cuh"
#include "cuda/runtime.cuh"
#include "cuda/staged_model.cuh"
