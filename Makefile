# Each target does its own set-up: virtual environments live in .venvs/<X.Y>.
.PHONY: test lint docs demo stress bench bench-shapes clean

test:  ## lint, types, and the suite on Python 3.11, 3.12 and 3.13, asyncio and trio
	@tools/test

demo:  ## the main job: a 3-turn step against the reference agent, stored under ./follower-demo/
	@py=$$(tools/venv $${DEMO_PYTHON:-3.11} testing,trio) && $$py -m follower demo

stress:  ## the property and fuzz tests with ten times more examples, new ones each run
	@HYPOTHESIS_PROFILE=stress tools/test tests/properties tests/hostile/test_card_fuzz.py tests/hostile/test_stored_garbage.py tests/hostile/test_http_fuzz.py

bench:  ## every benchmark against the old follower, JSON into benchmarks/results/, a summary of the targets, plots into docs/images/benchmarks/ (BENCH_QUICK=1: a smoke run)
	@py=$$(tools/venv 3.11 testing,trio,bench) && old=$$(tools/old-follower-venv) && \
		$$py benchmarks/run_all.py --old-python "$$old"

bench-shapes:  ## many followers in one process, client shapes compared (BENCH_ARGS="--agent-process")
	@py=$$(tools/venv $${BENCH_PYTHON:-3.11} testing,trio) && $$py benchmarks/many_followers.py $(BENCH_ARGS)

docs:  ## the documentation site, built strictly into site/ (open site/index.html; tools/docs serve)
	@tools/docs

lint:  ## ruff (with ASYNC rules) and mypy --strict
	@tools/lint

clean:
	rm -rf site .venvs .pytest_cache .mypy_cache .ruff_cache .hypothesis
