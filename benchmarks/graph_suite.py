"""The graphs of 0.1-3M nonzeros that issue 33's benchmarks share (benchmarks/sddmm.py, benchmarks/gnn.py): the
generated ones (R-MAT power-law digraphs, a 2D mesh, an SBM with 100 communities: tasks/fetch/generators.py, seed
1), the SNAP/email-Enron SuiteSparse fixture and the IGB tiny fixture archive (PubMed's citation graph, ``A[dst,
src]`` as tasks/parse/igb.py reads it), the builder that turns a case's source into its pattern with unit values, and
the loop both run their cases in (`run_cases`: the --budget-s stop, one case's failure or absent data recorded and
the next one run, the results written after each).

Fixtures are found as benchmarks/spmm.py finds them (``TCSPMM_FIXTURES``, ``.fixtures`` or ``../shared/fixtures``);
an absent one builds to None and the benchmark skips it with a note. No torch or CuPy here.
"""
from __future__ import annotations

import io
import os
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]

# (label, generator kind, parameters without seed and shuffle, shuffled labels): about 0.1M to 2M nonzeros
GRAPHS = (("rmat-s13", "rmat", "scale=13&edge_factor=16", 1),
          ("mesh2d-400", "mesh", "nx=400&ny=400&stencil=5", 0),
          ("rmat-s16", "rmat", "scale=16&edge_factor=16", 1),
          ("sbm-100k", "sbm", "n=100000&blocks=100&deg_in=16&deg_out=2", 1),
          ("rmat-s17", "rmat", "scale=17&edge_factor=16", 1))
FIXTURES = ("SNAP/email-Enron",)
IGB_TINY = "igb/igb-homogeneous/igb_homogeneous_tiny.tar.gz"
IGB_EDGES = "paper__cites__paper/edge_index.npy"
SEED = 1


def _spmm():
    """benchmarks/spmm.py, the fixtures' finder and SuiteSparse reader the benchmarks share; this folder is appended
    to sys.path, never put first (benchmarks/gnn.py would shadow the gnn package)."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.append(here)
    import spmm

    return spmm


def graph_cases(extra=()) -> list[dict]:
    """``{"label", "class": "graph", "source"}`` per graph: the first generated graph, IGB tiny, the fixtures, the
    other generated graphs, then ``extra`` (more ``(label, kind, params, shuffle)`` generator tuples)."""
    gen = [{"label": lab, "class": "graph", "source": ("gen", kind, prm, shuffle)}
           for lab, kind, prm, shuffle in (*GRAPHS, *extra)]
    return (gen[:1] + [{"label": "igb-tiny", "class": "graph", "source": ("igb", IGB_TINY)}]
            + [{"label": f"fixture:{n}", "class": "graph", "source": ("fixture", n)} for n in FIXTURES] + gen[1:])


def generator_spec(source) -> str:
    """The ``gen:`` spec a ``("gen", kind, params, shuffle)`` source is built from."""
    _, kind, params, shuffle = source
    return f"gen:{kind}?{params}&seed={SEED}&shuffle={shuffle}"


def igb_edges(path: Path) -> np.ndarray:
    """int64 [E, 2] (source, destination) of an IGB homogeneous graph: from its archive (``.tar.gz``, read up to the
    edge list's member), its ``edge_index.npy``, or a folder holding ``[<size>/]processed/paper__cites__paper/``."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob(f"**/{IGB_EDGES}"))
        if not found:
            raise FileNotFoundError(f"{path}: no {IGB_EDGES} below it")
        path = found[0]
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    with tarfile.open(path) as tar:  # iterated, not getmembers(): stops at the member, before the big features
        for member in tar:
            if member.name.endswith(IGB_EDGES):
                return np.load(io.BytesIO(tar.extractfile(member).read()), allow_pickle=False)
    raise FileNotFoundError(f"{path}: no member ending {IGB_EDGES}")


def igb_adjacency(path: Path) -> sp.csr_array:
    """``A[dst, src] = 1`` per edge of an IGB homogeneous graph (``igb_edges``; tasks/parse/igb.py's orientation),
    n = the largest node id + 1, repeated edges merged."""
    edges = igb_edges(path)
    n = int(edges.max()) + 1 if edges.size else 0
    A = sp.csr_array((np.ones(len(edges), np.float32), (edges[:, 1], edges[:, 0])), shape=(n, n))
    A.sum_duplicates()
    return A


def igb_small_path() -> tuple[Path | None, str]:
    """(where IGB small's edge list is, or None; where it was looked for). Looked for, in order: ``TCSPMM_IGB_SMALL``
    (its archive, ``edge_index.npy`` or extracted folder), ``igb/igb-homogeneous/igb_homogeneous_small.tar.gz`` or an
    extracted ``igb/small/`` in the fixtures folders, and ``$TCSPMM_DATA/extracted/*/small`` (where the pipeline
    extracts a fetched ``igb:small``)."""
    spmm = _spmm()
    env = os.environ.get("TCSPMM_IGB_SMALL")
    if env and Path(env).exists():
        return Path(env), "TCSPMM_IGB_SMALL"
    for rel in ("igb/igb-homogeneous/igb_homogeneous_small.tar.gz", f"igb/small/processed/{IGB_EDGES}"):
        found = spmm.fixture_path(rel)
        if found is not None:
            return found, "fixtures"
    data = os.environ.get("TCSPMM_DATA")
    if data:
        found = sorted(Path(data).glob(f"extracted/*/small/processed/{IGB_EDGES}"))
        if found:
            return found[0], "TCSPMM_DATA"
    where = ("TCSPMM_IGB_SMALL (unset)" if not env else f"TCSPMM_IGB_SMALL={env} (absent)") + \
        ", igb/igb-homogeneous/igb_homogeneous_small.tar.gz or igb/small/ in the fixtures folders (TCSPMM_FIXTURES, " \
        ".fixtures, ../shared/fixtures), $TCSPMM_DATA/extracted/*/small" + ("" if data else " (TCSPMM_DATA unset)")
    return None, where


def unit_pattern(A, drop_loops: bool = False) -> sp.csr_array:
    """``A``'s pattern as canonical CSR with unit float32 values (``drop_loops``: without self loops)."""
    A = sp.csr_array(A)
    A.sum_duplicates()
    A.sort_indices()
    if not drop_loops:
        return sp.csr_array((np.ones(A.nnz, np.float32), A.indices, A.indptr), shape=A.shape)
    from storage.indexing import segment_ids  # the repository on the path: as build's imports
    rows = segment_ids(A.indptr)
    keep = rows != A.indices
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows[keep], minlength=A.shape[0]))))
    return sp.csr_array((np.ones(int(keep.sum()), np.float32), A.indices[keep], indptr.astype(A.indptr.dtype)),
                        shape=A.shape)


