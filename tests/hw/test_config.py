"""``NPUConfig``'s string form: ``spec`` writes it, ``parse`` reads it back, bad strings get a
``ConfigParseError`` that quotes them."""

import dataclasses
import random

import pytest

from hw.config import ConfigParseError, NPUConfig

# Every legal value of each parameter (rows and cols take any of 2..32), from NPUConfig's checks.
POW2 = [1 << b for b in range(4, 17)]          # spad_rows, acc_rows: 16..65536
LEGAL = {
    "rows": list(range(2, 33)),
    "cols": list(range(2, 33)),
    "spad_rows": POW2,
    "acc_rows": POW2,
    "axi_data_bits": [32, 64, 128, 256],
    "axi_addr_bits": list(range(16, 33)),
    "axi_id_bits": list(range(1, 9)),
    "dram_bytes": [1 << b for b in range(12, 32)],
    "n_queues": list(range(1, 17)),
    "n_sems": list(range(1, 257)),
    "dma_outstanding": list(range(2, 65)),
    "dma_max_burst_beats": list(range(1, 257)),
    "cmd_fifo_depth": list(range(1, 65)),
    "fetch_depth": [1, 2, 4, 8, 16, 32],        # 64 only on a bus of 64 bits or more
    "trace_depth": list(range(2, 1025)),
    "tlb_entries": list(range(0, 65)),
}


def _random_configs(n: int, seed: int = 11) -> list[NPUConfig]:
    """``n`` configurations with random subsets of parameters changed (dram_bytes kept within
    the AXI address range)."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        params = {k: rng.choice(v) for k, v in LEGAL.items() if rng.random() < 0.4}
        addr = params.get("axi_addr_bits", NPUConfig.axi_addr_bits)
        if params.get("dram_bytes", NPUConfig.dram_bytes) > 1 << addr:
            params["dram_bytes"] = 1 << rng.randrange(12, addr + 1)
        if params.get("axi_id_bits") == 1:     # the page walkers need a second ID bit
            params["tlb_entries"] = 0
        out.append(NPUConfig(**params))
    return out


def _single_changes() -> list[NPUConfig]:
    """The default with one parameter changed, for every legal value of every parameter."""
    out = []
    for key, values in LEGAL.items():
        for v in values:
            try:
                out.append(NPUConfig(**{key: v}))
            except ValueError:      # the default 16 MiB DRAM needs a 24-bit address or more,
                if key == "axi_id_bits":     # the page walkers a second ID bit
                    assert v == 1
                    out.append(NPUConfig(axi_id_bits=v, tlb_entries=0))
                    continue
                assert key == "axi_addr_bits" and v < 24
                out.append(NPUConfig(axi_addr_bits=v, dram_bytes=1 << v))
    return out


def test_spec_of_default_and_examples():
    assert NPUConfig().spec == "8x8"
    assert NPUConfig(rows=4, cols=4, spad_rows=1024).spec == "4x4,spad_rows=1024"
    assert NPUConfig(rows=16, cols=8, n_sems=8, spad_rows=64).spec \
        == "16x8,spad_rows=64,n_sems=8"          # field order, not keyword order
    # the default value of a parameter is left out, even when given explicitly
    assert NPUConfig(rows=8, cols=8, n_queues=4).spec == "8x8"


@pytest.mark.parametrize("make", [_single_changes, lambda: _random_configs(600)],
                         ids=["one-parameter", "random"])
def test_spec_round_trips(make):
    configs = make()
    assert len(set(configs)) > 500
    for config in configs:
        spec = config.spec
        back = NPUConfig.parse(spec)
        assert back == config, spec
        assert back.spec == spec and back.name == config.name
        # exactly the parameters that differ from the default appear, once each
        changed = {f.name for f in dataclasses.fields(NPUConfig)
                   if f.name not in ("rows", "cols") and getattr(config, f.name) != f.default}
        assert {item.split("=")[0] for item in spec.split(",")[1:]} == changed, spec


def test_name_unchanged():
    assert NPUConfig().name == "8x8"
    assert NPUConfig(rows=4, cols=4, spad_rows=1024, n_sems=8).name == "4x4_spad_rows1024_n_sems8"


def test_parse_reads_integer_literals_and_either_x():
    assert NPUConfig.parse("8X8,dram_bytes=0x200000") == NPUConfig(dram_bytes=1 << 21)
    assert NPUConfig.parse("4x16,spad_rows=1_024") == NPUConfig(rows=4, cols=16, spad_rows=1024)
    assert NPUConfig.parse(" 4 x 4 ") == NPUConfig(rows=4, cols=4)


@pytest.mark.parametrize("text, message", [
    ("3x3x3", "expected ROWSxCOLS"),
    ("8", "expected ROWSxCOLS"),
    ("", "expected ROWSxCOLS"),
    ("axb", "expected ROWSxCOLS"),
    ("-4x4", "expected ROWSxCOLS"),
    ("\u00b2x8", "expected ROWSxCOLS"),           # a digit that int() does not read
    ("8x8,rows=4", "unknown parameter 'rows'"),
    ("8x8,input_bits=4", "unknown parameter 'input_bits'"),   # a fixed format, not a field
    ("8x8,spad_rows", "is not key=value"),
    ("8x8,", "'' is not key=value"),
    ("8x8,spad_rows=1k", "spad_rows needs an integer, got '1k'"),
    ("8x8,spad_rows=16,spad_rows=32", "spad_rows is given twice"),
    ("40x40", "NPUConfig.rows=40: must be an integer in 2..32"),
    ("8x8,spad_rows=1000", "NPUConfig.spad_rows=1000: must be a power of two"),
    # the address width is what is too small, not the (default) DRAM size
    ("8x8,axi_addr_bits=16", "NPUConfig.axi_addr_bits=16: addresses 64 KiB, less than "
     "dram_bytes=16777216 (16 MiB): give axi_addr_bits >= 24 or a smaller dram_bytes"),
    ("8x8,axi_addr_bits=20,dram_bytes=0x200000", "axi_addr_bits=20: addresses 1 MiB, less "
     "than dram_bytes=2097152 (2 MiB)"),
    ("8x8,dram_bytes=0x3000", "NPUConfig.dram_bytes=12288: must be a power of two"),
])
def test_parse_rejects_with_a_message_that_quotes_the_text(text, message):
    with pytest.raises(ConfigParseError, match="^bad configuration ") as exc:
        NPUConfig.parse(text)
    assert message in str(exc.value) and repr(text) in str(exc.value)
    assert isinstance(exc.value, ValueError)
