"""Peak resident memory of the learning experiment's phase processes, the path before against now.

The experiment (``agentgym experiment trainers/configs/experiments/learning_cpu.yaml``) runs its
phases two at a time, each in its own one-thread worker process. This benchmark runs, in separate
spawned processes (so each peak is that process's own), a short version of each kind of phase with
the experiment's configuration:

* ``sft``: the SFT phase (its steps as configured, or ``--sft-steps``);
* ``grpo``: ``--grpo-steps`` GRPO steps from that SFT model (rollouts, update, checkpoint, export);
* ``eval``: the evaluation of that SFT model on one evaluation split (``--eval-split``; the batch
  has as many rows as the whole evaluation's largest split).

Each runs on the path before (``old``: every row of a micro-batch forward, then one backward pass
over the micro-batch, log-probabilities of a pass in one ``[tokens, vocab]`` tensor, key/value
buffers that double when they grow, the shared prompt in every row) and on today's (``new``), one
process each, alternating. For each it prints the peak resident memory, the seconds, where the memory goes (weights, gradients,
optimiser state, the key/value buffers' peak, the largest logits tensor, and the rest:
activations, the allocator, Python), the peak of each stage of the phase, and the run folder's
size; then the new/old ratios and how many trajectories both paths sampled identically.
``--paths previous new`` compares today's with the previous round's (each row's pass keeping its
graph instead of running its decoder layers again in its backward); ``--paths exact-rows new``
with today's code whose row passes stop at each row's last needed position instead of a multiple
of ``ROW_LENGTH_MULTIPLE`` tokens (rows of ever new lengths: the allocator's and oneDNN's memory
grow from step to step; use ``--grpo-steps 5`` or more to see it); ``--paths untrimmed-rows new``
with today's code that hands the allocator's free pages back only after the optimiser step, not
after each row's backward; ``--paths unbounded-ideep new`` with today's code whose ideep layer keeps
its default 1,024 cached products instead of ``IDEEP_CACHE`` (the cache fills step by step: use
several GRPO steps).

    python benchmarks/bench_memory.py                                   # all three phases, both paths
    python benchmarks/bench_memory.py --phases grpo --sft-model PATH    # GRPO from a given model
    python benchmarks/bench_memory.py --autocast off                    # float32 products (faster on CPUs without bf16 units)

An SFT step of the experiment takes several CPU minutes with its bf16 autocast on a CPU without
bf16 units (float32 is ~5x faster there); ``--sft-steps``, ``--grpo-steps`` and ``--autocast``
trade fidelity for time. GRPO from a model that fails every task has nothing to update; add
``--keep-degenerate-groups`` to run the update anyway (same shapes, zero advantages).

The main job runs its phases side by side, so what the machine must hold is their sum.
``--experiment`` runs a shortened copy of the experiment (``agentgym experiment``, the same
scheduler, two phases at a time; one seed, one SFT and one GRPO step, fewer and shorter episodes,
float32 products, so that it takes minutes) on each path, and samples the resident memory of the
whole process tree every 0.2 s: it prints the largest sum, the largest single process and the
seconds, and the new/old ratios. The path before also schedules as before: no memory limit. Its
episodes are shorter than the real job's, so its sums are smaller; the whole job's summed peak is
measured by running it under ``benchmarks/bench_memory.py --watch agentgym experiment
trainers/configs/experiments/learning_cpu.yaml`` (an hour on 2 cores).

    python benchmarks/bench_memory.py --experiment                      # both paths, side by side in time

``--update`` measures a GRPO update alone, in minutes: a batch shaped like the experiment's (one
group of 8 episodes: the 779-token prompt the group shares, then 4 turns of 20-64 sampled and
30-60 environment tokens, random ids from a seeded generator, rewards 0 and 1 alternating), the
bundled model, AdamW's moments made first (as in every step after a phase's first), run on the
old and the new path alternately (``--update-repeats`` times each), each in its own process. It
prints each run's peak resident memory during the update, its seconds and CPU seconds, the gradient norms (equal
up to float rounding) and the new/old ratios.

    python benchmarks/bench_memory.py --update
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

PHASES = ("sft", "grpo", "eval")
PATHS = ("old", "previous", "exact-rows", "untrimmed-rows", "unbounded-ideep", "new")
EXPERIMENT = Path(__file__).resolve().parents[1] / "trainers" / "configs" / "experiments" / "learning_cpu.yaml"
MIB = 2**20


@dataclass
class Measurement:
    """One phase on one path, measured in its own process."""

    phase: str
    path: str
    seconds: float = 0.0
    peak_rss: int = 0
    weights: int = 0
    grads: int = 0
    optimizer: int = 0
    kv_peak: int = 0
    logprob_peak: int = 0
    run_folder: int = 0
    stages: dict[str, int] = field(default_factory=dict)  # stage -> peak resident bytes within it
    tokens: list[list[int]] = field(default_factory=list)


class _RssSampler:
    """Samples this process's resident memory every few milliseconds, attributed to the current stage."""

    def __init__(self) -> None:
        self.stage = "start"
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._page = os.sysconf("SC_PAGE_SIZE")

    def _run(self) -> None:
        with open("/proc/self/statm", "rb") as statm:
            while not self._stop.is_set():
                statm.seek(0)
                rss = int(statm.read().split()[1]) * self._page
                self.peaks[self.stage] = max(self.peaks.get(self.stage, 0), rss)
                time.sleep(0.002)

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @contextlib.contextmanager
    def during(self, stage: str) -> Iterator[None]:
        outer, self.stage = self.stage, stage
        try:
            yield
        finally:
            self.stage = outer


