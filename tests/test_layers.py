"""The import layers, read from the `import` statements (no module is imported): storage/ imports nothing from
kernels/ (the store is below the formats: they register their layouts with it), nothing below gnn/ (configs/,
storage/, kernels/, tasks/: gnn consumes the store) imports gnn, both anywhere in a module, function-local imports
included, no format's folder (kernels/formats/<name>/) imports another's (what formats share lives in
kernels/formats/*.py), kernels/ imports project modules at module level (function-local imports only where
`LAZY` says why), and the project's module-level imports form no cycle (a package's ``__init__`` importing its own
submodules excepted, as Python runs it first)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("configs", "storage", "kernels", "tasks", "flows", "gnn", "tcspmm")
BELOW_GNN = ("configs", "storage", "kernels", "tasks")
# function-local project imports kept in kernels/, (importer, imported): importing them costs what most callers of
# the importer never need
LAZY = {("kernels.cpu_path", "kernels.cpu_spmm"): "numba, ~0.25 s to import, only for a float32 CPU run"}


def modules(root: Path = REPO) -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for p in (root / pkg).rglob("*.py"):
            parts = p.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return found


def imports(path: Path, known: dict, module_level: bool) -> set[str]:
    """The project modules ``path`` imports (at module level only, or anywhere)."""
    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    out = set()

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if module_level and nested:
                continue
            if isinstance(child, ast.Import):
                out.update(filter(None, (resolve(a.name) for a in child.names)))
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                out.update(filter(None, (resolve(f"{child.module}.{a.name}") or resolve(child.module)
                                         for a in child.names)))
            else:
                visit(child, nested)

    visit(ast.parse(path.read_text()), False)
    return out


def imports_into(known: dict, importers: tuple, targets: tuple) -> dict[str, list[str]]:
    """Modules of the packages ``importers`` that import a module of the packages ``targets`` anywhere, with what
    they import."""
    bad = {m: sorted(t for t in imports(p, known, False) if t.split(".")[0] in targets)
           for m, p in known.items() if m.split(".")[0] in importers}
    return {m: t for m, t in bad.items() if t}


def storage_to_kernels(known: dict) -> dict[str, list[str]]:
    return imports_into(known, ("storage",), ("kernels",))


def format_folder(module: str, known: dict) -> str | None:
    """The format folder ``kernels/formats/<name>/`` that ``module`` belongs to, or None."""
    parts = module.split(".")
    top = ".".join(parts[:3])
    if parts[:2] != ["kernels", "formats"] or len(parts) < 3 or known[top].name != "__init__.py":
        return None
    return parts[2]


def format_to_format(known: dict) -> dict[str, list[str]]:
    """Modules of a format's folder that import (anywhere) a module of another format's folder."""
    bad = {m: sorted(t for t in imports(p, known, False)
                     if format_folder(t, known) not in (None, format_folder(m, known)))
           for m, p in known.items() if format_folder(m, known)}
    return {m: t for m, t in bad.items() if t}


def find_cycle(known: dict) -> list[str] | None:
    """One cycle of module-level imports, as a path m -> ... -> m, or None."""
    graph = {m: {t for t in imports(p, known, True) if t != m and not m.startswith(t + ".")}
             for m, p in known.items()}
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def walk(m, path):
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                return path[path.index(t):] + [m, t] if t in path else [m, t]
            if t not in state:
                found = walk(t, path + [m])
                if found:
                    return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = walk(m, [])
            if found:
                return found
    return None


def test_storage_imports_nothing_from_kernels():
    assert storage_to_kernels(modules()) == {}


def test_nothing_below_gnn_imports_gnn():
    assert imports_into(modules(), BELOW_GNN, ("gnn",)) == {}


def test_no_format_imports_another_format():
    assert format_to_format(modules()) == {}


def test_kernels_import_project_modules_at_module_level():
    known = modules()
    local = {(m, t) for m, p in known.items() if m.split(".")[0] == "kernels"
             for t in imports(p, known, False) - imports(p, known, True)}
    assert local == set(LAZY)


def test_no_module_level_import_cycle():
    cycle = find_cycle(modules())
    assert cycle is None, " -> ".join(cycle)


def test_the_checks_see_a_cycle_and_a_storage_import(tmp_path):
    (tmp_path / "storage").mkdir()
    (tmp_path / "storage" / "a.py").write_text("import kernels.b\n")
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "b.py").write_text("def f():\n    pass\n\n\nfrom storage import a\n")
    known = modules(tmp_path)
    assert storage_to_kernels(known) == {"storage.a": ["kernels.b"]}
    assert find_cycle(known) in (["kernels.b", "storage.a", "kernels.b"], ["storage.a", "kernels.b", "storage.a"])
    (tmp_path / "kernels" / "b.py").write_text("def f():\n    from storage import a\n")  # lazy: no cycle
    assert find_cycle(modules(tmp_path)) is None


def test_the_check_sees_a_function_local_gnn_import(tmp_path):
    for pkg, text in (("gnn", "def gcn_norm(A):\n    return A\n"),
                      ("tasks", "def f(A):\n    if A:\n        from gnn.norm import gcn_norm\n")):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
        (tmp_path / pkg / ("norm.py" if pkg == "gnn" else "features.py")).write_text(text)
    assert imports_into(modules(tmp_path), BELOW_GNN, ("gnn",)) == {"tasks.features": ["gnn.norm"]}
    (tmp_path / "tasks" / "features.py").write_text("import gnn\n")
    assert imports_into(modules(tmp_path), BELOW_GNN, ("gnn",)) == {"tasks.features": ["gnn"]}


def test_the_check_sees_a_format_importing_another(tmp_path):
    for folder in ("kernels", "kernels/formats", "kernels/formats/a", "kernels/formats/b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "kernels" / "formats" / "shared.py").write_text("")
    (tmp_path / "kernels" / "formats" / "b" / "x.py").write_text("")
    (tmp_path / "kernels" / "formats" / "a" / "y.py").write_text("from kernels.formats import shared\n"
                                                                 "from kernels.formats.a import z\n")
    (tmp_path / "kernels" / "formats" / "a" / "z.py").write_text("")
    assert format_to_format(modules(tmp_path)) == {}
    (tmp_path / "kernels" / "formats" / "a" / "z.py").write_text("def f():\n    from kernels.formats.b.x import g\n")
    assert format_to_format(modules(tmp_path)) == {"kernels.formats.a.z": ["kernels.formats.b.x"]}
