"""The learning experiment: does GRPO make the agent better than its SFT starting point?

One command runs the whole comparison and writes a results folder::

    agentgym experiment trainers/configs/experiments/learning_cpu.yaml

Read :func:`run_experiment` top to bottom; it is the whole protocol::

    pick the tasks: SFT demonstrations, GRPO training tasks (disjoint from them), evaluation tasks
        (other splits, disjoint from both)
    evaluate the untouched model
    for each seed:
        SFT on the demonstrations                          -> evaluate
        GRPO from that SFT model                           -> evaluate
        each ablation: GRPO with one setting changed       -> evaluate
    summarise the written evaluation episodes: success with Wilson intervals, the paired
        GRPO - SFT difference with a task-clustered bootstrap interval, pass^k over trials,
        per-template breakdowns, curves of the GRPO phases, example trajectories

The phases run one after another, or ``jobs`` at a time in worker processes (each with the
machine's cores divided among them), as soon as the phase they start from has finished: training
phases first, SFT before GRPO (an SFT model starts its seed's GRPO phases), evaluations once no
training is ready. On 2 CPU cores two single-threaded phases do more work than one two-threaded
phase, since much of a rollout is single-threaded Python: two trainings ~1.3x, two evaluations
~1.2x (152 s for two one-thread evaluations side by side against 92 s for one with both threads).

Every evaluation plays each evaluation task ``trials`` times with different environment seeds
(different faults, when the environment has them), greedily, and every arm sees exactly the same
(task, environment seed) pairs, so arms are compared pair by pair. Everything derives from the
seeds: rerunning the command reproduces the numbers. An interrupted run resumes where it stopped
(finished phases are kept; an interrupted training phase resumes from its last checkpoint). A
finished results folder takes more seeds and more ablation arms: an arm added later trains from
the SFT models already there, so trying an exploration option on a finished run costs only its
own GRPO phases and evaluations. Arms the folder has stay in it even when a configuration does
not list them; an existing arm may not be configured otherwise.

Files (``output_dir``): ``experiment.yaml`` (the configuration), ``tasks.json`` (the task ids of
each role), ``<arm>/seed-<s>/run/`` (the trainer's run folder; its checkpoints are deleted once
the phase has finished), ``<arm>/seed-<s>/eval.jsonl`` and
``base/eval.jsonl`` (one line per evaluation episode), ``timings.json`` (seconds per phase and in all),
``summary.json``, ``results.md`` and ``plots/``.
"""

from __future__ import annotations

from agentgym.trainers.experiment.config import Choice, DevelopmentSection, EvaluationSection, ExperimentConfig, TaskPick, load_experiment
from agentgym.trainers.experiment.run import run_experiment
from agentgym.trainers.experiment.summary import summarize_experiment

__all__ = ["Choice", "DevelopmentSection", "EvaluationSection", "ExperimentConfig", "TaskPick", "load_experiment", "run_experiment", "summarize_experiment"]
