#!/usr/bin/env bash
# Run here (the development machine) before a GPU session: packs what the GPU machine cannot
# download into the git-ignored .gpu-deps/ (Eigen, nlohmann_json, GoogleTest, Benchmark via the
# shared pack-gpu-deps script, plus zlib for the examples). Then carry .gpu-deps to the GPU
# machine and run scripts/gpu-check.sh there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p .git/info
"$root/../shared/scripts/pack-gpu-deps" "$@"
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
mkdir -p .gpu-deps/usr/include .gpu-deps/usr/lib/$multiarch
cp -a /usr/include/zlib.h /usr/include/zconf.h .gpu-deps/usr/include/
cp -a /usr/lib/$multiarch/libz.a .gpu-deps/usr/lib/$multiarch/
echo "gpu-pack: $(du -sh .gpu-deps | cut -f1) in .gpu-deps/"
