"""Every name imported from a project module exists there, read from the sources (nothing is imported, so the
GPU-only paths are checked on a CPU too): ``from kernels.x import f`` inside a function, ``import kernels.x as kx``
then ``kx.f``, and ``from kernels import x`` then ``x.f``, in the packages, the tests, the benchmarks and the
scripts. A moved function leaves no caller behind that only a GPU run would reach."""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("configs", "storage", "kernels", "tasks", "flows", "gnn", "tcspmm")
SOURCES = (*PACKAGES, "tests", "benchmarks", "scripts")


def module_path(name: str) -> Path | None:
    base = REPO.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


@cache
def defined(name: str) -> frozenset[str] | None:
    """The names module ``name`` defines at its top level (in if/try blocks too); None when it has a module
    ``__getattr__`` (anything may resolve)."""
    tree = ast.parse(module_path(name).read_text())
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                for extra in (getattr(node, "orelse", []), getattr(node, "finalbody", []),
                              *[h.body for h in getattr(node, "handlers", [])]):
                    visit(extra)
    visit(tree.body)
    return None if "__getattr__" in names else frozenset(names)


@cache
def signature(module: str, name: str) -> ast.arguments | None:
    """The parameters of function ``name`` defined at the top level of ``module`` (None for anything else, and for
    a decorated function, whose decorator may change them)."""
    for node in ast.parse(module_path(module).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return None if node.decorator_list else node.args
    return None


def call_problem(args: ast.arguments, call: ast.Call) -> str | None:
    """What a call misses or has too much of against the function's parameters; None when it fits (or when a
    ``*args`` / ``**kwargs`` makes it unknowable)."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    if len(call.args) > len(positional) and args.vararg is None:
        return f"takes {len(positional)} positional arguments, given {len(call.args)}"
    given = set(positional[:len(call.args)]) | {k.arg for k in call.keywords}
    required = positional[:len(positional) - len(args.defaults)]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    missing = [r for r in required if r not in given]
    unknown = [k.arg for k in call.keywords if k.arg not in positional
               and k.arg not in {a.arg for a in args.kwonlyargs}] if args.kwarg is None else []
    if missing:
        return f"missing {', '.join(missing)}"
    if unknown:
        return f"no parameter {', '.join(unknown)}"
    return None


def has(module: str, attr: str) -> bool:
    names = defined(module)
    return names is None or attr in names or module_path(f"{module}.{attr}") is not None


def is_project(name: str) -> bool:
    return name.split(".")[0] in PACKAGES and module_path(name) is not None


def problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}  # local name -> project module
    functions: dict[str, tuple[str, str]] = {}  # local name -> (project module, function)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in PACKAGES and not is_project(node.module):
                out.append(f"{path.relative_to(REPO)}:{node.lineno}: no module {node.module}")
                continue
            if not is_project(node.module):
                continue
            for a in node.names:
                if a.name == "*":
                    continue
                if not has(node.module, a.name):
                    out.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.module} has no {a.name}")
                elif module_path(f"{node.module}.{a.name}"):
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                elif signature(node.module, a.name) is not None:
                    functions[a.asname or a.name] = (node.module, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES and not is_project(a.name):
                    out.append(f"{path.relative_to(REPO)}:{node.lineno}: no module {a.name}")
                elif a.asname and is_project(a.name):
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and isinstance(node.ctx, ast.Load) and not node.attr.startswith("__")
                and not has(aliases[node.value.id], node.attr)):
            out.append(f"{path.relative_to(REPO)}:{node.lineno}: {aliases[node.value.id]} has no {node.attr}")
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in functions:
                target = functions[f.id]
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in aliases:
                target = (aliases[f.value.id], f.attr)
            else:
                continue
            args = signature(*target)
            problem = args and call_problem(args, node)
            if problem:
                out.append(f"{path.relative_to(REPO)}:{node.lineno}: {'.'.join(target)}() {problem}")
    return out


def test_every_imported_project_name_exists():
    found = []
    for folder in SOURCES:
        for path in sorted((REPO / folder).rglob("*.py")):
            found += problems(path)
    assert not found, "\n".join(found)
