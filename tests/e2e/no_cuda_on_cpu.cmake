# A CPU run of the rewind program loads no CUDA library: its dynamic dependencies (ldd: all of
# them, transitively) name neither the CUDA runtime nor cuBLAS, and a CPU command runs with the
# GPU plugin made unloadable. Arguments: -DPROGRAM=path of the rewind program.
execute_process(COMMAND ldd ${PROGRAM} OUTPUT_VARIABLE deps RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ldd ${PROGRAM} failed (${rc})")
endif()
string(REGEX MATCHALL "lib(cudart|cublas|cublasLt|cuda|nccl)[^ \t\n]*" cuda_deps "${deps}")
if(cuda_deps)
  message(FATAL_ERROR "the rewind program links CUDA libraries: ${cuda_deps}")
endif()
set(ENV{REWIND_GPU_PLUGIN} /nonexistent/librewind_gpu.so)
execute_process(COMMAND ${PROGRAM} memory --depths 2 --width 16 --batch 4 --steps 1 --modes reversible
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "a CPU run without the GPU plugin failed (${rc}): ${out}${err}")
endif()
message(STATUS "no CUDA library in: ${PROGRAM}; a CPU run without the plugin passed")
