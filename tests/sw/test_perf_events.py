"""The performance model's core: the event queue, the counter ledger, the host's clock."""

import pytest

from hw.isa import COUNTER_NAMES
from sw.perf.events import ARBITRATE, DECIDE, UPDATE, EventQueue
from sw.perf.host import HostClock, mem_write_accesses
from sw.perf.ledger import Ledger, intersect, measure, merge, subtract, union


def test_events_run_in_cycle_phase_then_scheduling_order():
    eq = EventQueue()
    log = []
    eq.at(5, DECIDE, log.append, "5d")
    eq.at(5, UPDATE, log.append, "5u")
    eq.at(3, ARBITRATE, log.append, "3a")
    eq.at(5, UPDATE, log.append, "5u2")
    eq.at(4, UPDATE, log.append, "4u")
    eq.run_through(5, UPDATE)
    assert log == ["3a", "4u", "5u", "5u2"]
    assert eq.now == 5 and eq.phase == UPDATE
    eq.run_through(9, ARBITRATE)
    assert log[-1] == "5d" and eq.events_run == 5


def test_an_event_may_schedule_later_in_its_own_phase_but_not_before():
    eq = EventQueue()
    log = []

    def first():
        eq.at(2, UPDATE, log.append, "same phase")
        eq.at(2, DECIDE, log.append, "later phase")
        with pytest.raises(ValueError, match="scheduled from cycle 2 phase 0"):
            eq.at(1, DECIDE, log.append, "past")
    eq.at(2, UPDATE, first)
    eq.run_through(2, ARBITRATE)
    assert log == ["same phase", "later phase"]


def test_run_until_stops_after_the_update_phase_of_the_cycle_that_sets_the_flag():
    eq = EventQueue()
    flag = [False]
    state = {"irq": False}
    log = []

    def raise_irq():
        state["irq"] = True
        flag[0] = True
    eq.at(7, UPDATE, raise_irq)
    eq.at(7, UPDATE, log.append, "other update of cycle 7")
    eq.at(7, DECIDE, log.append, "decide of cycle 7")
    eq.at(3, UPDATE, log.append, "3")
    assert eq.run_until(20, lambda: state["irq"], flag) == 7
    assert log == ["3", "other update of cycle 7"]          # the DECIDE phase is left
    assert eq.run_until(20, lambda: False, flag) is None and log[-1] == "decide of cycle 7"
    eq.at(30, UPDATE, raise_irq)
    assert eq.run_until(30, lambda: True, flag) is None      # cycle 30 is not before 30


def test_interval_algebra():
    assert merge([(5, 7), (1, 3), (3, 4), (6, 9), (10, 10)]) == [(1, 4), (5, 9)]
    x, y = [(0, 10), (20, 30)], [(5, 25)]
    assert union(x, y) == [(0, 30)]
    assert intersect(x, y) == [(5, 10), (20, 25)]
    assert subtract(x, y) == [(0, 5), (25, 30)]
    assert subtract([(0, 10)], [(2, 3), (5, 6)]) == [(0, 2), (3, 5), (6, 10)]
    assert measure([(0, 10), (20, 30)], 5, 25) == 10


def test_ledger_snapshots_count_cycles_before_the_snapshot_exactly_once():
    led = Ledger()
    led.interval("stall.load.dram_read", 10, 20)
    led.point("retired.matrix", 14)
    led.point("bytes_read", 19, 64)
    st = led.open("stall.matrix.sem", 12)
    span = led.busy_start("load", 5)
    mm = led.busy_start("matrix", 8)
    a = led.snapshot(15)
    assert a["stall.load.dram_read"] == 5 and a["retired.matrix"] == 1
    assert a["bytes_read"] == 0 and a["stall.matrix.sem"] == 3
    assert a["busy.load"] == 10 and a["busy.matrix"] == 7
    assert a["dma_busy"] == 10 and a["overlap"] == 7
    st.close(18)
    led.busy_end(span, 16)
    led.busy_end(mm, 30)
    led.busy_start("store", 25)
    b = led.snapshot(40)
    assert b["stall.load.dram_read"] == 10 and b["bytes_read"] == 64
    assert b["stall.matrix.sem"] == 6 and b["busy.load"] == 11 and b["busy.matrix"] == 22
    assert b["busy.store"] == 15 and b["dma_busy"] == 26
    assert b["overlap"] == 8 + 5                            # load to 16, store from 25
    assert set(b) == set(COUNTER_NAMES)
    with pytest.raises(ValueError, match="before the previous"):
        led.snapshot(39)


def test_host_accesses_cost_what_they_cost_on_the_rtl():
    """Numbers measured on the co-simulated RTL (cosim.tb.rtl_backend, internal clock): the job
    starts just before the falling edge of cycle 0; a CSR read samples the cycle it is
    presented in and returns 2 cycles later; a write returns 3 cycles after it is presented;
    a DRAM backdoor access 1; after a timer the next access is presented at once."""
    h = HostClock()
    assert h.csr_read() == 0 and h.cycle() == 2           # measured: cycles 0 -> 2
    assert h.csr_read() == 3 and h.cycle() == 5           # 3 cycles each after that
    assert h.csr_write() == 6 and h.cycle() == 9
    assert h.backdoor() == 10 and h.cycle() == 11
    h.timer(10)
    assert h.cycle() == 21
    assert h.csr_read() == 21 and h.cycle() == 23         # presented at the timer's end
    h.rising(30)                                          # woken by irq rising at edge 30
    assert h.cycle() == 30 and h.csr_write() == 30 and h.cycle() == 33


@pytest.mark.parametrize("addr, size, accesses", [
    (0, 64, 1), (0, 4, 2), (4, 4, 2), (2, 12, 3), (3, 2, 2), (8, 0, 0), (6, 2, 2)])
def test_host_dram_writes_read_the_words_they_cut(addr, size, accesses):
    assert mem_write_accesses(addr, size, 8) == accesses
