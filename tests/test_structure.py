"""The layers a newcomer reads in each package's `__init__.py` hold: no two packages of rhythm_core or of
the environment's package rhythm_env import each other (directly or around a loop), rhythm_env imports
nothing of rhythm_core, no module is over 450 lines, and rhythm_core has few top-level modules. The check
reads the source (every import, lazy ones included), so it holds for code paths no test runs. Each
distribution lists its own package folders and maps no other folder."""

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "rhythm_core"
ENV = REPO / "envs" / "rhythm_env"  # the folder is the package rhythm_env (OpenEnv's layout)
ROOTS = {"rhythm_core": CORE, "rhythm_env": ENV}
MAX_LINES = 450
MAX_TOP_LEVEL_MODULES = 7

def _unit(module: str) -> str | None:
    """The package (or top-level module) of rhythm_core or rhythm_env a dotted module name belongs to:
    `agents` for rhythm_core's, `rhythm_env.sim` for the environment's."""
    parts = module.split(".")
    if parts[0] not in ROOTS or len(parts) < 2:
        return None
    return parts[1] if parts[0] == "rhythm_core" else f"rhythm_env.{parts[1]}"


def _sources():
    """(top-level package, file) for every module of rhythm_core and rhythm_env."""
    return [(top, path) for top, root in ROOTS.items() for path in sorted(root.rglob("*.py"))
            if not any(part in ("build", ".venv") for part in path.relative_to(root).parts)]


def package_imports() -> dict[str, set[str]]:
    """For each package (or top-level module) of rhythm_core and rhythm_env, the others it imports anywhere."""
    edges: dict[str, set[str]] = {}
    for top, path in _sources():
        parts = [top, *path.relative_to(ROOTS[top]).with_suffix("").parts]
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


def test_no_package_cycle_in_rhythm_core_or_the_environment():
    found = cycles(package_imports())
    assert not found, f"packages that import each other: {found}"


def test_the_environment_imports_nothing_of_rhythm_core():
    # It installs alone (the Space, `pip install ./envs/rhythm_env`), where rhythm_core is not there.
    edges = package_imports()
    assert not {unit: targets for unit, targets in edges.items()
                if unit.startswith("rhythm_env.") and not all(t.startswith("rhythm_env.") for t in targets)}


def test_the_cycle_check_sees_a_loop():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_tracking_the_bottom_floor_imports_no_other_package_and_compute_sits_below_the_stages():
    edges = package_imports()
    assert not edges.get("tracking", set()) - {"errors"}, edges.get("tracking")
    above_compute = {"teacher", "data", "training", "evaluation", "distill", "gpu_check", "cli"}
    assert not edges.get("compute", set()) & above_compute, edges.get("compute")


def test_no_module_over_450_lines():
    long = {str(p.relative_to(REPO)): n for _, p in _sources() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {long}"


def test_few_top_level_modules():
    modules = {p.name for p in CORE.glob("*.py") if p.name != "__init__.py"}
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, sorted(modules)


def test_each_distribution_ships_its_own_package_folders_and_maps_no_other():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {".".join(p.parent.relative_to(REPO).parts) for top in ("rhythm_core", "rhythm_pipeline")
               for p in (REPO / top).rglob("__init__.py")}
    assert set(setuptools["packages"]) == folders and "package-dir" not in setuptools
    env = tomllib.loads((ENV / "pyproject.toml").read_text())["tool"]["setuptools"]
    subpackages = {".".join(["rhythm_env", *p.parent.relative_to(ENV).parts]) for p in ENV.rglob("*/__init__.py")
                   if "build" not in p.relative_to(ENV).parts}
    assert set(env["packages"]) == {"rhythm_env"} | subpackages
    assert env["package-dir"] == {"rhythm_env": "."}  # OpenEnv's layout: the folder is the package
    assert not (REPO / "rhythm_env").exists() and not (ENV / "rhythm_core").exists()  # one copy, one owner
