"""Invented names for the synthetic world: pronounceable, seeded, and unique across all entities.

Names are built from syllables rather than drawn from lists of real names, so that no fact in the
world can be recalled from pretraining: a model has to look it up with the tools.
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Callable

__all__ = ["NameForge", "normalize_name", "slugify"]

_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "sk", "t", "tr", "v", "z", "th", "sh")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "ia")
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "nd", "rk", "m", "x")
_PLACE_ENDINGS = ("ia", "or", "and", "ova", "esh", "um", "ar", "ene", "ath", "is")
_CITY_ENDINGS = ("holt", "mere", "ford", "vik", "grad", "ton", "wick", "bury", "stad", "port", "dale", "ril")
_ADJECTIVES = (
    "Amber",
    "Silent",
    "Crimson",
    "Hollow",
    "Distant",
    "Copper",
    "Velvet",
    "Broken",
    "Golden",
    "Northern",
    "Pale",
    "Restless",
    "Hidden",
    "Bitter",
    "Quiet",
    "Burning",
    "Frozen",
    "Wandering",
    "Last",
    "Iron",
    "Scarlet",
    "Gentle",
    "Salt",
    "Paper",
    "Glass",
    "Shattered",
    "Endless",
    "Lonely",
    "Midnight",
    "Winter",
)
_NOUNS = (
    "Lantern",
    "Harbor",
    "Orchard",
    "River",
    "Compass",
    "Garden",
    "Mirror",
    "Tide",
    "Crown",
    "Meadow",
    "Tower",
    "Letter",
    "Bridge",
    "Ember",
    "Harvest",
    "Sparrow",
    "Archive",
    "Signal",
    "Voyage",
    "Citadel",
    "Lighthouse",
    "Thread",
    "Season",
    "Canyon",
    "Atlas",
    "Furnace",
    "Island",
    "Chorus",
    "Mountain",
    "Window",
)
_BRAND_WORDS = (
    "Kestrel",
    "Nightjar",
    "Brightwater",
    "Stonebridge",
    "Bluefin",
    "Ashgrove",
    "Redmill",
    "Falconer",
    "Greywater",
    "Northwind",
    "Oakhaven",
    "Silverline",
    "Highmoor",
    "Blackthorn",
    "Lakeshore",
    "Windmere",
    "Goldcrest",
    "Ironwood",
    "Sunreach",
    "Deepwell",
    "Fairhaven",
    "Westmark",
    "Eastgate",
    "Clearfield",
    "Starling",
)
_PUNCTUATION = re.compile(r"[^\w\s]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPACES = re.compile(r"\s+")


def normalize_name(text: str) -> str:
    """Case-, accent-, punctuation- and article-insensitive form of a name (SQuAD-style).

    Two entities whose names normalise alike would make answers ambiguous, so the generator
    keeps normalised names unique; answer checking compares the same normal form.
    """
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).lower()
    text = _PUNCTUATION.sub(" ", text)
    text = _ARTICLES.sub(" ", text)
    return _SPACES.sub(" ", text).strip()


def slugify(text: str) -> str:
    """A lowercase, dash-separated id made from a name (document ids)."""
    return normalize_name(text).replace(" ", "-")


class NameForge:
    """Draws invented names from a seeded RNG and never returns the same normalised name twice.

    Args:
        rng: the generator's random source; the forge consumes it in a fixed order.
    """

    def __init__(self, rng: random.Random):
        self._rng = rng
        self._taken: set[str] = set()
        self._slugs: set[str] = set()

    def _claim(self, make: Callable[[], str]) -> str:
        # Collisions are rare; a bounded retry keeps generation total without risking a loop.
        for _ in range(1000):
            name = make()
            key = normalize_name(name)
            if key and key not in self._taken and slugify(name) not in self._slugs:
                self._taken.add(key)
                self._slugs.add(slugify(name))
                return name
        raise RuntimeError("name space exhausted: enlarge the syllable tables")

    def _word(self, syllables: int) -> str:
        rng = self._rng
        parts = [rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)]
        return ("".join(parts) + rng.choice(_CODAS)).capitalize()

    def country(self) -> str:
        """A country name such as ``Drelovia``."""
        return self._claim(lambda: self._word(self._rng.choice((1, 2))) + self._rng.choice(_PLACE_ENDINGS))

    def city(self) -> str:
        """A city name such as ``Varnholt``."""
        return self._claim(lambda: self._word(self._rng.choice((1, 2))) + self._rng.choice(_CITY_ENDINGS))

    def person(self) -> str:
        """A person's full name such as ``Orin Taskveld``."""
        return self._claim(lambda: f"{self._word(self._rng.choice((1, 2)))} {self._word(self._rng.choice((2, 3)))}")

    def company(self, suffix: str) -> str:
        """A company name: a brand word or invented word followed by ``suffix`` (``Pictures``...)."""
        rng = self._rng
        return self._claim(lambda: f"{rng.choice(_BRAND_WORDS) if rng.random() < 0.5 else self._word(2)} {suffix}")

    def title(self) -> str:
        """A title for a film, novel or album, such as ``The Amber Lantern``."""
        rng = self._rng

        def make() -> str:
            shape = rng.randrange(4)
            adjective, noun = rng.choice(_ADJECTIVES), rng.choice(_NOUNS)
            other = rng.choice([n for n in _NOUNS if n != noun])
            if shape == 0:
                return f"The {adjective} {noun}"
            if shape == 1:
                return f"{noun} of {self._word(2)}"
            if shape == 2:
                return f"{adjective} {noun}{'es' if noun.endswith('s') else 's'} of {self._word(1)}"
            return f"The {noun} and the {other}"

        return self._claim(make)

    def named(self, template: str) -> str:
        """A name from ``template`` with ``{word}`` replaced by an invented word (``{word} Prize``)."""
        return self._claim(lambda: template.format(word=self._word(2)))
