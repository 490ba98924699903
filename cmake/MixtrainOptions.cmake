# Compiler flags shared by every mixtrain target.
if(MIXTRAIN_NATIVE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native MT_HAS_MARCH_NATIVE)
  if(MT_HAS_MARCH_NATIVE)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
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
