# Vector code chosen at run time. A portable build (MIXTRAIN_NATIVE off) compiles the CPU
# backend's matrix product (kernels/cpu/gemm_eigen.cpp) and its vector kernels (GELU in
# unary_vector.cpp, layer norm's rows in norm_vector.cpp) twice more, for AVX2+FMA and for
# AVX-512, each copy in its own namespace with Eigen renamed (-DEigen=...) so that none of its
# inline or template code can stand in for the portable code's; cpu_isa.cpp picks the copy
# the CPU supports. With MIXTRAIN_NATIVE the portable copy is already built for this CPU.
if(MIXTRAIN_NATIVE OR NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$"
   OR NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  return()
endif()

function(mt_add_gemm_copy isa macro)
  mt_avx512_safe_flags(_flags ${ARGN})
  set(_target mixtrain_gemm_${isa})
  add_library(${_target} OBJECT ${PROJECT_SOURCE_DIR}/kernels/cpu/gemm_eigen.cpp)
  target_include_directories(${_target} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${_target} PRIVATE MT_GEMM_ISA=gemm_${isa} Eigen=mt_eigen_${isa})
  target_compile_options(${_target} PRIVATE ${_flags})
  target_link_libraries(${_target} PRIVATE Eigen3::Eigen OpenMP::OpenMP_CXX)
  target_sources(mixtrain PRIVATE $<TARGET_OBJECTS:${_target}>)
  # The vector kernels (kernels/cpu/unary_vector.h, norm_vector.h), same copies, same choice.
  add_library(mixtrain_vector_${isa} OBJECT ${PROJECT_SOURCE_DIR}/kernels/cpu/unary_vector.cpp
              ${PROJECT_SOURCE_DIR}/kernels/cpu/norm_vector.cpp)
  target_include_directories(mixtrain_vector_${isa} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include
                             ${PROJECT_BINARY_DIR}/include)
  target_compile_definitions(mixtrain_vector_${isa} PRIVATE MT_VEC_ISA=vec_${isa})
  target_compile_options(mixtrain_vector_${isa} PRIVATE ${_flags} -fno-math-errno)
  target_sources(mixtrain PRIVATE $<TARGET_OBJECTS:mixtrain_vector_${isa}>)
  # Layer norm's results must not depend on the CPU: no fused multiply-adds in its copies.
  set_source_files_properties(${PROJECT_SOURCE_DIR}/kernels/cpu/norm_vector.cpp TARGET_DIRECTORY
                              mixtrain_vector_${isa} PROPERTIES COMPILE_OPTIONS -ffp-contract=off)
  foreach(_chooser cpu_isa.cpp gemm_dispatch.cpp vector_dispatch.cpp)
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/backends/cpu/${_chooser} TARGET_DIRECTORY mixtrain
                 APPEND PROPERTY COMPILE_DEFINITIONS ${macro})
  endforeach()
endfunction()

mt_add_gemm_copy(avx2 MT_GEMM_HAVE_AVX2 -march=haswell -mtune=generic)
mt_add_gemm_copy(avx512 MT_GEMM_HAVE_AVX512 -march=x86-64-v4 -mtune=generic)

# The bf16 product on vdpbf16ps (kernels/cpu/gemm_bf16_avx512.cpp), where the compiler
# knows AVX512_BF16 (GCC 10, clang 9); gemm_dispatch.cpp runs it only on CPUs that report it.
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-mavx512bf16 MT_HAVE_MAVX512BF16)
if(MT_HAVE_MAVX512BF16)
  mt_avx512_safe_flags(_bf16_flags -march=x86-64-v4 -mavx512bf16 -mtune=generic)
  add_library(mixtrain_gemm_avx512bf16 OBJECT ${PROJECT_SOURCE_DIR}/kernels/cpu/gemm_bf16_avx512.cpp)
  target_include_directories(mixtrain_gemm_avx512bf16 PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
  target_compile_options(mixtrain_gemm_avx512bf16 PRIVATE ${_bf16_flags})
  target_link_libraries(mixtrain_gemm_avx512bf16 PRIVATE OpenMP::OpenMP_CXX)
  target_sources(mixtrain PRIVATE $<TARGET_OBJECTS:mixtrain_gemm_avx512bf16>)
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/backends/cpu/gemm_dispatch.cpp TARGET_DIRECTORY mixtrain
               APPEND PROPERTY COMPILE_DEFINITIONS MT_GEMM_HAVE_AVX512BF16)
else()
  message(STATUS "mixtrain: the compiler lacks -mavx512bf16; bf16 GEMMs keep the fp32 path")
endif()
