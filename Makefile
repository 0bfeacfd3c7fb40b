# evalbeam: `make demo` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

EMULATORS := .emulators
EMULATORS_STAMP := $(EMULATORS)/.installed

.PHONY: env demo test bench emulators emulators-stop clean

env: $(STAMP)

$(STAMP): requirements.lock setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==25.3
	$(BIN)/pip install --quiet -r requirements.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/evalbeam run configs/demo.yaml
	$(BIN)/evalbeam run configs/demo_qa.yaml

# The Cloud Storage and BigQuery emulators, each in its own venv (tests/emulators/*.lock).
$(EMULATORS_STAMP): $(STAMP) tests/emulators/bigquery.lock tests/emulators/storage.lock tests/emulators/control.py
	$(BIN)/python -m tests.emulators install $(EMULATORS)
	touch $(EMULATORS_STAMP)

emulators: $(EMULATORS_STAMP)
	$(BIN)/python -m tests.emulators start $(EMULATORS)

emulators-stop:
	$(BIN)/python -m tests.emulators stop $(EMULATORS)

# The tests start their own emulators on free ports.
test: $(STAMP) $(EMULATORS_STAMP)
	$(BIN)/python -m pytest -q tests

bench: $(STAMP)
	$(BIN)/python bench/compute_throughput.py

clean:
	rm -rf $(VENV) $(EMULATORS) output .pytest_cache
