#!/usr/bin/env bash
# Download, where pip reaches PyPI, the wheels scripts/gpu_figures.sh installs on a GPU
# machine without network: the benchmarks' peers and what they need beyond the machine's
# image (jax, flax, optax, chex, pandas, scipy, statsmodels, seaborn are there). Python
# 3.12, manylinux x86-64. Writes .whl/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
plat=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do plat+=(--platform "$p"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${plat[@]}" -d .whl \
  mctx==0.0.71 rliable==1.2.0 arch==7.2.0 gymnax==1.0.1 gymnasium==1.3.0 \
  farama-notifications rejax==0.1.3 distrax tensorflow-probability dm-tree gast \
  decorator tensorboardX
ls .whl
