"""The environment is the lock: `make install` installs exactly requirements.lock (pip constraints),
so what runs here is what CI tested."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def lock_lines() -> list[str]:
    lines = (REPO / "requirements.lock").read_text().splitlines()
    return sorted(line for line in lines if line.strip() and not line.startswith("#"))


def test_the_installed_packages_are_exactly_the_lock():
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    installed = sorted(line for line in frozen if line.strip() and not line.startswith("#"))
    missing, extra = set(lock_lines()) - set(installed), set(installed) - set(lock_lines())
    assert not missing and not extra, (
        f"pip freeze differs from requirements.lock: not installed {sorted(missing)}, not in the lock "
        f"{sorted(extra)}; `make install` installs the lock, `make lock` refreshes it")


def test_the_lock_pins_every_direct_dependency_with_cpu_torch():
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pinned = {canonicalize_name(line.split("==")[0]): line.split("==")[1] for line in lock_lines()}
    assert all("==" in line for line in lock_lines()), "every lock line is name==version"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    # The environment package is installed from its folder (editable, so not in the lock); its dependencies are.
    env_package = tomllib.loads((REPO / "envs" / "rhythm_env" / "pyproject.toml").read_text())["project"]
    assert env_package["name"] in project["dependencies"]
    wanted = [d for d in project["dependencies"] if d != env_package["name"]] + env_package["dependencies"] + [
        d for extra in ("dev", "postgres", "s3") for d in project["optional-dependencies"][extra]]
    for spec in map(Requirement, wanted):
        name = canonicalize_name(spec.name)
        assert name in pinned, f"{spec.name} is not in requirements.lock"
        assert spec.specifier.contains(pinned[name], prereleases=True), f"lock {name}=={pinned[name]} breaks {spec}"
    assert pinned["torch"].endswith("+cpu")