def _staged(sampler: _RssSampler, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with sampler.during(stage):
            return fn(*args, **kwargs)

    return wrapper


def _nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _use_path(path: str) -> None:
    """Switch this process to the path before (``old``: whole-micro-batch backward over a prefix
    pass that keeps its activations, one logits tensor a pass, doubling key/value buffers with the
    shared prompt in every row, AdamW moments in memory), to an earlier round's (``previous``: each row's pass keeps its graph
    instead of running its layers again in backward; ``exact-rows``: each row's pass stops at its last needed position;
    ``untrimmed-rows``: the allocator's free pages go back to the system only after the optimiser step, not after each row;
    ``unbounded-ideep``: ideep keeps up to its default 1,024 products) or leave today's defaults (``new``). Each path
    has the changes of the paths after it undone too."""
    if path == "new":
        return
    from agentgym.models import hf
    from agentgym.trainers import memory, modeling

    os.environ["LRU_CACHE_CAPACITY"] = "1024"  # ideep's own default, before bound_primitive_cache set it
    if path == "unbounded-ideep":
        return
    modeling.TRIM_BETWEEN_ROWS = False
    if path == "untrimmed-rows":
        return
    modeling.ROW_LENGTH_MULTIPLE = 1
    if path == "exact-rows":
        return
    modeling.RECOMPUTE_ROW_LAYERS = False
    if path == "previous":
        return

    class DoublingBackend(hf.HFBackend):
        """Key/value buffers that double when they grow and hold the shared prompt in every row, as before."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.engine.capacity_growth = 2.0
            self.engine.store_prefix = False

    hf.HFBackend = DoublingBackend  # type: ignore[misc]
    modeling.BACKWARD_BY_ROW = False
    modeling.LOGPROB_CHUNK_TOKENS = None
    memory.OFFLOAD_OPTIMIZER_STATE = False


def _measure_phase(args: argparse.Namespace, phase: str, path: str, work: Path) -> None:
    """Child process: run one phase on one path and report a :class:`Measurement`."""
    import torch

    torch.set_num_threads(args.threads)
    _use_path(path)
    from agentgym.models import hf
    from agentgym.trainers import modeling, trainer
    from agentgym.trainers.experiment import config as experiment_config
    from agentgym.trainers.experiment import run as experiment

    result = Measurement(phase, path)
    backends: list[Any] = []
    base_backend = hf.HFBackend

    class CountingBackend(base_backend):  # type: ignore[misc,valid-type]
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            backends.append(self.engine.stats)
            result.weights = _nbytes(self.model.parameters())

    hf.HFBackend = CountingBackend  # type: ignore[misc]

    logprob_peak = [0]
    original_chunk = modeling._chunk_logprobs

    def chunk_logprobs(states: Any, *a: Any, **k: Any) -> Any:
        # One chunk's float32 [tokens, vocab] logits: the largest tensors of an update.
        out = original_chunk(states, *a, **k)
        logprob_peak[0] = max(logprob_peak[0], states.shape[0] * vocab[0] * 4)
        return out

    vocab = [0]
    original_load = modeling.load_policy

    def load_policy(*a: Any, **k: Any) -> Any:
        policy, tokenizer = original_load(*a, **k)
        vocab[0] = policy.get_output_embeddings().weight.shape[0]
        return policy, tokenizer

    modeling._chunk_logprobs = chunk_logprobs
    trainer.load_policy = load_policy

    (work / "experiment").mkdir(parents=True)
    config = experiment_config.load_experiment(EXPERIMENT, output_dir=str(work / "experiment"))
    if args.autocast is not None:
        config.training["autocast"] = args.autocast
    tasks = experiment._tasks(config, work / "experiment")
    with _RssSampler() as sampler:
        trainer.run_rollouts = _staged(sampler, "rollouts", trainer.run_rollouts)
        trainer.grpo_update = _staged(sampler, "grpo update", trainer.grpo_update)
        trainer.sft_update = _staged(sampler, "sft update", trainer.sft_update)
        trainer.save_checkpoint = _staged(sampler, "checkpoint", trainer.save_checkpoint)
        trainer._export = _staged(sampler, "export", trainer._export)
        trainer._load = _staged(sampler, "load", trainer._load)
        original_step = trainer.clip_and_step

        def step(model: Any, optimizer: Any, *a: Any, **k: Any) -> Any:
            out = original_step(model, optimizer, *a, **k)
            params = modeling.trainable_parameters(model)
            result.weights = _nbytes(model.parameters())
            result.grads = _nbytes(params)  # allocated for every trainable parameter at each backward
            result.optimizer = max(
                result.optimizer, _nbytes(v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.dim())
            )
            return out

        trainer.clip_and_step = step
        import agentgym.trainers.sft as sft_module

        sft_module.clip_and_step = step
        started = time.perf_counter()
        if phase == "eval":
            episodes: list[Any] = []
            original_record = experiment._eval_record

            def record(episode: Any, **k: Any) -> Any:
                episodes.append(episode)
                return original_record(episode, **k)

            experiment._eval_record = record
            eval_tasks = [t for t in tasks["eval"] if t.startswith(f"{args.eval_split}:")]
            with sampler.during("evaluation"):
                experiment._evaluate(config, args.sft_model, eval_tasks, work / "eval.jsonl", arm="sft", seed=0, log=lambda line: None)
            result.tokens = [list(e.trajectory.token_ids) for e in episodes]
        else:
            run = work / "run"
            grpo = {"steps": args.grpo_steps} | ({"filter_degenerate": False} if args.keep_degenerate_groups else {})
            change = {"sft": {"steps": args.sft_steps}} if phase == "sft" else {"grpo": grpo}
            train_config = experiment_config.train_config_for(
                config, phase, 0, tasks["sft"], tasks["grpo"], run, model=None if phase == "sft" else args.sft_model, change=change
            )
            collected: list[Any] = []
            original_rollouts = trainer.run_rollouts

            def rollouts(*a: Any, **k: Any) -> Any:
                out = original_rollouts(*a, **k)
                collected.extend(out)
                return out

            trainer.run_rollouts = rollouts
            experiment._train(train_config, run, lambda line: None)
            result.tokens = [list(e.trajectory.token_ids) for e in collected]
            result.run_folder = _folder_bytes(run)
        result.seconds = time.perf_counter() - started
    result.peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result.kv_peak = max((s.peak_cache_bytes for s in backends), default=0)
    result.logprob_peak = logprob_peak[0]
    result.stages = dict(sampler.peaks)
    (work / "measurement.json").write_text(json.dumps(asdict(result)), encoding="utf-8")


def _run_child(args: argparse.Namespace, phase: str, path: str, work: Path) -> Measurement:
    process = multiprocessing.get_context("spawn").Process(target=_measure_phase, args=(args, phase, path, work))
    process.start()
    process.join()
    if process.exitcode != 0:
        sys.exit(f"the {phase} phase on the {path} path failed (exit code {process.exitcode})")
    return Measurement(**json.loads((work / "measurement.json").read_text(encoding="utf-8")))


def _print(measurements: list[Measurement]) -> None:
    print(f"{'phase':<6} {'path':<10} {'peak MiB':>9} {'s':>7} {'weights':>8} {'grads':>7} {'optim':>7} {'KV':>7} {'logp':>7} {'rest':>7} {'folder':>8}")
    for m in measurements:
        known = m.weights + m.grads + m.optimizer + m.kv_peak + m.logprob_peak
        print(
            f"{m.phase:<6} {m.path:<10} {m.peak_rss / MIB:>9.0f} {m.seconds:>7.1f} {m.weights / MIB:>8.0f} {m.grads / MIB:>7.0f} "
            f"{m.optimizer / MIB:>7.0f} {m.kv_peak / MIB:>7.0f} {m.logprob_peak / MIB:>7.0f} {(m.peak_rss - known) / MIB:>7.0f} {m.run_folder / MIB:>8.0f}"
        )
    print("peak resident MiB by stage:")
    for m in measurements:
        stages = ", ".join(f"{stage} {peak / MIB:.0f}" for stage, peak in m.stages.items())
        print(f"  {m.phase:<6} {m.path:<10} {stages}")
    by_key = {(m.phase, m.path): m for m in measurements}
    for phase, before in itertools.product(PHASES, [p for p in PATHS if p != "new"]):
        old, new = by_key.get((phase, before)), by_key.get((phase, "new"))
        if old is None or new is None:
            continue
        same = sum(a == b for a, b in zip(old.tokens, new.tokens, strict=False))
        print(
            f"{phase}: new/{before} peak memory {new.peak_rss / old.peak_rss:.2f}x, speed {old.seconds / new.seconds:.2f}x, "
            f"run folder {new.run_folder / max(old.run_folder, 1):.2f}x; same tokens {same}/{max(len(old.tokens), len(new.tokens))}"
        )


def _tree_rss(root: int) -> list[int]:
    """Resident bytes of process ``root`` and each of its descendants (Linux ``/proc``)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parents[int(entry.name)] = int(fields[1])
            rss[int(entry.name)] = int(fields[21]) * page
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    return [rss[pid] for pid in tree if pid in rss]


@dataclass
class TreePeak:
    """The resident memory of a command and its descendants, sampled while it ran."""

    summed: int = 0  # the largest sum over the processes alive at one time
    largest: int = 0  # the largest single process
    seconds: float = 0.0
    returncode: int = 0


def _watch(command: list[str], env: dict[str, str] | None = None) -> TreePeak:
    """Run ``command``, sampling the summed resident memory of it and its descendants every 0.2 s."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env)
    peak = TreePeak()
    while process.poll() is None:
        rss = _tree_rss(process.pid)
        peak.summed, peak.largest = max(peak.summed, sum(rss)), max(peak.largest, max(rss, default=0))
        time.sleep(0.2)
    peak.seconds, peak.returncode = time.perf_counter() - started, process.returncode
    return peak


PATH_VARIABLE = "AGENTGYM_BENCH_MEMORY_PATH"
"""Set for --run-experiment's phase workers: they import this file as ``__mp_main__`` (the spawn
start method), and the path before is switched on there (see the end of this file)."""


def _short_experiment(folder: Path, args: argparse.Namespace) -> Path:
    """A shortened copy of the learning experiment's configuration, results in ``folder``."""
    import yaml

    data = yaml.safe_load(EXPERIMENT.read_text(encoding="utf-8"))
    data.pop("development", None)
    data.pop("choices", None)
    data.pop("ablations", None)
    data["seeds"] = data["seeds"][:1]
    data["output_dir"] = str(folder / "results")
    data["evaluation"]["tasks"]["count"] = args.experiment_eval_tasks
    data["evaluation"]["trials"] = 2
    training = data["training"]
    training["autocast"] = args.autocast or "off"
    training["rollout"].update(num_tasks=1, group_size=4, max_turns=2)
    training["sft"].update(steps=args.sft_steps, batch_size=4, micro_batch_size=4)
    training["grpo"].update(steps=args.grpo_steps, micro_batch_size=4, filter_degenerate=False)
    training["checkpoint"] = {"every": 0, "keep": 1}
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _run_experiment(config_path: Path, path: str) -> None:
    """Child process of --experiment: run the experiment on ``path`` (its workers follow, see PATH_VARIABLE)."""
    import dataclasses
    import sys

    from agentgym.envs import register_envs
    from agentgym.trainers import experiment

    register_envs()
    if path == "old":
        # The scheduler before: what is available, no limit.
        estimate = experiment._memory_budget
        experiment._memory_budget = lambda *a: dataclasses.replace(estimate(*a), limit=sys.maxsize)  # type: ignore[assignment]
    experiment.run_experiment(experiment.load_experiment(config_path), log=lambda line: print(line, file=sys.stderr, flush=True))


