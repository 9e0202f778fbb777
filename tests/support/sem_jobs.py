"""Backend-agnostic jobs on semaphores near their 2**32 wrap (run on the RTL through
:func:`cosim.tb.harness.run_job`).

A job takes a :class:`sw.backend.Backend` and returns a JSON-serialisable dict that records,
step by step, which waits had been released; the test compares it with the serial-number rule
(:func:`hw.isa.sem_reached`). The semaphore is set with the host write of
:func:`hw.isa.sem_csr`.
"""

from hw.isa import LocalMem, sem_csr, sem_last_csr
from sw.runtime import CommandList, Device

#: hand-picked semaphores (the runtime's pool hands out the highest ids first)
SEM, FLAG = 0, 1
START = 0xFFFF_FFFE     #: SEM's value before the first signal
SETTLE_CYCLES = 400     #: cycles given to a released command to run (it takes < 100)


def _settle(backend) -> None:
    run = getattr(backend, "run_cycles", None)
    if run is not None:
        run(SETTLE_CYCLES)


def _zero_dma(*, wait, signal) -> bytes:
    """A zero-length DMA load: an engine command that moves nothing, waits and signals."""
    cmds = CommandList()
    cmds.dma_load(mem=LocalMem.SPAD, dram_addr=0, dram_stride=0, row_bytes=0, n_rows=0,
                  local_row=0, local_stride=0, wait=wait, signal=signal)
    return cmds[0].raw


def _wait_then_fence(target: int, addr: int, value: int) -> list[bytes]:
    """A WAIT command (a processor command) on SEM, then a fence writing ``value``."""
    cmds = CommandList()
    cmds.wait(SEM, target)
    cmds.fence(addr=addr, value=value)
    return [c.raw for c in cmds]


def sem_wrap(backend) -> dict:
    """Drive SEM from ``START`` across 2**32 one SIGNAL at a time, with waits whose targets
    wrap (queued in other streams, so each blocks only its own queue or engine FIFO):

    * ``wait2``: WAIT for 2 then a fence (released at the 4th signal, value 2);
    * ``dma1``: a zero-length DMA load waiting for 1, signalling FLAG (released at the 3rd);
    * ``behind``: a DMA load waiting for ``0x7FFF_FFFF`` (``2**31 - 1`` behind: at once).

    After the wrap (value 2): WAIT for ``0x8000_0003`` (``2**31 - 1`` behind, released at
    once), a DMA waiting for ``0xFFFF_FFF0`` (18 behind, at once; a plain ``>=`` never
    releases it) and WAIT for ``0x8000_0002`` (exactly 2**31 ahead: not reached), which a host
    write of ``0x8000_0002`` then releases. Returns the state after each step."""
    device = Device(backend)
    marks = device.alloc(64)
    marks.write(bytes(64))
    word = lambda i: int.from_bytes(marks.read(4, 4 * i), "little")  # noqa: E731
    waiters = [device.create_stream() for _ in range(3)]
    steps = []

    def record(what: str, signal_index: int | None = None) -> None:
        _settle(backend)
        steps.append({"step": what, "sem": device.semaphore(SEM), "flag": device.semaphore(FLAG),
                      "words": [word(i) for i in range(3)],
                      "sem_last": backend.csr_read(sem_last_csr(SEM)),
                      "last_signal": device.last_signal(SEM), "signal_index": signal_index})

    backend.csr_write(sem_csr(SEM), START)
    record("set")
    waiters[0].launch(_wait_then_fence(2, marks.addr, 0xA2), ordered=False)
    waiters[1].launch([_zero_dma(wait=(SEM, 1), signal=FLAG)], ordered=False)
    waiters[2].launch([_zero_dma(wait=(SEM, 0x7FFF_FFFF), signal=FLAG)], ordered=False)
    record("queued")
    for k in range(1, 5):
        cmds = CommandList()
        cmds.signal(SEM)
        index = device.default_stream.next_index
        device.default_stream.launch(cmds)
        device.default_stream.synchronize()
        record(f"signal{k}", index)
    # after the wrap: targets behind and exactly 2**31 ahead
    waiters[0].launch(_wait_then_fence(0x8000_0003, marks.addr + 4, 0xB3), ordered=False)
    waiters[1].launch([_zero_dma(wait=(SEM, 0xFFFF_FFF0), signal=FLAG)], ordered=False)
    waiters[2].launch(_wait_then_fence(0x8000_0002, marks.addr + 8, 0xC2), ordered=False)
    record("behind")
    backend.csr_write(sem_csr(SEM), 0x8000_0002)
    record("set_ahead")
    for stream in waiters:       # nothing is left waiting
        stream.synchronize(timeout_cycles=20_000)
    return {"steps": steps, "default_queue": device.default_stream.queue}
