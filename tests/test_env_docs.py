"""Environment docs: every registered environment's class docstring has Gymnasium's sections, and
its page under docs/envs/ holds them exactly as ``python -m agentgym.envs.docs`` renders them."""

import shutil
from pathlib import Path

import pytest

from agentgym.envs import ENVIRONMENTS, docs

DOCS_DIR = Path(__file__).resolve().parents[1] / "docs" / "envs"
FIX = "run python -m agentgym.envs.docs to regenerate the pages"


def test_class_docstring_has_gymnasium_sections(env_id):
    assert docs.missing_sections(docs.env_class(env_id)) == []


def test_page_holds_the_docstring(env_id):
    assert env_id in docs.PAGES, f"{env_id} has no page: add it to agentgym.envs.docs.PAGES and {FIX}"
    page = DOCS_DIR / docs.PAGES[env_id]
    assert page.is_file(), f"{page} is missing: {FIX}"
    assert docs.render(env_id) in page.read_text(encoding="utf-8"), f"{page}'s generated block differs from the class docstring: {FIX}"


def test_every_page_agrees_with_the_docstrings():
    assert set(docs.PAGES) == set(ENVIRONMENTS)
    assert docs.check_pages(DOCS_DIR) == []


def test_rendering_turns_docstring_markup_into_markdown():
    text = "``split`` (:class:`agentgym.env.ToolEnv`, :class:`~agentgym.envs.knowledge.cache.ToolCache`, :data:`X`)"
    assert docs.markdown(text) == "`split` (`agentgym.env.ToolEnv`, `ToolCache`, `X`)"


@pytest.fixture
def pages(tmp_path: Path) -> Path:
    """A copy of docs/envs/ to break, brought up to date first (the tests above judge the real one)."""
    copy = tmp_path / "envs"
    shutil.copytree(DOCS_DIR, copy)
    docs.write_pages(copy)
    return copy


def test_an_edited_docstring_makes_its_page_stale_until_regenerated(pages, monkeypatch):
    cls = docs.env_class("agentgym/Refund-v0")
    page = pages / docs.PAGES["agentgym/Refund-v0"]
    before = page.read_text(encoding="utf-8")
    monkeypatch.setattr(cls, "__doc__", cls.__doc__.replace("Today is frozen at 2025-06-15.", "Today is frozen at 2031-01-01."))
    problems = docs.check_pages(pages)
    assert len(problems) == 1 and str(page) in problems[0] and "differs" in problems[0]

    assert docs.write_pages(pages) == [page]
    after = page.read_text(encoding="utf-8")
    assert "2031-01-01" in after and "2025-06-15" not in after
    assert docs.check_pages(pages) == []
    # only the block changed: the hand-written text around it is kept
    start, end = docs.begin_marker("agentgym/Refund-v0"), docs.END
    assert before.split(start)[0] == after.split(start)[0] and before.split(end)[1] == after.split(end)[1]


def test_a_missing_section_is_reported(pages, monkeypatch):
    cls = docs.env_class("agentgym/SQL-v0")
    monkeypatch.setattr(cls, "__doc__", cls.__doc__.replace("## Starting State", "## Start"))
    assert docs.missing_sections(cls) == ["no '## Starting State' section"]
    assert any("agentgym/SQL-v0" in p and "Starting State" in p for p in docs.check_pages(pages))


def test_sections_out_of_order_are_reported(monkeypatch):
    cls = docs.env_class("agentgym/SearchQA-v0")
    doc = cls.__doc__.replace("## Rewards", "## TMP").replace("## Arguments", "## Rewards").replace("## TMP", "## Arguments")
    monkeypatch.setattr(cls, "__doc__", doc)
    assert [p for p in docs.missing_sections(cls) if "out of order" in p]


def test_a_missing_page_or_block_is_reported(pages, monkeypatch):
    (pages / "sql.md").unlink()
    tau = pages / "tau_retail.md"
    tau.write_text(tau.read_text(encoding="utf-8").replace(docs.END, ""), encoding="utf-8")
    monkeypatch.setitem(docs.PAGES, "agentgym/Refund-v0", "refund-renamed.md")
    problems = "\n".join(docs.check_pages(pages))
    assert "sql.md does not exist" in problems
    assert "tau_retail.md: a generated block has no closing" in problems
    assert "refund-renamed.md does not exist" in problems
    assert "refund.md: has a generated block but is no environment's page" in problems

    monkeypatch.delitem(docs.PAGES, "agentgym/Refund-v0")
    assert "agentgym/Refund-v0 (agentgym.envs.refund.env:RefundEnv): no page" in "\n".join(docs.check_pages(pages))


def test_write_pages_creates_a_missing_page(pages):
    (pages / "toolmath.md").unlink()
    assert docs.write_pages(pages) == [pages / "toolmath.md"]
    text = (pages / "toolmath.md").read_text(encoding="utf-8")
    assert text.startswith("# agentgym/ToolMath-v0 — ") and docs.render("agentgym/ToolMath-v0") in text
    assert docs.check_pages(pages) == []


def test_command_line_check_and_write(pages, capsys):
    assert docs.main(["--check", "--docs-dir", str(pages)]) == 0
    page = pages / "mock_api.md"
    page.write_text(page.read_text(encoding="utf-8").replace("## Rewards", "## Reward"), encoding="utf-8")
    assert docs.main(["--check", "--docs-dir", str(pages)]) == 1
    assert "mock_api.md" in capsys.readouterr().err
    assert docs.main(["--docs-dir", str(pages)]) == 0
    assert docs.main(["--check", "--docs-dir", str(pages)]) == 0
