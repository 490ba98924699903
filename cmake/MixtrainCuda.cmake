# The CUDA backend: kernels/cuda/*.cu (the device half) compile into an object library
# whose objects join the mixtrain library itself (one archive to link, no ordering between two
# static libraries); src/backends/cuda/*.cpp is host code that calls cuBLASLt, cuDNN and the kernels.
# CUDA, cuBLAS(Lt) and cuDNN are private to mixtrain: no public header includes them, so a user
# of the shared library needs neither their headers nor the toolkit's CMake package. A static
# mixtrain exports them as link-only dependencies, which mixtrainConfig.cmake then finds.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES ${MIXTRAIN_CUDA_ARCHS})
endif()
if(NOT CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)

find_library(MT_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 REQUIRED)
find_path(MT_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include REQUIRED)
# By target name, not path, so that an export of a static mixtrain names no path of this machine.
add_library(mixtrain::cudnn UNKNOWN IMPORTED)
set_target_properties(mixtrain::cudnn PROPERTIES IMPORTED_LOCATION ${MT_CUDNN_LIBRARY})

file(GLOB MT_CUDA_KERNELS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu)
file(GLOB MT_CUDA_HOST CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backends/cuda/*.cpp)
list(FILTER MT_CUDA_HOST EXCLUDE REGEX "/workspace\\.cpp$")  # in every build (CMakeLists.txt)

add_library(mixtrain_kernels OBJECT ${MT_CUDA_KERNELS})
target_include_directories(mixtrain_kernels
  PRIVATE ${PROJECT_SOURCE_DIR}/kernels/cuda ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include
          ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR})
target_compile_options(mixtrain_kernels PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo -Xcompiler=-fPIC>)
target_link_libraries(mixtrain_kernels PRIVATE CUDA::cudart)
target_sources(mixtrain PRIVATE $<TARGET_OBJECTS:mixtrain_kernels>)

target_sources(mixtrain PRIVATE ${MT_CUDA_HOST})
# mixtrain was created before CUDA was enabled, so it did not pick up the architectures.
set_target_properties(mixtrain PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
target_include_directories(mixtrain PRIVATE ${MT_CUDNN_INCLUDE})
target_link_libraries(mixtrain PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt mixtrain::cudnn)
