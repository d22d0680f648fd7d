"""Hostile archives built inside the tests (never committed): a mirror entry is an index row plus a tarball."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MTX_ONE = b"%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1.5\n"


class _Spaces(io.RawIOBase):
    """``n`` bytes of whitespace, read lazily (a padded member without a gigabyte in memory)."""

    def __init__(self, head: bytes, n: int) -> None:
        self.head, self.left = head, n

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self.head:
            k = min(len(buf), len(self.head))
            buf[:k], self.head = self.head[:k], self.head[k:]
            return k
        k = min(len(buf), self.left)
        buf[:k] = b" " * k
        self.left -= k
        return k


def tarball(members: dict[str, bytes | tuple[bytes, int]], symlinks: dict[str, str] | None = None) -> bytes:
    """A .tar.gz of regular members (bytes, or (head, n) for head padded with n spaces) and symlinks."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", compresslevel=1) as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(body, tuple):
                head, pad = body
                info.size = len(head) + pad
                tar.addfile(info, io.BufferedReader(_Spaces(head, pad), 1 << 20))
            else:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return out.getvalue()


def serve_matrix(mirror, group: str, name: str, body: bytes, nrows: int, ncols: int, nnz: int) -> None:
    """Serve ``body`` as ``MM/<group>/<name>.tar.gz`` and an index that lists it with the given size."""
    lines = mirror.read("suitesparse/files/ssstats.csv").decode().splitlines()
    lines[0] = str(int(lines[0]) + 1)
    lines.append(f"{group},{name},{nrows},{ncols},{nnz},1,0,0,0,0,0,hostile test,{nnz}")
    mirror.serve("suitesparse/files/ssstats.csv", ("\n".join(lines) + "\n").encode())
    mirror.serve(f"suitesparse/MM/{group}/{name}.tar.gz", body)


def run_limited(code: str, env: dict[str, str], memory_bytes: int = 3 << 30, timeout: int = 120):
    """Run ``code`` in a fresh interpreter whose address space is capped at ``memory_bytes`` (RLIMIT_AS): an
    allocation sized from a hostile header fails there with MemoryError instead of taking the machine down."""
    prologue = (f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({memory_bytes}, {memory_bytes}))\n"
                f"import sys\nsys.path.insert(0, {str(REPO)!r})\n")
    clean = {k: v for k, v in os.environ.items() if k != "TCSPMM_MEMORY_LIMIT"}
    # One BLAS thread: every OpenBLAS thread reserves address space, which RLIMIT_AS counts.
    full_env = {**clean, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-c", prologue + code], capture_output=True, text=True, env=full_env,
                          timeout=timeout, cwd=REPO)
