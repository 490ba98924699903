#!/usr/bin/env bash
# Run here (the development machine) before a GPU session: packs what a GPU machine without
# network access cannot download into the git-ignored .gpu-deps/: the Debian-installed Eigen,
# nlohmann_json, GoogleTest, Google Benchmark and CLI11 (the examples' and the mixtrain tool's
# flag parser) with their CMake package files, and zlib for the examples. Carry .gpu-deps to the GPU machine and run scripts/gpu-check.sh there, which
# configures with -DCMAKE_PREFIX_PATH=$PWD/.gpu-deps/usr.
#   scripts/gpu-pack.sh [--data]    --data: also the Fashion-MNIST files and fortunes (~35 MB)
# Needs Debian's packages (installed here when missing, as root) and nothing outside the repository.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dest=$root/.gpu-deps/usr
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

need=(libeigen3-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libcli11-dev libgloo-dev)
[ "${1:-}" = "--data" ] && need+=(dataset-fashion-mnist fortunes)
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu-pack: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Copies a path under /usr to the same place under .gpu-deps/usr (absent paths are skipped).
pack() {
  local src=$1
  [ -e "$src" ] || return 0
  mkdir -p "$dest/$(dirname "${src#/usr/}")"
  cp -a "$src" "$dest/${src#/usr/}"
}
rm -rf "$root/.gpu-deps"
for p in /usr/include/eigen3 /usr/share/eigen3 /usr/include/nlohmann /usr/share/cmake/nlohmann_json \
         /usr/include/gtest /usr/include/gmock /usr/include/benchmark /usr/include/CLI /usr/share/cmake/CLI11 \
         /usr/lib/$multiarch/cmake/GTest /usr/lib/$multiarch/cmake/benchmark \
         /usr/include/zlib.h /usr/include/zconf.h; do
  pack "$p"
done
# zlib as a shared library (the static one is not position-independent, and libmixtrain is shared);
# the GPU image has the libz.so.1 it names at run time.
mkdir -p "$dest/lib/$multiarch" && cp "$(readlink -f /lib/$multiarch/libz.so.1)" "$dest/lib/$multiarch/libz.so"
for f in /usr/lib/$multiarch/libgtest*.a /usr/lib/$multiarch/libgmock*.a /usr/lib/$multiarch/libbenchmark*; do
  pack "$f"
done
# Gloo (the distributed tests, and the store the NCCL rendezvous goes through) with the shared
# libraries it needs at run time, which a GPU image may lack. Its CMake targets name the library by
# absolute path; the packed copy names it relative to the package instead.
for p in /usr/include/gloo /usr/include/hiredis /usr/share/cmake/Gloo /usr/lib/libgloo.so /usr/lib/libgloo.so.0 \
         /usr/lib/libgloo.so.0.5.0; do
  pack "$p"
done
for lib in libhiredis.so.0.14 libibverbs.so.1 libnl-3.so.200 libnl-route-3.so.200; do
  f=$(readlink -f "/lib/$multiarch/$lib") && mkdir -p "$dest/lib/$multiarch" && cp "$f" "$dest/lib/$multiarch/$lib"
done
# NCCL's header, for a GPU image whose NCCL came in a wheel without it (gpu-build.sh looks there last).
[ -f /usr/local/cuda/include/nccl.h ] && mkdir -p "$dest/include" && cp /usr/local/cuda/include/nccl.h "$dest/include/"
sed -i 's|"/usr/lib/libgloo|"${_IMPORT_PREFIX}/lib/libgloo|' "$dest"/share/cmake/Gloo/GlooTargets-*.cmake
if [ "${1:-}" = "--data" ]; then
  pack /usr/share/datasets/fashion-mnist
  pack /usr/share/games/fortunes
fi
echo "gpu-pack: $(du -sh .gpu-deps | cut -f1) in .gpu-deps/ (git-ignored); configure with" \
     "-DCMAKE_PREFIX_PATH=\$PWD/.gpu-deps/usr, run with LD_LIBRARY_PATH=\$PWD/.gpu-deps/usr/lib/$multiarch"
