"""The one seed-derivation helper: stable values (saved runs depend on them), independent streams."""

import pytest

from agentgym.seeding import derive_seed, stream_rng


def test_derived_seeds_are_pinned() -> None:
    # Changing these changes every saved run's task draws, faults and samples.
    assert derive_seed(0, 1) == 1982462498
    assert derive_seed(0, 1, bits=32) == 3964924996
    assert list(stream_rng(7, 2).integers(0, 100, 3)) == [28, 27, 15]


def test_streams_differ_by_name_and_fit_their_bits() -> None:
    seeds = {derive_seed(5, stream, step) for stream in range(8) for step in range(64)}
    assert len(seeds) == 8 * 64
    assert all(0 <= s < 2**31 for s in seeds)
    assert all(0 <= derive_seed(5, n, bits=8) < 256 for n in range(100))


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="base seed"):
        derive_seed()
    with pytest.raises(ValueError, match="bits"):
        derive_seed(1, bits=33)
    with pytest.raises(ValueError, match="base seed"):
        stream_rng()
