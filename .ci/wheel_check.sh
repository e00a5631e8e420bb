#!/usr/bin/env bash
# The package as users get it: build the wheel from the checkout's files, install it (not editable) with its [demo]
# extra in a fresh virtual environment outside the checkout, run a short watched training through the `bertwatch`
# console script, and load the plugin's page, static files and data routes from a TensorBoard of that environment
# (so they come from the wheel and its `tensorboard_plugins` entry point, not from the checkout).
# Usage: bash .ci/wheel_check.sh   (PY=python3.11 to choose the Python; KEEP=1 to keep the scratch folder, which is
# also kept when CI=true)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/bertwatch-wheel.XXXXXX")"
VENV="$WORK/venv"
VPY="$VENV/bin/python"
TB_PID=""

cleanup() {
    local status=$?
    if [ -n "$TB_PID" ] && kill -0 "$TB_PID" 2>/dev/null; then
        kill "$TB_PID" 2>/dev/null || true
        wait "$TB_PID" 2>/dev/null || true
    fi
    if [ "$status" -ne 0 ]; then
        echo "wheel-check: FAILED (exit $status) after ${SECONDS}s; last lines of the logs:"
        for log in "$WORK"/*.log; do
            [ -f "$log" ] && { echo "--- $log"; tail -n 40 "$log"; }
        done
    fi
    # On CI the machine is thrown away: removing the venv's tens of thousands of files would only cost minutes.
    if [ "${KEEP:-0}" = 1 ] || [ "${CI:-}" = true ]; then
        echo "wheel-check: left $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

stage() { printf 'wheel-check [%3ds] %s\n' "$SECONDS" "$*"; }

# The checkout's files (tracked, and untracked ones git does not ignore), so no build output lands in the checkout.
stage "copying the source tree to $WORK/src"
mkdir -p "$WORK/src"
if git -C "$ROOT" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
        | tar -C "$ROOT" --null --no-recursion --ignore-failed-read -T - -cf - | tar -xf - -C "$WORK/src"
else  # not a git checkout (an unpacked archive): everything but environments and build outputs
    tar -C "$ROOT" --exclude=./.venv --exclude=./node_modules --exclude=./build --exclude=./dist \
        --exclude='*.egg-info' -cf - . | tar -xf - -C "$WORK/src"
fi

stage "creating a virtual environment with $("$PY" --version 2>&1)"
"$PY" -m venv "$VENV"
"$VPY" -m pip install -q --upgrade pip > "$WORK/pip.log" 2>&1

stage "installing torch==2.13.0 (the CPU build)"
"$VPY" -m pip install -q torch==2.13.0 >> "$WORK/pip.log" 2>&1

stage "building the wheel"
"$VPY" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src" >> "$WORK/pip.log" 2>&1
WHEEL="$(ls "$WORK"/dist/bertwatch-*.whl)"
stage "built $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB)"

stage "installing the wheel with its [demo] extra"
"$VPY" -m pip install -q "${WHEEL}[demo]" >> "$WORK/pip.log" 2>&1

# From here on, nothing runs from the checkout: cwd is outside it, the helpers are copies, PYTHONPATH is unset.
mkdir -p "$WORK/run"
cp "$ROOT/.ci/wheel_train.py" "$ROOT/.ci/wheel_probe.py" "$WORK/run/"
cd "$WORK/run"
unset PYTHONPATH
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=2

INSTALLED="$("$VPY" wheel_probe.py installed "$ROOT")"
stage "installed: $INSTALLED"

stage "a watched training: bertwatch run wheel_train.py"
"$VENV/bin/bertwatch" run --every-n-steps 3 --num-probe-examples 8 wheel_train.py "$WORK/out" > "$WORK/train.log" 2>&1
EVENTS="$(find "$WORK/out" -name '*.bertwatch' -type f -size +0 | head -n 1)"
[ -n "$EVENTS" ] || { echo "wheel-check: no .bertwatch event file under $WORK/out"; exit 1; }
stage "event file ${EVENTS#"$WORK/"} ($(du -k "$EVENTS" | cut -f1) KiB)"

PORT="$("$VPY" wheel_probe.py port)"
stage "starting tensorboard on 127.0.0.1:$PORT"
"$VENV/bin/tensorboard" --logdir "$WORK/out" --host 127.0.0.1 --port "$PORT" --reload_interval 1 \
    < /dev/null > "$WORK/tensorboard.log" 2>&1 &
TB_PID=$!

SERVED="$("$VPY" wheel_probe.py page "http://127.0.0.1:$PORT")"
stage "plugin loaded: $SERVED"

kill "$TB_PID" && wait "$TB_PID" 2>/dev/null || true
TB_PID=""
stage "passed"
