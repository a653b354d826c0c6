"""Code versions computed from the code: a hash of the normalised source of the modules a computation
runs, this project's (`rhythm_core`) and the environment's (`rhythm_env`), plus what else decides its
output (its defaults, the env version).

`modules_run_by(entries)` follows every `import` of those modules (at module level and inside
functions, the lazy imports included) from the entry modules, through the packages they sit in.
`source_hash` reads each module's syntax tree with docstrings removed and writes it back out, so a
comment, a docstring, blank lines or formatting change nothing and any change to what runs changes
the hash. The graders are left out (`EXCLUDED`): a grader's version belongs only to the assets that
grade, which name it themselves, so a grader change never marks teacher data or training unsynced.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path

# The top-level packages whose modules are followed and hashed: the recipe and the environment it runs
# (installed from envs/rhythm_env); any other import is a third-party library's.
PACKAGES = ("rhythm_core", "rhythm_env")
EXCLUDED = ("rhythm_env.graders",)


@cache
def _package_dir(top: str) -> Path:
    """The folder of the top-level package `top`, wherever it is installed from."""
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"{top} is not installed (`make install` installs it)")
    return Path(spec.origin).resolve().parent


def _path(module: str) -> Path | None:
    top, *parts = module.split(".")
    if top not in PACKAGES:
        return None
    base = _package_dir(top).joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    file = base.with_suffix(".py") if parts else None
    return file if file is not None and file.is_file() else None


def _excluded(module: str) -> bool:
    return any(module == e or module.startswith(e + ".") for e in EXCLUDED)


def _tree(path: Path) -> ast.Module:
    return _parsed(path, path.stat().st_mtime_ns)


@cache
def _parsed(path: Path, _mtime_ns: int) -> ast.Module:
    """A module's syntax tree, read once per version of the file (the definitions hash every asset's
    modules, which mostly overlap). Callers must not change it."""
    return ast.parse(path.read_text(), filename=str(path))


@cache
def _normalized(path: Path, _mtime_ns: int) -> str:
    return ast.unparse(_strip_docstrings(ast.parse(path.read_text())))


@cache
def _imports_cached(module: str, _mtime_ns: int) -> frozenset[str]:
    return frozenset(_scan_imports(module))


def _imports(module: str) -> frozenset[str]:
    return _imports_cached(module, _path(module).stat().st_mtime_ns)


def _scan_imports(module: str) -> set[str]:
    """The modules of `PACKAGES` that `module` imports anywhere in its source (an imported name that
    is itself a module counts as that module)."""
    path = _path(module)
    is_package = path.name == "__init__.py"
    base = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] in PACKAGES)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            elif (node.module or "").split(".")[0] in PACKAGES:
                target = node.module
            else:
                continue
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names if _path(f"{target}.{a.name}") is not None)
    return {m for m in found if _path(m) is not None}


def _with_packages(module: str) -> list[str]:
    """The module and the packages above it, which Python runs before it."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def modules_run_by(entries: Iterable[str]) -> list[str]:
    """Every module of `PACKAGES` the entry modules import, directly or not (graders left out), sorted."""
    seen, todo = set(), [m for e in entries for m in _with_packages(e)]
    while todo:
        module = todo.pop()
        if module in seen or _excluded(module):
            continue
        if _path(module) is None:
            raise ValueError(f"{module}: no such module in {' or '.join(PACKAGES)}")
        seen.add(module)
        for imported in _imports(module):
            todo.extend(_with_packages(imported))
    return sorted(seen)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


def normalized_source(module: str) -> str:
    """The module's code without comments, docstrings or formatting."""
    path = _path(module)
    return _normalized(path, path.stat().st_mtime_ns)


def source_hash(entries: Iterable[str], extra: dict | None = None) -> str:
    """12 hex digits of sha256 over the normalised source of `modules_run_by(entries)` and `extra`
    (JSON, keys sorted: the computation's defaults and anything else that decides its output)."""
    digest = hashlib.sha256()
    for module in modules_run_by(entries):
        digest.update(module.encode() + b"\0" + normalized_source(module).encode() + b"\0")
    digest.update(json.dumps(extra or {}, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:12]


def grader_version(name: str) -> str:
    """`<grader name>:<hash>` over the graders' own modules: what a grading asset's version names. A
    module is hashed under its file name, not its import name: the version names what the graders
    compute, not where their package is installed."""
    from rhythm_env.graders import GRADERS

    if name not in GRADERS:
        raise ValueError(f"unknown grader {name!r}; allowed: {', '.join(GRADERS)}")
    digest = hashlib.sha256(name.encode())
    for path in sorted(_path("rhythm_env.graders").parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + _normalized(path, path.stat().st_mtime_ns).encode() + b"\0")
    return f"{name}:{digest.hexdigest()[:12]}"
