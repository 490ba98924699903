# Compiler flags for mixtrain's own targets. Nothing here is global: mt_apply_flags(target) puts
# the flags on one target, and mt_apply_flags_in(dir) on every target defined under dir (called
# once, at the end of the top-level CMakeLists.txt). A parent project and the installed package
# never see them.
# GCC 12 can miscompile AVX-512 constant stores (cmake/checks/avx512_constant_stores.cpp).
# mt_avx512_safe_flags(out flags...) sets out to flags plus the narrowest workaround with which
# the check passes. Where the check cannot run (this CPU lacks AVX-512), GCC 12 gets the store
# size limits anyway, which are harmless.
function(mt_avx512_safe_flags out)
  set(_base ${ARGN})
  string(MAKE_C_IDENTIFIER "${_base}" _key)
  if(DEFINED MT_SAFE_FLAGS_${_key})
    set(${out} ${MT_SAFE_FLAGS_${_key}} PARENT_SCOPE)
    return()
  endif()
  set(_result ${_base})
  set(_workaround "")
  foreach(_extra none "-mmove-max=128 -mstore-max=128" "-mno-avx512f")
    set(_try ${_base})
    if(NOT _extra STREQUAL "none")
      separate_arguments(_extra_list UNIX_COMMAND "${_extra}")
      list(APPEND _try ${_extra_list})
    endif()
    try_run(_run_ok _compile_ok ${CMAKE_BINARY_DIR}/mt_checks ${PROJECT_SOURCE_DIR}/cmake/checks/avx512_constant_stores.cpp
            COMPILE_DEFINITIONS ${_try} -O2)
    if(_compile_ok AND _run_ok EQUAL 0)
      set(_result ${_try})
      if(NOT _extra STREQUAL "none")
        set(_workaround "${_extra}")
      endif()
      break()
    endif()
    if(_compile_ok AND _extra STREQUAL "none" AND NOT _run_ok EQUAL 1)
      # Crashed rather than failed: this CPU cannot run the flags, so the check tells nothing.
      if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
        set(_workaround "-mmove-max=128 -mstore-max=128")
        list(APPEND _result -mmove-max=128 -mstore-max=128)
      endif()
      break()
    endif()
  endforeach()
  if(_workaround)
    message(STATUS "mixtrain: ${_base}: the compiler miscompiles AVX-512 constant stores; adding ${_workaround}")
  endif()
  set(MT_SAFE_FLAGS_${_key} ${_result} CACHE INTERNAL "")
  set(${out} ${_result} PARENT_SCOPE)
endfunction()

set(MT_TARGET_FLAGS "")
if(MIXTRAIN_NATIVE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native MT_HAS_MARCH_NATIVE)
  if(MT_HAS_MARCH_NATIVE)
    mt_avx512_safe_flags(_mt_native_flags -march=native)
    list(APPEND MT_TARGET_FLAGS ${_mt_native_flags})
  endif()
endif()

# sqrt, exp and friends need not set errno (nothing reads it): without this, every std::sqrt keeps
# a branch to the library for negative inputs, and loops that call it do not vectorize.
list(APPEND MT_TARGET_FLAGS -fno-math-errno)

# MIXTRAIN_FUZZ: coverage feedback for libFuzzer in the library and the fuzz targets (the top-level
# CMakeLists.txt and tests/fuzz put it there), not in the tests, which CI runs from the same
# sanitizer build.
set(MT_FUZZ_COVERAGE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)

if(MIXTRAIN_SANITIZE)
  list(APPEND MT_TARGET_FLAGS -fsanitize=${MIXTRAIN_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
endif()

# ccache, unless the user chose a launcher of their own (-DCMAKE_CXX_COMPILER_LAUNCHER=... or the
# environment variable of that name, which CMake reads into the cache).
# ccache caches files that use a precompiled header only when told that the header's defines and
# time macros may be sloppy (ccache's manual, "Precompiled headers").
find_program(MT_CCACHE ccache)
if(MT_CCACHE)
  if(NOT CMAKE_CXX_COMPILER_LAUNCHER)
    set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime ${MT_CCACHE})
  endif()
  if(NOT CMAKE_CUDA_COMPILER_LAUNCHER AND NOT DEFINED ENV{CMAKE_CUDA_COMPILER_LAUNCHER})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${MT_CCACHE})
  endif()
endif()

function(mt_set_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()

# The flags above, on one target that compiles C++ (host code of CUDA targets included).
function(mt_apply_flags target)
  get_target_property(_type ${target} TYPE)
  get_target_property(_imported ${target} IMPORTED)
  if(_imported OR _type STREQUAL "INTERFACE_LIBRARY" OR _type STREQUAL "UTILITY")
    return()
  endif()
  foreach(_f ${MT_TARGET_FLAGS})
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${_f}>)
  endforeach()
  if(MIXTRAIN_SANITIZE)
    if(_type STREQUAL "EXECUTABLE" OR _type STREQUAL "SHARED_LIBRARY" OR _type STREQUAL "MODULE_LIBRARY")
      target_link_options(${target} PRIVATE -fsanitize=${MIXTRAIN_SANITIZE})
    endif()
  endif()
endfunction()

# mt_apply_flags on every target defined in dir and the directories below it.
function(mt_apply_flags_in dir)
  get_property(_targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(_t ${_targets})
    mt_apply_flags(${_t})
  endforeach()
  get_property(_subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(_d ${_subdirs})
    mt_apply_flags_in(${_d})
  endforeach()
endfunction()
