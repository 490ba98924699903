# Compiler flags shared by every mixtrain target.
if(MIXTRAIN_NATIVE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native MT_HAS_MARCH_NATIVE)
  if(MT_HAS_MARCH_NATIVE)
    # Guard against GCC 12's AVX-512 constant-store miscompilation (cmake/checks): add the
    # narrowest workaround that makes the check pass.
    set(_mt_native_flags -march=native)
    set(_mt_workaround "")
    foreach(_mt_extra none "-mmove-max=128 -mstore-max=128" "-mno-avx512f")
      set(_mt_try ${_mt_native_flags})
      if(NOT _mt_extra STREQUAL "none")
        separate_arguments(_mt_extra_list UNIX_COMMAND "${_mt_extra}")
        list(APPEND _mt_try ${_mt_extra_list})
      endif()
      try_run(_mt_run_ok _mt_compile_ok ${CMAKE_BINARY_DIR}/mt_checks
              ${CMAKE_CURRENT_LIST_DIR}/checks/avx512_constant_stores.cpp
              COMPILE_DEFINITIONS ${_mt_try} -O2)
      if(_mt_compile_ok AND _mt_run_ok EQUAL 0)
        set(_mt_native_flags ${_mt_try})
        if(NOT _mt_extra STREQUAL "none")
          set(_mt_workaround "${_mt_extra}")
        endif()
        break()
      endif()
    endforeach()
    if(_mt_workaround)
      message(STATUS "mixtrain: the compiler miscompiles AVX-512 constant stores; adding ${_mt_workaround}")
    endif()
    foreach(_f ${_mt_native_flags})
      add_compile_options($<$<COMPILE_LANGUAGE:CXX>:${_f}>)
    endforeach()
  endif()
endif()

# sqrt, exp and friends need not set errno (nothing reads it): without this, every std::sqrt keeps
# a branch to the library for negative inputs, and loops that call it do not vectorize.
add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fno-math-errno>)

if(MIXTRAIN_FUZZ)
  # Coverage feedback for libFuzzer in every mixtrain object; the fuzz targets link the runtime.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()

if(MIXTRAIN_SANITIZE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${MIXTRAIN_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${MIXTRAIN_SANITIZE})
endif()

find_program(MT_CCACHE ccache)
if(MT_CCACHE)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${MT_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${MT_CCACHE})
endif()

function(mt_set_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()
