"""Chaos, test-sized: CodeExec oracle episodes while another process pushes their memory group past
its limit again and again (benchmarks/bench_memory_pressure.py, in a group of its own: the
machine is never short). The OOM killer keeps taking the fork server; no episode comes out
silently wrong, and the ones it takes are labelled."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_memory_pressure.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_memory_pressure", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    try:
        module.memory_group_base()
    except (RuntimeError, KeyError) as exc:
        pytest.skip(str(exc))
    if os.geteuid() != 0:
        pytest.skip("creating a memory group needs root")
    return module


def test_no_episode_is_silently_wrong_under_memory_pressure(bench, local_backend):
    mib = bench.MiB
    # A warm fork server can finish a batch before the hog's first spike: play batches (at most
    # five) until the pressure has reached the sandbox at least once, checking every one.
    reached = 0
    for _ in range(5):
        outcome = bench.run(24, pressure=True, limit=768 * mib, margin=48 * mib, spike_s=0.2)
        assert outcome.episodes == 24
        assert outcome.silently_wrong == 0
        reached += outcome.restarts + outcome.infra_errors
        if reached:
            break
    assert reached >= 1, "the pressure never reached the sandbox: the test would be vacuous"
