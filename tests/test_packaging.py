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
