#!/usr/bin/env bash
# The device check of issue #16 (docs/scale-up.md, "Run on one GPU"): the plain loop on CUDA in bf16 and its
# CPU half, figures to $OUT/device_check.json: on CUDA also a real vocabulary (a random Qwen2 at
# V = 151,936, chunked head and gradient checkpointing), the ~100M model in fp32 beside bf16, and every
# process's peak GPU memory (pipeline, trainer) beside `ts plan`'s. Under 8 minutes on one H200 before the
# real-vocabulary cases were added (not yet timed with them: `--only llama qwen` keeps a subset).
#
#   scripts/device_check.sh              # GPU cases (when torch sees a GPU) + the CPU case
#   scripts/device_check.sh --cpu-only   # the CPU case only (CI: tests/e2e/test_device_check.py, slow)
#
# On the device tool, after `make device-wheels` here (run's carry: [".device-wheels"]):
#   bash scripts/device_check.sh
# Packages the machine lacks (pydantic, duckdb, math-verify, reasoning-gym, ...) are installed from the
# wheels in .device-wheels/ into /tmp/ts-site, never from a registry; pycosat (a C extension
# without a cp312 wheel) is built from its sdist there, or replaced by a stub that fails when called
# (only reasoning-gym's logic puzzles use it; this check never does).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${DEVICE_WHEELS:-.device-wheels}
SITE=${DEVICE_SITE:-/tmp/ts-site}  # where the wheels go (pip --target): never the machine's own site-packages
PY=${PYTHON:-}
if [ -z "$PY" ]; then [ -x .venv/bin/python ] && PY=.venv/bin/python || PY=python3; fi
export OUT=${OUT:-$PWD/device_check_out} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
mkdir -p "$OUT"
# The project itself is not installed here: scripts/device_check.py links the package from this checkout
# (scripts/checkout_import.py) and passes it on to the trainer's processes through PYTHONPATH.
NEEDED="import pydantic, duckdb, yaml, pyarrow, accelerate, psutil, math_verify, reasoning_gym"
if ! "$PY" -c "$NEEDED" 2>/dev/null; then
  if ! PYTHONPATH=$SITE "$PY" -c "$NEEDED" 2>/dev/null; then  # not installed into $SITE by an earlier call
    ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "missing packages and no wheels in $WHEELS: run 'make device-wheels' here first" >&2; exit 2; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl
    if ! PYTHONPATH=$SITE "$PY" -c "import pycosat" 2>/dev/null; then
      timeout 180 "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$SITE" \
        "$WHEELS"/sdist/pycosat-*.tar.gz >/dev/null 2>&1 || printf '%s\n' \
        '"""Stub from scripts/device_check.sh: pycosat could not be built here."""' \
        'def _missing(*a, **k):' '    raise ImportError("pycosat is not installed on this machine")' \
        'solve = itersolve = _missing' > "$SITE/pycosat.py"
    fi
  fi
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$SITE  # PYTHONPATH precedes site-packages: these versions win
  "$PY" -c "$NEEDED"
fi
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
exec "$PY" scripts/device_check.py --out "$OUT" "$@"
