# `mpirun -np 2 rewind train` against `rewind train` on the same global batch: the same loss and
# accuracy every epoch (to float reduction tolerance), the rank count in the report, and one
# report only (rank 0's).  -DMPIEXEC -DREWIND -DOUT -DARGS="train arguments"
separate_arguments(args UNIX_COMMAND "${ARGS}")
file(MAKE_DIRECTORY ${OUT})
foreach(ranks 1 2)
  file(REMOVE ${OUT}/train_${ranks}.json)
  execute_process(COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np ${ranks} --mca btl self,tcp
      --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x OMP_NUM_THREADS=1
      ${REWIND} train ${args} --json ${OUT}/train_${ranks}.json
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ranks} rank(s): exit ${rc}\n${out}\n${err}")
  endif()
  string(REGEX MATCHALL "rewind train:" reports "${out}")
  list(LENGTH reports n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "${ranks} rank(s) printed ${n} reports, not one (rank 0's):\n${out}")
  endif()
  file(READ ${OUT}/train_${ranks}.json doc_${ranks})
  string(JSON r GET "${doc_${ranks}}" config ranks)
  if(NOT r EQUAL ranks)
    message(FATAL_ERROR "the report of a ${ranks}-rank job says ${r} ranks")
  endif()
endforeach()
if(NOT out MATCHES "2 ranks \\(MPI data parallelism\\)")
  message(FATAL_ERROR "the 2-rank report does not state its ranks:\n${out}")
endif()
string(JSON epochs LENGTH "${doc_1}" epochs)
math(EXPR last "${epochs} - 1")
foreach(e RANGE ${last})
  foreach(field loss test_acc train_acc)
    string(JSON a GET "${doc_1}" epochs ${e} ${field})
    string(JSON b GET "${doc_2}" epochs ${e} ${field})
    execute_process(COMMAND awk -v a=${a} -v b=${b}
        "BEGIN { d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a; if (s < 1) s = 1; exit !(d <= 1e-4 * s) }"
      RESULT_VARIABLE same)
    if(NOT same EQUAL 0)
      message(FATAL_ERROR "epoch ${e} ${field}: 1 rank ${a}, 2 ranks ${b}")
    endif()
    message(STATUS "epoch ${e} ${field}: 1 rank ${a}, 2 ranks ${b}")
  endforeach()
endforeach()
