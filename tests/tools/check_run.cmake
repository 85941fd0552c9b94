# Runs PROGRAM with the arguments ARGS (a list) and standard input from INPUT (default: empty),
# then checks its exit status (zero, or non-zero if FAILS) and that its standard output and
# standard error match every regular expression in the lists STDOUT and STDERR.
#   cmake -DPROGRAM=... "-DARGS=encode;bf16;1" "-DSTDOUT=0x3f80" [-DFAILS=ON] -P check_run.cmake
if(NOT INPUT)
  set(INPUT /dev/null)
endif()
execute_process(COMMAND ${PROGRAM} ${ARGS} INPUT_FILE ${INPUT} RESULT_VARIABLE status
                OUTPUT_VARIABLE output ERROR_VARIABLE errors)
message("${PROGRAM} ${ARGS}\nexit status: ${status}\nstdout:\n${output}stderr:\n${errors}")
if(FAILS AND status EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit status")
elseif(NOT FAILS AND NOT status EQUAL 0)
  message(FATAL_ERROR "expected exit status 0")
endif()
foreach(pattern IN LISTS STDOUT)
  if(NOT output MATCHES "${pattern}")
    message(FATAL_ERROR "standard output does not match '${pattern}'")
  endif()
endforeach()
foreach(pattern IN LISTS STDERR)
  if(NOT errors MATCHES "${pattern}")
    message(FATAL_ERROR "standard error does not match '${pattern}'")
  endif()
endforeach()
if(FAILS AND NOT output STREQUAL "")
  message(FATAL_ERROR "expected no standard output from a failing run")
endif()
