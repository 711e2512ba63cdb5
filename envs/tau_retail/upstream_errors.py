"""τ-bench's own answers to malformed tool calls, for ``TauRetailEnv(errors="upstream")``.

By default TauRetail-v0 checks every call against the tools' JSON Schemas before it runs, and
answers a call that fails (an unknown tool, a missing, unexpected or mistyped argument) with
agentgym's error text. τ-bench (``sierra-research/tau-bench`` at ``59a200c``) has no such check:
its ``Env.step`` (``tau_bench/envs/base.py``) answers an unknown name with ``Unknown action NAME``
and otherwise runs ``Tool.invoke(data=self.data, **action.kwargs)``, turning any exception into
``Error: <exception>``; the tools take whatever values arrive (an integer ``zip`` is compared, or
stored, as an integer). This module holds the parts of that behaviour the tools cannot give by
themselves:

* :func:`unknown_action`, the observation for an unknown tool name;
* :func:`binding_error`, the ``TypeError`` text Python gives when the arguments do not bind to the
  signature of the tool's ``invoke`` (a missing or unexpected argument, or one named ``data``);
* :func:`calculate`, τ-bench's ``calculate`` (``tau_bench/envs/retail/tools/calculate.py``), which
  ``eval``s the expression: evaluated here on the syntax tree with Python's own operators, so that
  every result and error text is ``eval``'s, without running code or hanging the step.

One difference remains, in ``calculate``: an integer result of more than :data:`MAX_INT_BITS` bits
stops the evaluation with ``int too large to convert to float``. τ-bench computes such a number
(``9**9**9`` takes hours) and fails with that same text when it reaches ``float()``; it answers
otherwise only for an expression that goes on to bring the number back into a float's range
(``9**9**9 - 9**9**9``) or that fails elsewhere first.
"""

from __future__ import annotations

import ast
import inspect
import operator
import warnings
from collections.abc import Callable
from typing import Any, cast

from agentgym.envs.tau_retail import tools as default_tools
from agentgym.parsing import parse_python
from agentgym.tools import Tool, ToolError

__all__ = ["ERROR_MODES", "MAX_INT_BITS", "binding_error", "calculate", "unknown_action"]

ERROR_MODES = ("agentgym", "upstream")
"""The values of ``TauRetailEnv(errors=...)``: agentgym's schema check and texts, or τ-bench's."""

MAX_INT_BITS = 1 << 17
"""The largest integer ``calculate`` computes, in bits (``2**131072`` is about ``10**39457``)."""

# calculate.py's character check tests each element with ``char in <this str>``: a substring test,
# which raises for an element that is not a string (an expression given as a list of numbers).
_CHARACTERS = "0123456789+-*/(). "


def unknown_action(name: str) -> str:
    """``Env.step``'s observation for an action that names no tool."""
    return f"Unknown action {name}"


def binding_error(tool: Tool, arguments: dict[str, Any]) -> str | None:
    """The ``TypeError`` text of ``invoke(data=..., **arguments)`` for tool ``tool`` when the
    arguments do not bind, else ``None``.

    τ-bench's tool ``calculate`` is the static method ``Calculate.invoke`` of module
    ``tau_bench.envs.retail.tools.calculate`` (and so on for each tool), with parameters ``data``
    and then the tool's own, in the order of this environment's signature (a test keeps them
    equal). Python checks, in this order: an argument named ``data`` (given twice), each argument
    in turn against the parameter names, then the parameters left without a value.
    """
    qualname = "".join(word.capitalize() for word in tool.name.split("_")) + ".invoke"
    if "data" in arguments:
        return f"tau_bench.envs.retail.tools.{tool.name}.{qualname}() got multiple values for keyword argument 'data'"
    parameters = [name for name in inspect.signature(tool.fn).parameters if name != "self"]
    unexpected = next((name for name in arguments if name not in parameters), None)
    if unexpected is not None:
        return f"{qualname}() got an unexpected keyword argument '{unexpected}'"
    missing = [f"'{name}'" for name in parameters if name not in arguments]
    if not missing:
        return None
    listed = missing[0] if len(missing) == 1 else f"{missing[0]} and {missing[1]}" if len(missing) == 2 else ", ".join(missing[:-1]) + f", and {missing[-1]}"
    plural = "" if len(missing) == 1 else "s"
    return f"{qualname}() missing {len(missing)} required positional argument{plural}: {listed}"


