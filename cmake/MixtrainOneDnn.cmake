# oneDNN (Debian: libdnnl-dev) as the CPU backend's GEMM and convolution engine, private to the
# library and optional: without it the backend's own kernels run (docs/CPU.md, "oneDNN").
# Included right after add_library(mixtrain): it sets MIXTRAIN_WITH_ONEDNN for config.h.
# Debian's dnnl-config.cmake asks for OpenCL (its GPU runtime) with REQUIRED, a hard error inside
# find_package(dnnl) when ocl-icd-opencl-dev is missing: OpenCL is looked for first.
find_package(OpenCL QUIET)
if(OpenCL_FOUND)
  find_package(dnnl CONFIG QUIET)
endif()
if(TARGET DNNL::dnnl)
  set(_mt_onednn_default ON)
else()
  set(_mt_onednn_default OFF)
endif()
option(MIXTRAIN_ONEDNN "Run CPU GEMMs and convolutions on oneDNN where it is faster (needs libdnnl-dev)"
       ${_mt_onednn_default})
if(MIXTRAIN_ONEDNN)
  if(NOT TARGET DNNL::dnnl)
    message(FATAL_ERROR "MIXTRAIN_ONEDNN is ON but oneDNN was not found: install libdnnl-dev and "
                        "ocl-icd-opencl-dev, or pass -DMIXTRAIN_ONEDNN=OFF")
  endif()
  if(NOT DNNL_CPU_THREADING_RUNTIME STREQUAL "OMP")
    # Its threads must be the OpenMP threads the backend's governor steers (docs/CPU.md).
    message(FATAL_ERROR "mixtrain needs a oneDNN built with the OpenMP runtime, this one uses "
                        "${DNNL_CPU_THREADING_RUNTIME}; pass -DMIXTRAIN_ONEDNN=OFF")
  endif()
  target_link_libraries(mixtrain PRIVATE DNNL::dnnl)
  message(STATUS "mixtrain: oneDNN ${dnnl_VERSION} on (CPU GEMMs and convolutions; MIXTRAIN_ONEDNN=0 at run time turns it off)")
else()
  message(STATUS "mixtrain: oneDNN off (libdnnl-dev not found, or MIXTRAIN_ONEDNN=OFF): the CPU keeps its own kernels")
endif()
set(MIXTRAIN_WITH_ONEDNN ${MIXTRAIN_ONEDNN})

# The tests run both paths (called from tests/CMakeLists.txt once the test programs exist): the
# op, module and backend suites again with oneDNN at every size (MIXTRAIN_ONEDNN=all; the default
# run leaves the tests' small shapes on the own kernels) and with oneDNN off (0), the
# training-parity and determinism tests with it at every size, and the verbose trace naming it.
function(mt_add_onednn_tests)
  if(NOT MIXTRAIN_ONEDNN)
    return()
  endif()
  # The whole suites but the thread-count tests, which expect a governor left alone by the tests
  # before them (they run one per process in the default run).
  set(_runs "ops|test_ops|*" "nn|test_nn|*" "backends|test_backends|-CpuThreads.*")
  foreach(mode all 0)
    foreach(run ${_runs})
      string(REPLACE "|" ";" run "${run}")
      list(GET run 0 layer)
      list(GET run 1 exe)
      list(GET run 2 filter)
      if(TARGET ${exe})
        add_test(NAME ${layer}.onednn_${mode} COMMAND ${exe} --gtest_filter=${filter})
        set_tests_properties(${layer}.onednn_${mode} PROPERTIES TIMEOUT 900 ENVIRONMENT "MIXTRAIN_ONEDNN=${mode}")
      endif()
    endforeach()
  endforeach()
  if(TARGET test_examples)
    add_test(NAME examples.onednn_all COMMAND test_examples
             --gtest_filter=AmpParity.*:CpuDeterminism.*:UnetExample.ChannelsLastTrainsLikeNchw:DryRunModels.*)
    set_tests_properties(examples.onednn_all PROPERTIES TIMEOUT 900 ENVIRONMENT "MIXTRAIN_ONEDNN=all")
  endif()
  if(TARGET test_backends)
    add_test(NAME backends.onednn_verbose_trace COMMAND test_backends
             --gtest_filter=CpuOneDnn.PathFollowsTheSwitchAndTheSizeThreshold)
    set_tests_properties(backends.onednn_verbose_trace PROPERTIES TIMEOUT 120
      ENVIRONMENT "MIXTRAIN_ONEDNN=all;MIXTRAIN_CPU_VERBOSE=1"
      PASS_REGULAR_EXPRESSION "mixtrain cpu: gemm [^\n]* -> onednn:[^\n]*\n(.|\n)*mixtrain cpu: conv2d [^\n]* -> onednn:"
      FAIL_REGULAR_EXPRESSION "\\[  FAILED  \\]")
  endif()
endfunction()
