# ssmprof set-up and everyday commands. `make profile` and `make test` install first where .venv/ lacks
# ssmprof (a fresh clone); on a GPU host both also build the kernels where they are missing.
PYTHON      ?= python3
VENV        ?= .venv
BIN         := $(VENV)/bin
# Set WHEELHOUSE=wheelhouse on an offline host (filled by `make wheelhouse` on a connected one).
WHEELHOUSE  ?=
# The CPU build of torch used where no GPU is present (a CUDA build is several GB).
CPU_TORCH   ?= torch==2.13.0
# Where no GPU is present, the Triton and pandas of the GPU hosts' own torch environment (torch 2.11.0+cu130), so
# that CI tests what the hosts run: Triton 3.9 compiled the L1 calibration kernel into other loads than the hosts'
# 3.6, and pandas 3.0.0 refused an assignment that 3.1 accepts (2026-11-24, found only by `make test` on a host).
HOST_STACK  ?= triton==3.6.0 pandas==3.0.0
# Python version / platform the wheelhouse is for (our H100 host runs Python 3.12).
WHEEL_PY    ?= 3.12
MAMBA_SSM   := mamba-ssm==2.3.2.post1
CAUSAL_CONV := causal-conv1d==1.7.0
# The `gpu` extra of pyproject.toml (Gated DeltaNet's fla-core), installed on GPU hosts and carried in the offline
# wheelhouse; the `mimo` extra (Mamba-3 MIMO's TileLang) and what it pulls in beyond the host's torch/numpy, 77 MB:
# downloaded apart (wheelhouse-mimo/, `make wheelhouse-mimo`) since the wheelhouse and the built kernels must fit
# in one 64 MiB transfer to an offline host, and installed only where they can be had. quack-kernels and
# nvidia-cutlass-dsl, which mamba-ssm also declares, serve only Mamba-3's CuTe decode step, which training never
# calls: left out.
GPU_DEPS    := fla-core==0.6.0
MIMO_DEPS   := tilelang==0.1.8 apache-tvm-ffi==0.1.9 torch-c-dlpack-ext==0.1.5 cloudpickle ml-dtypes psutil tqdm \
               z3-solver==4.15.4.0
WHEEL_PLATFORMS := --only-binary :all: --python-version $(WHEEL_PY) --implementation cp \
	--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	--platform manylinux_2_25_x86_64
