#!/usr/bin/env bash
# Build an offline wheelhouse for an air-gapped GPU machine (CPython 3.12, manylinux x86_64), on a networked machine.
# Resolves tcspmm's runtime dependencies (Prefect, Dask, dask-cuda, fast_matrix_market) with pip's resolver, then
# drops the wheels that the GPU image already provides (the CUDA image: numpy, scipy, pyarrow, CuPy, pandas, ...),
# so the wheelhouse stays small enough to travel with the working tree.
# Usage: bash scripts/wheelhouse.sh [DIR] (default .whl); PYVER=3.12 to target another Python.
set -euo pipefail
dest=${1:-.whl}
pyver=${PYVER:-3.12}
mkdir -p "$dest"
platforms=()
for p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do platforms+=(--platform "$p"); done
python3 -m pip download -q --only-binary=:all: --python-version "$pyver" --implementation cp "${platforms[@]}" \
    -d "$dest" "prefect>=3.8,<3.9" "fastapi<0.151" "dask==2026.7.1" "distributed==2026.7.1" \
    "dask-cuda==26.10.0" "rapids-dask-dependency==26.10.0" "fast_matrix_market>=1.7.6" "pyyaml>=6"
# Provided by the GPU image (python3 -m pip list there); bokeh is only the dashboard, which tcspmm never starts.
provided="numpy scipy pyarrow pandas pillow cuda_core cuda_bindings cuda_pathfinder cupy_cuda13x nvidia_ml_py
numba numba_cuda llvmlite pyyaml pygments regex click cloudpickle fsspec jinja2 markupsafe msgpack packaging psutil
sortedcontainers toolz typing_extensions urllib3 requests idna certifi charset_normalizer anyio h11 httpcore httpx
rich markdown_it_py mdurl six python_dateutil attrs typer shellingham uvloop bokeh contourpy narwhals xyzservices"
for name in $provided; do
    rm -f "$dest"/"$name"-[0-9]*.whl
done
# benchmarks/bindings.py (issue 16): nvmath-python's own wheel, without its dependencies: cuda-bindings and cuda-core
# come with the GPU image, and its [cu12]/[cu13] extras' CUDA library wheels are not wanted (CuPy's libcusparse is
# the one both bindings use). cuda-pathfinder (60 kB) as a fallback: nvmath needs >= 1.5.1, CuPy 14.2 only >= 1.3.4.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" -d "$dest" "nvmath-python==1.0.0" "cuda-pathfinder>=1.5.1,<2"
echo "wheelhouse $dest: $(ls "$dest"/*.whl | wc -l) wheels, $(du -sh "$dest" | cut -f1)"
