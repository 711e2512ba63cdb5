"""Import paths that moved keep working for one release, with a DeprecationWarning that names the new one."""

import importlib
import warnings

import pytest

from agentgym import records


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
