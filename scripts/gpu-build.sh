# Sourced by the GPU scripts (gpu-check.sh, gpu-profile.sh): finds CUDA and cuDNN on this
# machine, exports LD_LIBRARY_PATH, installs packed data, and builds into $build (build-gpu/).
# Expects $root and $out to be set; sets $py, $build and $build_seconds.
# ---- Where CUDA and cuDNN live here.
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/device.txt"
nvcc --version | tail -1
py=$(command -v python3 || true)
cudnn_inc="" cudnn_lib=""
for d in /usr/local/cuda/include /usr/include /usr/include/x86_64-linux-gnu; do
  [ -f "$d/cudnn.h" ] && cudnn_inc=$d && break
done
for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
  f=$(ls "$d"/libcudnn.so* 2>/dev/null | head -1) && [ -n "$f" ] && cudnn_lib=$f && break
done
if [ -z "$cudnn_inc" ] && [ -n "$py" ]; then  # PyTorch's pip wheel of cuDNN
  base=$($py -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null || \
         $py -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null)
  [ -n "$base" ] && cudnn_inc=$base/include && cudnn_lib=$(ls "$base"/lib/libcudnn.so* | head -1)
fi
echo "cudnn: include $cudnn_inc, library $cudnn_lib"
# NCCL the same way: the toolkit's, the system's, or PyTorch's wheel (whose header may be missing:
# then the packed .gpu-deps copy, same major version).
nccl_inc="" nccl_lib=""
nccl_base=$($py -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
for d in /usr/local/cuda/include /usr/include ${nccl_base:+$nccl_base/include} "$root/.gpu-deps/usr/include"; do
  [ -f "$d/nccl.h" ] && nccl_inc=$d && break
done
for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu ${nccl_base:+$nccl_base/lib}; do
  f=$(ls "$d"/libnccl.so* 2>/dev/null | head -1) && [ -n "$f" ] && nccl_lib=$f && break
done
echo "nccl: include $nccl_inc, library $nccl_lib"
deps_lib="$root/.gpu-deps/usr/lib:$root/.gpu-deps/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$(dirname "${cudnn_lib:-/x}"):$(dirname "${nccl_lib:-/x}"):/usr/local/cuda/lib64:$deps_lib:${LD_LIBRARY_PATH:-}"

# ---- Data the tests and examples may read, when packed with --data.
if [ -d .gpu-deps/usr/share/datasets ]; then mkdir -p /usr/share/datasets && cp -rn .gpu-deps/usr/share/datasets/* /usr/share/datasets/; fi
if [ -d .gpu-deps/usr/share/games ]; then mkdir -p /usr/share/games && cp -rn .gpu-deps/usr/share/games/* /usr/share/games/; fi

# ---- Build, or a build made elsewhere (gpu-check.sh --prebuilt): its libraries on the path.
if [ -n "${prebuilt_dir:-}" ]; then
  build=$prebuilt_dir
  export LD_LIBRARY_PATH="$build:$build/../runlibs:$LD_LIBRARY_PATH"
  build_seconds=0
  return 0
fi
build=$root/build-gpu
gen=""
command -v ninja >/dev/null && gen="-G Ninja"
t0=$(date +%s)
cmake -S . -B "$build" $gen -DCMAKE_BUILD_TYPE=Release -DMIXTRAIN_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$root/.gpu-deps/usr" ${cudnn_inc:+-DMT_CUDNN_INCLUDE=$cudnn_inc} \
  ${cudnn_lib:+-DMT_CUDNN_LIBRARY=$cudnn_lib} ${nccl_inc:+-DMT_NCCL_INCLUDE=$nccl_inc} \
  ${nccl_lib:+-DMT_NCCL_LIBRARY=$nccl_lib} > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" ${build_target:+--target $build_target} > "$out/build.log" 2>&1 || { grep -E "error" -A5 "$out/build.log" | head -60; exit 1; }
build_seconds=$(( $(date +%s) - t0 ))

