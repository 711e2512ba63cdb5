#!/usr/bin/env bash
# Adapter tests against the real trainer frameworks (CPU only).
#
#   bash .ci/adapters.sh                  verl, OpenRLHF and TRL
#   bash .ci/adapters.sh trl verl         only those
#
# Each framework gets its own virtual environment (their pins conflict: verl wants
# transformers<5.11, OpenRLHF ==5.15, TRL's environment_factory >=5.2), created once under
# $AGENTGYM_CI_CACHE (default ~/.cache/agentgym-ci) and reused while its requirement list is
# unchanged; missing environments are built in parallel, and pip's own cache makes a rebuild cheap.
# Installs skip byte-compiling (--no-compile): on 2 cores compiling torch and transformers costs
# more than the downloads, and Python compiles what the tests import anyway.
# torch is pinned to the CPU build first and constrained afterwards, so no dependency can pull a
# CUDA build. agentgym itself is installed editable (no deps) on every run, so the tests always
# see this checkout.
#
# The tests run with AGENTGYM_ADAPTER_UNDER_TEST=<framework>, which turns "framework not
# importable" from a skip into a failure: a broken environment cannot pass as skipped tests.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
CACHE="${AGENTGYM_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentgym-ci}/adapters"
TORCH="torch==2.13.0"
BASE="setuptools>=69 wheel pytest>=8"

# Requirements per framework. verl and OpenRLHF go in with --no-deps: their full dependency
# sets are GPU stacks (vLLM, flash-attn, DeepSpeed) that neither install nor matter on CPU; the
# lists below are what their agent-loop / executor / dataset code imports.
requirements() {
    case "$1" in
        verl) echo "transformers>=5.5.3,<5.11,!=5.6.0 ray>=2.41 tensordict>=0.8,<=0.10,!=0.9.0 hydra-core>=1.3 omegaconf \
numpy>=2 pydantic>=2 packaging pillow codetiming aiohttp datasets pyarrow>=19 pandas cachetools uvicorn fastapi dill" ;;
        openrlhf) echo "transformers==5.15.0 sympy pylatexenc aiohttp datasets" ;;
        trl) echo "trl==1.16.0 transformers>=5.2" ;;
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

venv_path() {
    local key
    key="$(printf '%s|' "$("$PYTHON" -c 'import sys; print(sys.version)')" "$TORCH" "$BASE" "$(requirements "$1")" "$(no_deps_packages "$1")" | sha256sum | cut -c1-12)"
    echo "$CACHE/$1-$key"
}

# Build the framework's environment unless a complete one exists (all output to stderr).
ensure_venv() {
    local fw="$1" venv lock
    venv="$(venv_path "$fw")"
    mkdir -p "$CACHE"
    # Two runs at once must not build (or delete) the same environment under each other.
    exec {lock}>"$CACHE/$fw.lock"
    flock "$lock"
    if [ ! -f "$venv/.complete" ]; then
        echo "[$fw] building $venv" >&2
        # Environments of older requirement lists are never used again.
        rm -rf "$CACHE/$fw-"*
        "$PYTHON" -m venv "$venv"
        local pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile)
        printf '%s\n' "$TORCH" > "$venv/constraints.txt"
        "${pip[@]}" "$TORCH"
        # shellcheck disable=SC2046,SC2086  # the requirement lists are split on purpose
        "${pip[@]}" -c "$venv/constraints.txt" $BASE $(requirements "$fw")
        local nodeps
        nodeps="$(no_deps_packages "$fw")"
        # shellcheck disable=SC2086
        [ -z "$nodeps" ] || "${pip[@]}" --no-deps $nodeps
        # agentgym's own dependencies (once; the package itself is reinstalled on every run).
        "${pip[@]}" -c "$venv/constraints.txt" -e "$ROOT"
        "$venv/bin/python" -m pip freeze > "$venv/freeze.txt"
        touch "$venv/.complete"
    fi
    flock -u "$lock"
} >&2

frameworks=("$@")
[ ${#frameworks[@]} -gt 0 ] || frameworks=(verl openrlhf trl)
for fw in "${frameworks[@]}"; do requirements "$fw" > /dev/null; done
mkdir -p "$CACHE"

# Build missing environments in parallel (mostly downloads and unpacking), logs kept per framework.
pids=()
for fw in "${frameworks[@]}"; do
    ensure_venv "$fw" 2> "$CACHE/$fw.build.log" &
    pids+=($!)
done
status=0
for i in "${!frameworks[@]}"; do
    if ! wait "${pids[$i]}"; then
        echo "=== adapters: building the ${frameworks[$i]} environment failed; its log:" >&2
        grep -v "^WARNING: Location" "$CACHE/${frameworks[$i]}.build.log" | tail -n 40 >&2
        status=1
    fi
done
[ "$status" -eq 0 ] || exit "$status"

summary=()
for fw in "${frameworks[@]}"; do
    echo "=== adapters: $fw ==="
    start=$SECONDS
    venv="$(venv_path "$fw")"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT" \
        2> >(grep -v "^WARNING: Location" >&2)
    rc=0
    (cd "$ROOT" && AGENTGYM_ADAPTER_UNDER_TEST="$fw" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider "tests/adapters/test_$fw.py") || rc=$?
    summary+=("$fw: exit $rc in $((SECONDS - start)) s")
    [ "$rc" -eq 0 ] || status=1
done
echo "=== adapters summary ==="
printf '%s\n' "${summary[@]}"
exit $status
