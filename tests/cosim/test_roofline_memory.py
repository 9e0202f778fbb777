"""The honest roofline: the memory roof of a run's DRAM timing and bursts
(:func:`cosim.bench.roofline.memory_roof`), the DMA bursts seen by :class:`BurstTap`, and the
bound holding on timed runs."""

import pytest

from cosim.bench.bursts import BurstProfile, BurstTap
from cosim.bench.roofline import max_burst_beats, memory_roof, roofline
from cosim.bench.sweep_tasks import model_point
from cosim.bench.workloads import workload_job
from hw.config import NPUConfig
from hw.isa import COMMAND_BYTES, Csr, LocalMem, queue_csr
from sw.model import ModelBackend
from sw.runtime import CommandList

CFG = NPUConfig(dma_outstanding=2)     # 8x8, 8-byte AXI beats, 2 outstanding reads


def _profile(read_beats_per_burst: int, write_beats_per_burst: int) -> BurstProfile:
    return BurstProfile(read_bursts=10, read_beats=10 * read_beats_per_burst, write_bursts=10,
                        write_beats=10 * write_beats_per_burst, loads=1, stores=1)


def test_ideal_memory_is_the_bus():
    m = memory_roof(CFG, 1000, 0)
    assert max_burst_beats(CFG) == 256 and m["read_burst_beats"] == 256
    assert m["bytes_per_cycle"] == 8 and m["limit"] == "bandwidth"
    assert not m["latency_limited"]
    # reads and writes share the one bus budget
    assert memory_roof(CFG, 600, 400)["memory_cycles"] == pytest.approx(1000 / 8)


def _dma_reads(beats_per_burst, read_bytes):
    """A profile whose DMA reads are ``read_bytes`` in bursts of ``beats_per_burst``."""
    beats = read_bytes // CFG.axi_data_bytes
    return BurstProfile(read_bursts=beats // beats_per_burst, read_beats=beats,
                        write_bursts=10, write_beats=40, loads=1, stores=1)


def test_read_latency_by_littles_law():
    # 4-beat read bursts, 2 in flight, latency 1000: 2 * 4 * 8 bytes per (1000 + 3) cycles
    m = memory_roof(CFG, 64_000, 0, "latency=1000", _dma_reads(4, 64_000))
    assert m["bytes_in_flight"] == 64
    assert m["latency_bytes_per_cycle"] == pytest.approx(64 / 1003)
    assert m["bytes_per_cycle"] == pytest.approx(64 / 1003)
    assert m["limit"] == "read" and m["latency_limited"]
    # twice the outstanding reads, twice the roof
    m4 = memory_roof(NPUConfig(dma_outstanding=4), 64_000, 0, "latency=1000",
                     _dma_reads(4, 64_000))
    assert m4["bytes_per_cycle"] == pytest.approx(2 * m["bytes_per_cycle"])
    # short latency: the channel, with one idle cycle per 4-beat burst, is the limit
    short = memory_roof(CFG, 64_000, 0, "ideal", _dma_reads(4, 64_000))
    assert short["bytes_per_cycle"] == pytest.approx(8 * 4 / 5) and not short["latency_limited"]
    # command bytes beyond the DMA's ride in the fetch's own read slot (bursts of 4 commands,
    # 16 beats: 128 bytes per 1015 cycles): 3,200 of them fit in the DMA's time
    c = memory_roof(CFG, 67_200, 0, "latency=1000", _dma_reads(4, 64_000))
    assert c["memory_cycles"] == pytest.approx(m["memory_cycles"])
    c2 = memory_roof(CFG, 64_000 + 128_000, 0, "latency=1000", _dma_reads(4, 64_000))
    assert c2["memory_cycles"] == pytest.approx(128_000 / (128 / 1015))


