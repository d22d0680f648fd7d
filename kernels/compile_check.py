"""Offline compile check: nvcc-compiles every .cu (kernels/cuda and each format's folder, kernels/formats/<name>/)
for sm_80 and sm_90, once per build its format declares (``Format.cuda_sources`` / ``Format.cuda_builds`` in
kernels.formats.REGISTRY: a label and the -D options of a launcher's config, several where a format runs several;
a .cu no format declares, once without options), and prints ptxas's resource report (registers, shared memory, spills). Includes
resolve as kernels.launch.cuda_source resolves them: the file's folder, then kernels/cuda.

``python -m kernels.compile_check [--arch sm_80 --arch sm_90]``: exit 0 when all compile (or when nvcc is
absent: it prints why it skipped), 1 when any fails or spills to local memory.

Then, where a libnvrtc is found (`find_nvrtc`), the same builds once more through NVRTC (`nvrtc_check`), on the text
`kernels.launch.cuda_source` gives (headers inlined): what CuPy hands NVRTC at run time. nvcc is not NVRTC: a .cu
using a host header's macro (``INFINITY``) compiled with nvcc here and failed on the GPU under NVRTC (2026-11-29).
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kernels.formats import REGISTRY
from kernels.formats.registry import DEFAULT_BUILDS
from kernels.launch import OPTIONS, cuda_source

CUDA_DIR = Path(__file__).resolve().parent / "cuda"
FORMATS_DIR = Path(__file__).resolve().parent / "formats"
ARCHS = ("sm_80", "sm_90")


def sources() -> list[Path]:
    """Every .cu: the shared ones in kernels/cuda, then each format folder's."""
    return sorted(CUDA_DIR.glob("*.cu")) + sorted(FORMATS_DIR.glob("*/*.cu"))


def builds() -> list[tuple[Path, str, tuple[str, ...]]]:
    """(source, label, -D options) of each compile: every .cu once per build of the format declaring it, in
    `sources()` order; a .cu no registered format declares (kernels/cuda) once per `DEFAULT_BUILDS`."""
    declared = {Path(cu).resolve(): fmt.cuda_builds for fmt in REGISTRY.values() for cu in fmt.cuda_sources}
    return [(cu, label, tuple(defines)) for cu in sorted(set(sources()) | set(declared))
            for label, defines in declared.get(cu, DEFAULT_BUILDS)]


def check(archs=ARCHS, *, nvcc: str | None = None, verbose: bool = True) -> list[dict]:
    """Compile each build (`builds`) for each arch; returns one dict per (file, build, arch): ok, spills, report.
    [] without nvcc."""
    nvcc = nvcc or shutil.which("nvcc")
    if nvcc is None:
        return []
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for cu, cfg_name, defines in builds():
            for arch in archs:
                cmd = [nvcc, f"-arch={arch}", *OPTIONS, "-Xptxas", "-v", "-c", f"-I{CUDA_DIR}",
                       *defines, str(cu), "-o", str(Path(tmp) / f"{cu.stem}-{arch}-{cfg_name}.o")]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                report = proc.stdout + proc.stderr
                spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", report)]
                stack = [int(x) for x in re.findall(r"(\d+) bytes stack frame", report)]
                res = {"file": cu.name, "arch": arch, "config": cfg_name, "ok": proc.returncode == 0,
                       "spill_bytes": sum(spills), "stack_bytes": sum(stack), "command": " ".join(cmd),
                       "report": report}
                results.append(res)
                if verbose:
                    regs = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", report, re.S)
                    print(f"{cu.name} {arch} {cfg_name}: {'ok' if res['ok'] else 'FAILED'}; "
                          f"spills {res['spill_bytes']} B, stack {res['stack_bytes']} B; "
                          f"registers {dict((k, int(v)) for k, v in regs)}")
                    if not res["ok"]:
                        print(report)
    return results


