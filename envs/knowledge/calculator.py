"""A safe arithmetic evaluator for the model's ``calculator(expression)`` calls.

The expression is parsed with :mod:`ast` and walked by a small interpreter that knows numbers,
``+ - * / // % **``, unary signs, parentheses, ``pi``, ``e`` and a few math functions. Nothing
else is evaluated: names, attributes, subscripts, strings, lambdas and comprehensions are errors,
and ``eval`` is never called. Sizes are bounded before they are computed (the text length, the
number of syntax nodes, the nesting depth, the bits of an integer power or product), so an input
like ``9**9**9**9`` is refused at once instead of running for hours.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import cast

from agentgym.parsing import parse_python

__all__ = ["CalculatorError", "calculate", "evaluate"]

MAX_CHARS = 300
MAX_NODES = 120
MAX_DEPTH = 40
MAX_INT_BITS = 512  # about 10**154: far beyond any real quantity, far below a slow computation
MAX_ABS_EXPONENT = 10_000

Number = int | float


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be computed; the message says why."""


_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}
# name -> (function, fewest arguments, most arguments)
_FUNCTIONS: dict[str, tuple[Callable[..., Number], int, int]] = {
    "sqrt": (math.sqrt, 1, 1),
    "abs": (abs, 1, 1),
    "round": (round, 1, 2),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "exp": (math.exp, 1, 1),
    "log": (math.log, 1, 2),
    "log10": (math.log10, 1, 1),
    "log2": (math.log2, 1, 1),
    "min": (min, 1, 20),
    "max": (max, 1, 20),
}
_HINTS: dict[type, str] = {  # looked up by the type of a node and of its operator, if any
    ast.BitXor: "use ** for powers, not ^",
    ast.Tuple: "write numbers without thousands separators (1234567, not 1,234,567)",
    ast.Attribute: "attribute access is not allowed",
    ast.Subscript: "indexing is not allowed",
}


def calculate(expression: str) -> str:
    """Evaluate ``expression`` and format the result (integers exactly, floats to 12 significant digits).

    Raises:
        CalculatorError: a clear reason when the expression is not allowed or fails.
    """
    value = evaluate(expression)
    if isinstance(value, int):
        return str(value)
    return format(value, ".12g")


def evaluate(expression: str) -> Number:
    """Evaluate ``expression`` to an ``int`` or a finite ``float``.

    Raises:
        CalculatorError: a clear reason when the expression is not allowed or fails.
    """
    if not isinstance(expression, str):
        raise CalculatorError("the expression must be a string")
    text = expression.strip()
    if not text:
        raise CalculatorError("the expression is empty")
    if len(text) > MAX_CHARS:
        raise CalculatorError(f"the expression is {len(text)} characters long; the limit is {MAX_CHARS}")
    try:
        tree = cast(ast.Expression, parse_python(text, mode="eval"))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else str(exc) if isinstance(exc, ValueError) else "too deeply nested"
        raise CalculatorError(f"cannot parse the expression: {detail}") from None
    _check_size(tree)
    return _Evaluator().eval(tree.body)


def _check_size(tree: ast.AST) -> None:
    # iterative, so that a deep tree cannot exhaust the interpreter's stack before being refused
    count, stack = 0, [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise CalculatorError(f"the expression has more than {MAX_NODES} parts; split the computation into steps")
        if depth > MAX_DEPTH:
            raise CalculatorError(f"the expression is nested more than {MAX_DEPTH} levels deep")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


class _Evaluator:
    def eval(self, node: ast.AST) -> Number:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
            return _checked(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return self._binary(node.op, self.eval(node.left), self.eval(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _checked(_UNARY[type(node.op)](self.eval(node.operand)))
        if isinstance(node, ast.Name):
            if node.id in _CONSTANTS:
                return _CONSTANTS[node.id]
            raise CalculatorError(f"unknown name {node.id!r}; known constants: pi, e; functions: {', '.join(_FUNCTIONS)}")
        if isinstance(node, ast.Call):
            return self._call(node)
        hint = _HINTS.get(type(node)) or _HINTS.get(type(getattr(node, "op", None)))
        raise CalculatorError(hint or f"{type(node).__name__} is not allowed; use numbers, + - * / // % **, parentheses and functions")

    def _binary(self, op: ast.operator, left: Number, right: Number) -> Number:
        if isinstance(op, ast.Pow):
            _check_power(left, right)
        elif isinstance(op, ast.Mult) and isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise CalculatorError("the result is too large")
        try:
            return _checked(_BINARY[type(op)](left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("the result is too large") from None

    def _call(self, node: ast.Call) -> Number:
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            shown = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise CalculatorError(f"unknown function {shown!r}; available: {', '.join(_FUNCTIONS)}")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise CalculatorError("functions take plain positional arguments only")
        name = node.func.id
        fn, fewest, most = _FUNCTIONS[name]
        if not fewest <= len(node.args) <= most:
            expected = str(fewest) if fewest == most else f"{fewest} to {most}"
            raise CalculatorError(f"{name}() takes {expected} argument(s), got {len(node.args)}")
        args = [self.eval(a) for a in node.args]
        if name == "round" and len(args) == 2 and (not isinstance(args[1], int) or abs(args[1]) > 15):
            raise CalculatorError("round(x, n) needs a whole number of digits n between -15 and 15")
        try:
            return _checked(fn(*args))
        except (ValueError, OverflowError) as exc:
            raise CalculatorError(f"{name}() failed: {'the result is too large' if isinstance(exc, OverflowError) else 'math domain error'}") from None


def _check_power(base: Number, exponent: Number) -> None:
    if abs(exponent) > MAX_ABS_EXPONENT:
        raise CalculatorError(f"exponents are limited to {MAX_ABS_EXPONENT} in absolute value")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1 and (abs(base).bit_length() - 1) * exponent > MAX_INT_BITS:
        raise CalculatorError("the result is too large")


def _checked(value: Number) -> Number:
    if isinstance(value, complex):  # a negative number to a fractional power
        raise CalculatorError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalculatorError("the result is too large")
    return value
