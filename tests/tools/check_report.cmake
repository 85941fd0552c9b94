# tilekern-report --quick prints the machine line, the memcpy line, a conversion row for every
# format in FORMATS and every rounding mode, the custom operator rows, the normalization rows, the
# matmul rows and the attention rows.
#   cmake -DPROGRAM=... "-DFORMATS=bf16;fp16;..." -P check_report.cmake
execute_process(COMMAND ${PROGRAM} --quick RESULT_VARIABLE status OUTPUT_VARIABLE output
                ERROR_VARIABLE errors)
message("${output}${errors}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "exit status ${status}")
endif()
set(expected "machine: [a-z0-9]+ \\(cpu: " "\nmemcpy fp32 +[0-9]+ +[0-9.]+ +[0-9.]+\n")
# format, rounding, then the 11 numeric columns: range, precision, speed, error (CMake's
# regular expressions have no {10}, and at most 9 groups)
string(REPEAT " +[-+0-9.einf]+" 11 numbers)
foreach(format IN LISTS FORMATS)
  foreach(rounding nearest zero stochastic)
    list(APPEND expected "\n${format} +${rounding}${numbers}\n")
  endforeach()
endforeach()
# the custom operators table: each operator, bf16 in both rounding modes and float
list(APPEND expected "\ncustom operators \\(gpsimd\\)\n")
foreach(op relu gelu_erf bias_gelu "tanh_derivative: tanh" rmsnorm)
  foreach(cast "bf16 +nearest" "bf16 +stochastic" "float +-")
    list(APPEND expected "\n${op} +${cast} +[0-9.]+ +[-+0-9.einf]+ +[-+0-9.einf]+\n")
  endforeach()
endforeach()
# the normalization table: each kernel, bf16 in both rounding modes and float
list(APPEND expected "\nnormalization, softmax and activations \\(vector and scalar engines\\)\n")
foreach(kernel layernorm rmsnorm softmax "activation gelu_tanh" "activation silu" "activation exp")
  foreach(cast "bf16 +nearest" "bf16 +stochastic" "float +-")
    list(APPEND expected "\n${kernel} +${cast} +[0-9.]+ +[-+0-9.einf]+ +[-+0-9.einf]+\n")
  endforeach()
endforeach()
# the matmul table: each operand pair (C float), C bf16 in both rounding modes, the auto-cast
# policies; then path, GFLOPS and the three error columns
list(APPEND expected "\nmatmul \\(tensor engine\\)\n")
set(matmul_numbers " +[a-z0-9]+ [a-z0-9 ]+ +[0-9.]+ +[-+0-9.einf]+ +[-+0-9.einf]+ +[-+0-9.einf]+\n")
foreach(operands "bf16 x bf16" "bf16 x fp8_e4m3" "bf16 x fp8_e5m2" "bf16 x fp8_e3m4" "fp16 x fp16"
                 "tf32 x tf32" "float x float")
  list(APPEND expected "\n${operands} +none +float +-${matmul_numbers}")
endforeach()
foreach(rounding nearest stochastic)
  list(APPEND expected "\nbf16 x bf16 +none +bf16 +${rounding}${matmul_numbers}")
endforeach()
foreach(policy "matmult bf16" "all bf16")
  list(APPEND expected "\nfloat x float +${policy} +float +-${matmul_numbers}")
endforeach()
# the attention table: each input format (q, then k and v), unmasked, and bf16 causal; then
# GFLOPS, err/max|o| and SQNR
list(APPEND expected "\nattention \\(flash, forward\\)\n")
set(attention_numbers " +[0-9.]+ +[-+0-9.einf]+ +[-+0-9.einf]+\n")
foreach(row "bf16 +bf16 +none" "bf16 +bf16 +causal" "fp16 +fp16 +none" "fp8_e4m3 +fp8_e4m3 +none"
            "fp8_e5m2 +fp8_e5m2 +none" "bf16 +fp8_e4m3 +none")
  list(APPEND expected "\n${row}${attention_numbers}")
endforeach()
foreach(pattern IN LISTS expected)
  if(NOT output MATCHES "${pattern}")
    message(FATAL_ERROR "the report has no line matching '${pattern}'")
  endif()
endforeach()
