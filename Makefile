# The README's two commands: `make demo` (the main job) and `make test`.
# Both build the virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv demo test check bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py core/records/_speedups.c core/records/_plain_batch_write.c \
		core/records/_plain_batch_write.h core/log/_segment_appender.c core/records/arrow/_columnar.c \
		core/records/_record_framing.h
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tierlog demo

test: $(STAMP)
	$(PY) -m pytest -q

# Strict typing of core/ and plugins/ as the package tierlog (a tree of links laid out as the
# installed package), and lint of those and the tests.
check: $(STAMP)
	rm -rf build/typecheck && mkdir -p build/typecheck/tierlog
	for f in core/*.py core/*/ ; do ln -s "$(CURDIR)/$${f%/}" build/typecheck/tierlog/; done
	ln -s "$(CURDIR)/plugins" build/typecheck/tierlog/plugins
	cd build/typecheck && $(CURDIR)/$(PY) -m mypy --config-file $(CURDIR)/pyproject.toml -p tierlog
	$(VENV)/bin/ruff check core plugins tests

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info demo-data
