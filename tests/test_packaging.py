"""Packaging: every package folder is listed in pyproject.toml, so a wheel install is complete."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPING = {"agentgym": "agentgym", "envs": "agentgym.envs", "verifiers": "agentgym.verifiers", "trainers": "agentgym.trainers", "tasks": "agentgym.tasks"}


def test_every_package_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for folder, package in MAPPING.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *relative.parts]))
    assert found <= listed, f"add to pyproject.toml packages: {sorted(found - listed)}"
    assert listed <= found, f"listed but missing: {sorted(listed - found)}"


def test_the_wheel_carries_every_bundled_data_file(tmp_path):
    # Task data, licenses and docs under tasks/ reach a user only through package-data patterns.
    # Built from a copy: setuptools would reuse the checkout's build/ folder, stale files and all.
    import shutil
    import subprocess
    import sys
    import zipfile

    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in MAPPING:
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(source)], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("agentgym-*.whl")
    inside = set(zipfile.ZipFile(wheel).namelist())
    data = [p for p in (ROOT / "tasks").rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    missing = sorted(str(p.relative_to(ROOT)) for p in data if "agentgym/tasks/" + str(p.relative_to(ROOT / "tasks")) not in inside)
    assert data and missing == []