def _measure_experiment(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-memory-experiment-") as scratch:
        peaks: dict[str, TreePeak] = {}
        for path in args.paths:
            folder = Path(scratch) / path
            folder.mkdir()
            config = _short_experiment(folder, args)
            command = [sys.executable, __file__, "--run-experiment", str(config), "--run-path", path]
            peaks[path] = _watch(command, env={**os.environ, PATH_VARIABLE: path})
            if peaks[path].returncode != 0:
                sys.exit(f"the experiment on the {path} path failed (exit code {peaks[path].returncode})")
    print(f"{'path':<10} {'summed peak MiB':>16} {'largest process MiB':>20} {'s':>7}")
    for path, peak in peaks.items():
        print(f"{path:<4} {peak.summed / MIB:>16.0f} {peak.largest / MIB:>20.0f} {peak.seconds:>7.1f}")
    if {"old", "new"} <= peaks.keys():
        old, new = peaks["old"], peaks["new"]
        print(f"new/old: summed peak {new.summed / old.summed:.2f}x, largest process {new.largest / old.largest:.2f}x, speed {old.seconds / new.seconds:.2f}x")


UPDATE_PROMPT, UPDATE_TURNS = 779, 4


@dataclass
class UpdateRun:
    """One GRPO update on one path, in its own process."""

    path: str
    peak_rss: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the process's CPU time: less noisy than seconds on a shared machine
    grad_norm: float = 0.0


def _synthetic_episodes(rows: int, seed: int = 0) -> list[Any]:
    """Episodes shaped like one group of the experiment's (see the module docstring); only what the update reads."""
    from types import SimpleNamespace

    import numpy as np

    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, 49152, UPDATE_PROMPT).tolist()
    episodes = []
    for member in range(rows):
        ids, mask = list(prompt), [0] * UPDATE_PROMPT
        for _ in range(UPDATE_TURNS):
            sampled, reply = int(rng.integers(20, 65)), int(rng.integers(30, 61))
            ids += rng.integers(0, 49152, sampled + reply).tolist()
            mask += [1] * sampled + [0] * reply
        trajectory = SimpleNamespace(token_ids=tuple(ids), loss_mask=tuple(mask), logprobs=tuple(-1.0 * m for m in mask))
        episodes.append(SimpleNamespace(trajectory=trajectory, reward=float(member % 2), stop_reason="done", infra_error=False))
    return episodes