def build(source, drop_loops: bool = False) -> sp.csr_array | None:
    """The pattern of a case's source as canonical CSR with unit float32 values (``drop_loops``: without self
    loops, `unit_pattern`); None when its data is absent.
    Sources: ``("gen", kind, params, shuffle)``, ``("dlmc", params)``, ``("fixture", "Group/Name")``, ``("igb",
    path under the fixtures)``, ``("igb-small",)`` (``igb_small_path``)."""
    kind = source[0]
    if kind == "gen":
        from tasks.fetch.generators import generate

        A = generate(source[1], f"{source[2]}&seed={SEED}&shuffle={source[3]}")
    elif kind == "dlmc":
        from tasks.fetch.generators import generate

        A = generate("dlmc", source[1])
    elif kind == "igb-small":
        path, _ = igb_small_path()
        A = None if path is None else igb_adjacency(path)
    else:
        spmm = _spmm()
        if kind == "fixture":
            A = spmm.fixture(source[1])
        else:
            path = spmm.fixture_path(source[1])
            A = None if path is None else igb_adjacency(path)
    return None if A is None else unit_pattern(A, drop_loops)


def log(*a) -> None:
    print(f"[{time.strftime('%H:%M:%S')}]", *a, file=sys.stderr, flush=True)


class Skipped(Exception):
    """A case whose data is absent: noted under "skipped", not a failure."""


def one_line(err: BaseException) -> str:
    """``Type: first line of the message`` (200 characters at most)."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200]}" if text else type(err).__name__


def run_cases(cases, run_one, *, budget_s: float, skipped: list, failures: list, write=lambda: None,
              free=lambda: None, clock=time.time, start: float | None = None, describe=one_line) -> None:
    """``run_one(case)`` per case, isolated: no case is started once ``budget_s`` seconds have passed since
    ``start`` (a ``clock()`` reading; default: now), each noted in ``skipped``; a case that raises Skipped is noted
    there, one that raises anything else in ``failures`` (``"<label>: raised <describe(err)>"``); after each
    started case, ``free()`` then ``write()`` either way."""
    t0 = clock() if start is None else start
    for case in cases:
        if clock() - t0 > budget_s:
            skipped.append(f"{case['label']}: over --budget-s {budget_s:g}")
            log(skipped[-1])
            continue
        try:
            run_one(case)
        except Skipped as why:
            skipped.append(str(why))
            log(f"skipped {why}")
        except Exception as err:  # a generator, a reorder, a plan, an upload that raised: the next case still runs
            failures.append(f"{case['label']}: raised {describe(err)}")
            log(failures[-1])
        free()
        write()
