PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench eval runbook clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	@for f in examples/*.log examples/*.gz; do [ -e "$$f" ] && $(BIN)/triage diagnose "$$f"; done; true

test: $(STAMP)
	$(BIN)/pytest -n auto

bench: $(STAMP)
	$(BIN)/python bench/run.py

eval: $(STAMP)
	$(BIN)/triage eval ../shared/corpus/dev.jsonl

runbook: $(STAMP)
	$(BIN)/python -c "from knowledge.runbook import sync_generated; print('updated' if sync_generated() else 'up to date')"

clean:
	rm -rf $(VENV) build *.egg-info
