#!/usr/bin/env bash
# Adapter tests against the real trainer frameworks (CPU only).
#
#   bash .ci/adapters.sh                  verl, OpenRLHF and TRL, one after the other
#   bash .ci/adapters.sh trl verl         only those
#
# Each framework gets its own virtual environment (their pins conflict: verl wants
# transformers<5.11, OpenRLHF ==5.15, TRL's environment_factory >=5.2), created once under
# $AGENTGYM_CI_CACHE (default ~/.cache/agentgym-ci) and reused while its requirement list is
# unchanged; pip's own cache makes a rebuild cheap too. torch is pinned to the CPU build first and
# constrained afterwards, so no dependency can pull a CUDA build. agentgym itself is installed
# editable (no deps) on every run, so the tests always see this checkout.
#
# Each framework's tests run with AGENTGYM_ADAPTER_UNDER_TEST set, which turns "framework not
# importable" from a skip into a failure: a broken environment cannot pass as skipped tests.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
CACHE="${AGENTGYM_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgym-ci}/adapters"
TORCH="torch==2.13.0"

# Requirements per framework. The frameworks themselves go in with --no-deps: their full
# dependency sets are GPU stacks (vLLM, flash-attn, DeepSpeed) that neither install nor matter
# on CPU; the lists below are what their agent-loop / executor / trainer code imports.
requirements() {
    case "$1" in
        verl) echo "transformers>=5.5.3,<5.11,!=5.6.0 ray>=2.41 tensordict>=0.8,<=0.10,!=0.9.0 hydra-core>=1.3 \
omegaconf numpy>=2 pydantic>=2 packaging pillow codetiming aiohttp datasets pyarrow>=19 pandas cachetools \
uvicorn fastapi dill pytest>=8" ;;
        openrlhf) echo "transformers==5.15.0 sympy pylatexenc aiohttp pytest>=8" ;;
        trl) echo "trl==1.16.0 transformers>=5.2 pytest>=8" ;;
        *) echo "unknown framework '$1' (choose from: verl openrlhf trl)" >&2; return 2 ;;
    esac
}
no_deps_packages() {
    case "$1" in
        verl) echo "verl==0.9.1" ;;
        openrlhf) echo "openrlhf==0.11.2" ;;
        trl) echo "" ;;
    esac
}

# Create (or reuse) the framework's environment and print its path.
ensure_venv() {
    local fw="$1" reqs nodeps key venv lock
    reqs="$(requirements "$fw")"
    nodeps="$(no_deps_packages "$fw")"
    key="$(printf '%s|%s|%s|%s' "$("$PYTHON" -c 'import sys; print(sys.version)')" "$TORCH" "$reqs" "$nodeps" | sha256sum | cut -c1-12)"
    venv="$CACHE/$fw-$key"
    mkdir -p "$CACHE"
    # Two runs at once must not build (or delete) the same environment under each other.
    exec {lock}>"$CACHE/$fw.lock"
    flock "$lock"
    if [ ! -f "$venv/.complete" ]; then
        echo "[$fw] creating $venv" >&2
        rm -rf "$venv"
        # Environments of older requirement lists are never used again.
        rm -rf "$CACHE/$fw-"*
        "$PYTHON" -m venv "$venv"
        local pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
        "${pip[@]}" "$TORCH"
        printf '%s\n' "$TORCH" > "$venv/constraints.txt"
        # shellcheck disable=SC2086  # the requirement list is split on purpose
        "${pip[@]}" -c "$venv/constraints.txt" $reqs
        # shellcheck disable=SC2086
        [ -z "$nodeps" ] || "${pip[@]}" --no-deps $nodeps
        # agentgym's own dependencies (once; the package itself is reinstalled on every run).
        "${pip[@]}" -c "$venv/constraints.txt" -e "$ROOT"
        "$venv/bin/python" -m pip freeze > "$venv/freeze.txt"
        touch "$venv/.complete"
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e "$ROOT" >&2
    flock -u "$lock"
    echo "$venv"
}

frameworks=("$@")
[ ${#frameworks[@]} -gt 0 ] || frameworks=(verl openrlhf trl)
for fw in "${frameworks[@]}"; do requirements "$fw" > /dev/null; done

status=0
summary=()
for fw in "${frameworks[@]}"; do
    echo "=== adapters: $fw ==="
    start=$SECONDS
    venv="$(ensure_venv "$fw")"
    rc=0
    (cd "$ROOT" && AGENTGYM_ADAPTER_UNDER_TEST="$fw" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider "tests/adapters/test_$fw.py") || rc=$?
    summary+=("$fw: exit $rc in $((SECONDS - start)) s")
    [ "$rc" -eq 0 ] || status=1
done
echo "=== adapters summary ==="
printf '%s\n' "${summary[@]}"
exit $status