PROFILE_ARGS ?= mamba2-lm --preset small
# Extras of ssmprof to install: `dev` (pytest, ruff, mypy) where the network is; `test` (pytest) from a wheelhouse: an
# offline GPU host runs the tests but not the linter, whose 11 MB wheel would not fit beside the kernels in one
# 64 MiB transfer. `make lint` installs ruff and mypy where missing.
EXTRAS      ?= $(if $(WHEELHOUSE),test,dev)
# Extra pytest arguments for `make test`, e.g. PYTEST_ARGS='-m gpu' (a GPU host's suite in parts, each part within
# one 10-minute device call).
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`. Where no GPU is present, one per CPU: CI's two cores take the suite in
# about half the time of one process. Each test file runs on one worker (`--dist loadfile`), so that a module
# fixture is set up once; the session fixtures that several files read are made once per run
# (tests/conftest.py). On a GPU host, 0 (one process): the GPU tests time kernels and fill the GPU's memory, and
# two workers on one GPU would disturb each other.
TEST_WORKERS ?= $(if $(HAS_GPU),0,logical)

HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
ifneq ($(WHEELHOUSE),)
PIP_SOURCE := --no-index --find-links $(abspath $(WHEELHOUSE))
endif
# mamba-ssm / causal-conv1d: pure-Python install (their CUDA extensions come from `make kernels`);
# FORCE_BUILD stops setup.py from downloading prebuilt binaries, --no-deps skips the deps it declares for Mamba-3
# (tilelang, apache-tvm-ffi: the `gpu` extra on GPU hosts; quack-kernels, ninja: not needed to train). They are
# installed last: pip checks the declared
# dependencies of what is already installed whenever it installs their dependencies (torch, einops, ...),
# and would print resolver ERROR lines about those skipped ones; with --no-deps it checks nothing.
SDIST_ENV := MAMBA_FORCE_BUILD=TRUE MAMBA_SKIP_CUDA_BUILD=TRUE \
             CAUSAL_CONV1D_FORCE_BUILD=TRUE CAUSAL_CONV1D_SKIP_CUDA_BUILD=TRUE

.PHONY: install kernels wheelhouse wheelhouse-mimo test lint profile results golden gpu-check clean

# Present once `make install` has finished: what `profile`, `test`, `kernels` and `lint` need first.
# (.DELETE_ON_ERROR: an install that fails after pip wrote the entry point removes it, so the next run retries.)
.DELETE_ON_ERROR:
$(BIN)/ssmprof:
	$(MAKE) install

install:
ifeq ($(HAS_GPU),1)
	@# Keep the host's CUDA build of torch/triton: the venv sees the host interpreter's packages,
	@# also where that interpreter is itself a venv (--system-site-packages alone would skip those).
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(PYTHON) -c "import site; print(*site.getsitepackages(), sep='\n')" \
		> "$$($(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/host-site-packages.pth"
else
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(PIP_SOURCE) "$(CPU_TORCH)" $(HOST_STACK)
endif
	$(BIN)/pip install -q $(PIP_SOURCE) --no-build-isolation "setuptools>=61" wheel 2>/dev/null || true
	$(BIN)/pip install -q $(PIP_SOURCE) --no-build-isolation -e ".$(if $(EXTRAS),[$(EXTRAS)])"
ifeq ($(HAS_GPU),1)
	$(BIN)/pip install -q $(PIP_SOURCE) --no-build-isolation -e ".[gpu]"
	$(BIN)/pip install -q $(PIP_SOURCE) $(if $(WHEELHOUSE),--find-links $(abspath wheelhouse-mimo)) \
		--no-build-isolation -e ".[mimo]" 2>/dev/null \
		|| echo "Mamba-3 MIMO's TileLang could not be installed here (make wheelhouse-mimo): MIMO runs will say so"
endif
	$(SDIST_ENV) $(BIN)/pip install -q $(PIP_SOURCE) --no-build-isolation --no-deps --no-binary mamba-ssm,causal-conv1d \
		"$(MAMBA_SSM)" "$(CAUSAL_CONV)"
	@$(BIN)/ssmprof doctor

kernels: $(BIN)/ssmprof
	@# builds only what is missing for this torch and GPU architecture ("already built" otherwise)
	WHEELHOUSE=$(WHEELHOUSE) $(BIN)/python -m ssmprof.kernel_build

wheelhouse: $(BIN)/ssmprof
	@# Run where the network is; installs first (torch is needed to read the sdists). The wheels cover what
	@# the GPU host lacks besides its own torch/triton stack, the test extra (pytest, pytest-xdist) and the build tools
	@# (setuptools, wheel: the sdists build with them, and torch may ask for a newer setuptools than the venv's).
	mkdir -p wheelhouse
	$(SDIST_ENV) $(BIN)/pip download -q --no-deps --no-binary :all: --no-build-isolation -d wheelhouse \
		"$(MAMBA_SSM)" "$(CAUSAL_CONV)"
	$(BIN)/pip download -q $(WHEEL_PLATFORMS) -d wheelhouse nvtx plotly "ncu-report==2025.3.1" narwhals pydantic tabulate \
		nvidia-ml-py pytest pytest-xdist execnet setuptools wheel
	$(BIN)/pip download -q $(WHEEL_PLATFORMS) --no-deps -d wheelhouse $(GPU_DEPS)
	@ls -la wheelhouse

wheelhouse-mimo: $(BIN)/ssmprof
	$(BIN)/pip download -q $(WHEEL_PLATFORMS) --no-deps -d wheelhouse-mimo $(MIMO_DEPS)

test: $(BIN)/ssmprof
ifeq ($(HAS_GPU),1)
	@# the GPU tests compare the fused kernels with their references: build them first where they are missing
	$(MAKE) kernels
endif
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: $(BIN)/ssmprof
	@test -x $(BIN)/ruff || $(BIN)/pip install -q $(PIP_SOURCE) "ruff>=0.6"
	@test -x $(BIN)/mypy || $(BIN)/pip install -q $(PIP_SOURCE) "mypy>=1.10"
	$(BIN)/ruff check ssmprof tests benchmarks scripts examples
	$(BIN)/mypy

profile: $(BIN)/ssmprof
ifeq ($(HAS_GPU),1)
	$(MAKE) kernels
	$(BIN)/ssmprof profile $(PROFILE_ARGS) --out runs --report runs/report.html
else
	@echo "No NVIDIA GPU here: rendering the reference runs bundled with ssmprof (H100 and H200), not this machine."
	$(BIN)/ssmprof reference --out runs/reference
endif

results: $(BIN)/ssmprof
	$(BIN)/ssmprof results --readme docs/results.md

golden: $(BIN)/ssmprof
	@# the reviewed snapshots of every table the reference pages show (tests/test_golden.py): after a change that
	@# moves them on purpose, run this, review `git diff tests/data/golden-bundled-runs` and commit it with the change;
	@# docs/columns.md, the column reference, is written from the snapshots' headers
	$(BIN)/python scripts/golden.py
	$(BIN)/python scripts/column_reference.py

gpu-check:
	bash scripts/gpu_check.sh

clean:
	rm -rf build .pytest_cache .ruff_cache
