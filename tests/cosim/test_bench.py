"""``npu bench``: the roofline arithmetic, and the sweep/table/JSON code on the functional model
(tiny sizes, no simulation; the RTL figures come from running ``npu bench`` itself)."""

import json

import pytest

from cosim.bench import format_bench, kernel_dram_bytes, roofline, run_bench
from cosim.bench.roofline import attainable, gemm_min_dram_bytes, gemm_point, roofline_png
from cosim.cli import main
from hw.config import NPUConfig
from sw.kernels.linear import plan_linear


def test_roofline_arithmetic():
    r = roofline(NPUConfig(rows=16, cols=16), 64, 64, 64)
    assert r["min_dram_bytes"] == 3 * 64 * 64
    assert r["operational_intensity"] == pytest.approx(64 / 3)
    assert r["bound"] == pytest.approx(8 * 64 / 3 / 256)       # 64-bit AXI: 8 B/cycle
    assert r["bound_kind"] == "memory"
    assert roofline(NPUConfig(), 512, 512, 512)["bound"] == 1.0


def test_roofline_changes_roof_at_the_ridge():
    # 8x8 array, 8 B/cycle: ridge at OI = 64 / 8 = 8 MACs/byte; a square GEMM has OI = n / 3
    cfg = NPUConfig()
    at, below = roofline(cfg, 24, 24, 24), roofline(cfg, 23, 23, 23)
    assert at["operational_intensity"] == 8 and at["bound_kind"] == "compute"
    assert at["bound"] == 1.0
    assert below["bound_kind"] == "memory"
    assert below["bound"] == pytest.approx(8 * (23 / 3) / 64)
    assert attainable(1.0, 64, 8) == 8 and attainable(100.0, 64, 8) == 64
    assert attainable(8.0, 64, 8) == 64


def test_roofline_point_and_bound_share_intensity():
    cfg = NPUConfig(rows=4, cols=4, axi_data_bits=32)
    m, k, n = 16, 40, 24
    point = gemm_point("g", m, k, n, dram_bytes=gemm_min_dram_bytes(m, k, n), cycles=1000)
    rl = roofline(cfg, m, k, n)
    assert point.macs == rl["macs"] == m * k * n
    assert point.intensity == pytest.approx(rl["operational_intensity"])
    assert rl["bound"] == pytest.approx(attainable(point.intensity, cfg.n_pes, 4) / cfg.n_pes)


def test_roofline_png(tmp_path):
    pts = [gemm_point("16x40x24", 16, 40, 24, dram_bytes=2500, cycles=900),
           gemm_point("64x64x64", 64, 64, 64, dram_bytes=20000, cycles=5000)]
    assert pts[0].macs == 16 * 40 * 24 and pts[0].intensity == pytest.approx(15360 / 2500)
    assert pts[0].performance == pytest.approx(15360 / 900)
    r = roofline_png(tmp_path / "r.png", pts, rows=8, cols=8, bytes_per_cycle=8)
    assert r.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        roofline_png(tmp_path / "r.png", pts, rows=0, cols=8, bytes_per_cycle=8)


def test_kernel_bytes_at_least_the_minimum():
    cfg = NPUConfig()
    for size in (8, 40, 128):
        b = kernel_dram_bytes(cfg, plan_linear(cfg, size, size, size, double_buffer=True))
        assert b["total"] >= roofline(cfg, size, size, size)["min_dram_bytes"]


def test_bench_on_model_writes_json_and_table(tmp_path):
    path = tmp_path / "bench.json"
    res = run_bench([NPUConfig(rows=4, cols=4)], [8, 20], attention_len=0, backend="model",
                    json_path=path)
    rows = res["gemm"]["4x4"]["rows"]
    assert [r["size"] for r in rows] == [8, 20] and all(r["bit_exact"] for r in rows)
    assert json.loads(path.read_text())["gemm"]["4x4"]["rows"][1]["macs"] == 20 ** 3
    assert res["cosim_speed"]["verilator_cpp_harness"].startswith("not measured")
    table = format_bench(res)
    assert "4x4" in table and "bound" in table


def test_bench_table_columns_fit_long_names_and_shapes():
    """A long configuration name and a GEMV shape keep their columns apart (they ran together:
    ``8x8_cmd_fifo_depth41x384x1536``)."""
    res = run_bench([NPUConfig(rows=4, cols=4, cmd_fifo_depth=4)], [8], shapes=[(1, 24, 16)],
                    attention_len=0, backend="model")
    lines = format_bench(res).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("config"))
    rows = [line.split() for line in lines[header + 1:header + 3]]
    assert [r[:2] for r in rows] == [["4x4,cmd_fifo_depth=4", "8"],
                                     ["4x4,cmd_fifo_depth=4", "1x24x16"]]
    assert lines[header].split()[:3] == ["config", "size", "cycles"]


