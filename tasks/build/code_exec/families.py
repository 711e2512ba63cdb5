"""The task families of CodeExec-v0's bundled task set.

A family is one kind of problem with a parameterised statement and reference solution; each of
its variants fixes the parameters, so variants are different problems (another divisor, base,
window, coin set...) that a model must read carefully. ``tasks.py`` turns every variant into
a task: visible examples, hidden tests whose expected values come from running the reference
solution, and that solution as the oracle.

Templates use ``$name`` placeholders (:class:`string.Template`): statements and signatures get
``str(value)``, solutions get ``repr(value)``, so strings become Python literals in code. A
parameter whose key ends in ``_src`` is code (an expression, a body, an annotation): it fills
``$name`` (without the suffix) verbatim everywhere.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Inputs = Callable[[random.Random, dict[str, Any]], tuple[Any, ...]]


@dataclass(frozen=True)
class Family:
    """One kind of problem.

    Attributes:
        name: family id (part of every task id).
        entry_point: the function to write.
        signature: its parameters and return annotation, e.g. ``(n: int) -> int``.
        statement: what the function must do (template).
        solution: the reference solution's full source (template).
        variants: parameter sets, one task each.
        inputs: draws one random argument tuple for a variant.
        edges: argument tuples always among the hidden tests.
        difficulty: easy, medium or hard.
    """

    name: str
    entry_point: str
    signature: str
    statement: str
    solution: str
    variants: tuple[dict[str, Any], ...]
    inputs: Inputs
    edges: tuple[tuple[Any, ...], ...] = ()
    difficulty: str = "easy"


# ------------------------------------------------------------------------ input helpers


def an_int(lo: int, hi: int) -> Inputs:
    return lambda rng, p: (rng.randint(lo, hi),)


def int_list(min_len: int, max_len: int, lo: int, hi: int) -> Inputs:
    return lambda rng, p: ([rng.randint(lo, hi) for _ in range(rng.randint(min_len, max_len))],)


def text(alphabet: str, min_len: int, max_len: int) -> Callable[[random.Random], str]:
    return lambda rng: "".join(rng.choice(alphabet) for _ in range(rng.randint(min_len, max_len)))


WORDS = [
    "apple",
    "banana",
    "cherry",
    "delta",
    "echo",
    "fig",
    "grape",
    "harbor",
    "island",
    "jungle",
    "kettle",
    "lemon",
    "mango",
    "nectar",
    "olive",
    "pepper",
    "quartz",
    "river",
    "stone",
    "tiger",
    "umbrella",
    "violet",
    "walnut",
    "xenon",
    "yarrow",
    "zebra",
    "ant",
    "bee",
    "cat",
    "dog",
    "eel",
    "fox",
    "gnu",
    "hen",
    "ibis",
    "jay",
    "kiwi",
    "lark",
    "mole",
    "newt",
    "owl",
    "pig",
    "quail",
    "ram",
    "seal",
    "toad",
    "urchin",
    "vole",
    "wasp",
    "yak",
    "art",
    "bat",
    "cap",
    "den",
    "ear",
    "fan",
    "gap",
    "hat",
    "ink",
    "jar",
    "key",
    "lid",
    "map",
    "net",
    "oak",
    "pan",
]


def sentence(rng: random.Random, min_words: int = 0, max_words: int = 14, pool: int = 24) -> str:
    vocabulary = WORDS[:pool]
    return " ".join(rng.choice(vocabulary) for _ in range(rng.randint(min_words, max_words)))


def grid(rng: random.Random, rows: tuple[int, int], cols: tuple[int, int], cells: str, weights: tuple[int, ...]) -> list[str]:
    r, c = rng.randint(*rows), rng.randint(*cols)
    return ["".join(rng.choices(cells, weights=weights)[0] for _ in range(c)) for _ in range(r)]


def matrix(rng: random.Random, rows: tuple[int, int], cols: tuple[int, int] | None = None) -> list[list[int]]:
    r = rng.randint(*rows)
    c = r if cols is None else rng.randint(*cols)
    return [[rng.randint(-9, 9) for _ in range(c)] for _ in range(r)]


def nested(rng: random.Random, depth: int = 0) -> list[Any]:
    out: list[Any] = []
    for _ in range(rng.randint(0, 4)):
        out.append(nested(rng, depth + 1) if depth < 4 and rng.random() < 0.35 else rng.randint(0, 50))
    return out


ORDINALS = {1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 5: "5th", 6: "6th", 7: "7th", 8: "8th"}

# ------------------------------------------------------------------------------ families

FAMILIES: list[Family] = []


def family(**kwargs: Any) -> None:
    FAMILIES.append(Family(**kwargs))


family(
    name="multiples_sum",
    entry_point="sum_multiples",
    signature="(n: int) -> int",
    statement="Return the sum of all integers k with 0 <= k < n that are divisible by $a or by $b (0 when there are none).",
    solution="def sum_multiples(n: int) -> int:\n    return sum(k for k in range(n) if k % $a == 0 or k % $b == 0)\n",
    variants=tuple({"a": a, "b": b} for a, b in [(3, 5), (2, 7), (4, 6), (5, 11), (3, 8), (6, 9), (7, 13), (2, 3)]),
    inputs=an_int(2, 3000),
    edges=((0,), (1,)),
)

family(
    name="digit_power_sum",
    entry_point="digit_power_sum",
    signature="(n: int) -> int",
    statement="n is a non-negative integer. Return the sum of its decimal digits, each raised to the power $p.",
    solution="def digit_power_sum(n: int) -> int:\n    return sum(int(d) ** $p for d in str(n))\n",
    variants=tuple({"p": p} for p in range(1, 9)),
    inputs=an_int(10, 10**12),
    edges=((0,), (9,)),
)

family(
    name="to_base",
    entry_point="to_base",
    signature="(n: int) -> str",
    statement=(
        "Return the integer n written in base $b, using the digits 0-9 and then the uppercase letters A-Z, "
        "with a leading '-' for negative numbers and '0' for zero."
    ),
    solution=(
        "def to_base(n: int) -> str:\n"
        "    digits = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ'\n"
        "    if n == 0:\n        return '0'\n"
        "    sign, n = ('-' if n < 0 else ''), abs(n)\n"
        "    out = []\n"
        "    while n:\n        n, r = divmod(n, $b)\n        out.append(digits[r])\n"
        "    return sign + ''.join(reversed(out))\n"
    ),
    variants=tuple({"b": b} for b in (2, 3, 5, 7, 8, 12, 16, 36)),
    inputs=an_int(-(10**6), 10**6),
    edges=((0,), (-1,), (1,)),
    difficulty="medium",
)

family(
    name="linear_recurrence",
    entry_point="sequence_term",
    signature="(n: int) -> int",
    statement="A sequence has a(0) = $a0, a(1) = $a1 and a(k) = $x * a(k-1) + $y * a(k-2) for every k >= 2. Return a(n) for n >= 0.",
    solution=("def sequence_term(n: int) -> int:\n    a, b = $a0, $a1\n    for _ in range(n):\n        a, b = b, $x * b + $y * a\n    return a\n"),
    variants=tuple(
        {"x": x, "y": y, "a0": a0, "a1": a1}
        for x, y, a0, a1 in [(1, 1, 0, 1), (1, 1, 2, 1), (2, 1, 0, 1), (1, 2, 0, 1), (2, 3, 1, 1), (3, 1, 0, 1), (1, 3, 1, 2), (4, 1, 0, 2)]
    ),
    inputs=an_int(2, 90),
    edges=((0,), (1,)),
)

family(
    name="pair_sums_divisible",
    entry_point="count_pairs",
    signature="(xs: list[int]) -> int",
    statement="Return the number of index pairs (i, j) with i < j such that xs[i] + xs[j] is divisible by $k.",
    solution=(
        "def count_pairs(xs: list[int]) -> int:\n    return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs)) if (xs[i] + xs[j]) % $k == 0)\n"
    ),
    variants=tuple({"k": k} for k in (2, 3, 4, 5, 6, 7, 9, 10)),
    inputs=int_list(1, 30, -100, 100),
    edges=(([],),),
)

family(
    name="caesar",
    entry_point="shift_letters",
    signature="(s: str) -> str",
    statement=(
        "Shift every ASCII letter of s forward by $k places in the alphabet, wrapping around from z to a "
        "(and from Z to A) and keeping its case. Leave every other character unchanged."
    ),
    solution=(
        "def shift_letters(s: str) -> str:\n"
        "    out = []\n"
        "    for c in s:\n"
        "        if 'a' <= c <= 'z':\n            out.append(chr((ord(c) - 97 + $k) % 26 + 97))\n"
        "        elif 'A' <= c <= 'Z':\n            out.append(chr((ord(c) - 65 + $k) % 26 + 65))\n"
        "        else:\n            out.append(c)\n"
        "    return ''.join(out)\n"
    ),
    variants=tuple({"k": k} for k in (1, 2, 3, 5, 7, 13, 20, 25)),
    inputs=lambda rng, p: (text(string.ascii_letters + " .,!?0123456789", 1, 40)(rng),),
    edges=(("",),),
)

family(
    name="rotate_list",
    entry_point="rotate",
    signature="(xs: list[int]) -> list[int]",
    statement=(
        "Return a new list holding the elements of xs rotated $direction by $k places. Rotating [1, 2, 3, 4] left by 1 "
        "gives [2, 3, 4, 1]; rotating it right by 1 gives [4, 1, 2, 3]. Rotations wrap around (rotating by len(xs) "
        "changes nothing), and an empty list stays empty."
    ),
    solution=("def rotate(xs: list[int]) -> list[int]:\n    if not xs:\n        return []\n    k = $shift % len(xs)\n    return xs[k:] + xs[:k]\n"),
    variants=tuple(
        {"direction": d, "k": k, "shift": k if d == "left" else -k}
        for d, k in [("left", 1), ("left", 2), ("left", 3), ("left", 5), ("right", 1), ("right", 2), ("right", 3), ("right", 4)]
    ),
    inputs=int_list(1, 9, 0, 99),
    edges=(([],), ([7],)),
)

family(
    name="chunk_sums",
    entry_point="chunk_sums",
    signature="(xs: list[int]) -> list[int]",
    statement="Split xs into consecutive chunks of $k elements (the last chunk may be shorter) and return the list of the chunks' sums.",
    solution="def chunk_sums(xs: list[int]) -> list[int]:\n    return [sum(xs[i:i + $k]) for i in range(0, len(xs), $k)]\n",
    variants=tuple({"k": k} for k in range(2, 10)),
    inputs=int_list(1, 25, -50, 50),
    edges=(([],),),
)

family(
    name="moving_average",
    entry_point="moving_average",
    signature="(xs: list[int]) -> list[float]",
    statement=(
        "Return the average of every window of $w consecutive elements of xs, in order, each rounded to 2 decimal "
        "places with round(). Return an empty list when xs has fewer than $w elements."
    ),
    solution="def moving_average(xs: list[int]) -> list[float]:\n    return [round(sum(xs[i:i + $w]) / $w, 2) for i in range(len(xs) - $w + 1)]\n",
    variants=tuple({"w": w} for w in range(2, 10)),
    inputs=int_list(1, 20, -100, 100),
    edges=(([],),),
)

_CHAR_CLASSES = [
    ("ASCII vowels (a, e, i, o, u, in either case)", "c in 'aeiouAEIOU'"),
    ("ASCII consonants (letters other than a, e, i, o, u, in either case)", "c in string.ascii_letters and c not in 'aeiouAEIOU'"),
    ("decimal digits 0-9", "c in string.digits"),
    ("uppercase ASCII letters", "c in string.ascii_uppercase"),
    ("lowercase ASCII letters", "c in string.ascii_lowercase"),
    ("whitespace characters (space, tab or newline)", "c in ' \\t\\n'"),
    ("punctuation characters (those in string.punctuation)", "c in string.punctuation"),
    ("ASCII letters or digits", "c in string.ascii_letters + string.digits"),
]
family(
    name="count_char_class",
    entry_point="count_chars",
    signature="(s: str) -> int",
    statement="Return how many characters of s are $what.",
    solution="import string\n\n\ndef count_chars(s: str) -> int:\n    return sum(1 for c in s if $predicate)\n",
    variants=tuple({"what": w, "predicate_src": p} for w, p in _CHAR_CLASSES),
    inputs=lambda rng, p: (text(string.ascii_letters + string.digits + string.punctuation + " \t\n", 0, 40)(rng),),
    edges=(("",),),
)

family(
    name="is_power",
    entry_point="is_power",
    signature="(n: int) -> bool",
    statement="Return True if n is a power of $b, that is n == $b ** k for some integer k >= 0 (so 1 counts); otherwise False. n may be any integer.",
    solution=("def is_power(n: int) -> bool:\n    if n < 1:\n        return False\n    while n % $b == 0:\n        n //= $b\n    return n == 1\n"),
    variants=tuple({"b": b} for b in (2, 3, 4, 5, 6, 7, 10, 12)),
    inputs=lambda rng, p: (p["b"] ** rng.randint(0, 12) + rng.choice([0, 0, 1, -1, p["b"]]),),
    edges=((1,), (0,), (-8,)),
)

family(
    name="special_prime_sum",
    entry_point="sum_special_primes",
    signature="(n: int) -> int",
    statement="Return the sum of all prime numbers p < n with p % $m == $r (0 when there are none).",
    solution=(
        "def sum_special_primes(n: int) -> int:\n"
        "    total = 0\n"
        "    for p in range(2, n):\n"
        "        if all(p % d for d in range(2, int(p ** 0.5) + 1)) and p % $m == $r:\n            total += p\n"
        "    return total\n"
    ),
    variants=tuple({"m": m, "r": r} for m, r in [(4, 1), (4, 3), (6, 1), (6, 5), (10, 3), (10, 7), (3, 2), (8, 1)]),
    inputs=an_int(3, 4000),
    edges=((0,), (2,)),
    difficulty="medium",
)

family(
    name="prime_after",
    entry_point="prime_after",
    signature="(n: int) -> int",
    statement="Return the $ordinal smallest prime number that is strictly greater than n (n may be negative).",
    solution=(
        "def prime_after(n: int) -> int:\n"
        "    def is_prime(q):\n        return q > 1 and all(q % d for d in range(2, int(q ** 0.5) + 1))\n"
        "    found, q = 0, max(n, 1)\n"
        "    while found < $k:\n        q += 1\n        if is_prime(q):\n            found += 1\n"
        "    return q\n"
    ),
    variants=tuple({"k": k, "ordinal": ORDINALS[k]} for k in range(1, 9)),
    inputs=an_int(-10, 20000),
    edges=((0,), (2,), (-5,)),
    difficulty="medium",
)

_TRANSFORMS = [
    ("transposed (row i of the result is column i of grid)", "return [list(col) for col in zip(*grid)]"),
    ("rotated 90 degrees clockwise", "return [list(row) for row in zip(*grid[::-1])]"),
    ("rotated 90 degrees counterclockwise", "return [list(row) for row in zip(*grid)][::-1]"),
    ("rotated 180 degrees", "return [row[::-1] for row in grid[::-1]]"),
    ("mirrored left to right (every row reversed)", "return [row[::-1] for row in grid]"),
    ("mirrored top to bottom (the order of the rows reversed)", "return [list(row) for row in grid[::-1]]"),
    ("transposed along the anti-diagonal (rotated 90 degrees clockwise, then mirrored left to right)", "return [list(row)[::-1] for row in zip(*grid[::-1])]"),
]
family(
    name="grid_transform",
    entry_point="transform",
    signature="(grid: list[list[int]]) -> list[list[int]]",
    statement="grid is a non-empty rectangular list of rows. Return a new grid: the input $what.",
    solution="def transform(grid: list[list[int]]) -> list[list[int]]:\n    $body\n",
    variants=tuple({"what": w, "body_src": b} for w, b in _TRANSFORMS),
    inputs=lambda rng, p: (matrix(rng, (1, 5), (1, 5)),),
    difficulty="medium",
)

family(
    name="kth_largest_distinct",
    entry_point="kth_largest",
    signature="(xs: list[int]) -> int | None",
    statement="Return the $ordinal largest distinct value in xs (equal values count once), or None if xs has fewer than $k distinct values.",
    solution="def kth_largest(xs: list[int]) -> int | None:\n    values = sorted(set(xs), reverse=True)\n    return values[$k - 1] if len(values) >= $k else None\n",
    variants=tuple({"k": k, "ordinal": ORDINALS[k]} for k in range(1, 9)),
    inputs=int_list(0, 20, -20, 20),
    edges=(([],),),
)

_STREAKS = [
    ("all elements are equal", "cur == prev"),
    ("each element is strictly greater than the one before it", "cur > prev"),
    ("each element is strictly smaller than the one before it", "cur < prev"),
    ("each element is greater than or equal to the one before it", "cur >= prev"),
    ("each element differs from the one before it by exactly 1 (up or down)", "abs(cur - prev) == 1"),
    ("neighbouring elements always differ", "cur != prev"),
]
family(
    name="longest_streak",
    entry_point="longest_streak",
    signature="(xs: list[int]) -> int",
    statement="Return the length of the longest run of consecutive elements of xs in which $what. A single element is a run of length 1; an empty list has 0.",
    solution=(
        "def longest_streak(xs: list[int]) -> int:\n"
        "    best = run = 0\n"
        "    for i, cur in enumerate(xs):\n"
        "        prev = xs[i - 1] if i else None\n"
        "        run = run + 1 if i and ($relation) else 1\n"
        "        best = max(best, run)\n"
        "    return best\n"
    ),
    variants=tuple({"what": w, "relation_src": r} for w, r in _STREAKS),
    inputs=int_list(1, 25, -3, 6),
    edges=(([],), ([5],)),
)

family(
    name="longest_property_run",
    entry_point="longest_run",
    signature="(xs: list[int]) -> int",
    statement="Return the length of the longest run of consecutive elements of xs that are all $what (0 when no element is).",
    solution=(
        "def longest_run(xs: list[int]) -> int:\n"
        "    best = run = 0\n"
        "    for x in xs:\n        run = run + 1 if $predicate else 0\n        best = max(best, run)\n"
        "    return best\n"
    ),
    variants=({"what": "even", "predicate_src": "x % 2 == 0"}, {"what": "positive", "predicate_src": "x > 0"}),
    inputs=int_list(1, 25, -4, 7),
    edges=(([],),),
)

family(
    name="popcount",
    entry_point="count_with_bits",
    signature="(n: int) -> int",
    statement="Return how many integers k with 0 <= k <= n have exactly $k one-bits in their binary representation.",
    solution="def count_with_bits(n: int) -> int:\n    return sum(1 for k in range(n + 1) if bin(k).count('1') == $k)\n",
    variants=tuple({"k": k} for k in range(1, 9)),
    inputs=an_int(0, 5000),
    edges=((0,), (1,)),
)

family(
    name="fizzbuzz",
    entry_point="fizzbuzz",
    signature="(n: int) -> list[str]",
    statement=(
        "Return a list of n strings for the numbers 1 to n: '$w1$w2' for multiples of both $a and $b, '$w1' for "
        "the other multiples of $a, '$w2' for the other multiples of $b, and the number itself in decimal otherwise."
    ),
    solution=(
        "def fizzbuzz(n: int) -> list[str]:\n"
        "    out = []\n"
        "    for i in range(1, n + 1):\n"
        "        word = ($w1 if i % $a == 0 else '') + ($w2 if i % $b == 0 else '')\n"
        "        out.append(word or str(i))\n"
        "    return out\n"
    ),
    variants=tuple(
        {"a": a, "b": b, "w1": w1, "w2": w2}
        for a, b, w1, w2 in [
            (3, 5, "Fizz", "Buzz"),
            (2, 3, "Foo", "Bar"),
            (4, 7, "Ping", "Pong"),
            (3, 4, "Tick", "Tock"),
            (5, 6, "Hip", "Hop"),
            (2, 5, "Zig", "Zag"),
            (3, 7, "Red", "Blue"),
            (4, 6, "Up", "Down"),
        ]
    ),
    inputs=an_int(1, 45),
    edges=((0,),),
)

family(
    name="pascal_row_mod",
    entry_point="pascal_row",
    signature="(n: int) -> list[int]",
    statement="Return row n (n >= 0; row 0 is [1], row 2 is [1, 2, 1]) of Pascal's triangle, with every entry taken modulo $m.",
    solution=(
        "def pascal_row(n: int) -> list[int]:\n"
        "    row = [1]\n"
        "    for _ in range(n):\n        row = [a + b for a, b in zip([0] + row, row + [0])]\n"
        "    return [x % $m for x in row]\n"
    ),
    variants=tuple({"m": m} for m in (2, 3, 5, 7, 10, 11, 97, 1000)),
    inputs=an_int(1, 60),
    edges=((0,),),
)


def _near_polygonal(rng: random.Random, s2: int, s4: int) -> int:
    k = rng.randint(1, 300)
    return (s2 * k * k - s4 * k) // 2 + rng.choice([0, 0, 1, -1])


_POLYGON_NAMES = {3: "triangular", 4: "square", 5: "pentagonal", 6: "hexagonal", 7: "heptagonal", 8: "octagonal", 9: "nonagonal", 10: "decagonal"}
family(
    name="polygonal",
    entry_point="is_polygonal",
    signature="(n: int) -> bool",
    statement="The $name numbers are P(k) = ($s2 * k * k - $s4 * k) // 2 for k = 1, 2, 3, ... Return True if n is one of them, else False (n may be any integer).",
    solution=(
        "def is_polygonal(n: int) -> bool:\n"
        "    k = 1\n"
        "    while ($s2 * k * k - $s4 * k) // 2 < n:\n        k += 1\n"
        "    return ($s2 * k * k - $s4 * k) // 2 == n\n"
    ),
    variants=tuple({"name": _POLYGON_NAMES[s], "s2": s - 2, "s4": s - 4} for s in range(3, 11)),
    inputs=lambda rng, p: (_near_polygonal(rng, p["s2"], p["s4"]),),
    edges=((1,), (0,), (-3,)),
)

family(
    name="climb_ways",
    entry_point="climb_ways",
    signature="(n: int) -> int",
    statement=(
        "You climb a staircase of n steps; every move climbs a number of steps from $steps. Return the number of "
        "distinct ordered sequences of moves that end exactly on step n (1 for n = 0)."
    ),
    solution=(
        "def climb_ways(n: int) -> int:\n"
        "    ways = [1] + [0] * n\n"
        "    for i in range(1, n + 1):\n        ways[i] = sum(ways[i - s] for s in $steps if s <= i)\n"
        "    return ways[n]\n"
    ),
    variants=tuple({"steps": s} for s in ([1, 2], [1, 3], [2, 3], [1, 2, 3], [1, 4], [2, 5], [1, 2, 5], [3, 4, 5])),
    inputs=an_int(1, 70),
    edges=((0,),),
    difficulty="medium",
)

family(
    name="coin_ways",
    entry_point="coin_ways",
    signature="(amount: int) -> int",
    statement=(
        "Return the number of ways to pay amount with coins of the values $coins, using any number of each coin. "
        "The order of the coins does not matter, and there is exactly 1 way to pay 0."
    ),
    solution=(
        "def coin_ways(amount: int) -> int:\n"
        "    ways = [1] + [0] * amount\n"
        "    for coin in $coins:\n"
        "        for total in range(coin, amount + 1):\n            ways[total] += ways[total - coin]\n"
        "    return ways[amount]\n"
    ),
    variants=tuple({"coins": c} for c in ([1, 2, 5], [2, 3], [1, 5, 10, 25], [3, 7], [2, 5, 10], [1, 4, 9], [5, 10, 20, 50], [4, 6, 9])),
    inputs=an_int(1, 300),
    edges=((0,),),
    difficulty="medium",
)

family(
    name="min_coins",
    entry_point="min_coins",
    signature="(amount: int) -> int",
    statement="Return the smallest number of coins with values from $coins (any number of each) that add up to exactly amount, or -1 if no combination does.",
    solution=(
        "def min_coins(amount: int) -> int:\n"
        "    best = [0] + [None] * amount\n"
        "    for total in range(1, amount + 1):\n"
        "        options = [best[total - c] for c in $coins if c <= total and best[total - c] is not None]\n"
        "        best[total] = min(options) + 1 if options else None\n"
        "    return -1 if best[amount] is None else best[amount]\n"
    ),
    variants=tuple({"coins": c} for c in ([1, 3, 4], [2, 5], [3, 7], [1, 5, 6, 9], [4, 7, 11], [1, 7, 10], [5, 9, 13], [2, 3, 7])),
    inputs=an_int(1, 200),
    edges=((0,),),
    difficulty="medium",
)

family(
    name="top_frequent",
    entry_point="top_frequent",
    signature="(xs: list[int]) -> list[int]",
    statement=(
        "Return the $k values that occur most often in xs, most frequent first, breaking ties by the smaller value "
        "first. When xs has fewer than $k distinct values, return all of them in that order."
    ),
    solution=(
        "def top_frequent(xs: list[int]) -> list[int]:\n"
        "    counts = {}\n"
        "    for x in xs:\n        counts[x] = counts.get(x, 0) + 1\n"
        "    return sorted(counts, key=lambda v: (-counts[v], v))[:$k]\n"
    ),
    variants=tuple({"k": k} for k in range(1, 9)),
    inputs=int_list(0, 30, -5, 12),
    edges=(([],),),
)

_MAX, _MIN, _RANGE = "max(xs[i:i + W])", "min(xs[i:i + W])", "max(xs[i:i + W]) - min(xs[i:i + W])"
_WINDOWS = [
    ("maximum", _MAX, 2),
    ("maximum", _MAX, 3),
    ("maximum", _MAX, 5),
    ("minimum", _MIN, 2),
    ("minimum", _MIN, 3),
    ("minimum", _MIN, 4),
    ("range (maximum minus minimum)", _RANGE, 3),
    ("range (maximum minus minimum)", _RANGE, 4),
]
family(
    name="sliding_window",
    entry_point="sliding",
    signature="(xs: list[int]) -> list[int]",
    statement="Return the $what of every window of $w consecutive elements of xs, in order (an empty list when xs has fewer than $w elements).",
    solution="def sliding(xs: list[int]) -> list[int]:\n    return [$expr for i in range(len(xs) - $w + 1)]\n",
    variants=tuple({"what": what, "w": w, "expr_src": expr.replace("W", str(w))} for what, expr, w in _WINDOWS),
    inputs=int_list(1, 20, -50, 50),
    edges=(([],),),
)

family(
    name="factorial_zeros",
    entry_point="factorial_trailing_zeros",
    signature="(n: int) -> int",
    statement="Return the number of trailing zeros of n! (n factorial, n >= 0) when it is written in base $b.",
    solution=(
        "def factorial_trailing_zeros(n: int) -> int:\n"
        "    factors, b, p = {}, $b, 2\n"
        "    while b > 1:\n"
        "        while b % p == 0:\n            factors[p] = factors.get(p, 0) + 1\n            b //= p\n"
        "        p += 1\n"
        "    best = None\n"
        "    for p, e in factors.items():\n"
        "        count, q = 0, p\n"
        "        while q <= n:\n            count += n // q\n            q *= p\n"
        "        best = count // e if best is None else min(best, count // e)\n"
        "    return best\n"
    ),
    variants=tuple({"b": b} for b in (10, 2, 5, 6, 12, 16, 8, 9)),
    inputs=an_int(1, 3000),
    edges=((0,),),
    difficulty="hard",
)

family(
    name="words_in_range",
    entry_point="words_in_range",
    signature="(text: str) -> list[str]",
    statement="Split text on whitespace and return the distinct words whose length is between $lo and $hi inclusive, sorted by length and then alphabetically.",
    solution="def words_in_range(text: str) -> list[str]:\n    return sorted({w for w in text.split() if $lo <= len(w) <= $hi}, key=lambda w: (len(w), w))\n",
    variants=tuple({"lo": lo, "hi": hi} for lo, hi in [(1, 3), (2, 4), (3, 5), (4, 8), (5, 10), (3, 3)]),
    inputs=lambda rng, p: (sentence(rng, 0, 16, len(WORDS)),),
    edges=(("",),),
)

_TIES = [("alphabetically first", "min(best)"), ("alphabetically last", "max(best)"), ("first to appear in text", "next(w for w in words if w in best)")]
family(
    name="most_common_word",
    entry_point="most_common_word",
    signature="(text: str) -> str | None",
    statement=(
        "Split text on whitespace, lowercase every word and ignore the words shorter than $minlen characters. "
        "Return the word that occurs most often; among equally frequent words return the one $tie. "
        "Return None when no word is left."
    ),
    solution=(
        "def most_common_word(text: str) -> str | None:\n"
        "    words = [w.lower() for w in text.split() if len(w) >= $minlen]\n"
        "    if not words:\n        return None\n"
        "    counts = {w: words.count(w) for w in words}\n"
        "    best = {w for w in counts if counts[w] == max(counts.values())}\n"
        "    return $pick\n"
    ),
    variants=tuple({"minlen": m, "tie": t, "pick_src": pick} for m in (1, 4) for t, pick in _TIES),
    inputs=lambda rng, p: (" ".join(w.upper() if rng.random() < 0.2 else w for w in sentence(rng, 0, 14, 12).split()),),
    edges=(("",),),
)

_BRACKETS = ["()", "()[]", "()[]{}", "()<>", "[]{}<>", "(){}"]
family(
    name="balanced_brackets",
    entry_point="is_balanced",
    signature="(s: str) -> bool",
    statement="Consider only the bracket pairs $shown in s and ignore every other character. Return True if those brackets are balanced and properly nested.",
    solution=(
        "def is_balanced(s: str) -> bool:\n"
        "    pairs = {$pairs}\n"
        "    stack = []\n"
        "    for c in s:\n"
        "        if c in pairs.values():\n            stack.append(c)\n"
        "        elif c in pairs:\n"
        "            if not stack or stack.pop() != pairs[c]:\n                return False\n"
        "    return not stack\n"
    ),
    variants=tuple(
        {"shown": " ".join(b[i : i + 2] for i in range(0, len(b), 2)), "pairs_src": ", ".join(f"{b[i + 1]!r}: {b[i]!r}" for i in range(0, len(b), 2))}
        for b in _BRACKETS
    ),
    inputs=lambda rng, p: (text("()[]{}<>ab", 0, 16)(rng),),
    edges=(("",), ("(",)),
    difficulty="medium",
)

family(
    name="flatten",
    entry_point="flatten",
    signature="(xs: list) -> list",
    statement="xs is a list whose items are integers or lists of the same kind, nested to any depth. Return a new list in which $how.",
    solution=(
        "def flatten(xs: list, depth: int = $depth) -> list:\n"
        "    out = []\n"
        "    for item in xs:\n"
        "        if isinstance(item, list) and depth > 0:\n            out.extend(flatten(item, depth - 1))\n"
        "        else:\n            out.append(item)\n"
        "    return out\n"
    ),
    variants=(
        {"how": "the lists directly inside xs are replaced by their items (one level of nesting removed)", "depth": 1},
        {"how": "two levels of nesting are removed (lists nested deeper stay lists)", "depth": 2},
        {"how": "three levels of nesting are removed (lists nested deeper stay lists)", "depth": 3},
        {"how": "every level of nesting is removed, leaving only integers", "depth": 10**6},
    ),
    inputs=lambda rng, p: (nested(rng),),
    edges=(([],), ([[[[1]]]],)),
    difficulty="medium",
)

_ROMAN = "    values = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'), (100, 'C'), (90, 'XC'), (50, 'L'), (40, 'XL'), (10, 'X'), (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]\n"
family(
    name="to_roman",
    entry_point="to_roman",
    signature="(n: int) -> str",
    statement="Return the standard Roman numeral for n, 1 <= n <= 3999 (subtractive forms IV, IX, XL, XC, CD, CM).",
    solution="def to_roman(n: int) -> str:\n"
    + _ROMAN
    + "    out = ''\n    for value, letters in values:\n        while n >= value:\n            out += letters\n            n -= value\n    return out\n",
    variants=({},),
    inputs=an_int(1, 3999),
    edges=((1,), (3999,), (4,)),
)
family(
    name="from_roman",
    entry_point="from_roman",
    signature="(s: str) -> int",
    statement="s is a standard Roman numeral (1 to 3999, subtractive forms IV, IX, XL, XC, CD, CM). Return its value.",
    solution="def from_roman(s: str) -> int:\n    value = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n    total = 0\n    for i, c in enumerate(s):\n        if i + 1 < len(s) and value[c] < value[s[i + 1]]:\n            total -= value[c]\n        else:\n            total += value[c]\n    return total\n",
    variants=({},),
    inputs=lambda rng, p: (_roman(rng.randint(1, 3999)),),
    edges=(("MMMCMXCIX",), ("IV",)),
)


def _roman(n: int) -> str:
    out = ""
    for value, letters in [
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ]:
        while n >= value:
            out, n = out + letters, n - value
    return out


def _intervals(rng: random.Random, p: dict[str, Any]) -> tuple[Any, ...]:
    out = []
    for _ in range(rng.randint(1, 8)):
        a = rng.randint(0, 30)
        out.append([a, a + rng.randint(0, 6)])
    return (out,)


family(
    name="merge_intervals",
    entry_point="merge_intervals",
    signature="(intervals: list[list[int]]) -> list[list[int]]",
    statement=(
        "Each interval [a, b] (a <= b) covers the real numbers from a to b, ends included. Merge $which and return the merged intervals sorted by start."
    ),
    solution=(
        "def merge_intervals(intervals: list[list[int]]) -> list[list[int]]:\n"
        "    out = []\n"
        "    for a, b in sorted(intervals):\n"
        "        if out and a $cmp out[-1][1]:\n            out[-1][1] = max(out[-1][1], b)\n"
        "        else:\n            out.append([a, b])\n"
        "    return out\n"
    ),
    variants=(
        {"which": "intervals that overlap or touch ([1, 3] and [3, 5] become [1, 5])", "cmp_src": "<="},
        {"which": "intervals that share more than one point ([1, 3] and [3, 5] stay apart, [1, 4] and [3, 5] become [1, 5])", "cmp_src": "<"},
    ),
    inputs=_intervals,
    edges=(([],),),
    difficulty="medium",
)
family(
    name="covered_length",
    entry_point="covered_length",
    signature="(intervals: list[list[int]]) -> int",
    statement="Each interval [a, b] (a <= b) covers the real numbers from a to b. Return the total length of the union of all intervals.",
    solution=(
        "def covered_length(intervals: list[list[int]]) -> int:\n"
        "    total, end = 0, None\n"
        "    for a, b in sorted(intervals):\n"
        "        if end is None or a > end:\n            total += b - a\n            end = b\n"
        "        elif b > end:\n            total += b - end\n            end = b\n"
        "    return total\n"
    ),
    variants=({},),
    inputs=_intervals,
    edges=(([],),),
    difficulty="medium",
)

family(
    name="digit_persistence",
    entry_point="digit_measure",
    signature="(n: int) -> int",
    statement="n is a non-negative integer. Return $what.",
    solution=(
        "def digit_measure(n: int) -> int:\n"
        "    steps = 0\n"
        "    while n >= 10:\n"
        "        digits = [int(d) for d in str(n)]\n"
        "        n = $combine\n"
        "        steps += 1\n"
        "    return $result\n"
    ),
    variants=(
        {
            "what": "its additive persistence: how many times its digits must be replaced by their sum to reach a single digit",
            "combine_src": "sum(digits)",
            "result_src": "steps",
        },
        {
            "what": "its digital root: the single digit reached by replacing the number by the sum of its digits again and again",
            "combine_src": "sum(digits)",
            "result_src": "n",
        },
        {
            "what": "its multiplicative persistence: how many times its digits must be replaced by their product to reach a single digit",
            "combine_src": "__import__('math').prod(digits)",
            "result_src": "steps",
        },
        {
            "what": "its multiplicative digital root: the single digit reached by replacing the number by the product of its digits again and again",
            "combine_src": "__import__('math').prod(digits)",
            "result_src": "n",
        },
    ),
    inputs=an_int(10, 10**9),
    edges=((0,), (7,), (277777788888899,)),
)

_REVERSE_ONLY = [
    ("vowels (a, e, i, o, u, either case)", "c in 'aeiouAEIOU'"),
    ("letters", "c.isalpha()"),
    ("digits", "c.isdigit()"),
    ("consonant letters (letters other than a, e, i, o, u, either case)", "c.isalpha() and c not in 'aeiouAEIOU'"),
]
family(
    name="reverse_only",
    entry_point="reverse_only",
    signature="(s: str) -> str",
    statement="Reverse the order of the $what in s, leaving every other character where it is.",
    solution=(
        "def reverse_only(s: str) -> str:\n    chosen = [c for c in s if $predicate]\n    return ''.join(chosen.pop() if $predicate else c for c in s)\n"
    ),
    variants=tuple({"what": w, "predicate_src": p} for w, p in _REVERSE_ONLY),
    inputs=lambda rng, p: (text(string.ascii_letters[:10] + "AEIOU" + "0123456789" + " -!", 0, 20)(rng),),
    edges=(("",),),
)

family(
    name="count_islands",
    entry_point="count_islands",
    signature="(grid: list[str]) -> int",
    statement="grid is a list of equally long strings of '#' (land) and '.' (water). Return the number of islands: groups of land cells connected $how.",
    solution=(
        "def count_islands(grid: list[str]) -> int:\n"
        "    seen, islands = set(), 0\n"
        "    for r in range(len(grid)):\n"
        "        for c in range(len(grid[r])):\n"
        "            if grid[r][c] != '#' or (r, c) in seen:\n                continue\n"
        "            islands += 1\n"
        "            stack = [(r, c)]\n"
        "            seen.add((r, c))\n"
        "            while stack:\n"
        "                y, x = stack.pop()\n"
        "                for dy, dx in $moves:\n"
        "                    ny, nx = y + dy, x + dx\n"
        "                    if 0 <= ny < len(grid) and 0 <= nx < len(grid[ny]) and grid[ny][nx] == '#' and (ny, nx) not in seen:\n"
        "                        seen.add((ny, nx))\n                        stack.append((ny, nx))\n"
        "    return islands\n"
    ),
    variants=(
        {"how": "horizontally or vertically", "moves": [(0, 1), (1, 0), (0, -1), (-1, 0)]},
        {"how": "horizontally, vertically or diagonally", "moves": [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx]},
    ),
    inputs=lambda rng, p: (grid(rng, (1, 7), (1, 8), "#.", (2, 3)),),
    edges=(([],),),
    difficulty="medium",
)

family(
    name="maze_steps",
    entry_point="maze_steps",
    signature="(grid: list[str]) -> int",
    statement=(
        "grid is a list of equally long strings of '.' (free) and '#' (wall). Starting on the top-left cell, each move "
        "goes to a free cell $how. Return the fewest moves to reach the bottom-right cell, or -1 if it cannot be "
        "reached (also when either corner is a wall)."
    ),
    solution=(
        "def maze_steps(grid: list[str]) -> int:\n"
        "    rows, cols = len(grid), len(grid[0])\n"
        "    if grid[0][0] == '#' or grid[-1][-1] == '#':\n        return -1\n"
        "    frontier, seen, steps = [(0, 0)], {(0, 0)}, 0\n"
        "    while frontier:\n"
        "        if (rows - 1, cols - 1) in frontier:\n            return steps\n"
        "        following = []\n"
        "        for y, x in frontier:\n"
        "            for dy, dx in $moves:\n"
        "                ny, nx = y + dy, x + dx\n"
        "                if 0 <= ny < rows and 0 <= nx < cols and grid[ny][nx] == '.' and (ny, nx) not in seen:\n"
        "                    seen.add((ny, nx))\n                    following.append((ny, nx))\n"
        "        frontier, steps = following, steps + 1\n"
        "    return -1\n"
    ),
    variants=(
        {"how": "up, down, left or right", "moves": [(0, 1), (1, 0), (0, -1), (-1, 0)]},
        {"how": "in any of the 8 directions (like a chess king)", "moves": [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx]},
    ),
    inputs=lambda rng, p: (grid(rng, (1, 7), (1, 7), ".#", (3, 1)),),
    edges=((["."],),),
    difficulty="hard",
)

family(
    name="checksum",
    entry_point="is_valid",
    signature="(code: str) -> bool",
    statement="Return True if code is $what, else False.",
    solution="def is_valid(code: str) -> bool:\n$body",
    variants=(
        {
            "what": "a valid Luhn number: only digits (at least 2), where doubling every second digit from the right (subtracting 9 from results above 9) and adding all digits gives a multiple of 10",
            "body_src": "    if len(code) < 2 or not all(c in '0123456789' for c in code):\n        return False\n    total = 0\n    for i, c in enumerate(reversed(code)):\n        d = int(c) * (2 if i % 2 else 1)\n        total += d - 9 if d > 9 else d\n    return total % 10 == 0\n",
        },
        {
            "what": "a valid ISBN-10: 9 digits followed by a digit or 'X' (worth 10), where the sum of each character's value times its weight 10, 9, ..., 1 is a multiple of 11",
            "body_src": "    if len(code) != 10 or not all(c in '0123456789' for c in code[:9]) or code[9] not in '0123456789X':\n        return False\n    values = [int(c) for c in code[:9]] + [10 if code[9] == 'X' else int(code[9])]\n    return sum(v * w for v, w in zip(values, range(10, 0, -1))) % 11 == 0\n",
        },
        {
            "what": "a valid ISBN-13: exactly 13 digits whose weighted sum, with weights 1, 3, 1, 3, ... from the left, is a multiple of 10",
            "body_src": "    if len(code) != 13 or not all(c in '0123456789' for c in code):\n        return False\n    return sum(int(c) * (3 if i % 2 else 1) for i, c in enumerate(code)) % 10 == 0\n",
        },
    ),
    inputs=lambda rng, p: (_checksum_candidate(rng),),
    edges=(("",), ("0",)),
    difficulty="medium",
)


def _checksum_candidate(rng: random.Random) -> str:
    # Mostly well-formed strings of the lengths the variants care about, so both answers occur.
    length = rng.choice([10, 10, 13, 13, 16, 2, 7])
    digits = "".join(rng.choice("0123456789") for _ in range(length))
    return digits[:-1] + "X" if length == 10 and rng.random() < 0.2 else digits


family(
    name="leap_years",
    entry_point="count_leap_years",
    signature="(start: int, end: int) -> int",
    statement="Return how many years y with start <= y <= end are leap years in the $calendar calendar: $rule (0 when start > end).",
    solution="def count_leap_years(start: int, end: int) -> int:\n    return sum(1 for y in range(start, end + 1) if $test)\n",
    variants=(
        {
            "calendar": "Gregorian",
            "rule": "years divisible by 4, except years divisible by 100 that are not divisible by 400",
            "test_src": "y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)",
        },
        {"calendar": "Julian", "rule": "every year divisible by 4", "test_src": "y % 4 == 0"},
    ),
    inputs=lambda rng, p: (lambda a: (a, a + rng.randint(-5, 600)))(rng.randint(1, 2500)),
)

family(
    name="dates",
    entry_point="date_fact",
    signature="$signature",
    statement="$what",
    solution="import datetime\n\n\ndef date_fact$signature:\n$body",
    variants=(
        {
            "signature_src": "(day: str) -> str",
            "what": "day is a date 'YYYY-MM-DD' (years 1 to 9999). Return the English name of its weekday, e.g. 'Monday'.",
            "body_src": "    names = ['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday']\n    return names[datetime.date.fromisoformat(day).weekday()]\n",
        },
        {
            "signature_src": "(first: str, second: str) -> int",
            "what": "first and second are dates 'YYYY-MM-DD'. Return the number of days between them (never negative).",
            "body_src": "    return abs((datetime.date.fromisoformat(second) - datetime.date.fromisoformat(first)).days)\n",
        },
    ),
    inputs=lambda rng, p: tuple(_date(rng) for _ in range(p["signature_src"].count(": str"))),
)


def _date(rng: random.Random) -> str:
    return f"{rng.randint(1, 2400):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


family(
    name="divisors",
    entry_point="divisor_fact",
    signature="(n: int) -> $returns",
    statement="n is a positive integer. Return $what.",
    solution="def divisor_fact(n: int) -> $returns:\n    proper = sum(d for d in range(1, n // 2 + 1) if n % d == 0)\n    count = sum(1 for d in range(1, n + 1) if n % d == 0)\n    return $result\n",
    variants=(
        {"returns_src": "int", "what": "the sum of its proper divisors (its divisors smaller than n; 0 for n = 1)", "result_src": "proper"},
        {
            "returns_src": "str",
            "what": "'perfect', 'abundant' or 'deficient' when the sum of its proper divisors (divisors smaller than n) is equal to, greater than or smaller than n",
            "result_src": "'perfect' if proper == n else 'abundant' if proper > n else 'deficient'",
        },
        {"returns_src": "int", "what": "how many positive divisors it has (n itself included)", "result_src": "count"},
    ),
    inputs=an_int(2, 3000),
    edges=((1,), (6,), (28,)),
)

family(
    name="string_property",
    entry_point="has_property",
    signature="(s: str) -> bool",
    statement="Return True if s $what, else False.",
    solution="def has_property(s: str) -> bool:\n$body",
    variants=(
        {
            "what": "is an isogram: no letter appears twice, ignoring case, spaces and hyphens",
            "body_src": "    letters = [c.lower() for c in s if c not in ' -']\n    return len(letters) == len(set(letters))\n",
        },
        {"what": "is a pangram: every letter a-z appears in it, ignoring case", "body_src": "    return set('abcdefghijklmnopqrstuvwxyz') <= set(s.lower())\n"},
        {
            "what": "is a palindrome when only its letters and digits are kept and case is ignored",
            "body_src": "    kept = [c.lower() for c in s if c.isalnum()]\n    return kept == kept[::-1]\n",
        },
    ),
    inputs=lambda rng, p: (_property_candidate(rng),),
    edges=(("",),),
)


def _property_candidate(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        core = text("abcdefg", 1, 6)(rng)
        return core + rng.choice(["", "x", " "]) + core[::-1].upper()
    if kind == 1:
        return "".join(rng.sample(string.ascii_lowercase, 26 - rng.randint(0, 2))) + " q-"
    if kind == 2:
        return "".join(rng.sample("abcdefghij", rng.randint(1, 8))) + rng.choice(["", "-k", " A"])
    return text("abcAB -", 0, 12)(rng)


_NEAREST = [
    ("next greater element: the first element to its right that is greater", "range(i + 1, len(xs))", ">"),
    ("next smaller element: the first element to its right that is smaller", "range(i + 1, len(xs))", "<"),
    ("previous greater element: the nearest element to its left that is greater", "range(i - 1, -1, -1)", ">"),
    ("previous smaller element: the nearest element to its left that is smaller", "range(i - 1, -1, -1)", "<"),
]
family(
    name="nearest_element",
    entry_point="nearest",
    signature="(xs: list[int]) -> list[int]",
    statement="For every element of xs, find its $what. Return these values as a list, with -1 where there is none.",
    solution="def nearest(xs: list[int]) -> list[int]:\n    return [next((xs[j] for j in $order if xs[j] $cmp xs[i]), -1) for i in range(len(xs))]\n",
    variants=tuple({"what": w, "order_src": o, "cmp_src": c} for w, o, c in _NEAREST),
    inputs=int_list(1, 15, 0, 30),
    edges=(([],),),
)

family(
    name="diagonals",
    entry_point="diagonal_value",
    signature="(matrix: list[list[int]]) -> int",
    statement="matrix is a non-empty square list of rows. Return $what.",
    solution="def diagonal_value(matrix: list[list[int]]) -> int:\n    n = len(matrix)\n    main = sum(matrix[i][i] for i in range(n))\n    anti = sum(matrix[i][n - 1 - i] for i in range(n))\n    return $result\n",
    variants=(
        {"what": "the sum of its main diagonal (top-left to bottom-right)", "result_src": "main"},
        {"what": "the sum of its anti-diagonal (top-right to bottom-left)", "result_src": "anti"},
        {"what": "the absolute difference between the sums of its main and anti-diagonals", "result_src": "abs(main - anti)"},
    ),
    inputs=lambda rng, p: (matrix(rng, (1, 6)),),
)

family(
    name="digit_arrangement",
    entry_point="arrange_digits",
    signature="(n: int) -> int",
    statement="n is a positive integer. Return $what.",
    solution="def arrange_digits(n: int) -> int:\n    digits = sorted(str(n))\n$body",
    variants=(
        {"what": "the largest number that can be written with exactly its digits", "body_src": "    return int(''.join(reversed(digits)))\n"},
        {
            "what": "the smallest number with no leading zero that can be written with exactly its digits",
            "body_src": "    first = next(i for i, d in enumerate(digits) if d != '0')\n    return int(digits[first] + ''.join(digits[:first] + digits[first + 1:]))\n",
        },
    ),
    inputs=lambda rng, p: (int(str(rng.randint(1, 9)) + "".join(rng.choice("0012345679") for _ in range(rng.randint(0, 9)))),),
)

family(
    name="hamming",
    entry_point="hamming",
    signature="$signature",
    statement="$what",
    solution="def hamming$signature:\n$body",
    variants=(
        {
            "signature_src": "(a: int, b: int) -> int",
            "what": "a and b are non-negative integers. Return the number of bit positions in which their binary representations differ.",
            "body_src": "    return bin(a ^ b).count('1')\n",
        },
        {
            "signature_src": "(a: str, b: str) -> int | None",
            "what": "Return the number of positions at which the strings a and b have different characters, or None if their lengths differ.",
            "body_src": "    if len(a) != len(b):\n        return None\n    return sum(x != y for x, y in zip(a, b))\n",
        },
    ),
    inputs=lambda rng, p: (
        (rng.randint(0, 10**6), rng.randint(0, 10**6)) if "int" in p["signature_src"].split(",")[0] else (text("abc", 0, 8)(rng), text("abc", 0, 8)(rng))
    ),
)

family(
    name="look_and_say",
    entry_point="look_and_say",
    signature="(n: int) -> str",
    statement=(
        "Term 0 of a look-and-say sequence is '$seed'. Each next term reads the previous one aloud: every run of "
        "equal digits becomes its length followed by the digit (so '1' becomes '11', and '1211' becomes '111221'). Return term n (n >= 0)."
    ),
    solution=(
        "def look_and_say(n: int) -> str:\n"
        "    term = $seed\n"
        "    for _ in range(n):\n"
        "        out, i = [], 0\n"
        "        while i < len(term):\n"
        "            j = i\n"
        "            while j < len(term) and term[j] == term[i]:\n                j += 1\n"
        "            out.append(str(j - i) + term[i])\n"
        "            i = j\n"
        "        term = ''.join(out)\n"
        "    return term\n"
    ),
    variants=tuple({"seed": s} for s in ("1", "2", "3", "13")),  # not "22": it reads aloud as itself, so every answer is "22"
    inputs=an_int(1, 14),
    edges=((0,),),
)

family(
    name="dedupe",
    entry_point="dedupe",
    signature="(xs: list[int]) -> list[int]",
    statement="Return $what.",
    solution="def dedupe(xs: list[int]) -> list[int]:\n$body",
    variants=(
        {"what": "the distinct values of xs in the order of their first occurrence", "body_src": "    return list(dict.fromkeys(xs))\n"},
        {"what": "the distinct values of xs in the order of their last occurrence", "body_src": "    return list(dict.fromkeys(reversed(xs)))[::-1]\n"},
        {"what": "the values that occur exactly once in xs, in their order in xs", "body_src": "    return [x for x in xs if xs.count(x) == 1]\n"},
    ),
    inputs=int_list(1, 20, 0, 9),
    edges=(([],),),
)

family(
    name="zigzag",
    entry_point="zigzag",
    signature="(s: str) -> str",
    statement=(
        "Write the characters of s in a zigzag over $k rows: down from the first row to the last, then diagonally "
        "back up to the first, and so on. Return the rows read left to right, first row first."
    ),
    solution=(
        "def zigzag(s: str) -> str:\n"
        "    rows, row, step = [''] * $k, 0, 1\n"
        "    for c in s:\n"
        "        rows[row] += c\n"
        "        if row == 0:\n            step = 1\n"
        "        elif row == $k - 1:\n            step = -1\n"
        "        row += step\n"
        "    return ''.join(rows)\n"
    ),
    variants=tuple({"k": k} for k in (2, 3, 4, 5)),
    inputs=lambda rng, p: (text(string.ascii_uppercase, 1, 20)(rng),),
    edges=(("",), ("A",)),
    difficulty="medium",
)

family(
    name="reduce_list",
    entry_point="combine",
    signature="(xs: list[int]) -> int",
    statement="Return $what.",
    solution="import math\n\n\ndef combine(xs: list[int]) -> int:\n    result = $start\n    for x in xs:\n        result = $step\n    return result\n",
    variants=(
        {
            "what": "the greatest common divisor of the integers in xs (math.gcd semantics; 0 for an empty list)",
            "start_src": "0",
            "step_src": "math.gcd(result, x)",
        },
        {
            "what": "the least common multiple of the positive integers in xs (1 for an empty list)",
            "start_src": "1",
            "step_src": "result * x // math.gcd(result, x)",
        },
        {"what": "the bitwise XOR of the non-negative integers in xs (0 for an empty list)", "start_src": "0", "step_src": "result ^ x"},
        {
            "what": "the product of the integers in xs modulo 1000000007, as a number from 0 to 1000000006 (1 for an empty list)",
            "start_src": "1",
            "step_src": "result * x % 1000000007",
        },
    ),
    inputs=lambda rng, p: ([rng.randint(1, 60) * rng.choice([1, 1, 2, 6]) for _ in range(rng.randint(1, 8))],),
    edges=(([],),),
)

family(
    name="spiral",
    entry_point="spiral",
    signature="(matrix: list[list[int]]) -> list[int]",
    statement="matrix is a rectangular list of rows (possibly empty). Return its elements in spiral order, starting at the top-left corner and going $how, moving inwards.",
    solution=(
        "def spiral(matrix: list[list[int]]) -> list[int]:\n"
        "    grid = [list(row) for row in matrix]$prepare\n"
        "    out = []\n"
        "    while grid and grid[0]:\n"
        "        out.extend(grid.pop(0))\n"
        "        grid = [list(row) for row in zip(*grid)][::-1]\n"
        "    return out\n"
    ),
    variants=(
        {"how": "right first (clockwise)", "prepare_src": ""},
        {"how": "down first (counterclockwise)", "prepare_src": "\n    grid = [list(col) for col in zip(*grid)] if grid else grid"},
    ),
    inputs=lambda rng, p: (matrix(rng, (1, 5), (1, 5)),),
    edges=(([],),),
    difficulty="medium",
)

family(
    name="two_sum",
    entry_point="two_sum",
    signature="(xs: list[int], target: int) -> $returns",
    statement="$what",
    solution="def two_sum(xs: list[int], target: int) -> $returns:\n$body",
    variants=(
        {
            "returns_src": "list[int] | None",
            "what": "Return [i, j] with i < j and xs[i] + xs[j] == target, choosing the smallest j and then the smallest i; return None if there is no such pair.",
            "body_src": "    for j in range(len(xs)):\n        for i in range(j):\n            if xs[i] + xs[j] == target:\n                return [i, j]\n    return None\n",
        },
        {
            "returns_src": "int",
            "what": "Return the number of index pairs i < j with xs[i] + xs[j] == target.",
            "body_src": "    return sum(1 for j in range(len(xs)) for i in range(j) if xs[i] + xs[j] == target)\n",
        },
    ),
    inputs=lambda rng, p: (lambda xs: (xs, rng.randint(-10, 30)))([rng.randint(-5, 15) for _ in range(rng.randint(0, 12))]),
)

family(
    name="anagram_groups",
    entry_point="anagram_groups",
    signature="(words: list[str]) -> list[list[str]]",
    statement="Group the distinct words of words that are anagrams of each other. Sort each group alphabetically and the groups by their first word; single words form groups of one.",
    solution="def anagram_groups(words: list[str]) -> list[list[str]]:\n    groups = {}\n    for w in set(words):\n        groups.setdefault(''.join(sorted(w)), []).append(w)\n    return sorted(sorted(g) for g in groups.values())\n",
    variants=({},),
    inputs=lambda rng, p: (
        [
            rng.choice(["listen", "silent", "enlist", "google", "gogole", "cat", "act", "tac", "dog", "god", "bird", "drib", "elbow", "below"])
            for _ in range(rng.randint(0, 9))
        ],
    ),
)

family(
    name="common_affix",
    entry_point="common_affix",
    signature="(words: list[str]) -> str",
    statement="Return the longest common $what of all strings in words ('' for an empty list).",
    solution="import os\n\n\ndef common_affix(words: list[str]) -> str:\n$body",
    variants=(
        {"what": "prefix", "body_src": "    return os.path.commonprefix(words) if words else ''\n"},
        {"what": "suffix", "body_src": "    return os.path.commonprefix([w[::-1] for w in words])[::-1] if words else ''\n"},
    ),
    inputs=lambda rng, p: (_affixed_words(rng),),
    edges=(([],),),
)


def _affixed_words(rng: random.Random) -> list[str]:
    core = text("abc", 0, 4)(rng)
    return [rng.choice(["", "re", "un", "pre"]) + core + rng.choice(["", "ing", "ed"]) for _ in range(rng.randint(1, 5))]


family(
    name="word_pattern",
    entry_point="follows_pattern",
    signature="(pattern: str, text: str) -> bool",
    statement="Return True if the whitespace-separated words of text follow pattern: one word per pattern letter, equal letters matching equal words and different letters matching different words.",
    solution="def follows_pattern(pattern: str, text: str) -> bool:\n    words = text.split()\n    return len(words) == len(pattern) and len(set(pattern)) == len(set(words)) == len(set(zip(pattern, words)))\n",
    variants=({},),
    inputs=lambda rng, p: (text("ab", 1, 4)(rng), " ".join(rng.choice(["dog", "cat"]) for _ in range(rng.randint(1, 4)))),
)

family(
    name="inversions",
    entry_point="count_inversions",
    signature="(xs: list[int]) -> int",
    statement="Return the number of inversions of xs: index pairs i < j with xs[i] > xs[j].",
    solution="def count_inversions(xs: list[int]) -> int:\n    return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs)) if xs[i] > xs[j])\n",
    variants=({},),
    inputs=int_list(1, 30, 0, 20),
    edges=(([],),),
)

family(
    name="kth_permutation",
    entry_point="kth_permutation",
    signature="(n: int, k: int) -> str",
    statement="Return the k-th (counting from 1) permutation, in lexicographic order, of the digits 1 to n (1 <= n <= 9, 1 <= k <= n!), as a string.",
    solution="import itertools\n\n\ndef kth_permutation(n: int, k: int) -> str:\n    digits = '123456789'[:n]\n    return ''.join(next(itertools.islice(itertools.permutations(digits), k - 1, None)))\n",
    variants=({},),
    inputs=lambda rng, p: (lambda n: (n, rng.randint(1, __import__("math").factorial(n))))(rng.randint(1, 7)),
    difficulty="medium",
)

family(
    name="bulls_and_cows",
    entry_point="score_guess",
    signature="(secret: str, guess: str) -> list[int]",
    statement="secret and guess are digit strings of the same length. Return [bulls, cows]: bulls are positions with the same digit; cows count the remaining digits of guess that also occur among the remaining digits of secret (each digit of secret is used at most once).",
    solution="def score_guess(secret: str, guess: str) -> list[int]:\n    bulls = sum(s == g for s, g in zip(secret, guess))\n    rest_s = [s for s, g in zip(secret, guess) if s != g]\n    rest_g = [g for s, g in zip(secret, guess) if s != g]\n    cows = sum(min(rest_s.count(d), rest_g.count(d)) for d in set(rest_g))\n    return [bulls, cows]\n",
    variants=({},),
    inputs=lambda rng, p: (lambda n: (text("0123", n, n)(rng), text("0123", n, n)(rng)))(rng.randint(1, 6)),
)

family(
    name="is_rotation",
    entry_point="is_rotation",
    signature="(a: str, b: str) -> bool",
    statement="Return True if b can be obtained by moving some leading characters of a to its end (a string is a rotation of itself; two empty strings count).",
    solution="def is_rotation(a: str, b: str) -> bool:\n    return len(a) == len(b) and b in a + a\n",
    variants=({},),
    inputs=lambda rng, p: (lambda a, k: (a, a[k:] + a[:k] if rng.random() < 0.5 else text("ab", len(a), len(a))(rng)))(
        text("ab", 1, 6)(rng), rng.randint(0, 5)
    ),
)

family(
    name="ipv4",
    entry_point="is_ipv4",
    signature="(s: str) -> bool",
    statement="Return True if s is a dotted-decimal IPv4 address: four parts separated by '.', each a decimal number from 0 to 255 made only of digits, without leading zeros (but '0' itself is fine).",
    solution="def is_ipv4(s: str) -> bool:\n    parts = s.split('.')\n    return len(parts) == 4 and all(p.isdigit() and p.isascii() and int(p) <= 255 and (p == '0' or not p.startswith('0')) for p in parts)\n",
    variants=({},),
    inputs=lambda rng, p: (".".join(rng.choice(["0", "1", "01", "255", "256", "192", "10", "", "a", "999"]) for _ in range(rng.choice([3, 4, 4, 4, 5]))),),
)

family(
    name="arithmetic",
    entry_point="evaluate",
    signature="(expression: str) -> int",
    statement="expression contains non-negative integers, the operators +, - and *, parentheses and spaces; * binds tighter than + and -, which apply left to right. Return its value (there is no unary minus).",
    solution=(
        "def evaluate(expression: str) -> int:\n"
        "    tokens = expression.replace('(', ' ( ').replace(')', ' ) ').replace('+', ' + ').replace('-', ' - ').replace('*', ' * ').split()\n"
        "    position = 0\n"
        "    def take():\n        nonlocal position\n        position += 1\n        return tokens[position - 1]\n"
        "    def atom():\n        token = take()\n        if token == '(':\n            value = total()\n            take()\n            return value\n        return int(token)\n"
        "    def product():\n        value = atom()\n        while position < len(tokens) and tokens[position] == '*':\n            take()\n            value *= atom()\n        return value\n"
        "    def total():\n        value = product()\n        while position < len(tokens) and tokens[position] in '+-':\n            sign = take()\n            value = value + product() if sign == '+' else value - product()\n        return value\n"
        "    return total()\n"
    ),
    variants=({},),
    inputs=lambda rng, p: (_expression(rng, 3),),
    difficulty="hard",
)


def _expression(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.3:
        return str(rng.randint(0, 20))
    left, right = _expression(rng, depth - 1), _expression(rng, depth - 1)
    joined = f"{left} {rng.choice('+-*')} {right}"
    return f"({joined})" if rng.random() < 0.4 else joined


family(
    name="range_updates",
    entry_point="apply_updates",
    signature="(n: int, updates: list[list[int]]) -> list[int]",
    statement="Start from a list of n zeros. Each update [l, r, v] (0 <= l <= r < n) adds v to every position from l to r inclusive. Return the list after all updates.",
    solution="def apply_updates(n: int, updates: list[list[int]]) -> list[int]:\n    out = [0] * n\n    for l, r, v in updates:\n        for i in range(l, r + 1):\n            out[i] += v\n    return out\n",
    variants=({},),
    inputs=lambda rng, p: (lambda n: (n, [[*sorted([rng.randrange(n), rng.randrange(n)]), rng.randint(-5, 9)] for _ in range(rng.randint(0, 6))]))(
        rng.randint(1, 10)
    ),
)

family(
    name="run_length",
    entry_point="run_length",
    signature="(s: str) -> str",
    statement="$what",
    solution="import itertools\n\n\ndef run_length(s: str) -> str:\n$body",
    variants=(
        {
            "what": "Encode s by runs of equal characters: each run becomes the character followed by the run's length ('aaab' becomes 'a3b1').",
            "body_src": "    return ''.join(c + str(len(list(g))) for c, g in itertools.groupby(s))\n",
        },
        {
            "what": "Encode s by runs of equal characters: each run becomes the run's length followed by the character ('aaab' becomes '3a1b').",
            "body_src": "    return ''.join(str(len(list(g))) + c for c, g in itertools.groupby(s))\n",
        },
        {
            "what": "Encode s by runs of equal characters: each run becomes the character followed by the run's length, but runs of length 1 are just the character ('aaab' becomes 'a3b').",
            "body_src": "    out = ''\n    for c, g in itertools.groupby(s):\n        n = len(list(g))\n        out += c + (str(n) if n > 1 else '')\n    return out\n",
        },
    ),
    inputs=lambda rng, p: (text("aab", 0, 16)(rng),),
    edges=(("",),),
)
family(
    name="run_length_decode",
    entry_point="expand",
    signature="(s: str) -> str",
    statement="s is a sequence of letters, each followed by a positive decimal count ('a3b12'). Return the string with every letter repeated its count times ('a3b1' becomes 'aaab').",
    solution="import re\n\n\ndef expand(s: str) -> str:\n    return ''.join(c * int(n) for c, n in re.findall(r'([A-Za-z])(\\d+)', s))\n",
    variants=({},),
    inputs=lambda rng, p: ("".join(rng.choice("abcXY") + str(rng.randint(1, 12)) for _ in range(rng.randint(0, 5))),),
)

family(
    name="case_convert",
    entry_point="convert_case",
    signature="(s: str) -> str",
    statement="$what",
    solution="def convert_case(s: str) -> str:\n$body",
    variants=(
        {
            "what": "s is snake_case (lowercase words joined by single underscores). Return it in camelCase: the first word unchanged, every other word capitalised, underscores removed.",
            "body_src": "    first, *rest = s.split('_')\n    return first + ''.join(w.capitalize() for w in rest)\n",
        },
        {
            "what": "s is camelCase (letters only; each new word starts with an uppercase letter). Return it in snake_case: lowercase words joined by single underscores.",
            "body_src": "    return ''.join('_' + c.lower() if c.isupper() else c for c in s).lstrip('_')\n",
        },
        {
            "what": "s is kebab-case (lowercase words joined by single hyphens). Return the words capitalised and separated by single spaces.",
            "body_src": "    return ' '.join(w.capitalize() for w in s.split('-'))\n",
        },
        {
            "what": "Return s in title case with exceptions: split on whitespace, capitalise every word except the small words a, an, the, of, and, or, in, on, at, to (written in lowercase) unless it is the first word, and join with single spaces.",
            "body_src": "    small = {'a', 'an', 'the', 'of', 'and', 'or', 'in', 'on', 'at', 'to'}\n    words = s.lower().split()\n    return ' '.join(w if i and w in small else w.capitalize() for i, w in enumerate(words))\n",
        },
    ),
    inputs=lambda rng, p: (_case_input(rng, p["what"]),),
)


def _case_input(rng: random.Random, what: str) -> str:
    words = [rng.choice(WORDS[:30]) for _ in range(rng.randint(1, 4))]
    if what.startswith("s is snake_case"):
        return "_".join(words)
    if what.startswith("s is camelCase"):
        return words[0] + "".join(w.capitalize() for w in words[1:])
    if what.startswith("s is kebab-case"):
        return "-".join(words)
    return " ".join(rng.choice([w, w.upper(), rng.choice(["the", "of", "and", "a", "to"])]) for w in words)


family(
    name="primes_in_range",
    entry_point="count_primes",
    signature="(start: int, end: int) -> int",
    statement="Return how many prime numbers p satisfy start <= p <= end (0 when start > end).",
    solution="def count_primes(start: int, end: int) -> int:\n    return sum(1 for p in range(max(start, 2), end + 1) if all(p % d for d in range(2, int(p ** 0.5) + 1)))\n",
    variants=({},),
    inputs=lambda rng, p: (lambda a: (a, a + rng.randint(-3, 3000)))(rng.randint(-10, 5000)),
)

family(
    name="group_by_length",
    entry_point="group_by_length",
    signature="(text: str) -> dict[int, list[str]]",
    statement="Split text on whitespace and return a dict mapping each word length to the sorted list of distinct words of that length.",
    solution="def group_by_length(text: str) -> dict[int, list[str]]:\n    out = {}\n    for w in set(text.split()):\n        out.setdefault(len(w), []).append(w)\n    return {n: sorted(ws) for n, ws in out.items()}\n",
    variants=({},),
    inputs=lambda rng, p: (sentence(rng, 0, 12, len(WORDS)),),
    edges=(("",),),
)
