// rewind: the library's portability macros.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define REWIND_HOST_DEVICE __host__ __device__
#else
#define REWIND_HOST_DEVICE
#endif

// A loop over a sample's channels (a per-index functor's inner loop) that the host compiler is
// to vectorise at any optimisation level: GCC's -O2 vectorises only what its cheap cost model
// proves profitable, never a loop with a runtime trip count, and ran the convolutions' patch
// copies and group norms element by element. `omp simd` where OpenMP or its simd part
// (-fopenmp-simd, REWIND_OPENMP_SIMD) is on; nothing in device code.
#if (defined(_OPENMP) || defined(REWIND_OPENMP_SIMD)) && !defined(__CUDA_ARCH__)
#define REWIND_SIMD _Pragma("omp simd")
#else
#define REWIND_SIMD
#endif

#define REWIND_VERSION_MAJOR 0
#define REWIND_VERSION_MINOR 1
#define REWIND_VERSION_PATCH 0