def calculate(expression: Any) -> str:
    """τ-bench's ``Calculate.invoke``: ``str(round(float(eval(expression)), 2))`` after a character check.

    Raises:
        ToolError: with the text τ-bench returns as ``"Error: ..."``.
        TypeError: where τ-bench's character check raises (``expression`` not iterable, or a list
            holding a non-string); its ``Env.step`` shows it as ``"Error: ..."`` too.
    """
    if not all(char in _CHARACTERS for char in expression):
        raise ToolError("invalid characters in expression")
    try:
        if not isinstance(expression, str):  # a list or object of allowed strings got past the check
            raise TypeError("eval() arg 1 must be a string, bytes or code object")
        return str(round(float(_evaluate(_syntax_tree(expression))), 2))
    except Exception as exc:  # noqa: BLE001 - calculate.py turns every failure into its text
        raise ToolError(str(exc)) from None


def _syntax_tree(expression: str) -> ast.expr:
    # eval() skips leading spaces; compiling first gives eval's own errors for what the compiler
    # refuses beyond the grammar (nesting too deep). The SyntaxWarning for "1()" is eval's stderr
    # noise, not a result (and would be an error under a warnings-as-errors filter).
    source = expression.lstrip(" ")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        compile(source, "<string>", "eval", dont_inherit=True)
    return cast(ast.Expression, parse_python(source, mode="eval")).body


def _evaluate(root: ast.expr) -> Any:
    """The value of the tree, in eval's order (operands left to right, then the operation), without
    recursion: the compiler accepts nesting deeper than Python's recursion limit."""
    values: list[Any] = []
    pending: list[tuple[ast.expr, bool]] = [(root, False)]
    while pending:
        node, operands_done = pending.pop()
        children = _operands(node)
        if not operands_done:
            pending.append((node, True))
            pending.extend((child, False) for child in reversed(children))
            continue
        operands = values[len(values) - len(children) :]
        del values[len(values) - len(children) :]
        values.append(_apply(node, operands))
    return values[0]


def _operands(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.Tuple):
        return list(node.elts)
    if isinstance(node, ast.Call):
        # With no comma in the alphabet a call has one argument at most: x, *x or **x.
        return [node.func, *(a.value if isinstance(a, ast.Starred) else a for a in node.args), *(k.value for k in node.keywords)]
    return []


# The default calculator's operators, with eval's integer power (the default's is in floats).
_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {**default_tools._BINARY, ast.Pow: operator.pow}
_UNARY = default_tools._UNARY


def _apply(node: ast.expr, operands: list[Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value  # an int, a float or Ellipsis ("...")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](operands[0])
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = operands
        if _both_int(left, right) and _int_result_too_large(node.op, left, right):
            raise OverflowError("int too large to convert to float")
        result = _BINARY[type(node.op)](left, right)
        if type(result) is int and result.bit_length() > MAX_INT_BITS:
            raise OverflowError("int too large to convert to float")
        return result
    if isinstance(node, ast.Tuple):
        return tuple(operands)
    if isinstance(node, ast.Call):
        # None of the values is callable, so each call raises eval's TypeError; calling the value
        # the way the expression does gives eval's text ("1 argument after * must be an iterable").
        function, arguments = operands[0], operands[1:]
        if not arguments:
            return function()
        if node.keywords:
            return function(**arguments[0])
        if isinstance(node.args[0], ast.Starred):
            return function(*arguments[0])
        return function(arguments[0])
    # The character set leaves no other syntax; refuse rather than guess if Python grows some.
    raise TypeError(f"unsupported expression: {ast.dump(node)[:80]}")


def _both_int(left: Any, right: Any) -> bool:
    return type(left) is int and type(right) is int


def _int_result_too_large(op: ast.operator, left: int, right: int) -> bool:
    """Whether the integer product or power is sure to pass :data:`MAX_INT_BITS` (checked before
    computing it: ``9**9**9`` would take hours)."""
    if isinstance(op, ast.Mult):
        return left != 0 and right != 0 and left.bit_length() + right.bit_length() - 1 > MAX_INT_BITS
    if isinstance(op, ast.Pow):
        # |left| >= 2**(bits - 1), so |left|**right >= 2**((bits - 1) * right); 0, 1 and -1 stay small.
        return right > 0 and (abs(left).bit_length() - 1) * right > MAX_INT_BITS
    return False
