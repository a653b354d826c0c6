# The two commands: `make demo` (set up and run the main job on the embedded default) and
# `make test` (set up, lint, run the tests). Both create .venv on first use.
VENV ?= .venv
PYTHON ?= python3
# CPU installs pin torch to the local CPU wheel; any other torch request pulls GBs of CUDA packages.
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The exact versions CI tested (pip constraints: `pip freeze` of a fresh install); `make lock` refreshes it.
LOCK := requirements.lock
# RhythmEnv's package (openenv-rhythm-env), a dependency of this one that is on no index: installed from its
# folder in the same pip call, so pip never looks for it on PyPI.
ENV_PACKAGE := ./envs/rhythm_env

.PHONY: demo ui mlflow test test-slow install lint bench results gpu-check clean lock example

install: $(STAMP)

$(STAMP): pyproject.toml $(ENV_PACKAGE)/pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c $(LOCK) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -c $(LOCK) -e $(ENV_PACKAGE) -e ".[dev,postgres,s3,openenv]"
	touch $(STAMP)

# Resolve pyproject.toml's ranges afresh in a scratch venv and write what was installed as the lock.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install -q --upgrade pip
	.lock-venv/bin/python -m pip install -q "$(TORCH_SPEC)"
	.lock-venv/bin/python -m pip install -q -e $(ENV_PACKAGE) -e ".[dev,postgres,s3,openenv]"
	{ echo "# The exact versions \`make install\` installs (pip constraints), written by \`make lock\` on $$(date -u +%F)."; \
	  echo "# pyproject.toml keeps compatible ranges for people who import the package."; \
	  .lock-venv/bin/python -m pip freeze --exclude-editable; } > $(LOCK).tmp
	mv $(LOCK).tmp $(LOCK)
	rm -rf .lock-venv

# A DAGSTER_HOME the user exported is kept; the embedded default instance otherwise.
DAGSTER_HOME ?= $(CURDIR)/dagster_home
export DAGSTER_HOME
UI_PORT ?= 3000

demo: $(STAMP)
	$(BIN)/python -m rhythm_pipeline.demo

# `dg dev` (the project in pyproject.toml's [tool.dg]) in its own process group: Ctrl-C or SIGTERM stops
# all of it (rhythm_pipeline/ui.py).
ui: $(STAMP)
	$(BIN)/python -m rhythm_pipeline.ui --port $(UI_PORT)

# The MLflow UI on the embedded instance's tracking store (training and evaluation runs, the
# rhythm-student registry), where the assets log by default: http://127.0.0.1:5000. It prints the
# link to the rhythm experiment's runs (its id read from the store; MLflow 3 opens an experiment
# clicked in its list on the GenAI overview), or the experiments list while the store has none.
# With an object store (RHYTHM_ARTIFACTS=s3://…) the tracking store is in the local cache (or set MLFLOW_TRACKING_URI).
MLFLOW_STORE = $(if $(findstring ://,$(RHYTHM_ARTIFACTS)),$(or $(RHYTHM_ARTIFACT_CACHE),$(DAGSTER_HOME)/storage/rhythm-cache),$(or $(RHYTHM_ARTIFACTS),$(DAGSTER_HOME)/storage/rhythm))/mlflow
mlflow: $(STAMP)
	mkdir -p $(MLFLOW_STORE)
	@$(BIN)/python -m rhythm_core.tracking.ui_link $(MLFLOW_STORE) --ui-url http://127.0.0.1:5000
	$(BIN)/mlflow server --backend-store-uri sqlite:///$(abspath $(MLFLOW_STORE))/mlflow.db \
		--default-artifact-root $(abspath $(MLFLOW_STORE))/artifacts -h 127.0.0.1 -p 5000

# GRPO with TRL's environment_factory on RhythmEnv on CPU: a small offline stand-in is first taught the
# tool-call format on demonstration weeks, then trains two GRPO steps (examples/grpo_rhythm_env.py;
# without --offline it trains Qwen2.5-3B-Instruct on a GPU).
example: $(STAMP)
	TRL_EXPERIMENTAL_SILENCE=1 $(BIN)/python examples/grpo_rhythm_env.py --offline --output_dir example_run

lint: $(STAMP)
	$(BIN)/ruff check .

# Tests run on TEST_WORKERS processes (pytest-xdist; a module's tests stay on one worker, so its
# fixtures are built once) and print the slowest ones, so the suite's cost stays in sight.
TEST_WORKERS ?= 2
PYTEST_RUN = $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope --durations=25

test: $(STAMP)
	$(BIN)/ruff check .
	$(PYTEST_RUN) -m "not slow"

test-slow: $(STAMP)
	$(PYTEST_RUN) -m slow; rc=$$?; [ $$rc -eq 5 ] && exit 0 || exit $$rc

bench: $(STAMP)
	$(BIN)/python benchmarks/env_throughput.py

# docs/results.md and the README's results table, from the result files under benchmarks/results/.
results: $(STAMP)
	$(BIN)/python docs/results_page.py

# Before paying for GPU time: every GPU stage on a 3B-shaped student, on one CUDA GPU (a run: gpu_check_h200.json)
# (a CUDA build of torch: `make TORCH_SPEC=torch install`); `rhythm gpu-check --smoke` is its CPU form.
gpu-check: $(STAMP)
	$(BIN)/rhythm gpu-check --out gpu_check.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
