"""How likely a model is to retry a failed ``sql`` call, measured exactly instead of by sampling.

In the learning experiment GRPO can reinforce retrying after a seeded fault only once a sampled
episode has done it. This measures how rare that is: it plays the experiment's GRPO training tasks
greedily with every first ``sql`` call failing (``fault_rate: 1`` capped at one fault in a row), and
in the turn after the fault (the model's own turn: no exploration) it reads the model's next-token
distribution where a call to ``sql`` (the retry) and a call to ``answer`` (giving up with a guess)
first differ, in the format the demonstrations write: the tool's name (in the format before
2026-11-29, which wrote the arguments first, the argument's name, ``query`` or ``text``, where a
call that opened with ``query`` could still be named ``answer``: docs/trainer.md). It prints, per model, the mean probability of that token at each sampling
temperature of ``--temperatures`` (default 0.7 and 1.0; the candidates for ``error_temperature``,
the temperature of the turn after a failed call, are measured here), and the expected retries among a GRPO phase's fault decisions (``--decisions``: the
experiment's 10 steps x 16 episodes at a fault rate of 0.5 meet about 80). Training tasks only; one
model after another in the same run, so the figures compare directly:

    python benchmarks/bench_retry_decision.py runs/learning/sft/seed-0/run/model runs/learning/grpo/seed-0/run/model \\
        [--experiment trainers/configs/experiments/learning_cpu.yaml] [--tasks runs/learning/tasks.json] [--groups 16]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

from bench_group_signal import training_episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="models to measure (e.g. an experiment's SFT and GRPO models)")
    parser.add_argument("--experiment", default="trainers/configs/experiments/learning_cpu.yaml")
    parser.add_argument("--tasks", default="runs/learning/tasks.json", help="the experiment's tasks.json (its grpo tasks are played)")
    parser.add_argument("--groups", type=int, default=16, help="GRPO training tasks to play, one episode each")
    parser.add_argument("--decisions", type=int, default=80, help="fault decisions of a GRPO phase, for the expected retries")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--temperatures", default="0.7,1.0", help="comma-separated sampling temperatures to read P(retry) at")
    args = parser.parse_args()

    import gymnasium as gym
    import torch

    from agentgym.models import load_model
    from agentgym.models.hf import HFBackend
    from agentgym.rollouts.chat import ChatRenderer, common_prefix_length
    from agentgym.rollouts.runner import RolloutRunner
    from agentgym.rollouts.settings import NO_EXPLORATION

    torch.set_num_threads(args.threads)
    base = training_episodes(args.experiment, args.tasks, args.groups, seed=1000)
    # One greedy episode per task under the experiment's environment options, every first call
    # failing, stopped after the turn that follows the fault.
    faults = {"fault_rate": 1.0, "max_consecutive_faults": 1}
    # The model's own choice: no exploration opens the turn for it.
    config = dataclasses.replace(base, temperature=0.0, group_size=1, max_turns=2, env_kwargs={**base.env_kwargs, **faults}, **NO_EXPLORATION)
    tools = gym.make(config.env_id).unwrapped.tools
    for path in args.models:
        model, tokenizer = load_model(path, device="cpu")
        openings = dict(zip((t["function"]["name"] for t in tools), ChatRenderer(tokenizer, tools=tools).call_openings, strict=True))
        at_choice = common_prefix_length(openings["sql"], openings["answer"])
        retry, give_up = openings["sql"][at_choice], openings["answer"][at_choice]
        if path == args.models[0]:
            print(
                f"{config.num_groups} GRPO training tasks, every first sql call failing; P(retry) is the probability of "
                f"{tokenizer.decode([retry])!r} (sql) where {tokenizer.decode([give_up])!r} would call answer"
            )
        temperatures = [float(t) for t in args.temperatures.split(",")]
        at: dict[float, list[float]] = {t: [] for t in temperatures}
        greedy_retries = 0
        for episode in RolloutRunner(HFBackend(model, tokenizer)).run(config):
            if len(episode.turns) < 2:
                continue  # the first turn answered or broke the format: no fault met
            after = episode.turns[1]
            sampled = list(after["sampled_ids"])
            where = next((i for i, token in enumerate(sampled) if token in (retry, give_up)), None)
            if where is None:
                continue  # neither call begun (a malformed turn)
            greedy_retries += sampled[where] == retry
            with torch.no_grad():
                logits = model(torch.tensor([[*after["prompt_ids"], *sampled[:where]]])).logits[0, -1].float()
            for t in temperatures:
                at[t].append(torch.softmax(logits / t, -1)[retry].item())
        decisions = len(at[temperatures[0]])
        if not decisions:
            print(f"{path}: no episode reached the decision")
            continue
        per_t = "; ".join(
            f"at {t:g}: P(retry) {statistics.fmean(at[t]):.4f}, {args.decisions * statistics.fmean(at[t]):.2f} expected retries" for t in temperatures
        )
        print(f"{path}: decisions {decisions}, greedy retries {greedy_retries} (in {args.decisions} decisions) {per_t}", flush=True)


if __name__ == "__main__":
    main()