def _measure_update(args: argparse.Namespace, path: str, out: Path) -> None:
    """Child process: one GRPO update of the synthetic batch on ``path``; writes an :class:`UpdateRun`."""
    import torch

    torch.set_num_threads(args.threads)
    _use_path(path)
    from agentgym.trainers import memory, modeling, trainer
    from agentgym.trainers.config import GRPOSection
    from agentgym.trainers.experiment import config as experiment_config

    config = experiment_config.load_experiment(EXPERIMENT, output_dir=str(out.parent / "unused"))
    if args.autocast is not None:
        config.training["autocast"] = args.autocast
    # The synthetic episodes have no turns: the options that keep some turns' tokens out of the loss have none to find.
    every_token = {option.name: "always" for option in fields(GRPOSection) if option.name.endswith("_in_loss")}
    train_config = experiment_config.train_config_for(
        config, "grpo", 0, [], [], out.parent / "unused", change={"grpo": {"filter_degenerate": False, **every_token}}
    )
    policy, tokenizer = modeling.load_policy(None)
    optimizer, scheduler = modeling.make_optimizer(policy, train_config.optim, 10)
    for p in modeling.trainable_parameters(policy):  # the moments exist, as in every step after the first
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    memory.return_freed_memory()
    episodes = _synthetic_episodes(args.update_rows)
    g = train_config.grpo
    with _RssSampler() as sampler, sampler.during("update"), modeling.autocast(torch.device("cpu"), train_config.autocast):
        started, cpu_started = time.perf_counter(), time.process_time()
        metrics = trainer.grpo_update(
            policy,
            None,
            optimizer,
            scheduler,
            episodes,
            g,
            group_size=args.update_rows,
            temperature=train_config.rollout.temperature,
            pad_token_id=tokenizer.eos_token_id,
            max_len=256,
            max_grad_norm=train_config.optim.max_grad_norm,
            shuffle_seed=0,
        )
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    run = UpdateRun(path, peak_rss=sampler.peaks["update"], seconds=seconds, cpu_seconds=cpu_seconds, grad_norm=metrics["optim/grad_norm"])
    out.write_text(json.dumps(asdict(run)), encoding="utf-8")