def test_bench_speed_table_fits_long_configuration_names():
    """The co-simulation speed table's run column takes the longest run (``attention L=32
    8x8,dma_outstanding=2`` pushed its figures out of their columns)."""
    res = run_bench([NPUConfig(rows=4, cols=4)], [8], attention_len=0, backend="model")
    res["cosim_speed"]["runs"] = [
        {"run": run, "cycles": cycles, "job_seconds": 1.0, "cycles_per_second": cycles}
        for run, cycles in (("gemm 8x8", 100), ("attention L=32 8x8,dma_outstanding=2",
                                                 123456))]
    lines = [line for line in format_bench(res).splitlines() if line.endswith("cycles/s")]
    assert len(lines) == 2
    assert lines[0].index(" cycles ") == lines[1].index(" cycles ")
    assert "8x8,dma_outstanding=2 " in lines[1]


def test_bench_progress_names_only_the_gemms_there_are(capsys):
    """The progress line lists the square sizes and the shapes in words, and only the kinds
    there are (it printed ``GEMM sweep [8] [] on ...`` and ``[[1, 24, 16]]``)."""
    said = []
    res = run_bench([NPUConfig(rows=4, cols=4)], [], shapes=[(1, 24, 16)], attention_len=0,
                    backend="model", progress=said.append)
    assert said[0] == "GEMM sweep: shapes 1x24x16 on 4x4 (model, DRAM ideal)..."
    assert [r["shape"] for r in res["gemm"]["4x4"]["rows"]] == [[1, 24, 16]]
    argv = ["bench", "--backend", "model", "--configs", "4x4", "--attention-len", "0",
            "--sizes", "8", "16"]
    assert main(argv) == 0
    assert "GEMM sweep: sizes 8, 16 on 4x4 (model, DRAM ideal)...\n" in capsys.readouterr().err
    assert main([*argv, "--shapes", "1,24,16", "2,8,8"]) == 0
    assert ("GEMM sweep: sizes 8, 16; shapes 1x24x16, 2x8x8 on 4x4 (model, DRAM ideal)...\n"
            in capsys.readouterr().err)


def test_cli_bench_model(tmp_path, capsys):
    path = tmp_path / "b.json"
    assert main(["bench", "--backend", "model", "--configs", "4x4", "--sizes", "8",
                 "--attention-len", "0", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "untimed backend" in out
    # the functional model has no DRAM timing (it printed ideal's while refusing --dram)
    assert "DRAM timing: none: the functional model is untimed" in out
    assert "read latency" not in out
    assert json.loads(path.read_text())["sizes"] == [8]


def test_cli_bench_names_configurations_as_configs_takes_them(tmp_path, capsys):
    """The configuration names of the table and the JSON are what ``--configs`` accepts
    (they were ``4x4_cmd_fifo_depth4``, which it refuses): a round trip gives the same
    configurations."""
    path = tmp_path / "b.json"
    argv = ["bench", "--backend", "model", "--sizes", "8", "--attention-len", "0", "--json",
            str(path), "--configs"]
    assert main([*argv, "4x4,cmd_fifo_depth=4", "4x4"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(path.read_text())
    names = doc["configs"]
    assert names == list(doc["gemm"]) == ["4x4,cmd_fifo_depth=4", "4x4"]
    table = out.splitlines()
    header = next(i for i, line in enumerate(table) if line.startswith("config"))
    assert [line.split()[0] for line in table[header + 1:header + 3]] == names
    assert main([*argv, *names]) == 0
    assert json.loads(path.read_text())["configs"] == names


def test_transformer_ops_cost_variants_reach_the_golden_model():
    """The GELU and LayerNorm variants of ``cosim.bench.transformer_ops_cost`` were swapped
    on the ``sw.golden`` package, which the golden model's own functions never look up: every
    variant's encoder cosine was the unmodified model's. Inside ``_patched`` the golden
    GELU and LAYERNORM follow the variant; after it, the model is restored."""
    import numpy as np

    from cosim.bench.transformer_ops_cost import _patched
    from sw.golden import gelu_int, layernorm_int

    rng = np.random.default_rng(0)
    acc = rng.integers(-5000, 5000, (4, 8))
    z = np.zeros(8, np.int64)
    g_args = (acc, z, np.full(8, 1 << 20), np.full(8, 12), np.full(8, 1 << 20), np.full(8, 28))
    a = rng.integers(-128, 128, (2, 16), dtype=np.int8)
    ln_args = (a, a, np.full(16, 1 << 20), np.full(16, 1 << 20), 12, np.full(16, 1 << 12),
               np.zeros(16, np.int64), 12)
    g0, ln0 = gelu_int(*g_args), layernorm_int(*ln_args)
    with _patched(gelu=lambda y: np.zeros_like(y)):
        assert not gelu_int(*g_args).any()
    with _patched(row_constants=lambda s, q, n: (0, 0, 0)):
        assert not np.array_equal(layernorm_int(*ln_args), ln0)
    assert np.array_equal(gelu_int(*g_args), g0) and np.array_equal(layernorm_int(*ln_args), ln0)
