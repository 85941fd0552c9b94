# Project targets (tests, tools, benchmarks): warnings are errors, sanitizers when asked.
function(tilekern_project_target target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Werror)
  target_link_libraries(${target} PRIVATE tilekern::tilekern)
  if(TILEKERN_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${TILEKERN_SANITIZE} -fno-sanitize-recover=all
                                             -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${TILEKERN_SANITIZE})
  endif()
endfunction()