def test_bandwidth_limit_and_backpressure():
    m = memory_roof(CFG, 3000, 1000, "bw=2")
    assert m["peak_bytes_per_cycle"] == 2 and m["bytes_per_cycle"] == pytest.approx(2)
    assert m["memory_cycles"] == pytest.approx(4000 / 2)
    p = memory_roof(CFG, 8000, 0, "r_stall=0.5", _profile(8, 8))
    assert p["read_bytes_per_cycle"] == pytest.approx(8 * 8 / 9 * 0.5)
    w = memory_roof(CFG, 0, 8000, "w_stall=0.25", _profile(8, 8))
    assert w["write_bytes_per_cycle"] == pytest.approx(8 * 8 / 9 * 0.75) and w["limit"] == "write"
    # the bench's GEMM bound uses that roof
    r = roofline(CFG, 16, 16, 16, dram="bw=0.5")
    assert r["bytes_per_cycle"] == pytest.approx(0.5)
    assert r["bound"] == pytest.approx(0.5 * (16 ** 3 / (3 * 16 * 16)) / 64)


def test_burst_tap_forgets_the_slots_of_a_ring_set_up_again():
    """Setting up a queue's ring again (``RING_BASE``, ``RING_SIZE``) starts a new ring: a
    command written into the old ring and never published is not counted, even when a
    doorbell of the new ring covers its slot without the host having written it there."""
    cfg = NPUConfig()
    tap = BurstTap(ModelBackend(cfg), cfg)
    load, nop = CommandList(), CommandList()
    load.dma_load(mem=LocalMem.SPAD, dram_addr=0x8000, dram_stride=cfg.spad_row_bytes,
                  row_bytes=cfg.spad_row_bytes, n_rows=2, local_row=0, local_stride=1)
    nop.nop()
    ring_a, ring_b = 0x1000, 0x2000
    for base in (ring_a, ring_b):
        tap.csr_write(queue_csr(0, Csr.RING_BASE), base)
        tap.csr_write(queue_csr(0, Csr.RING_SIZE), 8)
        tap.csr_write(queue_csr(0, Csr.TAIL), 0)
        if base == ring_a:      # slot 2 of the first ring, never published
            tap.mem_write(ring_a + 2 * COMMAND_BYTES, load[0].raw)
    tap.mem_write(ring_b, nop[0].raw + nop[0].raw)
    tap.csr_write(queue_csr(0, Csr.TAIL), 3)       # slots 0..2 of the new ring
    assert tap.profile.loads == 0 and tap.profile.read_bursts == 0
    # a load published through the new ring is counted, with its bursts
    tap.mem_write(ring_b + 3 * COMMAND_BYTES, load[0].raw)
    tap.csr_write(queue_csr(0, Csr.TAIL), 4)
    assert tap.profile.loads == 1 and tap.profile.read_bursts >= 1


def test_burst_tap_counts_every_published_dma_command():
    """On a stream longer than the ring (it wraps), the tap sees every DMA command the device
    retires, and its read beats are at most the DRAM reads that are not command fetches."""
    cfg = NPUConfig()
    res = workload_job(ModelBackend(cfg), workload="minilm-block:256")   # 8,956 commands
    c, b = res["counters"], res["bursts"]
    commands = sum(v for k, v in c.items() if k.startswith("retired."))
    assert commands > 4096                                   # the largest ring
    assert b["loads"] == c["retired.load"] > 0 and b["stores"] == c["retired.store"] > 0
    assert 0 < b["read_beats"] * cfg.axi_data_bytes <= c["bytes_read"] - commands * COMMAND_BYTES
    assert 0 < b["write_beats"] * cfg.axi_data_bytes <= c["bytes_written"]
    assert b["read_bursts"] <= b["read_beats"] and b["mean_read_beats"] == pytest.approx(
        b["read_beats"] / b["read_bursts"])


@pytest.mark.parametrize("dram", ["ideal", "latency=200", "latency=600,wlatency=100"])
@pytest.mark.parametrize(("config", "workload"), [("4x4", "gemm:32x64x48"),
                                                  ("8x8,dma_outstanding=4", "gemm:1x128x256"),
                                                  ("8x8", "minilm-block:8")])
def test_no_timed_run_beats_its_bound(config, workload, dram):
    res = model_point(config, dram, workload)
    assert res["status"] == "ok"
    assert res["utilization"] <= res["roofline"]["bound"] + 1e-12
