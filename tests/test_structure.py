"""The layers a newcomer reads in each package's `__init__.py` hold: no two packages of rhythm_core
import each other (directly or around a loop), no module is over 450 lines, and rhythm_core has few
top-level modules. The check reads the source (every import, lazy ones included), so it holds for
code paths no test runs. The environment's layers (env, protocol, graders, text_env) are rhythm_core
packages whose folder is the environment package's; the package lists every package folder."""

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "rhythm_core"
LAYERS = REPO / "envs" / "rhythm_env" / "rhythm_core"
MAX_LINES = 450
MAX_TOP_LEVEL_MODULES = 7

def _unit(module: str) -> str | None:
    """The package (or top-level module) of rhythm_core a dotted module name belongs to."""
    parts = module.split(".")
    return parts[1] if parts[0] == "rhythm_core" and len(parts) > 1 else None


def package_imports() -> dict[str, set[str]]:
    """For each package (or top-level module) of rhythm_core, the others it imports anywhere."""
    edges: dict[str, set[str]] = {}
    for path in [*CORE.rglob("*.py"), *LAYERS.rglob("*.py")]:
        root = CORE if path.is_relative_to(CORE) else LAYERS
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        module = parts[:-1] if is_package else parts
        source = _unit(".".join(module))
        if source is None:
            continue
        base = module if is_package else module[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                target = (".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
                          if node.level else node.module or "")
                targets = [target] + ([f"{target}.{a.name}" for a in node.names] if not node.module else [])
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for target in targets:
                unit = _unit(target)
                if unit and unit != source:
                    edges.setdefault(source, set()).add(unit)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one package (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(group)

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def test_no_package_cycle_in_rhythm_core():
    found = cycles(package_imports())
    assert not found, f"packages that import each other: {found}"


def test_the_cycle_check_sees_a_loop():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_tracking_the_bottom_floor_imports_no_other_package_and_compute_sits_below_the_stages():
    edges = package_imports()
    assert not edges.get("tracking", set()) - {"errors"}, edges.get("tracking")
    above_compute = {"teacher", "data", "training", "evaluation", "distill", "gpu_check", "cli"}
    assert not edges.get("compute", set()) & above_compute, edges.get("compute")


def test_no_module_over_450_lines():
    long = {str(p.relative_to(REPO)): n for p in [*CORE.rglob("*.py"), *LAYERS.rglob("*.py")]
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {long}"


def test_few_top_level_modules():
    modules = {p.name for p in CORE.glob("*.py") if p.name != "__init__.py"}
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, sorted(modules)


def test_the_package_ships_every_package_folder_and_the_environments_layers_from_their_folder():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.parent.relative_to(REPO).parts) for top in ("rhythm_core", "rhythm_pipeline")
               for p in (REPO / top).rglob("__init__.py")}
    layers = {f"rhythm_core.{p.parent.name}": str(p.parent.relative_to(REPO)) for p in LAYERS.glob("*/__init__.py")}
    assert set(setuptools["packages"]) == folders | set(layers)
    assert setuptools["package-dir"] == layers
    assert not (CORE / "env").exists() and not (LAYERS / "__init__.py").exists()  # one copy; a namespace portion
