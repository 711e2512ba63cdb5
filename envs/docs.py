"""The environments' pages under ``docs/envs/``, generated from their class docstrings.

Each registered environment's class docstring is its documentation, in Gymnasium's sections
(:data:`SECTIONS`; extra sections such as ``## Info`` may sit between them). Its page (:data:`PAGES`)
holds that text, rendered as Markdown, between two marker comments (:func:`begin_marker`, :data:`END`);
what the page has outside that block (its title, usage, measurements, notes on the task data) is
written by hand. An environment registered outside agentgym gets the same: pass ``pages={id: name}``
and a ``docs_dir`` to :func:`write_pages` and :func:`check_pages`.

    python -m agentgym.envs.docs            rewrite the generated blocks (a missing page is created)
    python -m agentgym.envs.docs --check    report stale or missing blocks and exit 1; write nothing

``tests/test_env_docs.py`` runs the same check.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

from agentgym.envs.catalogue import ENVIRONMENTS
from agentgym.envs.registration import env_class

__all__ = [
    "DOCS_DIR",
    "END",
    "PAGES",
    "SECTIONS",
    "begin_marker",
    "check_pages",
    "env_class",
    "markdown",
    "missing_sections",
    "render",
    "replace_block",
    "sections",
    "write_pages",
]

SECTIONS = ("Description", "Action Space", "Observation Space", "Rewards", "Starting State", "Episode End", "Arguments", "Version History")
"""The sections every environment's class docstring has, in this order (Gymnasium's)."""

PAGES = {
    "agentgym/Refund-v0": "refund.md",
    "agentgym/CodeExec-v0": "code_exec.md",
    "agentgym/MockAPI-v0": "mock_api.md",
    "agentgym/SQL-v0": "sql.md",
    "agentgym/SearchQA-v0": "searchqa.md",
    "agentgym/ToolMath-v0": "toolmath.md",
    "agentgym/TauRetail-v0": "tau_retail.md",
}
"""Each registered environment's page, under :data:`DOCS_DIR`."""

DOCS_DIR = Path(__file__).resolve().parents[1] / "docs" / "envs"
"""``docs/envs/`` of the source tree this module lives in (``envs/docs.py``)."""

END = "<!-- end of generated block -->"
_BEGIN = re.compile(r"<!-- generated from the class docstring of \S+ by python -m agentgym\.envs\.docs: edit the docstring, not this block -->")
_HEADING = re.compile(r"^## (.+?)\s*$", re.MULTILINE)
_LITERAL = re.compile(r"``(.+?)``")
_ROLE = re.compile(r":(?:class|mod|func|meth|data|attr|exc|obj):`(~?)([^`]+)`")


def begin_marker(env_id: str) -> str:
    """The comment that opens ``env_id``'s generated block; it names the class to edit."""
    return f"<!-- generated from the class docstring of {_class_path(env_id)} by python -m agentgym.envs.docs: edit the docstring, not this block -->"


def _class_path(env_id: str) -> str:
    cls = env_class(env_id)
    return f"{cls.__module__}:{cls.__qualname__}"


def sections(cls: type) -> dict[str, str]:
    """The ``## `` sections of the class's own docstring, title -> text, in their order."""
    doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
    parts = _HEADING.split(doc)
    return {title: text.strip() for title, text in zip(parts[1::2], parts[2::2], strict=True)}


def missing_sections(cls: type) -> list[str]:
    """What keeps the class docstring from Gymnasium's form: sections missing, empty, or out of order."""
    found = sections(cls)
    problems = [f"no '## {title}' section" for title in SECTIONS if not found.get(title)]
    present = [title for title in found if title in SECTIONS]
    if not problems and present != list(SECTIONS):
        problems.append(f"sections out of order: {', '.join(present)} (expected {', '.join(SECTIONS)})")
    return problems


def markdown(text: str) -> str:
    """A docstring's text as Markdown: ``literal`` becomes `literal`, :role:`a.b.C` becomes `a.b.C`
    (`C` with a leading ``~``)."""
    text = _ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", text)
    return _LITERAL.sub(lambda m: f"`{m[1]}`", text)


