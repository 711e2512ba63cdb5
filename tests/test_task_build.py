"""The task data bundled under tasks/ is what its builders (agentgym.tasks.build) write, byte for byte."""

import pytest

import agentgym.tasks.build.__main__ as command
from agentgym.sandbox import SandboxUnavailable, get_backend
from agentgym.tasks.build import BUILDERS, TASKS, stale


@pytest.mark.parametrize("env", sorted(BUILDERS))
def test_a_fresh_build_reproduces_the_bundled_files(env):
    if env == "code_exec":  # its labelled set runs the scenarios' code in the sandbox
        try:
            get_backend("auto")
        except SandboxUnavailable as exc:
            pytest.skip(f"no sandbox backend here: {exc}")
    differing = [str(path.relative_to(TASKS)) for path in stale(env)]
    assert differing == [], f"rebuild with: python -m agentgym.tasks.build {env}"


def test_every_bundled_task_folder_has_builders():
    folders = {p.name for p in TASKS.iterdir() if p.is_dir() and p.name not in ("build", "__pycache__")}
    assert folders == set(BUILDERS)


def test_the_command_line_rebuilds_and_reports_changed_files(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(command, "TASKS", tmp_path)
    assert command.main(["--check", "refund"]) == 1  # nothing built there yet
    assert command.main(["refund"]) == 0
    assert sorted(p.name for p in (tmp_path / "refund").iterdir()) == ["labelled.jsonl", "test.jsonl", "train.jsonl", "val.jsonl"]
    assert command.main(["--check", "refund"]) == 0
    changed = tmp_path / "refund" / "val.jsonl"
    changed.write_bytes(changed.read_bytes().replace(b"refund-", b"refunds-", 1))
    capsys.readouterr()
    assert command.main(["--check", "refund"]) == 1
    assert capsys.readouterr().out == f"differs from a fresh build: {changed}\n"
    with pytest.raises(SystemExit):
        command.main(["nope"])
