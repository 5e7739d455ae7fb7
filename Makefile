# The two quick-start commands: `make demo` and `make test`. Both set up .venv first.
.PHONY: setup demo test bench

setup:
	@bash scripts/setup.sh

# The main job: the bundled is_prime task, solved by `refine` on the embedded model.
demo: setup
	@.venv/bin/reflexa refine --task examples/is_prime/task.md --tests examples/is_prime/test_solution.py; \
	  code=$$?; echo "reflexa exited $$code (0 solved, 3 not solved within the budget)"; [ $$code -le 3 ]

test: setup
	.venv/bin/python -m pytest