def render(env_id: str) -> str:
    """``env_id``'s generated block, both markers included."""
    body = "\n\n".join(f"## {title}\n\n{markdown(text)}" for title, text in sections(env_class(env_id)).items())
    return f"{begin_marker(env_id)}\n\n{body}\n\n{END}"


def _blocks(page: str) -> list[tuple[int, int]]:
    """The (start, end) offsets of each generated block of a page, markers included."""
    spans = []
    for match in _BEGIN.finditer(page):
        end = page.find(END, match.end())
        if end < 0:
            raise ValueError(f"a generated block has no closing {END!r}")
        spans.append((match.start(), end + len(END)))
    return spans


def replace_block(page: str, block: str) -> str:
    """``page`` with its one generated block replaced by ``block``."""
    spans = _blocks(page)
    if len(spans) != 1:
        raise ValueError(f"expected one generated block, found {len(spans)}")
    start, end = spans[0]
    return page[:start] + block + page[end:]


def _new_page(env_id: str) -> str:
    summary = inspect.getdoc(env_class(env_id)) or ""
    title = summary.splitlines()[0].partition(": ")[2].rstrip(".") if summary else ENVIRONMENTS.get(env_id, ("", env_id))[1]
    return f"# {env_id} — {title}\n\n{render(env_id)}\n"


def check_pages(docs_dir: Path = DOCS_DIR, pages: dict[str, str] | None = None) -> list[str]:
    """Every way the pages under ``docs_dir`` differ from the docstrings (empty when they agree).

    ``pages`` (default :data:`PAGES`, where every bundled environment must have a page) maps each
    environment id to document to its page's file name."""
    if pages is None:
        pages, env_ids = PAGES, list(dict.fromkeys([*ENVIRONMENTS, *PAGES]))
    else:
        env_ids = list(pages)
    problems = []
    for env_id in env_ids:
        where = f"{env_id} ({_class_path(env_id)})"
        problems += [f"{where}: {problem}" for problem in missing_sections(env_class(env_id))]
        if env_id not in pages:
            problems.append(f"{where}: no page (add it to agentgym.envs.docs.PAGES)")
        elif not (docs_dir / pages[env_id]).is_file():
            problems.append(f"{where}: {docs_dir / pages[env_id]} does not exist")
    for path in sorted(docs_dir.glob("*.md")):
        page = path.read_text(encoding="utf-8")
        try:
            spans = _blocks(page)
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
            continue
        owners = [env_id for env_id, name in pages.items() if name == path.name]
        if owners and len(spans) != 1:
            problems.append(f"{path}: expected one generated block (for {owners[0]}), found {len(spans)}")
        elif spans and not owners:
            problems.append(f"{path}: has a generated block but is no environment's page")
        elif spans and page[spans[0][0] : spans[0][1]] != render(owners[0]):
            problems.append(f"{path}: the generated block differs from {owners[0]}'s class docstring (run python -m agentgym.envs.docs)")
    return problems


def write_pages(docs_dir: Path = DOCS_DIR, pages: dict[str, str] | None = None) -> list[Path]:
    """Rewrite each environment page's generated block (creating missing pages); returns the pages
    changed. ``pages``: environment id -> file name under ``docs_dir`` (default :data:`PAGES`)."""
    changed = []
    for env_id, name in (PAGES if pages is None else pages).items():
        path = docs_dir / name
        if path.is_file():
            old = path.read_text(encoding="utf-8")
            try:
                new = replace_block(old, render(env_id))
            except ValueError as exc:
                raise ValueError(f"{path}: {exc}") from None
        else:
            old, new = "", _new_page(env_id)
        if new != old:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    """Command line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m agentgym.envs.docs", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="report differences and exit 1; write nothing")
    parser.add_argument("--docs-dir", type=Path, default=DOCS_DIR, help=f"the environment pages' folder (default: {DOCS_DIR})")
    args = parser.parse_args(argv)
    if not args.docs_dir.is_dir():
        parser.error(f"no folder {args.docs_dir}: run from a source checkout, or pass --docs-dir")
    if not args.check:
        for path in write_pages(args.docs_dir):
            print(f"wrote {path}")
    problems = check_pages(args.docs_dir)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
