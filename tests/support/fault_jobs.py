"""Jobs of the bus-fault tests (``tests/cosim/test_bus_faults.py``): on any backend with
``set_bus_fault`` (RTL, functional model, performance model), the DRAM answers one site's
burst with SLVERR or DECERR while another stream copies its own data.

:func:`bus_fault_site` builds the scene, injects the fault, and reports what the device did:
the typed error, every DRAM byte that changed outside the rings (as ranges), whether the
other stream's copy is right, what the failing command left in local memory, the fault hits
the DRAM model counted (RTL only) and whether the same work succeeds once the fault is
cleared. :func:`layout` gives the addresses the test needs to state its expectations.
"""

from __future__ import annotations

import numpy as np

from hw.isa import COMMAND_BYTES, LocalMem
from sw.model.faults import BusFault
from sw.runtime import Device, DeviceError
from sw.runtime.commands import CommandList

SITES = ("fetch", "load", "load_spad", "store", "fence")
ROW_BYTES = 512           #: bytes per DRAM row of the victim's transfer
N_ROWS = 4
STRIDE = 1024
HEAD = 128                #: row 0 starts this many bytes before a 4 KiB boundary: 2 bursts
FENCE_VALUE = 0xFEED_F00D
OTHER_BYTES = 4096        #: the other stream's copy
OTHER_SPAD_ROW = 2048


def _mem(site: str) -> LocalMem:
    """The load site fills the accumulator (local rows wider than a beat), the others the
    scratchpad (``load_spad``: a load whose local rows may be narrower than a beat, so that a
    beat takes several steps, the failing one too)."""
    return LocalMem.ACC if site == "load" else LocalMem.SPAD


def layout(base: int) -> dict:
    """Addresses of the victim's transfer for a region of 16 KiB at ``base`` (4 KiB
    aligned): ``src``/``dst`` start ``HEAD`` bytes before a 4 KiB boundary, so row 0 is two
    bursts and the fault hits the second (from ``page``)."""
    return {"src": base + 4096 - HEAD, "dst": base + 8192 + 4096 - HEAD,
            "page": base + 4096, "dst_page": base + 8192 + 4096, "fence": base + 0x3F00}


def _local_row_bytes(cfg, site: str) -> int:
    return cfg.acc_row_bytes if _mem(site) == LocalMem.ACC else cfg.spad_row_bytes


