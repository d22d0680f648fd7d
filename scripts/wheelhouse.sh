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
echo "wheelhouse $dest: $(ls "$dest"/*.whl | wc -l) wheels, $(du -sh "$dest" | cut -f1)"