def _update_benchmark(args: argparse.Namespace) -> None:
    runs: list[UpdateRun] = []
    with tempfile.TemporaryDirectory(prefix="bench-memory-update-") as scratch:
        for repeat in range(args.update_repeats):
            for path in args.paths if repeat % 2 == 0 else list(reversed(args.paths)):
                out = Path(scratch) / f"{path}-{repeat}.json"
                process = multiprocessing.get_context("spawn").Process(target=_measure_update, args=(args, path, out))
                process.start()
                process.join()
                if process.exitcode != 0:
                    sys.exit(f"the update on the {path} path failed (exit code {process.exitcode})")
                runs.append(UpdateRun(**json.loads(out.read_text(encoding="utf-8"))))
    print(f"{'path':<10} {'peak MiB':>9} {'s':>7} {'CPU s':>7} {'grad norm':>12}")
    for run in runs:
        print(f"{run.path:<10} {run.peak_rss / MIB:>9.0f} {run.seconds:>7.1f} {run.cpu_seconds:>7.1f} {run.grad_norm:>12.6f}")
    by_path = {path: [r for r in runs if r.path == path] for path in PATHS}
    new = by_path["new"]
    for path in (p for p in PATHS if p != "new"):
        before = by_path[path]
        if before and new:
            peak = max(r.peak_rss for r in new) / max(r.peak_rss for r in before)
            speed = sum(r.seconds for r in before) / sum(r.seconds for r in new)
            cpu = sum(r.cpu_seconds for r in before) / sum(r.cpu_seconds for r in new)
            print(f"new/{path}: peak memory {peak:.2f}x, speed {speed:.2f}x ({path} seconds / new seconds, summed over the runs), {cpu:.2f}x in CPU seconds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    parser.add_argument(
        "--paths",
        nargs="+",
        choices=PATHS,
        default=["old", "new"],
        help="old: before the first round; previous: before the rows ran their layers again; exact-rows: before the rows ran to a multiple of ROW_LENGTH_MULTIPLE; "
        "untrimmed-rows: before the free pages went back to the system after each row; unbounded-ideep: before ideep's cache was bounded",
    )
    parser.add_argument("--sft-steps", type=int, default=6)
    parser.add_argument("--grpo-steps", type=int, default=1)
    parser.add_argument("--eval-split", default="test")
    parser.add_argument(
        "--keep-degenerate-groups",
        action="store_true",
        help="GRPO updates on groups without reward variance too (a model that fails every task still exercises the update)",
    )
    parser.add_argument("--sft-model", type=Path, help="start the grpo and eval phases from this model folder instead of training one first")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per phase (the experiment's: cores // jobs)")
    parser.add_argument(
        "--autocast",
        choices=["auto", "bf16", "off"],
        help="replace the experiment's training.autocast (bf16 matrix products are ~5x slower than float32 on CPUs without bf16 units)",
    )
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--watch", nargs=argparse.REMAINDER, help="run this command and report its summed peak (see the module docstring)")
    parser.add_argument("--experiment", action="store_true", help="the summed peak of a shortened experiment's concurrent phases (see the module docstring)")
    parser.add_argument("--experiment-eval-tasks", type=int, default=4, help="--experiment: evaluation tasks (each played twice)")
    parser.add_argument("--update", action="store_true", help="a GRPO update alone, on a synthetic batch (see the module docstring)")
    parser.add_argument("--update-rows", type=int, default=8, help="--update: episodes in the batch (one group)")
    parser.add_argument("--update-repeats", type=int, default=1, help="--update: runs of each path")
    parser.add_argument("--run-experiment", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--run-path", choices=PATHS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.watch:
        peak = _watch(args.watch)
        print(f"summed peak resident memory {peak.summed / MIB:.0f} MiB; largest single process {peak.largest / MIB:.0f} MiB; exit code {peak.returncode}")
        return
    if args.run_experiment:
        _run_experiment(args.run_experiment, args.run_path)
        return
    if args.experiment:
        _measure_experiment(args)
        return
    if args.update:
        _update_benchmark(args)
        return
    measurements: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as scratch:
        phases = list(args.phases)
        if {"grpo", "eval"} & set(phases) and "sft" not in phases and args.sft_model is None:
            phases.insert(0, "sft")  # the SFT model the other phases start from
        for number, phase in enumerate(phases):
            # Alternate which path goes first, so neither always meets a cold or a warm page cache.
            paths = args.paths if phase in args.phases else ["new"]
            for path in paths if number % 2 == 0 else list(reversed(paths)):
                work = Path(scratch) / f"{phase}-{path}"
                measurements.append(_run_child(args, phase, path, work))
                if phase == "sft":
                    args.sft_model = work / "run" / "model"
    _print([m for m in measurements if m.phase in args.phases])
    if args.json:
        # A digest of the sampled tokens, so that runs of the two paths in separate invocations can be compared.
        rows = [asdict(m) | {"tokens": len(m.tokens), "token_digest": hashlib.sha256(json.dumps(m.tokens).encode()).hexdigest()} for m in measurements]
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
elif __name__ == "__mp_main__" and os.environ.get(PATH_VARIABLE) == "old":
    _use_path("old")  # a phase worker of --run-experiment on the path before
