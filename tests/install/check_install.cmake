# Installs the build tree into a scratch prefix, checks that the installed CMake files and headers
# name no path of this machine, then configures, builds and runs a consumer project that uses
# find_package(mixtrain) with CUDA hidden from CMake (no CUDAToolkit package, no nvcc on PATH),
# with the README's training loops (examples/readme/amp_loop.cpp) as a second program and the
# libtorch habits (consumer/libtorch_habits.cpp, against PyTorch's results) as a third, a program
# on the public headers' old paths (consumer/old_header_paths.cpp) as a fourth, a trainer of a
# user's own that plans its step with the library (consumer/own_trainer.cpp) as a fifth, and checks
# what the consumer's binary links: never libcudart, libcublas(Lt) or libcudnn itself, nor
# through libmixtrain when mixtrain was built without CUDA.
# Variables: BUILD (mixtrain's build dir), SOURCE (the consumer), WORK (scratch), MT_SOURCE_DIR,
# WITH_CUDA (ON/OFF), SHARED (ON/OFF), CUDA_ROOT (the toolkit's root, when known), READELF, LDD,
# MIXTRAIN_EXE (the mixtrain command, to launch the consumer's DDP trainer; empty: not run).
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
execute_process(COMMAND ${WORK}/build/old_header_paths RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the program on the old header paths (tests/install/consumer/old_header_paths.cpp) failed: ${rc}")
endif()
execute_process(COMMAND ${WORK}/build/own_trainer RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the trainer of a user's own (tests/install/consumer/own_trainer.cpp) did not get its step's "
                      "prediction, measurement and fit from the library: ${rc}")
endif()
execute_process(COMMAND ${WORK}/build/readme_loop RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "the README's training loop (examples/readme/amp_loop.cpp), built against the package, failed: ${rc}")
endif()

# A user's DDP trainer follows the launcher's shares with no code of its own
# (docs/DISTRIBUTED.md, "A trainer of your own follows the launcher"): --rank-weights 2,1,1 gives
# its three ranks 48, 24 and 24 rows of every global batch of 96; --rank-batches auto gives each
# rank a share no larger than what its own --rank-memory budget holds, found by a dry run of the
# trainer's step, the shares together the whole batch.
if(MIXTRAIN_EXE)
  set(trainer ${WORK}/build/ddp_trainer)
  function(launch_trainer out)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1 ${MIXTRAIN_EXE} launch ${ARGN} -- ${trainer}
                    OUTPUT_VARIABLE text ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 180)
    if(rc)
      message(FATAL_ERROR "mixtrain launch ${ARGN} -- ddp_trainer failed (${rc}):\n${text}\n${err}")
    endif()
    set(${out} "${text}" PARENT_SCOPE)
  endfunction()
  launch_trainer(text --nproc 3 --rank-weights 2,1,1)
  foreach(rank_rows "0;48" "1;24" "2;24")
    list(GET rank_rows 0 r)
    list(GET rank_rows 1 n)
    foreach(step 0 1 2)
      string(FIND "${text}" "rank ${r} step ${step} rows ${n}\n" at)
      if(at EQUAL -1)
        message(FATAL_ERROR "--rank-weights 2,1,1: rank ${r} did not train on ${n} rows at step ${step}:\n${text}")
      endif()
    endforeach()
  endforeach()
  # Budgets that hold about 60 and 40 of the 96 rows: neither rank holds the batch alone.
  foreach(rows 60 40)
    execute_process(COMMAND ${trainer} --peak ${rows} OUTPUT_VARIABLE peak OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE rc)
    if(rc OR NOT peak MATCHES "^[0-9]+$")
      message(FATAL_ERROR "ddp_trainer --peak ${rows} failed (${rc}): ${peak}")
    endif()
    list(APPEND budgets ${peak})
  endforeach()
  string(REPLACE ";" "," budget_list "${budgets}")
  launch_trainer(text --nproc 2 --rank-batches auto --rank-memory ${budget_list})
  set(total 0)
  foreach(r 0 1)
    if(NOT text MATCHES "rank ${r} step 0 rows ([0-9]+)\n")
      message(FATAL_ERROR "--rank-batches auto: no rows from rank ${r}:\n${text}")
    endif()
    set(rows${r} ${CMAKE_MATCH_1})
    math(EXPR total "${total} + ${CMAKE_MATCH_1}")
    if(NOT text MATCHES "rank ${r} fits ([0-9]+) peak ([0-9]+) budget ([0-9]+)")
      message(FATAL_ERROR "--rank-batches auto: no fit from rank ${r}:\n${text}")
    endif()
    if(rows${r} GREATER CMAKE_MATCH_1 OR CMAKE_MATCH_2 GREATER CMAKE_MATCH_3)
      message(FATAL_ERROR "--rank-batches auto: rank ${r} took ${rows${r}} rows, more than its fit ${CMAKE_MATCH_1} "
                          "(peak ${CMAKE_MATCH_2} in a budget of ${CMAKE_MATCH_3}):\n${text}")
    endif()
  endforeach()
  if(NOT total EQUAL 96 OR NOT rows0 GREATER rows1)
    message(FATAL_ERROR "--rank-batches auto: shares ${rows0} and ${rows1} are not the batch of 96 split toward "
                        "the larger budget:\n${text}")
  endif()
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
