#!/usr/bin/env bash
# Builds, on a machine with the CUDA toolkit (nvcc), what scripts/gpu_check.sh runs on a GPU
# machine that has no compiler or package registry: gpu-bundle/bin (gpu_tests, backend_tests,
# gpu_bench, gemm_bench for bench/compare_cores.sh, fit_host_cost, custom_loop and the lockstep CLI; their
# plugins liblockstep_cuda.so (the CUDA backend) and liblockstep_nccl.so in gpu-bundle/lib, where
# they look for them), gpu-bundle/data (MNIST and the GPT's text, which that machine may not have)
# and gpu-bundle/lib (the shared libraries they need that such a machine may lack:
# oneDNN, protobuf, libstdc++, the CUDA runtime). cuBLASLt, cuDNN and NCCL are too large to carry
# (hundreds of MiB); gpu_check.sh takes them from the GPU machine's PyTorch (its nvidia-* wheels)
# or CUDA install. It is packed into gpu-bundle.tar.xz, which must stay well under 64 MiB (what a
# device run may carry, with the working tree).
#   scripts/gpu_bundle.sh [cuda architectures, default 90 (H200)]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
arch="${1:-90}"
export PATH="/usr/local/cuda/bin:$PATH"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
# No MPI (its runtime and plugins would have to travel too), no -march=native (the GPU machine's
# CPU may lack this one's extensions).
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_WERROR=ON -DLOCKSTEP_WITH_CUDA=ON \
      -DLOCKSTEP_WITH_MPI=OFF -DLOCKSTEP_NATIVE=OFF -DLOCKSTEP_BUILD_EXAMPLES=ON \
      -DCMAKE_CUDA_ARCHITECTURES="$arch" "${launcher[@]}" >/dev/null
cmake --build build-gpu --target gpu_tests backend_tests gpu_bench gemm_bench fit_host_cost hotpath_bench lockstep custom_loop -j"$(nproc)"
rm -rf gpu-bundle
mkdir -p gpu-bundle/bin gpu-bundle/lib gpu-bundle/data/mnist
cp build-gpu/tests/gpu_tests build-gpu/tests/backend_tests build-gpu/bin/gpu_bench build-gpu/bin/lockstep \
   build-gpu/bin/custom_loop build-gpu/bin/gemm_bench build-gpu/bin/fit_host_cost \
   build-gpu/bin/hotpath_bench gpu-bundle/bin/
cp build-gpu/lib/liblockstep_*.so gpu-bundle/lib/  # bin/../lib: where the programs look for them
# The character GPT's text (the files of /usr/share/common-licenses, which the GPU machine may lack).
python3 - "$repo/bench" gpu-bundle/data/text.txt <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import reference_transformer as r
open(sys.argv[2], "w", encoding="utf-8").write(r.read_text(None))
PY
# MNIST for the flagship's and the convnet's accuracy on the GPU (already gzipped: ~11 MiB).
mnist=""
for d in "${LOCKSTEP_DATA_DIR:-$HOME/.lockstep/datasets}/mnist" "$(dirname "$repo")/shared/data/mnist"; do
  [[ -f "$d/train-images-idx3-ubyte.gz" ]] && { mnist="$d"; break; }
done
if [[ -n "$mnist" ]]; then
  cp "$mnist"/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz gpu-bundle/data/mnist/
else
  echo "gpu_bundle: no MNIST here (scripts/setup.sh fetches it); gpu_check.sh will skip the accuracy runs" >&2
fi
strip gpu-bundle/bin/*
# Shared libraries, except glibc's own and the CUDA libraries the GPU machine brings.
for b in gpu-bundle/bin/* gpu-bundle/lib/liblockstep_*.so; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libresolv.so*|libnss*|libutil.so*|libanl.so*) continue ;;
    libcuda.so*) continue ;;
    # Hundreds of MiB: from the GPU machine's PyTorch or CUDA. cuDNN's front library is small, but it
    # loads its sub-libraries (engines, ~1 GiB) at run time and they must be of its own version.
    libcublas*|libnccl*|libcudnn*) continue ;;
  esac
  cp -L "$lib" gpu-bundle/lib/
done
strip --strip-unneeded gpu-bundle/lib/* 2>/dev/null || true
# The C++ runtime only as a fallback: the GPU machine's own is usually newer, and NVIDIA's libraries
# from PyTorch's wheels may need that one (gpu_check.sh adds this folder only if ours need it).
mkdir -p gpu-bundle/lib/fallback
for f in gpu-bundle/lib/libstdc++.so* gpu-bundle/lib/libgcc_s.so*; do [[ -e "$f" ]] && mv "$f" gpu-bundle/lib/fallback/; done
git rev-parse HEAD > gpu-bundle/COMMIT
ls -la gpu-bundle/bin gpu-bundle/lib
# One compressed file to carry (oneDNN alone is ~40 MiB uncompressed); gpu_check.sh unpacks it.
tar -cJf gpu-bundle.tar.xz gpu-bundle
size_kib=$(du -sk gpu-bundle.tar.xz | cut -f1)
echo "gpu-bundle.tar.xz: ${size_kib} KiB ($(du -sk gpu-bundle | cut -f1) KiB unpacked), built from $(cat gpu-bundle/COMMIT) for sm_${arch}"
echo "carry it to the GPU machine with the working tree, then run: scripts/gpu_check.sh"
if (( size_kib > 56 * 1024 )); then echo "gpu_bundle: too large to carry to a device run (64 MiB with the tree)" >&2; exit 1; fi
