// The dsl layer includes no backend: after the umbrella header, neither Eigen nor CUDA is seen.
#include <rewind/pointwise.hpp>
#include <rewind/rewind.hpp>

#if defined(EIGEN_WORLD_VERSION) || defined(EIGEN_CORE_H)
#error "rewind: a dsl header included Eigen; dsl/ must not include a backend"
#endif
#if defined(__CUDA_RUNTIME_H__) || defined(CUBLAS_API_H_)
#error "rewind: a dsl header included CUDA; dsl/ must not include a backend"
#endif
