"""Old import paths of modules that moved when ``agentgym/`` was grouped by role, for one version.

``import agentgym.runner`` (now :mod:`agentgym.rollouts.runner`) still works and gives the module
at its new path, with a DeprecationWarning. :data:`MOVED_MODULES` is the one list of what moved;
Importing this module puts a finder for those names at the front of ``sys.meta_path`` (``import
agentgym`` does it first), so nothing is left at the old paths but this table.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

__all__ = ["MOVED_MODULES"]

MOVED_MODULES: dict[str, tuple[str, ...]] = {
    "agentgym.episode": ("agentgym.rollouts.episode",),
    "agentgym.runner": ("agentgym.rollouts.runner",),
    "agentgym.evaluation": ("agentgym.rollouts.evaluation",),
    "agentgym.episode_file": ("agentgym.rollouts.episode_file",),
    "agentgym.parquet": ("agentgym.rollouts.parquet",),
    # rollout.py was split: the scripted-policy driver, and the record files.
    "agentgym.rollout": ("agentgym.rollouts.scripted", "agentgym.rollouts.io"),
    "agentgym.models.chat": ("agentgym.rollouts.chat",),
    "agentgym.models.trajectory": ("agentgym.rollouts.trajectory",),
    "agentgym.models.batching": ("agentgym.rollouts.batching",),
    "agentgym.models.inspection": ("agentgym.offline.inspection",),
    "agentgym.labelling": ("agentgym.offline.labelling",),
    "agentgym.validation": ("agentgym.offline.validation",),
}
"""Old module path -> the module(s) that hold its contents now (two where a module was split)."""


class _Alias(importlib.abc.Loader):
    """Loads an old path as its new module (or, for a split module, a module of both halves' names)."""

    def __init__(self, targets: Sequence[str]) -> None:
        self.targets = targets

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        where = " and ".join(self.targets)
        # stacklevel 2 is the importing line: past this frame, warnings skips the import machinery's frames.
        warnings.warn(f"{spec.name} is deprecated: import from {where} (the old path goes in the next release)", DeprecationWarning, stacklevel=2)
        modules = [importlib.import_module(target) for target in self.targets]
        if len(modules) == 1:
            return modules[0]
        merged = types.ModuleType(spec.name, f"Deprecated: the names of {where}.")
        for module in modules:
            merged.__dict__.update({name: getattr(module, name) for name in module.__all__})
        merged.__all__ = [name for module in modules for name in module.__all__]  # type: ignore[attr-defined]
        return merged

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the module was imported at its new path."""


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        targets = MOVED_MODULES.get(fullname)
        return None if targets is None else importlib.machinery.ModuleSpec(fullname, _Alias(targets))


if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
