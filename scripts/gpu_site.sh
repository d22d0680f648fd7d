#!/usr/bin/env bash
# Pack the Python packages a bare multi-GPU machine lacks (Dask, distributed, dask-cuda, Prefect and their
# dependencies from the wheelhouse; rmm-cu13 with rapids-logger, and the UCX stack: ucxx-cu13, distributed-ucxx-cu13, libucxx-cu13,
# libucx-cu13) into one xz tarball of an unpacked site folder, small enough to travel with the working tree
# (~32 MB instead of ~100 MB of wheels: static libraries, UCX's perftest and headers dropped, duplicate .so
# copies made links). Needs a networked machine; the GPU machine unpacks it with
#   mkdir -p /tmp/site && tar xJf .mg/site.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:.
# Usage: bash scripts/gpu_site.sh [OUT] (default .mg/site.tar.xz; git-ignored). PYVER=3.12 as in wheelhouse.sh.
set -euo pipefail
out=${1:-.mg/site.tar.xz}
whl=${WHEELHOUSE:-.whl}
pyver=${PYVER:-3.12}
[ -d "$whl" ] || bash scripts/wheelhouse.sh "$whl"
extra=$(mktemp -d)
site=$(mktemp -d)
trap 'rm -rf "$extra" "$site"' EXIT
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64; do platforms+=(--platform "$p"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    "${platforms[@]}" -d "$extra" rmm-cu13==26.10.0 librmm-cu13==26.10.0 ucxx-cu13==0.52.0 libucxx-cu13==0.52.0 \
    distributed-ucxx-cu13==0.52.0 "libucx-cu13>=1.19,<1.22" "rapids-logger==0.3.*"
for w in "$whl"/*.whl "$extra"/*.whl; do
    python3 -m zipfile -e "$w" "$site"
done
# Build and test material only. (asyncpg stays: Prefect's server module imports it at load time although the
# temporary server uses SQLite; without it the server exited with status 1 on the H100 x4, 2026-11-27.)
rm -rf "$site"/libucx/bin "$site"/libucx/include "$site"/libucx/share "$site"/libucx/lib/cmake \
    "$site"/libucx/lib/pkgconfig "$site"/librmm/include "$site"/libucxx/include
find "$site" \( -name '*.a' -o -name '*.la' -o -name '*perftest*' \) -delete
find "$site" -name __pycache__ -type d -prune -exec rm -rf {} +
for d in "$site"/libucx/lib "$site"/libucx/lib/ucx; do  # libX.so.0.0.0 = libX.so.0 = libX.so: keep one, link two
    for f in "$d"/*.so.0.0.0; do
        [ -f "$f" ] || continue
        b=${f%.0.0}
        rm -f "$b" "${b%.0}"
        mv "$f" "$b"
        ln -s "$(basename "$b")" "${b%.0}"
    done
done
mkdir -p "$(dirname "$out")"
tar cJf "$out" -C "$site" .
echo "$out: $(du -h "$out" | cut -f1)"
