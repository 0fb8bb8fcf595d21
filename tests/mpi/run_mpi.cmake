# Runs PROGRAM ARGS on RANKS ranks with mpirun over loopback and checks the job: EXPECT ok (exit 0)
# or fail (non-zero), the output matching REGEX, and the whole job taking under MAX_SECONDS.
string(TIMESTAMP start "%s" UTC)
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe -np ${RANKS}
    --mca btl self,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo
    -x OMP_NUM_THREADS=1 ${PROGRAM} ${ARGS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT ${MAX_SECONDS})
string(TIMESTAMP stop "%s" UTC)
math(EXPR took "${stop} - ${start}")
message("${out}")
message("mpirun -np ${RANKS} ${ARGS}: exit ${rc} after ${took} s")
if(rc MATCHES "timeout")
  message(FATAL_ERROR "the job did not end within ${MAX_SECONDS} s")
endif()
if(EXPECT STREQUAL "ok_or_skip" AND rc EQUAL 77)
  message("skipped: no GPU visible to the job")
  return()
endif()
if(EXPECT MATCHES "^ok" AND NOT rc EQUAL 0)
  message(FATAL_ERROR "the job failed (exit ${rc})")
endif()
if(EXPECT STREQUAL "fail" AND rc EQUAL 0)
  message(FATAL_ERROR "the job succeeded but one of its ranks failed on purpose")
endif()
if(NOT out MATCHES "${REGEX}")
  message(FATAL_ERROR "the output does not match '${REGEX}'")
endif()
