# Developer shortcuts. The README's two commands are the supported way in; these wrap them.
PYTHON ?= python

.PHONY: install test lint bench fuzz notations paper-cascades experiments ci clean

install:
	$(PYTHON) -m pip install -e ".[test]"

test:
	$(PYTHON) -m pytest

lint:
	$(PYTHON) -m ruff check simulator tests experiments
	$(PYTHON) -m ruff format --check simulator tests experiments
	lint-imports

bench:
	$(PYTHON) -m experiments.bench

# The spec fuzzers at length: 10,000 cases of mutated architecture, mapping, table and sweep
# files and command-line values, freshly drawn (the unit suite runs 300, the same each time),
# and 1,000 random cascades bound by every strategy on both engines (the suite runs 60).
FUZZ_CASES ?= 10000
CASCADE_FUZZ_CASES ?= 1000  # random cascades x strategies x engines (the unit suite runs 60)
fuzz:
	FUZZ_CASES=$(FUZZ_CASES) CASCADE_FUZZ_CASES=$(CASCADE_FUZZ_CASES) FLOOR_CASES=200 \
		$(PYTHON) -m pytest tests/test_spec_fuzz.py tests/test_random_cascades.py \
		tests/test_floors.py -p no:cacheprovider -p no:logging

# Every shipped cascade written in seven notations, each rewritten to the shipped form's pass
# count and mapped alike at 4K and 64K on both chips (the unit suite runs a few cascades).
notations:
	CASCADE_NOTATIONS_ALL=1 $(PYTHON) -m pytest tests/test_canonical.py \
		tests/test_notation_mapping.py -p no:cacheprovider

# Every held-out paper-form cascade mapped at every listed length (the unit suite maps each
# at one: the last listed).
paper-cascades:
	PAPER_CASCADES_ALL=1 $(PYTHON) -m pytest tests/test_paper_cascades_heldout.py \
		-p no:cacheprovider

experiments:
	$(PYTHON) -m experiments

ci:
	bash .ci/run

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache
	find experiments/out -mindepth 1 ! -name .gitkeep -delete 2>/dev/null || true
