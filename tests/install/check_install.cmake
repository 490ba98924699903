# Installs the build tree into a scratch prefix, checks that the installed CMake files and headers
# name no path of this machine, then configures, builds and runs a consumer project that uses
# find_package(mixtrain) with CUDA hidden from CMake (no CUDAToolkit package, no nvcc on PATH),
# with the README's training loops (examples/readme/amp_loop.cpp) as a second program and the
# libtorch habits (consumer/libtorch_habits.cpp, against PyTorch's results) as a third, and checks
# what the consumer's binary links: never libcudart, libcublas(Lt) or libcudnn itself, nor
# through libmixtrain when mixtrain was built without CUDA.
# Variables: BUILD (mixtrain's build dir), SOURCE (the consumer), WORK (scratch), MT_SOURCE_DIR,
# WITH_CUDA (ON/OFF), SHARED (ON/OFF), CUDA_ROOT (the toolkit's root, when known), READELF, LDD.
# A static mixtrain built with CUDA leaves cudart, cuBLAS and cuDNN to its users' link, so its
# consumer is configured with the toolkit visible.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()

# Relocatable: no absolute path of the build machine in the package's CMake files or headers.
file(GLOB_RECURSE installed_text ${WORK}/prefix/*.cmake ${WORK}/prefix/*.h)
set(forbidden ${MT_SOURCE_DIR} ${BUILD} /usr/local/cuda)
if(CUDA_ROOT)
  list(APPEND forbidden ${CUDA_ROOT})
endif()
set(checked 0)
foreach(f ${installed_text})
  file(READ ${f} text)
  math(EXPR checked "${checked} + 1")
  foreach(path ${forbidden})
    string(FIND "${text}" "${path}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${f} names a path of the build machine: ${path}")
    endif()
  endforeach()
endforeach()
if(NOT EXISTS ${WORK}/prefix/include/mixtrain/config.h OR checked LESS 3)
  message(FATAL_ERROR "the install tree lacks mixtrain/config.h or the package files (${checked} files checked)")
endif()

# CUDA hidden: no CUDAToolkit package, and PATH without any directory holding nvcc.
set(path_without_cuda "")
string(REPLACE ":" ";" path_dirs "$ENV{PATH}")
foreach(d ${path_dirs})
  if(NOT EXISTS ${d}/nvcc AND NOT d MATCHES "cuda")
    list(APPEND path_without_cuda ${d})
  endif()
endforeach()
string(REPLACE ";" ":" path_without_cuda "${path_without_cuda}")
set(hide_cuda ON)
if(WITH_CUDA AND NOT SHARED)
  set(hide_cuda OFF)
  set(path_without_cuda "$ENV{PATH}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PATH=${path_without_cuda}"
                        ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -DCMAKE_PREFIX_PATH=${WORK}/prefix
                        -DCMAKE_BUILD_TYPE=Release -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=${hide_cuda}
                        -DREADME_LOOP=${MT_SOURCE_DIR}/examples/readme/amp_loop.cpp
                        -DCMAKE_DISABLE_FIND_PACKAGE_CUDA=${hide_cuda} RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "configuring the consumer project with CUDA hidden failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PATH=${path_without_cuda}" ${CMAKE_COMMAND} --build ${WORK}/build
                RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer project failed: ${rc}")
endif()
execute_process(COMMAND ${WORK}/build/consumer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the consumer program failed: ${rc}")
endif()
execute_process(COMMAND ${WORK}/build/libtorch_habits ${MT_SOURCE_DIR}/tests/ops/pytorch_reference/libtorch_ops.json
                        ${WORK}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the libtorch habits program (tests/install/consumer/libtorch_habits.cpp), built against the "
                      "package, disagrees with PyTorch or failed: ${rc}")
endif()
execute_process(COMMAND ${WORK}/build/readme_loop RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the README's training loop (examples/readme/amp_loop.cpp), built against the package, failed: ${rc}")
endif()

# What the consumer links directly: mixtrain, never CUDA's libraries.
execute_process(COMMAND ${READELF} -d ${WORK}/build/consumer OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "${READELF} -d consumer failed: ${rc}")
endif()
if(SHARED AND dynamic MATCHES "(libcudart|libcublas|libcudnn)[^\n]*")
  message(FATAL_ERROR "the consumer links ${CMAKE_MATCH_0} itself:\n${dynamic}")
endif()
# Everything it loads at run time: without CUDA in mixtrain, nothing of CUDA at all.
if(NOT WITH_CUDA)
  execute_process(COMMAND ${LDD} ${WORK}/build/consumer OUTPUT_VARIABLE loaded RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "${LDD} consumer failed: ${rc}")
  endif()
  if(loaded MATCHES "(libcudart|libcublas|libcudnn|libcuda)[^\n]*")
    message(FATAL_ERROR "a CPU-only mixtrain's consumer loads ${CMAKE_MATCH_0}:\n${loaded}")
  endif()
endif()
