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

need=(libeigen3-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev libcli11-dev)
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
         /usr/include/zlib.h /usr/include/zconf.h /usr/lib/$multiarch/libz.a; do
  pack "$p"
done
for f in /usr/lib/$multiarch/libgtest*.a /usr/lib/$multiarch/libgmock*.a /usr/lib/$multiarch/libbenchmark*; do
  pack "$f"
done
if [ "${1:-}" = "--data" ]; then
  pack /usr/share/datasets/fashion-mnist
  pack /usr/share/games/fortunes
fi
echo "gpu-pack: $(du -sh .gpu-deps | cut -f1) in .gpu-deps/ (git-ignored); configure with" \
     "-DCMAKE_PREFIX_PATH=\$PWD/.gpu-deps/usr, run with LD_LIBRARY_PATH=\$PWD/.gpu-deps/usr/lib/$multiarch"
