"""Import paths that moved keep working for one release, with a DeprecationWarning that names the new one."""

import importlib
import sys
import warnings

import pytest

from agentgym import _moved, models, records


@pytest.mark.parametrize("name", sorted(records.MOVED))
def test_a_moved_record_type_is_found_at_its_old_path_with_a_warning(name: str) -> None:
    new = getattr(importlib.import_module(records.MOVED[name]), name)
    with pytest.deprecated_call(match=f"agentgym.records.{name} is deprecated: import it from {records.MOVED[name]}"):
        assert getattr(records, name) is new
    with pytest.deprecated_call():
        exec(f"from agentgym.records import {name} as old", namespace := {})  # the form users wrote
    assert namespace["old"] is new


def test_the_old_paths_are_the_ones_that_moved() -> None:
    assert set(records.MOVED) == {
        "APIFault",
        "CodeExecTask",
        "KnowledgeTask",
        "MockAPITask",
        "RefundTask",
        "SQLTask",
        "SearchQATask",
        "TauRetailTask",
        "ToolMathTask",
    }
    assert not set(records.MOVED) & set(records.__all__)


def test_names_that_never_existed_still_fail_and_current_ones_do_not_warn() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchTask'"):
        records.NoSuchTask  # noqa: B018
    with pytest.raises(ImportError):
        exec("from agentgym.records import NoSuchTask", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from agentgym.envs import make_env, register_envs  # still where they were (agentgym.envs.registration re-exported)
        from agentgym.records import EpisodeRecord, TaskRecord

        assert make_env and register_envs and EpisodeRecord and TaskRecord


@pytest.mark.parametrize("old", sorted(_moved.MOVED_MODULES))
def test_a_moved_module_imports_from_its_old_path_with_a_warning(old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    new = [importlib.import_module(target) for target in _moved.MOVED_MODULES[old]]
    monkeypatch.delitem(sys.modules, old, raising=False)  # as in a fresh interpreter
    with pytest.deprecated_call(match=f"{old} is deprecated: import from {' and '.join(_moved.MOVED_MODULES[old])}"):
        module = importlib.import_module(old)
    for target in new:
        for name in target.__all__ if hasattr(target, "__all__") else vars(target):
            assert getattr(module, name) is getattr(target, name)
    if len(new) == 1:
        assert module is new[0]  # the same module: patching it patches what the package uses


def test_the_split_rollout_module_keeps_both_halves_and_the_form_users_wrote(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym.rollouts.io import read_records
    from agentgym.rollouts.scripted import rollout

    monkeypatch.delitem(sys.modules, "agentgym.rollout", raising=False)
    with pytest.deprecated_call():
        exec("from agentgym.rollout import read_records as old_read, rollout as old_rollout", namespace := {})
    assert namespace["old_read"] is read_records and namespace["old_rollout"] is rollout


@pytest.mark.parametrize("name", sorted(models.MOVED))
def test_a_name_that_left_the_models_package_is_found_there_with_a_warning(name: str) -> None:
    new = getattr(importlib.import_module(models.MOVED[name]), name)
    with pytest.deprecated_call(match=f"agentgym.models.{name} is deprecated: import it from {models.MOVED[name]}"):
        assert getattr(models, name) is new


def test_the_new_paths_import_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for targets in _moved.MOVED_MODULES.values():
            for target in targets:
                importlib.import_module(target)
        exec("from agentgym.rollouts import ChatRenderer, RolloutConfig, Trajectory, evaluate, read_records, rollout", {})
        exec("from agentgym.offline import render_html, validate", {})
        exec("from agentgym.models import DEFAULT_MODEL, GenerationBackend, create_backend", {})


def test_a_moved_module_warning_points_at_the_importing_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "agentgym.runner", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import agentgym.runner  # noqa: F401
    (warning,) = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert warning.filename == __file__
