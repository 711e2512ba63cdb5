"""Tool declaration: schemas generated from type hints, arguments validated before the call."""

from typing import Literal

import pytest

from agentgym.tools import tool, tools_of


class _Shop:
    @tool
    def search(self, query: str, limit: int = 5, tags: list[str] | None = None, mode: Literal["a", "b"] = "a") -> str:
        """Search the shop.

        Args:
            query: words to look for,
                possibly several.
            limit: how many results.
        """
        return query

    @tool(name="open")
    def open_item(self, item_id: str, verbose: bool) -> str:
        """Open one item."""
        return item_id


def test_schema_from_type_hints_and_docstring():
    search, open_item = tools_of(_Shop)
    params = search.parameters
    assert search.name == "search" and search.description == "Search the shop."
    assert params["required"] == ["query"]
    assert params["properties"]["query"] == {"type": "string", "description": "words to look for, possibly several."}
    assert params["properties"]["limit"] == {"type": "integer", "description": "how many results.", "default": 5}
    assert params["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert params["properties"]["mode"] == {"enum": ["a", "b"], "default": "a"}
    assert params["additionalProperties"] is False
    assert open_item.name == "open" and open_item.parameters["required"] == ["item_id", "verbose"]
    assert open_item.schema["type"] == "function" and open_item.schema["function"]["name"] == "open"


@pytest.mark.parametrize(
    "arguments, fragment",
    [
        ({}, "'query' is a required property"),
        ({"query": 3}, "is not of type 'string'"),
        ({"query": "x", "limit": "5"}, "is not of type 'integer'"),
        ({"query": "x", "mode": "c"}, "is not one of"),
        ({"query": "x", "extra": 1}, "Additional properties"),
        ([], "must be a JSON object"),
    ],
)
def test_validation_errors_are_readable(arguments, fragment):
    search = tools_of(_Shop)[0]
    assert fragment in search.validation_error(arguments)


def test_valid_arguments_pass():
    assert tools_of(_Shop)[0].validation_error({"query": "x", "tags": ["a"], "mode": "b"}) is None


def test_untyped_parameter_is_rejected_at_declaration():
    with pytest.raises(TypeError, match="needs a type hint"):

        @tool
        def bad(self, x):  # noqa: ANN001
            """No hint."""


def test_cap_result_bounds_bytes_at_a_character_boundary():
    from agentgym.tools import cap_result

    assert cap_result("short") == "short"
    capped = cap_result("é" * 1000, max_bytes=500)  # two bytes a character
    assert len(capped.encode()) <= 500 and capped.startswith("é" * 50)
    assert capped.endswith("[result truncated: 2000 bytes long; the part above is what fits in 500]")
    assert cap_result(capped, max_bytes=500) == capped  # capping twice changes nothing
    assert cap_result("a\ud800b") == "a\ufffdb"  # and the result always encodes