def find_nvrtc() -> Path | None:
    """A libnvrtc for `nvrtc_check`: $TCSPMM_NVRTC, else the CUDA wheels' (nvidia/cu13/lib or
    nvidia/cuda_nvrtc/lib under a sys.path folder, what CuPy's and torch's CUDA 13 wheels install), else the
    system's; None where there is none."""
    env = os.environ.get("TCSPMM_NVRTC")
    if env:
        return Path(env) if Path(env).is_file() else None
    for base in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"):
            found = sorted(Path(base, sub).glob("libnvrtc.so.*")) if Path(base, sub).is_dir() else []
            if found:
                return found[0]
    name = ctypes.util.find_library("nvrtc")
    return Path(name) if name else None


@functools.cache
def _load_nvrtc(lib: Path):
    """ctypes handle of ``lib``, its builtins library loaded first from the same folder (NVRTC opens it by name,
    which finds an already loaded one; without it on the loader's path, compiling fails with status 7)."""
    for builtins in sorted(Path(lib).parent.glob("libnvrtc-builtins.so.*")):
        if ".alt." not in builtins.name:
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
            break
    return ctypes.CDLL(str(lib))


def nvrtc_check(archs=ARCHS, *, lib: Path | None = None) -> list[dict]:
    """Compile each build (`builds`) for each arch with NVRTC, on ``kernels.launch.cuda_source``'s text and the
    options the launchers pass (`launch.OPTIONS` and the build's -D options); one dict per (file, build, arch): ok and
    NVRTC's log. [] without a libnvrtc."""
    lib = lib or find_nvrtc()
    if lib is None:
        return []
    results = []
    for cu, cfg_name, defines in builds():
        source = cuda_source(cu)
        for arch in archs:
            ok, log = nvrtc_compile(source, arch, defines, name=cu.name, lib=lib)
            results.append({"file": cu.name, "arch": arch, "config": cfg_name, "ok": ok, "log": log})
    return results


def nvrtc_compile(source: str, arch: str, defines=(), *, name: str = "kernel.cu", lib: Path) -> tuple[bool, str]:
    """(compiled, NVRTC's log) of one source text for ``arch`` (sm_XX) with the launchers' `OPTIONS` and
    ``defines``."""
    nvrtc = _load_nvrtc(lib)
    prog = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None):
        raise RuntimeError(f"compile_check: nvrtcCreateProgram failed for {name}")
    opts = [*(o.encode() for o in OPTIONS), f"--gpu-architecture={arch}".encode(), *(d.encode() for d in defines)]
    status = nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return status == 0, log.value.decode(errors="replace")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", action="append", help="sm_XX (repeatable); default sm_80 and sm_90")
    args = ap.parse_args(argv)
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("compile_check: skipped, nvcc is not on PATH (install the CUDA toolkit to check kernels/cuda offline)")
        return 0
    results = check(tuple(args.arch or ARCHS), nvcc=nvcc)
    if not results:
        print(f"compile_check: no .cu files in {CUDA_DIR} or {FORMATS_DIR}/*")
        return 1
    bad = [r for r in results if not r["ok"] or r["spill_bytes"]]
    print(f"compile_check: {len(results) - len(bad)}/{len(results)} compiled without spills with {nvcc}")
    lib = find_nvrtc()
    if lib is None:
        print("compile_check: NVRTC pass skipped, no libnvrtc found (TCSPMM_NVRTC, the nvidia CUDA wheels, the "
              "system)")
        return 1 if bad else 0
    runtime = nvrtc_check(tuple(args.arch or ARCHS), lib=lib)
    failed = [r for r in runtime if not r["ok"]]
    for r in failed:
        print(f"{r['file']} {r['arch']} {r['config']}: NVRTC FAILED\n{r['log']}")
    print(f"compile_check: {len(runtime) - len(failed)}/{len(runtime)} compiled with NVRTC ({lib})")
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main())
