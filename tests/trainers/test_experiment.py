"""The learning experiment on a tiny budget: the protocol end to end, disjoint task sets, numbers
recomputed from the written episodes, resume, and the interval arithmetic it reports."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
import re
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from letters_env import TOY_ENV
from processes import alive, children_of, cmdline

from agentgym.rollouts.evaluation import paired_bootstrap, pass_hat_k, wilson_interval
from agentgym.rollouts.io import read_jsonl
from agentgym.trainers.config import ConfigError
from agentgym.trainers.experiment import (
    DevelopmentSection,
    EvaluationSection,
    ExperimentConfig,
    TaskPick,
    load_experiment,
    run_experiment,
    summarize_experiment,
)
from agentgym.trainers.experiment.report import _examples
from agentgym.trainers.experiment.run import _Phase, _startable

QUIET = {"progress": False, "tensorboard": False, "plots": False}


def _config(tiny_model_dir, out) -> dict:
    return {
        "env_id": TOY_ENV,
        "model": str(tiny_model_dir),
        "output_dir": str(out),
        "seeds": [0, 1],
        "sft_tasks": {"splits": ["train"], "task_ids": ["letters-0", "letters-1", "letters-2"]},
        "grpo_tasks": {"splits": ["train"], "task_ids": ["letters-3", "letters-4", "letters-5"]},
        "evaluation": {"tasks": {"splits": ["test"], "task_ids": ["letters-6", "letters-7"]}, "trials": 2},
        "training": {
            "device": "cpu",
            "rollout": {"num_tasks": 1, "group_size": 2, "max_new_tokens": 6},
            "sft": {"steps": 1, "batch_size": 2, "optim": {"lr": 1e-2}},
            "grpo": {"steps": 1, "micro_batch_size": 2},
            "optim": {"lr": 1e-2},
            "logging": QUIET,
        },
        "ablations": {"env_tokens_in_loss": {"grpo": {"train_on_env_tokens": True}}},
    }


@pytest.fixture(scope="module")
def finished(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("experiment")
    path = out / "experiment-config.yaml"
    path.write_text(yaml.safe_dump(_config(tiny_model_dir, out / "results")))
    config = load_experiment(path)
    summary = run_experiment(config, log=lambda line: None)
    return config, out / "results", summary, path


def test_every_arm_is_trained_and_evaluated(finished) -> None:
    config, out, summary, _ = finished
    assert set(summary["arms"]) == {"base", "sft", "grpo", "env_tokens_in_loss"}
    for arm in ("sft", "grpo", "env_tokens_in_loss"):
        for seed in config.seeds:
            assert (out / arm / f"seed-{seed}" / "run" / "model").is_dir()
            assert len(read_jsonl(out / arm / f"seed-{seed}" / "eval.jsonl")) == 2 * 2  # tasks x trials
    assert summary["arms"]["base"]["n"] == 4 and summary["arms"]["grpo"]["n"] == 8  # base once, the others per seed
    assert (out / "results.md").read_text().startswith("# Learning experiment")
    assert set(summary["grpo_curves"]) == {"grpo", "env_tokens_in_loss"}
    assert summary["phase_seconds"] and summary["wall_seconds"] > 0
    assert all(re.fullmatch(r"[0-9a-f]{40}(-dirty)?", c) for c in summary["commits"])  # empty outside a git checkout
    assert summary["commit"] == (summary["commits"][-1] if summary["commits"] else None)
    # The machine is recorded (autocast "auto" trains in bfloat16 only where the products are native) and reported.
    (machine,) = summary["machines"]
    assert isinstance(machine["cpu_native_bf16"], bool) and machine["processor"] and machine["torch"]
    assert "Machines (autocast `auto`" in (out / "results.md").read_text()


def test_task_sets_are_disjoint_and_recorded(finished) -> None:
    _, out, summary, _ = finished
    sft, grpo, evaluation = (set(summary[k]) for k in ("sft_task_ids", "train_task_ids", "eval_task_ids"))
    ids = [{t.split(":", 1)[1] for t in s} for s in (sft, grpo, evaluation)]
    assert not ids[0] & ids[1] and not ids[0] & ids[2] and not ids[1] & ids[2]
    assert json.loads((out / "tasks.json").read_text()) == {"sft": summary["sft_task_ids"], "grpo": summary["train_task_ids"], "eval": summary["eval_task_ids"]}
    # The GRPO phase trained on exactly the GRPO tasks, SFT demonstrated exactly the SFT tasks.
    grpo_run = yaml.safe_load((out / "grpo" / "seed-0" / "run" / "config.yaml").read_text())
    sft_run = yaml.safe_load((out / "sft" / "seed-0" / "run" / "config.yaml").read_text())
    assert {f"train:{t}" for t in grpo_run["rollout"]["task_ids"]} == grpo
    assert {f"train:{t}" for t in sft_run["sft"]["task_ids"]} == sft
    assert grpo_run["sft"]["steps"] == 0 and sft_run["grpo"]["steps"] == 0
    assert grpo_run["model"].endswith("sft/seed-0/run/model")


def test_summary_numbers_come_from_the_written_episodes(finished) -> None:
    config, out, summary, _ = finished
    for arm in ("base", "sft", "grpo"):
        paths = [out / "base" / "eval.jsonl"] if arm == "base" else [out / arm / f"seed-{s}" / "eval.jsonl" for s in config.seeds]
        rows = [r for p in paths for r in read_jsonl(p)]
        wins = sum(r["success"] for r in rows)
        reported = summary["arms"][arm]
        assert reported["n"] == len(rows) and reported["success"] == pytest.approx(wins / len(rows))
        assert reported["ci"] == pytest.approx(list(wilson_interval(wins, len(rows))))
        assert reported["mean_reward"] == pytest.approx(sum(r["reward"] for r in rows) / len(rows))
    sft = {(r["seed"], r["task_id"], r["trial"]): r["success"] for s in config.seeds for r in read_jsonl(out / "sft" / f"seed-{s}" / "eval.jsonl")}
    diffs = [r["success"] - sft[(r["seed"], r["task_id"], r["trial"])] for s in config.seeds for r in read_jsonl(out / "grpo" / f"seed-{s}" / "eval.jsonl")]
    delta = summary["delta_grpo_minus_sft"]
    assert delta["mean"] == pytest.approx(sum(diffs) / len(diffs)) and delta["n_pairs"] == len(diffs)
    assert delta["ci"][0] <= delta["mean"] <= delta["ci"][1]
    # A finished training phase keeps its model and report, not the trainer's resume state.
    for arm in ("sft", "grpo"):
        run = out / arm / "seed-0" / "run"
        assert (run / "model").is_dir() and (run / "report.md").is_file()
        assert not (run / "checkpoints").exists() and not (run / "sft_model").exists()
    # Every arm saw the same (task, environment seed) pairs.
    pairs = {arm: sorted((r["task_id"], r["env_seed"]) for r in read_jsonl(out / arm / "seed-0" / "eval.jsonl")) for arm in ("sft", "grpo")}
    assert pairs["sft"] == pairs["grpo"] == sorted((r["task_id"], r["env_seed"]) for r in read_jsonl(out / "base" / "eval.jsonl"))


def test_a_rerun_resumes_and_reproduces_the_summary(finished) -> None:
    config, out, summary, _ = finished
    (out / "grpo" / "seed-1" / "eval.jsonl").unlink()  # as if interrupted before this evaluation
    again = run_experiment(config, log=lambda line: None)
    for arm in summary["arms"]:
        assert again["arms"][arm]["success"] == summary["arms"][arm]["success"]
    assert summarize_experiment(out)["delta_grpo_minus_sft"] == summary["delta_grpo_minus_sft"]


def test_evaluations_decode_the_same_episodes_with_fewer_rows_at_once(finished, tmp_path) -> None:
    config, out, _, _ = finished
    copy = tmp_path / "results"
    shutil.copytree(out, copy)
    evaluations = [copy / "base" / "eval.jsonl", *(copy / arm / "seed-0" / "eval.jsonl" for arm in ("sft", "grpo"))]
    written = {path: path.read_bytes() for path in evaluations}
    for path in evaluations:
        path.unlink()
    # One row at a time instead of all of a split's episodes: the same bytes, and the folder takes the
    # other value (it changes memory, not results).
    one_row = dataclasses.replace(config, output_dir=str(copy), evaluation=dataclasses.replace(config.evaluation, max_batch_size=1))
    run_experiment(one_row, log=lambda line: None)
    assert {path: path.read_bytes() for path in evaluations} == written


def test_more_seeds_extend_a_finished_run_and_keep_its_phases(finished, tmp_path) -> None:
    config, out, summary, _ = finished
    extended = tmp_path / "extended"
    shutil.copytree(out, extended)
    kept = {path: path.stat().st_mtime_ns for path in extended.glob("*/seed-*/eval.jsonl")}
    more = run_experiment(dataclasses.replace(config, seeds=(0, 1, 2), output_dir=str(extended)), log=lambda line: None)
    assert {path: path.stat().st_mtime_ns for path in kept} == kept  # seeds 0 and 1 were not run again
    for arm in ("sft", "grpo", "env_tokens_in_loss"):
        assert len(read_jsonl(extended / arm / "seed-2" / "eval.jsonl")) == 2 * 2
        assert sorted(more["arms"][arm]["seeds"]) == [0, 1, 2] and more["arms"][arm]["n"] == 3 * 2 * 2
        assert {s: more["arms"][arm]["per_seed"][s] for s in ("0", "1")} == summary["arms"][arm]["per_seed"]
    assert more["arms"]["base"] == summary["arms"]["base"]
    assert yaml.safe_load((extended / "experiment.yaml").read_text())["seeds"] == [0, 1, 2]
    assert summarize_experiment(extended)["arms"]["grpo"]["n"] == 12  # the folder now records three seeds
    with pytest.raises(ConfigError, match=r"seeds may be added to it, not left out \(missing: \[1\]\)"):
        run_experiment(dataclasses.replace(config, seeds=(0, 2), output_dir=str(extended)), log=lambda line: None)
    with pytest.raises(ConfigError, match="another configuration"):
        run_experiment(dataclasses.replace(config, seeds=(0, 1, 2), jobs=2, output_dir=str(extended)), log=lambda line: None)
    # A training option spelled out at its default value is the same configuration; another value is not.
    spelled = {**config.training, "grpo": {**config.training.get("grpo", {}), "openings_in_loss": "always"}}
    again = run_experiment(dataclasses.replace(config, seeds=(0, 1, 2), training=spelled, output_dir=str(extended)), log=lambda line: None)
    assert again["arms"] == more["arms"] and {path: path.stat().st_mtime_ns for path in kept} == kept
    with pytest.raises(ConfigError, match="another configuration"):
        changed = {**spelled, "grpo": {**spelled["grpo"], "openings_in_loss": "when_better"}}
        run_experiment(dataclasses.replace(config, seeds=(0, 1, 2), training=changed, output_dir=str(extended)), log=lambda line: None)


def test_more_arms_extend_a_finished_run_from_its_sft_models(finished, tmp_path) -> None:
    # An exploration arm tried after the fact trains from the SFT models already in the folder; no
    # finished phase runs again, and an existing arm may not be changed or left out.
    config, out, summary, _ = finished
    extended = tmp_path / "extended"
    shutil.copytree(out, extended)
    kept = {path: path.stat().st_mtime_ns for path in extended.rglob("*") if path.is_file() and path.name in ("eval.jsonl", "report.md")}
    hot = {"rollout": {"temperature": 1.5}}
    # Another file may extend the folder: its own development section and choices document it.
    development = DevelopmentSection(seeds=(7,), evaluation_tasks=TaskPick(splits=("val",)))
    # Its control (the arm that isolates what it adds) gets a paired difference of its own.
    controls = {"hot": "env_tokens_in_loss"}
    more = run_experiment(
        dataclasses.replace(config, ablations={**config.ablations, "hot": hot}, controls=controls, development=development, output_dir=str(extended)),
        log=lambda line: None,
    )
    assert {path: path.stat().st_mtime_ns for path in kept} == kept
    for seed in config.seeds:
        assert len(read_jsonl(extended / "hot" / f"seed-{seed}" / "eval.jsonl")) == 2 * 2
        hot_run = yaml.safe_load((extended / "hot" / f"seed-{seed}" / "run" / "config.yaml").read_text())
        assert hot_run["model"].endswith(f"sft/seed-{seed}/run/model") and hot_run["rollout"]["temperature"] == 1.5
    assert {arm: more["arms"][arm] for arm in summary["arms"]} == summary["arms"]
    assert more["arms"]["hot"]["n"] == 2 * 2 * 2 and "hot" in (extended / "results.md").read_text()
    control = {
        (r["seed"], r["task_id"], r["trial"]): r["success"]
        for s in config.seeds
        for r in read_jsonl(extended / "env_tokens_in_loss" / f"seed-{s}" / "eval.jsonl")
    }
    diffs = [
        r["success"] - control[(r["seed"], r["task_id"], r["trial"])] for s in config.seeds for r in read_jsonl(extended / "hot" / f"seed-{s}" / "eval.jsonl")
    ]
    delta = more["delta_hot_minus_env_tokens_in_loss"]
    assert delta["n_pairs"] == len(diffs) and delta["mean"] == pytest.approx(sum(diffs) / len(diffs))
    assert "hot − env_tokens_in_loss" in (extended / "results.md").read_text()
    assert set(yaml.safe_load((extended / "experiment.yaml").read_text())["ablations"]) == {"env_tokens_in_loss", "hot"}
    # A configuration that does not list an arm the folder has leaves it there, as configured.
    again = run_experiment(dataclasses.replace(config, ablations={}, output_dir=str(extended)), log=lambda line: None)
    assert again["arms"] == more["arms"] and yaml.safe_load((extended / "experiment.yaml").read_text())["ablations"]["hot"] == hot
    with pytest.raises(ConfigError, match=r"ablation arms \['hot'\] are configured otherwise"):
        changed = {**config.ablations, "hot": {"rollout": {"temperature": 1.2}}}
        run_experiment(dataclasses.replace(config, ablations=changed, output_dir=str(extended)), log=lambda line: None)


def test_a_run_of_some_arms_trains_only_those_and_pairs_them_on_their_seeds(finished, tmp_path) -> None:
    # A new seed for one arm and its control only (agentgym experiment --arms): base and SFT run
    # as they must, the other arm does not, and each paired difference is over the seeds both ran.
    config, out, summary, _ = finished
    extended = tmp_path / "extended"
    shutil.copytree(out, extended)
    more = run_experiment(dataclasses.replace(config, seeds=(0, 1, 2), output_dir=str(extended)), arms=["env_tokens_in_loss"], log=lambda line: None)
    assert (extended / "sft" / "seed-2" / "eval.jsonl").is_file() and (extended / "env_tokens_in_loss" / "seed-2" / "eval.jsonl").is_file()
    assert not (extended / "grpo" / "seed-2").exists()
    assert sorted(more["arms"]["env_tokens_in_loss"]["seeds"]) == [0, 1, 2] and sorted(more["arms"]["grpo"]["seeds"]) == [0, 1]
    assert more["delta_env_tokens_in_loss_minus_sft"]["n_pairs"] == 3 * 2 * 2
    assert more["delta_env_tokens_in_loss_minus_grpo"] == summary["delta_env_tokens_in_loss_minus_grpo"]  # seeds 0 and 1 only
    # An arm that shares no seed with another gets no paired difference against it.
    for seed in (0, 1):
        shutil.rmtree(extended / "env_tokens_in_loss" / f"seed-{seed}")
    alone = summarize_experiment(extended)
    assert "delta_env_tokens_in_loss_minus_grpo" not in alone and alone["delta_env_tokens_in_loss_minus_sft"]["n_pairs"] == 2 * 2
    with pytest.raises(ConfigError, match=r"no arm 'hot' in this experiment; its arms: grpo, env_tokens_in_loss"):
        run_experiment(dataclasses.replace(config, output_dir=str(extended)), arms=["hot"], log=lambda line: None)


def test_phases_in_worker_processes_give_the_same_results(finished, tmp_path) -> None:
    # jobs: 2 runs two phases at a time in spawned workers (the toy environment's registration
    # travels with them); the per-phase work is the same, so are the written episodes.
    config, out, summary, _ = finished
    logged: list[str] = []
    parallel = run_experiment(dataclasses.replace(config, jobs=2, output_dir=str(tmp_path / "parallel")), log=logged.append)
    assert any(line.startswith("started sft/seed-1/train") for line in logged)
    for arm in summary["arms"]:
        assert parallel["arms"][arm]["success"] == summary["arms"][arm]["success"]
    for arm, seed in [("base", None), ("sft", 0), ("grpo", 1), ("env_tokens_in_loss", 1)]:
        folder = arm if seed is None else f"{arm}/seed-{seed}"
        assert read_jsonl(tmp_path / "parallel" / folder / "eval.jsonl") == read_jsonl(out / folder / "eval.jsonl")
    timings = json.loads((tmp_path / "parallel" / "timings.json").read_text())
    assert len(timings["phase_seconds"]) == 1 + 2 * 6 and timings["wall_seconds"] > 0
    # Each phase ran in a worker of its own, whose peak resident memory is the phase's: at least
    # the runtime with a model loaded, well under the machine's memory.
    assert set(timings["phase_peak_mib"]) == set(timings["phase_seconds"]) and all(100 < mib < 8192 for mib in timings["phase_peak_mib"].values())
    assert any(line.startswith("finished grpo/seed-0/train (") and "peak resident memory" in line for line in logged)
    assert "Peak resident memory of a phase process" in (tmp_path / "parallel" / "results.md").read_text()
    assert parallel["jobs"] == 2


def test_a_stopped_run_records_its_time_and_stops_its_workers(tiny_model_dir, tmp_path) -> None:
    # SIGTERM (a scheduler's stop) unwinds like Ctrl-C: the command exits at once with 130, the
    # workers go with it, and the wall time so far is kept for the resumed run's total.
    import os
    import signal
    import subprocess
    import sys
    import time

    config = _config(tiny_model_dir, tmp_path / "results") | {"jobs": 2}
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    code = f"import letters_env, sys; from agentgym.cli import main; sys.exit(main(['experiment', {str(path)!r}]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, env=env)
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("started"):
            break
    workers: set[int] = set()
    deadline = time.monotonic() + 30
    while not workers and time.monotonic() < deadline:
        workers = {pid for pid in children_of(process.pid) if "spawn_main" in cmdline(pid)}
        time.sleep(0.05)
    assert workers
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 130 and time.monotonic() - started < 30
    timings = json.loads((tmp_path / "results" / "timings.json").read_text())
    assert timings["wall_seconds"] > 0
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in workers)


def test_a_killed_session_keeps_its_wall_time_and_the_resumed_run_counts_both(tiny_model_dir, tmp_path) -> None:
    # SIGKILL (a machine's session ending) leaves no chance to clean up: the wall time written as
    # each phase finished must survive it, and the run that resumes adds its own session.
    import os
    import signal
    import subprocess
    import sys

    config = _config(tiny_model_dir, tmp_path / "results") | {"jobs": 2, "seeds": [0]}
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    code = f"import letters_env, sys; from agentgym.cli import main; sys.exit(main(['experiment', {str(path)!r}]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("finished"):
            break
    os.killpg(process.pid, signal.SIGKILL)  # the command and its workers, as a session's end does
    process.wait(timeout=60)
    killed = json.loads((tmp_path / "results" / "timings.json").read_text())
    assert killed["sessions"] == 1 and killed["wall_seconds"] > 0 and killed["phase_seconds"]
    summary = run_experiment(load_experiment(path), log=lambda line: None)
    assert summary["sessions"] == 2 and summary["wall_seconds"] > killed["wall_seconds"]
    assert f"wall time {summary['wall_seconds'] / 60:.1f} min over 2 sessions (a resumed run)." in (tmp_path / "results" / "results.md").read_text()


def test_bad_experiment_files_are_clear_errors(tiny_model_dir, tmp_path) -> None:
    def load(change: dict) -> None:
        path = tmp_path / "x.yaml"
        path.write_text(yaml.safe_dump({**_config(tiny_model_dir, tmp_path / "out"), **change}))
        load_experiment(path)

    with pytest.raises(ConfigError, match="training.seed is set by the experiment"):
        load({"training": {**_config(tiny_model_dir, tmp_path)["training"], "seed": 3}})
    with pytest.raises(ConfigError, match=r"evaluation\.trails: unknown option"):
        load({"evaluation": {"trails": 2}})
    with pytest.raises(ConfigError, match=r"seeds: must be distinct \(got \[1, 1\]\)"):
        load({"seeds": [1, 1]})
    with pytest.raises(ConfigError, match="grpo.steps"):
        load({"training": {"sft": {"steps": 0}, "grpo": {"steps": 0}}})
    with pytest.raises(ConfigError) as info:  # bounds on the fields of each section, all reported at once
        load({"seeds": [], "jobs": 0, "evaluation": {"trials": 0}, "sft_tasks": {"splits": ["train"], "count": 0}, "ablations": {"nothing": {}}})
    assert info.value.problems == [
        "seeds: must not be empty (got [])",
        "sft_tasks.count: must be >= 1 (got 0)",
        "evaluation.trials: must be >= 1 (got 0)",
        "ablations.nothing: must not be empty (got {})",
        "jobs: must be >= 1 (got 0)",
    ]
    with pytest.raises(ConfigError) as info:  # the trainer's findings, named as the experiment file spells them
        load({"training": {**_config(tiny_model_dir, tmp_path)["training"], "grpo": {"stepz": 2}}})
    (problem,) = info.value.problems
    assert str(info.value).startswith("invalid experiment configuration") and problem.startswith("training.grpo.stepz: unknown option; valid options: steps, ")
    with pytest.raises(ConfigError) as info:  # an arm's GRPO phase is checked when the file loads, not hours later
        load({"ablations": {"no_sft_term": {"grpo": {"sft_coef": 0.0, "sft_when_degenerate": True}}}})
    assert info.value.problems == ["ablations.no_sft_term: grpo.sft_when_degenerate needs grpo.sft_coef above 0 (it takes the SFT term's step)"]
    with pytest.raises(ConfigError) as info:
        load({"ablations": {"typo": {"grpo": {"stepz": 2}}}})
    assert info.value.problems[0].startswith("ablations.typo.grpo.stepz: unknown option")
    with pytest.raises(ConfigError, match="grpo_tasks: give task_ids or difficulties, not both"):
        load({"grpo_tasks": {"task_ids": ["letters-3"], "difficulties": ["easy"]}})
    with pytest.raises(ConfigError, match="ablation name 'sft' is taken by an arm"):
        load({"ablations": {"sft": {"grpo": {"steps": 2}}}})
    with pytest.raises(ConfigError) as info:
        load({"controls": {"grpo": "grpo", "env_tokens_in_loss": "longer_sft"}})
    assert info.value.problems == ["controls: 'longer_sft' is not an arm of this experiment", "controls: 'grpo' cannot be its own control"]


def test_a_folder_whose_configuration_this_code_cannot_read_is_a_clear_error(tiny_model_dir, tmp_path) -> None:
    from agentgym.trainers.experiment.run import _record_config

    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(_config(tiny_model_dir, tmp_path / "out")))
    config = load_experiment(path)
    out = tmp_path / "out"
    out.mkdir()
    recorded = json.loads(json.dumps(dataclasses.asdict(config)))
    for broken in ({**recorded, "training": {"grpo": {"renamed_option": 1}}}, {key: value for key, value in recorded.items() if key != "env_id"}):
        (out / "experiment.yaml").write_text(yaml.safe_dump(broken))
        with pytest.raises(ConfigError, match=r"(?s)holds an experiment configuration this code cannot read .*choose another output folder"):
            _record_config(config, out)
    (out / "experiment.yaml").write_text(yaml.safe_dump({**recorded, "training": None}))
    with pytest.raises(ConfigError, match="another configuration"):  # no training options: the defaults, not this file's
        _record_config(config, out)


def test_a_file_extends_another(tiny_model_dir, tmp_path) -> None:
    base = {**_config(tiny_model_dir, tmp_path / "out")}
    base["choices"] = [{"option": "seeds", "value": [0, 1], "made_on": "nothing"}, {"option": "training.grpo.steps", "value": 2, "made_on": "the base"}]
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "base.yaml").write_text(yaml.safe_dump(base))
    top = {
        "extends": "base.yaml",
        "seeds": [2],
        "training": {"grpo": {"steps": 3}},
        "ablations": {"no_mask_again": {"grpo": {"train_on_env_tokens": True}}},
        "choices": [{"option": "training.grpo.steps", "value": 3, "made_on": "a test"}],
    }
    (tmp_path / "configs" / "top.yaml").write_text(yaml.safe_dump(top))
    config = load_experiment(tmp_path / "configs" / "top.yaml")
    assert config.seeds == (2,)  # a value replaces the extended file's
    assert config.training["grpo"] == {"steps": 3, "micro_batch_size": 2}  # mappings merge key by key
    assert config.training["sft"] == base["training"]["sft"] and config.model == str(tiny_model_dir)
    assert list(config.ablations) == ["env_tokens_in_loss", "no_mask_again"]
    # Choices add up; one of an option the extended file chose too replaces that one.
    assert [(c.option, c.made_on) for c in config.choices] == [("seeds", "nothing"), ("training.grpo.steps", "a test")]
    # The same file without extends, written out, loads to the same configuration.
    flat = {**base, "seeds": [2], "training": {**base["training"], "grpo": {"steps": 3, "micro_batch_size": 2}}}
    flat["ablations"] = {**base["ablations"], **top["ablations"]}
    flat["choices"] = [base["choices"][0], *top["choices"]]
    (tmp_path / "flat.yaml").write_text(yaml.safe_dump(flat))
    assert load_experiment(tmp_path / "flat.yaml") == config

    (tmp_path / "configs" / "base.yaml").write_text(yaml.safe_dump({**base, "extends": "top.yaml"}))
    with pytest.raises(ConfigError, match="extend each other in a cycle"):
        load_experiment(tmp_path / "configs" / "top.yaml")
    (tmp_path / "configs" / "top.yaml").write_text(yaml.safe_dump({**top, "extends": "missing.yaml"}))
    with pytest.raises(ConfigError, match="cannot read .*missing.yaml"):
        load_experiment(tmp_path / "configs" / "top.yaml")
    (tmp_path / "configs" / "top.yaml").write_text(yaml.safe_dump({**top, "extends": 3}))
    with pytest.raises(ConfigError, match="extends must name an experiment file"):
        load_experiment(tmp_path / "configs" / "top.yaml")


def test_experiment_configs_check_themselves_when_made() -> None:
    with pytest.raises(ConfigError, match=r"jobs: must be >= 1 \(got 0\)"):
        ExperimentConfig(env_id=TOY_ENV, jobs=0)
    with pytest.raises(ConfigError, match=r"temperature: must be >= 0 \(got -1\.0\)"):
        EvaluationSection(temperature=-1.0)
    with pytest.raises(ConfigError, match="give task_ids or difficulties, not both"):
        TaskPick(task_ids=("letters-0",), difficulties=("easy",))
    config = ExperimentConfig(env_id=TOY_ENV, seeds=[3, 4])
    assert config.seeds == (3, 4) and pickle.loads(pickle.dumps(config)) == config  # phases run in spawned workers
    with pytest.raises(ConfigError, match=r"seeds\[1\]: must be >= 0 \(got -1\)"):
        dataclasses.replace(config, seeds=(3, -1))


def test_overlapping_task_sets_are_refused(tiny_model_dir, tmp_path) -> None:
    config = _config(tiny_model_dir, tmp_path / "out")
    config["evaluation"]["tasks"] = {"splits": ["train"], "task_ids": ["letters-0"]}  # excluded: an SFT task
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match="empty"):
        run_experiment(load_experiment(path), log=lambda line: None)


def test_interval_arithmetic() -> None:
    low, high = wilson_interval(7, 10)
    assert (round(low, 4), round(high, 4)) == (0.3968, 0.8922)  # the textbook Wilson interval
    assert wilson_interval(0, 5)[0] == pytest.approx(0.0, abs=1e-12) and wilson_interval(5, 5)[1] == pytest.approx(1.0)
    # pass^k: C(c, k) / C(n, k) per task, averaged.
    trials = {"a": [True, True, True], "b": [True, False, True], "c": [False, False, False]}
    assert pass_hat_k(trials, 1) == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert pass_hat_k(trials, 2) == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert pass_hat_k(trials, 3) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="trials"):
        pass_hat_k(trials, 4)
    # The bootstrap interval brackets the mean, narrows with more clusters and is deterministic.
    few = {i: [1.0 if i % 2 else 0.0] for i in range(10)}
    many = {i: [1.0 if i % 2 else 0.0] for i in range(400)}
    mean, (lo, hi) = paired_bootstrap(few)
    assert mean == 0.5 and lo < 0.5 < hi and paired_bootstrap(few) == (mean, (lo, hi))
    _, (lo2, hi2) = paired_bootstrap(many)
    assert hi2 - lo2 < hi - lo
    assert math.isclose(paired_bootstrap({0: [1.0, 1.0], 1: [0.0]})[0], 2 / 3)
    # Differences that share a cluster move together: the interval is wider than for independent ones.
    clustered = defaultdict(list)
    for i in range(20):
        clustered[i // 4].append(1.0 if (i // 4) % 2 else 0.0)
    independent = {i: [1.0 if (i // 4) % 2 else 0.0] for i in range(20)}
    assert paired_bootstrap(clustered)[1][1] - paired_bootstrap(clustered)[1][0] > paired_bootstrap(independent)[1][1] - paired_bootstrap(independent)[1][0]


def test_the_command_prints_the_results_and_reports_bad_input(finished, tmp_path, capsys) -> None:
    import argparse

    from agentgym.cli import experiment

    _, out, _, path = finished
    parser = argparse.ArgumentParser()
    experiment.add_parser(parser.add_subparsers())
    args = parser.parse_args(["experiment", str(path), "--summarize"])
    assert args.run(args) == 0
    assert capsys.readouterr().out.startswith("# Learning experiment")
    missing = parser.parse_args(["experiment", str(tmp_path / "nope.yaml")])
    assert missing.run(missing) == 2
    assert "cannot read" in capsys.readouterr().err
    empty = parser.parse_args(["experiment", str(path), "--summarize", "--output", str(tmp_path / "none")])
    assert empty.run(empty) == 2
    assert "no experiment to summarise" in capsys.readouterr().err
    both = parser.parse_args(["experiment", str(path), "--summarize", "--seeds", "0,1,2"])
    assert both.run(both) == 2
    assert "leave --seeds out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["experiment", str(path), "--seeds", "0,one"])
    assert "expected comma-separated integers" in capsys.readouterr().err


def test_several_configurations_give_one_combined_report(finished, tmp_path, capsys) -> None:
    import argparse

    from agentgym.cli import experiment

    _, out, summary, path = finished
    second = tmp_path / "second"
    shutil.copytree(out, second)
    (tmp_path / "second.yaml").write_text(path.read_text().replace(str(out), str(second)))
    parser = argparse.ArgumentParser()
    experiment.add_parser(parser.add_subparsers())
    report = tmp_path / "suite.md"
    args = parser.parse_args(["experiment", str(path), str(tmp_path / "second.yaml"), "--summarize", "--report", str(report)])
    assert args.run(args) == 0
    text = report.read_text()
    assert capsys.readouterr().out.startswith("# Learning suite")
    delta = summary["delta_grpo_minus_sft"]
    row = f"{delta['mean'] * 100:+.1f} [{delta['ci'][0] * 100:+.1f}, {delta['ci'][1] * 100:+.1f}]"
    assert text.count(row) == 2 and f"{out}/results.md" in text and f"{second}/results.md" in text
    assert text.count(f"## {summary['env_id']}") == 2
    grpo = summary["arms"]["grpo"]
    assert f"| grpo | {grpo['success']:.3f} | [{grpo['ci'][0]:.3f}, {grpo['ci'][1]:.3f}] | {grpo['n']} |" in text
    for bad, message in (
        (["--summarize", "--output", str(tmp_path / "x")], "each uses its own output_dir"),
        ([str(tmp_path / "missing.yaml"), "--summarize"], "cannot read"),
    ):
        args = parser.parse_args(["experiment", str(path), str(tmp_path / "second.yaml"), *bad])
        assert args.run(args) == 2
        assert message in capsys.readouterr().err
    one = parser.parse_args(["experiment", str(path), "--summarize", "--report", str(report)])
    assert one.run(one) == 2 and "--report is the combined report" in capsys.readouterr().err


_SHIPPED_EXPERIMENTS = Path(__file__).resolve().parents[2] / "trainers" / "configs" / "experiments"


@pytest.mark.parametrize("name", sorted(path.name for path in _SHIPPED_EXPERIMENTS.glob("*.yaml")))
def test_the_shipped_experiment_configs_load(name, tmp_path) -> None:
    from agentgym.trainers.experiment.config import GRPO, train_config_for

    path = _SHIPPED_EXPERIMENTS / name
    config = load_experiment(path)
    assert len(config.seeds) >= 3 and config.evaluation.trials >= 2 and config.ablations
    # Demonstrations without faults, otherwise shown as evaluation shows the tasks (the same schema, say).
    faults = {"fault_rate": 0.0} if "fault_rate" in config.evaluation.env_kwargs else {}
    assert config.training["sft"].get("env_kwargs", {}) == {**config.evaluation.env_kwargs, **faults}
    # GRPO sees what evaluation sees, except that it may cap a streak of faults (a retry then runs).
    rollout_kwargs = dict(config.training["rollout"].get("env_kwargs", {}))
    assert rollout_kwargs.pop("max_consecutive_faults", 1) == 1
    assert config.evaluation.env_kwargs == rollout_kwargs
    # Every arm's GRPO phase is a valid trainer configuration (step credit with shared seeds, say).
    for change in config.ablations.values():
        train_config_for(config, GRPO, config.seeds[0], [], [], tmp_path, change=change)


def test_the_main_jobs_grpo_arms_are_the_exploration_arms_they_are_pooled_with(tmp_path) -> None:
    # The results pool protocol v4's GRPO arm with tool_exploration_cpu.yaml's after-error arm and
    # protocol v3's (the ablation guarded) with its guarded arm: each pair must train alike; and
    # that file's grpo arm stays protocol v2's, as plain_grpo is.
    from agentgym.trainers.experiment.config import GRPO, train_config_for

    main, tool = (load_experiment(_SHIPPED_EXPERIMENTS / name) for name in ("learning_cpu.yaml", "tool_exploration_cpu.yaml"))
    after_error = train_config_for(tool, GRPO, 7, [], [], tmp_path, change=tool.ablations["tool_exploration_after_error_guarded"])
    assert train_config_for(main, GRPO, 7, [], [], tmp_path) == after_error and after_error.grpo.after_error_in_loss == "when_better"
    ablations = load_experiment(_SHIPPED_EXPERIMENTS / "learning_cpu_ablations.yaml")
    guarded = train_config_for(tool, GRPO, 7, [], [], tmp_path, change=tool.ablations["tool_exploration_guarded"])
    assert train_config_for(ablations, GRPO, 7, [], [], tmp_path, change=ablations.ablations["guarded"]) == guarded
    assert guarded.rollout.error_tool_exploration == 0.5 and guarded.grpo.after_error_in_loss == "always"
    plain = train_config_for(tool, GRPO, 7, [], [], tmp_path)
    assert train_config_for(ablations, GRPO, 7, [], [], tmp_path, change=ablations.ablations["plain_grpo"]) == plain
    assert plain.rollout.error_tool_exploration == 0.0 and plain.grpo.openings_in_loss == "always" and not plain.grpo.sft_when_degenerate
    assert plain.grpo.after_error_in_loss == "always"


@pytest.mark.parametrize("name", ["learning_mockapi_cpu.yaml", "learning_refund_cpu.yaml"])
def test_the_suites_other_environments_train_with_the_main_jobs_grpo_and_control(name, tmp_path) -> None:
    # One protocol for the three environments: the GRPO recipe and its control are the main job's;
    # only the environment's own budgets (steps, lengths, batch sizes) may differ.
    from agentgym.trainers.experiment.config import GRPO, train_config_for

    main, other = (load_experiment(_SHIPPED_EXPERIMENTS / file) for file in ("learning_cpu.yaml", name))
    ours, theirs = (train_config_for(config, GRPO, 7, [], [], tmp_path) for config in (main, other))
    recipe = ("kl_coef", "filter_degenerate", "sft_coef", "openings_in_loss", "sft_when_degenerate", "after_error_in_loss", "train_on_env_tokens")
    assert {key: getattr(theirs.grpo, key) for key in recipe} == {key: getattr(ours.grpo, key) for key in recipe}
    assert theirs.rollout.error_tool_exploration == ours.rollout.error_tool_exploration == 0.5
    assert theirs.optim.lr == ours.optim.lr and theirs.rollout.temperature == ours.rollout.temperature
    assert other.controls == main.controls == {"grpo": "sft_continued"}
    assert other.ablations["sft_continued"] == main.ablations["sft_continued"]


def test_an_arms_demonstrations_are_the_sft_phases_tasks(tmp_path) -> None:
    from agentgym.trainers.experiment.config import GRPO, train_config_for

    config = load_experiment(_SHIPPED_EXPERIMENTS / "exploration_cpu.yaml")  # its GRPO arm has no SFT term
    sft_tasks, grpo_tasks = ["train:sql-0001", "train:sql-0002"], ["train:sql-0003"]
    anchored = train_config_for(config, GRPO, 10, sft_tasks, grpo_tasks, tmp_path, change={"grpo": {"sft_coef": 1.0}})
    assert anchored.grpo.sft_coef == 1.0 and anchored.sft.steps == 0 and anchored.sft.task_ids == ("sql-0001", "sql-0002")
    assert anchored.rollout.task_ids == ("sql-0003",)
    plain = train_config_for(config, GRPO, 10, sft_tasks, grpo_tasks, tmp_path)
    assert plain.sft.task_ids is None  # the configuration of a plain GRPO phase stays as it was
    # The SFT term's control: more SFT steps from the SFT model, and no GRPO step.
    continued = train_config_for(
        config, GRPO, 10, sft_tasks, grpo_tasks, tmp_path, change={"grpo": {"steps": 0}, "sft": {"steps": 10, "optim": {"lr": 2.0e-5}}}
    )
    assert continued.grpo.steps == 0 and continued.sft.steps == 10 and continued.sft.task_ids == ("sql-0001", "sql-0002")
    assert continued.sft.optim is not None and continued.sft.optim.lr == 2.0e-5


def test_the_report_shows_what_each_seed_learned_side_by_side() -> None:
    def episode(seed: int, task: str, success: bool, answer: str) -> dict:
        messages = [{"role": "user", "content": f"question {task}"}, {"role": "assistant", "content": answer}]
        return {"seed": seed, "task_id": task, "trial": 0, "success": success, "turns": 1, "faults": 0, "messages": messages}

    sft = [episode(0, "t1", False, "sft-0-t1"), episode(0, "t2", False, "sft-0-t2"), episode(1, "t1", True, "sft-1-t1"), episode(1, "t2", False, "sft-1-t2")]
    grpo = [episode(0, "t1", True, "grpo-0-t1"), episode(0, "t2", True, "grpo-0-t2"), episode(1, "t1", False, "grpo-1-t1"), episode(1, "t2", True, "grpo-1-t2")]
    text = "\n".join(_examples({"sft": sft, "grpo": grpo}, [("sft", "grpo")]))
    titles = re.findall(r"^### (.*)$", text, flags=re.MULTILINE)
    # The first improvement of every seed, then the first task where GRPO did worse than SFT.
    assert titles == [
        "sft failed, grpo succeeded: seed 0, t1 (trial 0)",
        "sft failed, grpo succeeded: seed 1, t2 (trial 0)",
        "sft succeeded, grpo failed: seed 1, t1 (trial 0)",
    ]
    assert text.index("sft-1-t2") < text.index("grpo-1-t2") and "grpo-0-t2" not in text
    assert _examples({"sft": sft[:1], "grpo": [episode(0, "t1", False, "x")]}, [("sft", "grpo")]) == []  # nothing changed, nothing shown
    # An ablation arm is shown beside its control, after GRPO beside SFT; a pair missing an arm is skipped.
    explore = [episode(1, "t1", True, "explore-1-t1"), episode(1, "t2", True, "explore-1-t2")]
    text = "\n".join(_examples({"sft": sft, "grpo": grpo, "explore": explore}, [("sft", "grpo"), ("grpo", "explore"), ("control", "explore")]))
    titles = re.findall(r"^### (.*)$", text, flags=re.MULTILINE)
    assert titles[3:] == ["grpo failed, explore succeeded: seed 1, t1 (trial 0)"]
    assert "## Example trajectories: grpo and explore of one seed" in text and "control" not in text


def test_trainings_start_first_sft_before_grpo_and_evaluations_fill_the_free_slots() -> None:
    sft0, sft1 = _Phase("sft", 0, "train"), _Phase("sft", 1, "train")
    grpo0 = _Phase("grpo", 0, "train", after="sft/seed-0/train")
    base, sft0_eval = _Phase("base", None, "eval"), _Phase("sft", 0, "eval", after="sft/seed-0/train")
    assert _startable([base, sft0, sft1], 2) == [sft0, sft1]
    # An SFT training starts the GRPO phases of its seed: it goes before them, whatever the order given.
    assert _startable([sft0_eval, grpo0, base, sft1], 1) == [sft1]
    assert _startable([sft0_eval, grpo0, base, sft1], 3) == [sft1, grpo0, sft0_eval]
    # Evaluations run once no training is ready, beside whatever still runs.
    assert _startable([sft0_eval, base], 1) == [sft0_eval]
    assert _startable([base, sft1], 0) == []


def test_development_runs_are_kept_apart_from_the_reported_run(tiny_model_dir, tmp_path) -> None:
    from agentgym.trainers.experiment.report import _protocol_lines

    def write(change: dict):
        path = tmp_path / "x.yaml"
        data = {**_config(tiny_model_dir, tmp_path / "out"), "seeds": [10, 11]}
        data["development"] = {"seeds": [0, 1], "evaluation_tasks": {"splits": ["val"], "task_ids": ["letters-8"]}}
        data["choices"] = [{"option": "training.optim.lr", "value": 0.01, "made_on": "development seeds 0-1"}]
        path.write_text(yaml.safe_dump({**data, **change}))
        return path

    reported = load_experiment(write({}))
    assert (reported.run, reported.seeds, reported.evaluation.tasks.splits) == ("reported", (10, 11), ("test",))
    development = load_experiment(write({}), development=True)
    assert (development.run, development.seeds, development.evaluation.tasks.task_ids) == ("development", (0, 1), ("letters-8",))
    assert development.output_dir == str(tmp_path / "out" / "development")
    assert load_experiment(write({}), development=True, seeds=[2]).seeds == (2,)
    # A reported seed or split that a choice was made on is refused.
    with pytest.raises(ConfigError, match=r"development\.seeds and seeds share \[1\]"):
        load_experiment(write({"seeds": [1, 10]}))
    with pytest.raises(ConfigError, match=r"share the split\(s\) \['test'\]"):
        load_experiment(write({"development": {"seeds": [0], "evaluation_tasks": {"splits": ["test"]}}}))
    with pytest.raises(ConfigError, match="no development section"):
        load_experiment(write({"development": None}), development=True)
    # The report says which run it is and lists every choice with what it was made on.
    summary = {
        "seeds": [10, 11],
        "run": "reported",
        "development": dataclasses.asdict(reported.development),
        "choices": [dataclasses.asdict(reported.choices[0])],
    }
    text = "\n".join(_protocol_lines(summary))
    assert "seeds [10, 11] and these evaluation tasks were not used for any choice" in text and "development seeds [0, 1]" in text
    assert "| `training.optim.lr` | `0.01` | development seeds 0-1 |" in text
    assert "A development run" in "\n".join(_protocol_lines({**summary, "run": "development"}))


def _row(task: str, trial: int, success: bool, stop_reason: str = "done") -> dict:
    return {
        "seed": 0, "task_id": task, "trial": trial, "success": success, "reward": float(success), "turns": 2, "sampled_tokens": 10,
        "tokens": 30, "faults": 0, "format_errors": 0, "stop_reason": stop_reason, "template": None, "difficulty": None,
    }  # fmt: skip


def test_arm_statistics_leave_infra_errors_out_and_count_them() -> None:
    from agentgym.trainers.experiment.summary import _arm_summary, _paired_delta

    scored = [_row("a", 0, True), _row("a", 1, True), _row("b", 0, False), _row("b", 1, True)]
    broken = _row("b", 1, False, "infra_error")
    with_error = _arm_summary([*scored[:3], broken], trials=2)
    assert with_error["infra_errors"] == 1 and with_error["n"] == 3
    assert with_error["success"] == pytest.approx(2 / 3)  # not 2 / 4: the failed machinery is not the model's failure
    assert with_error["pass^2"] == 1.0  # over task "a", the one task with both trials scored
    assert _arm_summary(scored, trials=2)["infra_errors"] == 0
    # A pair with an infra error on either side says nothing about the difference between the arms.
    delta = _paired_delta([*scored[:3], broken], scored)
    assert (delta["wins"], delta["losses"]) == (0, 0) and delta["mean"] == 0.0


def test_a_phase_starts_only_beside_phases_it_fits_with_in_memory() -> None:
    from agentgym.trainers.memory import MemoryBudget

    gib = 2**30
    sft0, sft1 = _Phase("sft", 0, "train"), _Phase("sft", 1, "train")
    base = _Phase("base", None, "eval")
    budget = MemoryBudget(available=10 * gib, training=4 * gib, evaluation=7 * gib, limit=100 * gib)  # here what is available decides
    assert _startable([base, sft0, sft1], 3, budget=budget) == [sft0, sft1]  # 4 + 4 fit; + 7 would not
    assert _startable([base], 1, running=["train"], budget=budget) == []  # waits for the training to finish
    assert _startable([base, sft0], 2, running=["eval"], budget=budget) == []
    assert _startable([base], 2, budget=budget) == [base]  # alone, a phase always runs
    assert _startable([base, sft0, sft1], 3) == [sft0, sft1, base]  # no budget: slots alone decide


def test_the_phases_hold_at_most_the_memory_limit_together_however_much_is_available(tiny_model_dir, tmp_path) -> None:
    from agentgym.trainers.experiment.run import _memory_budget
    from agentgym.trainers.memory import MemoryBudget

    sft0, sft1 = _Phase("sft", 0, "train"), _Phase("sft", 1, "train")
    base = _Phase("base", None, "eval")
    gb = 10**9
    roomy = MemoryBudget(available=100 * gb, training=3 * gb, evaluation=4 * gb, limit=6 * gb)
    assert _startable([base, sft0, sft1], 3, budget=roomy) == [sft0, sft1]  # 3 + 3 <= 6; + 4 would not
    assert _startable([base], 1, running=["train"], budget=roomy) == []
    assert _startable([base], 2, budget=MemoryBudget(available=100 * gb, training=3 * gb, evaluation=7 * gb, limit=6 * gb)) == [base]  # alone, it runs
    wide = MemoryBudget(available=100 * gb, training=3 * gb, evaluation=4 * gb)  # no limit: what is available decides
    assert _startable([base, sft0, sft1], 3, budget=wide) == [sft0, sft1, base]
    # The experiment file's memory_limit_gb becomes the budget's limit; none by default.
    tasks = {"eval": ["test:letters-6"]}
    limited = load_experiment(_written(tmp_path, {**_config(tiny_model_dir, tmp_path / "out"), "memory_limit_gb": 6}))
    assert _memory_budget(limited, tasks).limit == 6 * gb
    assert _memory_budget(load_experiment(_written(tmp_path, _config(tiny_model_dir, tmp_path / "out"))), tasks).limit is None


def _written(folder, config: dict):
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_memory_estimates_start_from_the_model_folder(tiny_model_dir, monkeypatch) -> None:
    import json

    from agentgym.trainers import memory
    from agentgym.trainers.memory import EVALUATION_OVERHEAD, TRAINING_OVERHEAD, model_footprint

    config = json.loads((tiny_model_dir / "config.json").read_text())
    footprint = model_footprint(tiny_model_dir)
    assert footprint is not None and model_footprint(tiny_model_dir / "missing") is None
    assert footprint.weight_bytes == (tiny_model_dir / "model.safetensors").stat().st_size  # float32 weights
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    per_token = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * 4
    assert footprint.kv_bytes_per_token == per_token
    activation = 4 * config["num_hidden_layers"] * (8 * config["hidden_size"] + 4 * config["intermediate_size"])
    assert footprint.activation_bytes_per_token == activation
    weights = footprint.weight_bytes
    # The larger of the rollouts (weights, their bf16 copy, key/value buffers) and the update (weights, gradients,
    # the moments when they stay in memory, one pass's activations).
    monkeypatch.setattr(memory, "OFFLOAD_OPTIMIZER_STATE", False)
    assert footprint.training_peak(16, 100) == max(weights + weights // 2 + 1600 * per_token, 4 * weights + 100 * activation) + TRAINING_OVERHEAD
    monkeypatch.setattr(memory, "OFFLOAD_OPTIMIZER_STATE", True)
    moments = 0 if memory.disk_folder() is not None else 2 * weights
    assert footprint.training_peak(16, 100) == max(weights + weights // 2 + 1600 * per_token, 2 * weights + moments + 100 * activation) + TRAINING_OVERHEAD
    assert footprint.training_peak(1000, 100) == weights + weights // 2 + 100_000 * per_token + TRAINING_OVERHEAD
    assert footprint.evaluation_peak(64, 100) == footprint.weight_bytes + 6400 * per_token + EVALUATION_OVERHEAD


@pytest.mark.parametrize("info", [{"faults": 2}, {"faults_injected": 2, "api_calls": 5}])
def test_evaluation_records_count_the_faults_each_environment_reports(info) -> None:
    from types import SimpleNamespace

    from agentgym.trainers.experiment.run import _eval_record

    record = {"task_id": "t", "seed": 3, "success": True, "reward": 1.0, "turns": 2, "messages": [{"role": "system", "content": ""}], "steps": [{"info": info}]}
    episode = SimpleNamespace(record=record, stop_reason="done", trajectory=SimpleNamespace(loss_mask=(0, 1, 1), token_ids=(1, 2, 3)))
    assert _eval_record(episode, arm="sft", seed=0, trial=0, split="test")["faults"] == 2


@pytest.mark.parametrize("name", sorted(path.name for path in _SHIPPED_EXPERIMENTS.glob("*.yaml")))
def test_the_turn_budget_fits_every_demonstrated_turn(name, tokenizer) -> None:
    # A demonstrated call longer than max_new_tokens is cut off unterminated in every rollout and
    # evaluation (MockAPI-v0's ticket creation was, at 128 tokens), whatever SFT taught.
    from agentgym.trainers.config import SFTSection
    from agentgym.trainers.experiment.config import task_id_of
    from agentgym.trainers.experiment.run import _pick
    from agentgym.trainers.sft import assistant_text, demonstration_records

    config = load_experiment(_SHIPPED_EXPERIMENTS / name)
    tasks = [task_id_of(t) for t in _pick(config.env_id, config.sft_tasks, config.seeds[0], exclude=[])][:32]
    sft_kwargs = config.training["sft"].get("env_kwargs", {})
    records = demonstration_records(config.env_id, SFTSection(), tasks, split=config.sft_tasks.splits[0], seed=0, env_kwargs=sft_kwargs)
    turns = [assistant_text(m) for r in records for m in r["messages"] if m["role"] == "assistant"]
    longest = max(len(tokenizer(text)["input_ids"]) + 1 for text in turns)  # + the end-of-turn token
    assert turns and longest <= config.training["rollout"]["max_new_tokens"]
