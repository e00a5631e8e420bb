#!/usr/bin/env bash
# Every GPU figure of docs/performance.md in one table: benchmarks/gpu_check.py (its doc says what and how long).
#   bash benchmarks/gpu_check.sh            on a GPU: bert-base shapes, about 5 minutes on one H100
#   bash benchmarks/gpu_check.sh --smoke    tiny shapes on any device (the CPU too): the code paths only
# bertwatch runs from this source tree (PYTHONPATH gets the repository root); $OUT/gpu_check.txt gets the table.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
exec "${PYTHON:-python3}" benchmarks/gpu_check.py "$@"