def _transfer(cmds: CommandList, cfg, site: str, load: bool, addr: int, *,
              contiguous: bool = False) -> None:
    """The victim's transfer shape (``N_ROWS`` rows of ``ROW_BYTES``, ``STRIDE`` apart, or
    back to back) between DRAM at ``addr`` and local rows 0.. (contiguous)."""
    kw = dict(mem=_mem(site), dram_addr=addr, dram_stride=ROW_BYTES if contiguous else STRIDE,
              row_bytes=ROW_BYTES, n_rows=N_ROWS, local_row=0,
              local_stride=ROW_BYTES // _local_row_bytes(cfg, site))
    (cmds.dma_load if load else cmds.dma_store)(**kw)


def _victim_commands(cfg, site: str, lay: dict) -> CommandList:
    cmds = CommandList()
    _transfer(cmds, cfg, site, True, lay["src"])
    cmds.barrier()
    if site == "fence":
        cmds.fence(addr=lay["fence"], value=FENCE_VALUE, irq=True)
    else:
        _transfer(cmds, cfg, site, False, lay["dst"])
    return cmds


def _fault(site: str, resp: str, lay: dict, ring_slot_addr: int) -> BusFault:
    if site == "fetch":
        return BusFault(reads=True, writes=False, resp=resp, lo=ring_slot_addr,
                        hi=ring_slot_addr + COMMAND_BYTES)
    if site in ("load", "load_spad"):
        return BusFault(reads=True, writes=False, resp=resp, lo=lay["page"] + 64,
                        hi=lay["page"] + 72)
    if site == "store":
        return BusFault(reads=False, writes=True, resp=resp, lo=lay["dst_page"] + 64,
                        hi=lay["dst_page"] + 72)
    return BusFault(reads=False, writes=True, resp=resp, lo=lay["fence"], hi=lay["fence"] + 4)


def _changed(before: bytes, after: bytes, base: int, masks: list[tuple[int, int]]) -> list:
    """``[lo, hi)`` ranges (absolute addresses) where ``after`` differs from ``before``,
    outside ``masks``."""
    diff = np.frombuffer(before, np.uint8) != np.frombuffer(after, np.uint8)
    for lo, hi in masks:
        diff[max(lo - base, 0):max(hi - base, 0)] = False
    idx = np.flatnonzero(np.diff(np.concatenate(([0], diff.view(np.int8), [0]))))
    return [[base + int(a), base + int(b)] for a, b in zip(idx[::2], idx[1::2], strict=True)]


def _other_copy(dev: Device, stream, src, dst) -> None:
    cfg = dev.config
    cmds = CommandList()
    kw = dict(mem=LocalMem.SPAD, dram_stride=OTHER_BYTES, row_bytes=OTHER_BYTES, n_rows=1,
              local_row=OTHER_SPAD_ROW, local_stride=0)
    cmds.dma_load(dram_addr=src.addr, **kw)
    cmds.barrier()
    cmds.dma_store(dram_addr=dst.addr, **kw)
    assert OTHER_BYTES % cfg.spad_row_bytes == 0
    stream.launch(cmds)


def bus_fault_site(backend, *, site: str, resp: str) -> dict:
    """Inject a ``resp`` (``"slverr"``/``"decerr"``) fault at ``site`` (:data:`SITES`) while
    another stream works; see the module docstring for what is returned."""
    dev = Device(backend)
    cfg = dev.config
    other, victim = dev.create_stream(), dev.create_stream()
    rng = np.random.default_rng(len(site) * 7 + len(resp))
    region = dev.alloc(16384, align=4096)
    lay = layout(region.addr)
    data = bytearray(rng.integers(0, 256, 16384, np.uint8).tobytes())
    for r in range(N_ROWS):     # dst rows start as the complement of src rows: never equal
        s = lay["src"] - region.addr + r * STRIDE
        d = lay["dst"] - region.addr + r * STRIDE
        data[d:d + ROW_BYTES] = bytes(b ^ 0xFF for b in data[s:s + ROW_BYTES])
    backend.mem_write(region.addr, bytes(data))
    o_src = dev.upload(rng.integers(0, 256, OTHER_BYTES, np.uint8))
    o_dst = dev.upload(np.zeros(OTHER_BYTES, np.uint8))
    check = dev.upload(np.zeros(N_ROWS * ROW_BYTES, np.uint8))
    # local memory before: a known pattern in the victim's rows
    init_bytes = rng.integers(0, 256, N_ROWS * ROW_BYTES, np.uint8).tobytes()
    init = dev.upload(np.frombuffer(init_bytes, np.uint8))
    pre = CommandList()
    _transfer(pre, cfg, site, True, init.addr, contiguous=True)
    victim.launch(pre)
    victim.synchronize()
    # The victim's commands land at the next ring slots; the fetch fault hits the third.
    slot = (victim._tail + 2) % victim.ring_size
    fault = _fault(site, resp, lay, victim.ring.addr + slot * COMMAND_BYTES)
    bufs = (region, o_src, o_dst, check, init)
    lo, hi = min(b.addr for b in bufs), max(b.addr + b.nbytes for b in bufs)
    rings = [(s.ring.addr, s.ring.addr + s.ring_size * COMMAND_BYTES) for s in (other, victim)]
    fence_words = [(s._fence_word.addr, s._fence_word.addr + 4) for s in (other, victim)]
    before = backend.mem_read(lo, hi - lo)

    backend.set_bus_fault(fault)
    counters = dev.counters()
    _other_copy(dev, other, o_src, o_dst)
    victim.launch(_victim_commands(cfg, site, lay))
    error = None
    try:
        victim.synchronize(timeout_cycles=2_000_000)
    except DeviceError as e:
        error = {"code": int(getattr(e.code, "value", e.code)), "queue": e.queue,
                 "index": e.command_index, "opcode": e.opcode, "addr": e.address}
    other.synchronize(timeout_cycles=2_000_000)
    counters = dict(dev.counters() - counters)
    after = backend.mem_read(lo, hi - lo)
    hits = getattr(backend, "bus_fault_hits", None)
    other_ok = o_dst.read(OTHER_BYTES) == o_src.read(OTHER_BYTES)
    changed = _changed(before, after, lo, rings + fence_words + [(o_dst.addr, o_dst.addr
                                                                  + OTHER_BYTES)])

    # What the failing command left in the victim's local rows: store them out (no fault).
    backend.set_bus_fault(None)
    got = _store_local(victim, cfg, site, check)
    src = bytes(after[lay["src"] - lo:lay["src"] - lo + N_ROWS * STRIDE])
    local_rows = _classify(got, src, init_bytes, _local_row_bytes(cfg, site))
    # Recovery: the same work succeeds once the fault is cleared.
    victim.launch(_victim_commands(cfg, site, lay))
    victim.synchronize(timeout_cycles=2_000_000)
    final = backend.mem_read(region.addr, 16384)
    return {"error": error, "changed": changed, "other_ok": bool(other_ok), "hits": hits,
            "local_rows": local_rows, "queues": [other.queue, victim.queue],
            "layout": lay, "recovered": _recovered(final, region.addr, lay, site),
            "fault": fault.pins(), "counters": counters}


def _store_local(victim, cfg, site: str, check) -> bytes:
    cmds = CommandList()
    _transfer(cmds, cfg, site, False, check.addr, contiguous=True)
    victim.launch(cmds)
    victim.synchronize()
    return check.read(N_ROWS * ROW_BYTES)


def _classify(got: bytes, src: bytes, init: bytes, local: int) -> list[int]:
    """Per local row of the victim's transfer: 1 if it holds the source data (a load wrote
    it), 0 if it holds the pattern loaded before, -1 if neither."""
    out = []
    for i in range(N_ROWS * ROW_BYTES // local):
        r, off = divmod(i * local, ROW_BYTES)
        row = got[i * local:(i + 1) * local]
        out.append(1 if row == src[r * STRIDE + off:r * STRIDE + off + local]
                   else 0 if row == init[i * local:(i + 1) * local] else -1)
    return out


def _recovered(final: bytes, base: int, lay: dict, site: str) -> bool:
    if site == "fence":
        off = lay["fence"] - base
        return int.from_bytes(final[off:off + 4], "little") == FENCE_VALUE
    src, dst = lay["src"] - base, lay["dst"] - base
    return all(final[src + r * STRIDE:src + r * STRIDE + ROW_BYTES]
               == final[dst + r * STRIDE:dst + r * STRIDE + ROW_BYTES] for r in range(N_ROWS))


def bus_fault_sites(backend, *, cases: list) -> list:
    """:func:`bus_fault_site` for each ``[site, resp]`` of ``cases``, one after the other."""
    return [bus_fault_site(backend, site=site, resp=resp) for site, resp in cases]


def bus_fault_nth(backend) -> dict:
    """The count mode (RTL only): with nothing else on the bus, the first read burst after
    the fault is set is the fetch of the next launch (a single command here: a failing fetch
    burst of several commands is read again one command at a time, which the count mode's
    one failure would not survive: ``read_several``, three commands in one burst, runs without
    error), and the first write burst is the store's first burst."""
    dev = Device(backend)
    stream = dev.create_stream()
    src = dev.upload(np.arange(256, dtype=np.uint8))
    dst = dev.upload(np.zeros(256, np.uint8))
    out = {}
    read = BusFault(mode="nth", reads=True, writes=False, nth=1)
    for name, fault in (("read", read), ("read_several", read),
                        ("write", BusFault(mode="nth", reads=False, writes=True, nth=1,
                                           resp="decerr"))):
        slot = stream.ring.addr + stream._tail * COMMAND_BYTES
        index = stream.next_index
        dst.write(bytes(256))
        backend.set_bus_fault(fault)
        cmds = CommandList()
        kw = dict(mem=LocalMem.SPAD, dram_stride=256, row_bytes=256, n_rows=1, local_row=0,
                  local_stride=0)
        cmds.dma_load(dram_addr=src.addr, **kw)
        if name != "read":
            cmds.barrier()
            cmds.dma_store(dram_addr=dst.addr, **kw)
        stream.launch(cmds)
        try:
            stream.synchronize(timeout_cycles=200_000)
            error = None
        except DeviceError as e:
            error = [int(getattr(e.code, "value", e.code)), e.command_index - index, e.address]
        out[name] = {"error": error, "hits": backend.bus_fault_hits, "slot": slot,
                     "dst": dst.addr, "dst_written": dst.read(256) != bytes(256)}
        backend.set_bus_fault(None)
    return out


def first_fetch(backend) -> dict:
    """One NOP on a fresh device: what its fetch (the first read burst of the run) gives."""
    dev = Device(backend)
    stream = dev.create_stream()
    slot = stream.ring.addr + stream._tail * COMMAND_BYTES
    cmds = CommandList()
    cmds.nop()
    stream.launch(cmds)
    try:
        stream.synchronize(timeout_cycles=100_000)
    except DeviceError as e:
        return {"error": [int(getattr(e.code, "value", e.code)), e.command_index, e.address],
                "slot": slot, "hits": backend.bus_fault_hits}
    return {"error": None, "slot": slot, "hits": backend.bus_fault_hits}


def failing_last_beat(backend) -> dict:
    """A DMA_LOAD of 8 bytes into the scratchpad from 3 bytes before a 4 KiB boundary, with
    the page after the boundary faulted: its second and last burst is one failing beat, which
    on 4x4 (4-byte local rows) would leave a flush word behind; after the error the channel
    drains instead. Returns the error (code, index) and the counters over the launch."""
    dev = Device(backend)
    stream = dev.create_stream()
    region = dev.alloc(8192, align=4096)
    backend.mem_write(region.addr, bytes(range(256)) * 32)
    page = region.addr + 4096
    backend.set_bus_fault(BusFault(reads=True, writes=False, resp="slverr", lo=page,
                                   hi=page + 4096))
    cmds = CommandList()
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=page - 3, dram_stride=8, row_bytes=8, n_rows=1,
                  local_row=0, local_stride=0)
    before = dev.counters()
    stream.launch(cmds)
    error = None
    try:
        stream.synchronize(timeout_cycles=100_000)
    except DeviceError as e:
        error = [int(getattr(e.code, "value", e.code)), e.command_index]
    counters = dict(dev.counters() - before)
    backend.set_bus_fault(None)
    return {"error": error, "counters": counters}
