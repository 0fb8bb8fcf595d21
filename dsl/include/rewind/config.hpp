// rewind: the one portability macro of the library.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define REWIND_HOST_DEVICE __host__ __device__
#else
#define REWIND_HOST_DEVICE
#endif

#define REWIND_VERSION_MAJOR 0
#define REWIND_VERSION_MINOR 1
#define REWIND_VERSION_PATCH 0
