#!/usr/bin/env bash
# Run here (the development machine): packs a CUDA build made here (BUILD_DIR, configured with
# -DMIXTRAIN_CUDA=ON) into .gpu-bin/build.tar.xz for `scripts/gpu-check.sh --prebuilt`, so that the
# lent GPU machine's minutes go to tests and measurements instead of compiling: the library, the
# test programs, the mixtrain command, the example programs and benchmarks, and the shared
# libraries they need that a GPU image lacks (oneDNN, Gloo and its dependencies). CUDA, cuBLAS,
# cuDNN and NCCL come from the GPU machine.
#   scripts/gpu-pack-build.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
[ "$(basename "$build")" = build-cuda ] || { echo "gpu-pack-build: BUILD_DIR must be <source>/build-cuda" >&2; exit 2; }
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/runlibs"
echo "$src" > "$stage/source_dir.txt"
for lib in libdnnl.so.2 libOpenCL.so.1 libgomp.so.1 libgloo.so.0 libhiredis.so.0.14 libibverbs.so.1 libnl-3.so.200 \
           libnl-route-3.so.200 libz.so.1 libbenchmark.so.1debian; do
  f=$(ldconfig -p | awk -v l="$lib" '$1 == l && !f {print $NF; f = 1}')
  [ -n "$f" ] || f=/usr/lib/$lib
  cp -L "$f" "$stage/runlibs/$lib"
done
mkdir -p "$root/.gpu-bin"
(cd "$src" && find build-cuda -maxdepth 1 -name 'libmixtrain.so*' && \
   find build-cuda/tests build-cuda/apps build-cuda/examples build-cuda/bench -maxdepth 2 -type f -perm -u+x \
     ! -name '*.so' ! -name '*.a' ! -path '*CMakeFiles*') > "$stage/files.txt"
tar -cJf "$root/.gpu-bin/build.tar.xz" -C "$src" -T "$stage/files.txt" -C "$stage" source_dir.txt runlibs
echo "gpu-pack-build: $(du -h "$root/.gpu-bin/build.tar.xz" | cut -f1) in .gpu-bin/build.tar.xz ($(wc -l < "$stage/files.txt") files of $src)"
