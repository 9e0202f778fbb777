"""The per-opcode field generators of the fuzzer (:class:`CommandMaker`): valid commands in a
queue's own memory, and invalid ones of every :class:`hw.isa.ErrorCode`.

Memory a valid command of queue ``q`` may touch (:mod:`cosim.fuzz.layout`): its private
DRAM (less the last :data:`TS_BYTES`, where timestamp fences write: those words differ
between backends, so nothing reads them), shared slots through handoffs (queues without a
window), and its partitions of the scratchpad and the accumulator. Footprints are exact for
DRAM writes and conservative (a superset) elsewhere.
"""

from __future__ import annotations

from hw.isa import (
    LN_MAX_ELEMS,
    ErrorCode,
    LocalMem,
    Opcode,
    act_tile_rows,
    eltwise_param_rows,
    weight_tile_rows,
)
from sw.model.faults import BusFault

__all__ = ["CommandMaker", "TS_BYTES"]

E = ErrorCode
TS_BYTES = 256
_WEIGHTS = {"load": 20, "store": 14, "matmul": 14, "requant": 9, "softmax": 7, "fence": 8,
            "nop": 4, "wait": 6, "signal": 6, "barrier": 6, "gelu": 5, "eltwise": 6,
            "tlb_invalidate": 2}


class CommandMaker:
    """Draws commands for the generator ``g`` (:class:`cosim.fuzz.generate._Gen`)."""

    def __init__(self, g) -> None:
        self.g = g
        self.rng = g.rng
        self.cfg = g.cfg
        self.lay = g.lay
        self.windowed: dict[int, bool] = {}
        self.translated: dict[int, bool] = {}
        self.plan: str | None = None        # "data" or "fetch" bus fault
        #: per translated queue: the page fault planted on its fault page (see vm_fault)
        self.vm_planted: dict[int, dict] = {}

    def _int(self, lo: int, hi: int) -> int:
        """Uniform in ``[lo, hi]``."""
        return self.rng.randint(lo, hi)

    def _chance(self, p: float) -> bool:
        return self.rng.random() < p

    # -- faults ---------------------------------------------------------------------------

    def plan_faults(self, qids: list[int], ring_sizes: dict[int, int]) -> None:
        """Decide the scenario's bus fault: on the poison area (data) or on one ring slot
        (fetch; fixed when that queue's invalid command is drawn)."""
        if not self._chance(self.g.s.p_fault):
            return
        self.plan = "fetch" if self._chance(0.3) else "data"
        if self.plan == "data":
            lo, hi = self.lay.poison_all
            dirs = [(True, False), (False, True), (True, True)][self._int(0, 2)]
            self.g.fault = BusFault(reads=dirs[0], writes=dirs[1],
                                    resp=["slverr", "decerr"][self._int(0, 1)], lo=lo, hi=hi)
        self.ring_sizes = ring_sizes

    # -- local memory and DRAM ----------------------------------------------------------

    def _local(self, mem: LocalMem, q: int) -> tuple[int, int, int]:
        """``(row bytes, first row, end row)`` of queue ``q``'s partition of ``mem``."""
        if mem == LocalMem.ACC:
            return (self.cfg.acc_row_bytes, *self.lay.acc_part(q))
        return (self.cfg.spad_row_bytes, *self.lay.spad_part(q))

    def _rows(self, lo: int, hi: int, n: int) -> int:
        return self._int(lo, hi - n)

    def _dram(self, q: int) -> tuple[int, int]:
        lo, hi = self.lay.private(q)
        return lo, hi - TS_BYTES

    # -- valid commands -----------------------------------------------------------------

    def valid(self, q: int) -> None:
        names = list(_WEIGHTS)
        w = [_WEIGHTS[n] for n in names]
        kind = self.rng.choices(names, weights=w)[0]
        getattr(self, f"_{kind}")(q)

    def _flags(self) -> tuple[bool, bool]:
        return self._chance(self.g.s.p_signal), self._chance(self.g.s.p_wait)

    def _dma_shape(self, mem: LocalMem, q: int, load: bool):
        """Fields and footprint of a valid DMA of queue ``q`` (without the DRAM address)."""
        L, llo, lhi = self._local(mem, q)
        g = min(L, self.cfg.axi_data_bytes)
        k = self._int(1, max(1, min(16, 512 // L)))
        row_bytes = k * L
        n_rows = self._int(1, 6)
        ls = [k, k + self._int(0, 4), 0 if n_rows > 1 else k][self._int(0, 2)]
        lspan = (n_rows - 1) * ls + k
        if lspan > lhi - llo:
            n_rows, lspan = 1, k
        local_row = self._rows(llo, lhi, lspan)
        if self._chance(0.25):
            # any byte address and length (hw.dma): primes, flush words, a partial last row
            row_bytes -= self._int(0, L - 1)
            g = 1
        stride = [row_bytes, row_bytes + g * self._int(1, 8), g * self._int(0, row_bytes // g),
                  0][self._int(0, 3)]
        if n_rows == 1:
            stride = row_bytes
        body = {"dram_stride": stride, "row_bytes": row_bytes, "n_rows": n_rows,
                "local_row": local_row, "local_stride": ls, "mem": mem}
        space = "acc" if mem == LocalMem.ACC else "spad"
        local = [(space, local_row + r * ls, local_row + r * ls + k, load)
                 for r in range(n_rows)]
        return body, local, g, (n_rows - 1) * stride + row_bytes

    def _place(self, lo: int, hi: int, span: int, g: int) -> int | None:
        """An address for ``span`` bytes in ``[lo, hi)``, aligned to ``g``; sometimes just
        before a 4 KiB boundary, so that a row splits into two bursts."""
        if span > hi - lo:
            return None
        if self._chance(0.3):
            half = span // 2
            pages = [p for p in range((lo + 4095) // 4096 * 4096, hi, 4096)
                     if p - half - g >= lo and p - half + span <= hi]
            if pages:
                return (pages[self._int(0, len(pages) - 1)] - half) // g * g
        return lo + self._int(0, (hi - lo - span) // g) * g

    def _dram_foot(self, body: dict, write: bool) -> list:
        a, s, rb = body["dram_addr"], body["dram_stride"], body["row_bytes"]
        return [("dram", a + r * s, a + r * s + rb, write) for r in range(body["n_rows"])]

    def _dma(self, q: int, load: bool) -> None:
        mem = LocalMem.ACC if self._chance(0.4) else LocalMem.SPAD
        if self._chance(0.04):      # nothing to move: completes, touches nothing
            self._add(q, Opcode.DMA_LOAD if load else Opcode.DMA_STORE,
                      {"dma": {"dram_addr": self._dram(q)[0], "n_rows": self._int(0, 1) * 3,
                               "row_bytes": 0, "mem": mem}}, [])
            return
        body, local, g, span = self._dma_shape(mem, q, load)
        op = Opcode.DMA_LOAD if load else Opcode.DMA_STORE
        handoff = not self.windowed[q] and self._chance(self.g.s.p_handoff)
        if handoff and load and self.g.slots:
            slot_lo, slot_hi, producer = self.g.slots[self._int(0, len(self.g.slots) - 1)]
            addr = self._place(slot_lo, slot_hi, span, g)
            if addr is not None and self.g.cmds[producer].queue != q:
                body["dram_addr"] = addr
                self._add(q, op, {"dma": body}, local + self._dram_foot(body, False),
                          handoff_from=producer)
                return
        if handoff and not load:
            size = (span + 63) // 64 * 64
            lo = self.g.next_slot
            if lo + size <= self.lay.shared[1]:
                body["dram_addr"] = lo
                if self._add(q, op, {"dma": body}, local + self._dram_foot(body, True),
                             signal=True):
                    producer = len(self.g.cmds) - 1
                    if self.g.cmds[producer].signal is not None:
                        self.g.slots.append((lo, lo + span, producer))
                        self.g.next_slot = lo + size
                return
        addr = self._place(*self._dram(q), span, g)
        if addr is None:
            return
        body["dram_addr"] = addr
        self._add(q, op, {"dma": body}, local + self._dram_foot(body, not load))

    def _load(self, q: int) -> None:
        self._dma(q, True)

    def _store(self, q: int) -> None:
        self._dma(q, False)

    def _add(self, q: int, op: Opcode, body: dict | None, foot: list, *,
             signal: bool | None = None, handoff_from: int | None = None) -> bool:
        sig, wait = self._flags()
        fields = {"header": {"opcode": op, "flags": {}}}
        if body is not None:
            fields["body"] = body
        return self.g.add(q, fields, foot, sig if signal is None else signal, wait,
                          handoff_from=handoff_from)

    def _matmul(self, q: int) -> None:
        c = self.cfg
        _, slo, shi = self._local(LocalMem.SPAD, q)
        _, alo, ahi = self._local(LocalMem.ACC, q)
        m = self._int(1, min(24, ahi - alo))
        # number formats (hw.isa.formats): int4 weights always, MXINT8 with the MX stage
        w_fmt = [0, 0, 1, 2][self._int(0, 3 if c.mx else 2)]
        a_fmt = int(bool(c.mx) and self._chance(0.3))
        x_base = self._int(0, 1023) if self._chance(0.2) else 254 + self._int(-12, 12)
        transpose = c.rows == c.cols and w_fmt == 0 and self._chance(0.3)
        a_n, w_n = act_tile_rows(c, m, a_fmt), weight_tile_rows(c, w_fmt)
        a, w = self._rows(slo, shi, a_n), self._rows(slo, shi, w_n)
        acc = self._rows(alo, ahi, m)
        accumulate = self._chance(0.4)
        foot = [("spad", a, a + a_n, False), ("spad", w, w + w_n, False),
                ("acc", acc, acc + m, True)]
        fmt = {"w_fmt": w_fmt, "a_fmt": a_fmt, "x_base": x_base} if w_fmt or a_fmt else {}
        fields = {"header": {"opcode": Opcode.MATMUL,
                             "flags": {"accumulate": int(accumulate), "transpose": int(transpose)}},
                  "body": {"matmul": {"a_row": a, "w_row": w, "acc_row": acc, "m": m, **fmt}}}
        sig, wait = self._flags()
        self.g.add(q, fields, foot, sig, wait)

    def _requant(self, q: int) -> None:
        c = self.cfg
        _, slo, shi = self._local(LocalMem.SPAD, q)
        _, alo, ahi = self._local(LocalMem.ACC, q)
        n = self._int(1, min(24, ahi - alo))
        acc, sp, par = self._rows(alo, ahi, n), self._rows(slo, shi, n), self._rows(alo, ahi, 3)
        row_scale = self._chance(0.3)
        n_scale = (n - 1) // c.cols + 1
        sc = self._rows(alo, ahi, n_scale)
        foot = [("acc", acc, acc + n, False), ("spad", sp, sp + n, True),
                ("acc", par, par + 3, False)]
        if row_scale:
            foot.append(("acc", sc, sc + n_scale, False))
        flags = {"relu": int(self._chance(0.5)), "row_scale": int(row_scale)}
        fields = {"header": {"opcode": Opcode.REQUANT, "flags": flags},
                  "body": {"requant": {"acc_row": acc, "spad_row": sp, "n_rows": n,
                                       "param_row": par, "scale_row": sc}}}
        sig, wait = self._flags()
        self.g.add(q, fields, foot, sig, wait)

    def _softmax_body(self, q: int, overlap: bool = False) -> tuple[dict, list]:
        c = self.cfg
        _, slo, shi = self._local(LocalMem.SPAD, q)
        _, alo, ahi = self._local(LocalMem.ACC, q)
        n = self._int(2 if overlap else 1, min(2 * c.cols, 24))
        nb = self._int(2, 3) if overlap else self._int(1, 3)
        stride = self._int(1, n - 1) if overlap else n + self._int(0, 3)
        span = (nb - 1) * stride + n
        n_scale = (n - 1) // c.cols + 1
        acc, sp = self._rows(alo, ahi, span), self._rows(slo, shi, span)
        sc = self._rows(alo, ahi, n_scale)
        body = {"acc_row": acc, "spad_row": sp, "n_rows": n, "n_blocks": nb, "stride": stride,
                "scale_row": sc, "kv_len": self._int(0, nb * c.cols + 1),
                "q_offset": self._int(0, 8), "mult": self._int(1, 65535),
                "shift": self._int(0, 24), "causal": int(self._chance(0.4))}
        foot = [("acc", acc, acc + span, False), ("spad", sp, sp + span, True),
                ("acc", sc, sc + n_scale, True)]
        return body, foot

    def _softmax(self, q: int) -> None:
        body, foot = self._softmax_body(q)
        self._add(q, Opcode.SOFTMAX, {"softmax": body}, foot)

    def _gelu(self, q: int) -> None:
        _, slo, shi = self._local(LocalMem.SPAD, q)
        _, alo, ahi = self._local(LocalMem.ACC, q)
        n = self._int(1, min(24, ahi - alo))
        acc, sp, par = self._rows(alo, ahi, n), self._rows(slo, shi, n), self._rows(alo, ahi, 4)
        foot = [("acc", acc, acc + n, False), ("spad", sp, sp + n, True),
                ("acc", par, par + 4, False)]
        self._add(q, Opcode.GELU, {"requant": {"acc_row": acc, "spad_row": sp, "n_rows": n,
                                               "param_row": par}}, foot)

    def _eltwise_body(self, q: int, op: Opcode) -> tuple[dict, int]:
        """An ADD or LAYERNORM body in queue ``q``'s partitions with disjoint ``a``, ``b`` and
        output ranges (``b`` sometimes the same rows as ``a``); returns it and its span."""
        _, slo, shi = self._local(LocalMem.SPAD, q)
        _, alo, ahi = self._local(LocalMem.ACC, q)
        n = self._int(1, 6)
        nb = self._int(1, 3)
        stride = n + self._int(0, 2) if nb > 1 else self._int(0, 3)
        span = (nb - 1) * stride + n
        third = (shi - slo) // 3
        a = slo + self._int(0, third - span)
        b = a if self._chance(0.2) else slo + third + self._int(0, third - span)
        out = slo + 2 * third + self._int(0, third - span)
        par = self._rows(alo, ahi, eltwise_param_rows(op, nb))
        body = {"a_row": a, "b_row": b, "out_row": out, "n_rows": n, "n_blocks": nb,
                "stride": stride, "param_row": par, "shift": self._int(0, 40),
                "g_shift": self._int(0, 63)}
        return body, span

    def _eltwise(self, q: int) -> None:
        op = Opcode.LAYERNORM if self._chance(0.5) else Opcode.ADD
        body, span = self._eltwise_body(q, op)
        par = body["param_row"]
        foot = [("spad", body["a_row"], body["a_row"] + span, False),
                ("spad", body["b_row"], body["b_row"] + span, False),
                ("spad", body["out_row"], body["out_row"] + span, True),
                ("acc", par, par + eltwise_param_rows(op, body["n_blocks"]), False)]
        self._add(q, op, {"eltwise": body}, foot)

    def _fence(self, q: int) -> None:
        lo, hi = self.lay.private(q)
        ts = self._chance(0.3)
        addr = (hi - TS_BYTES + 4 * self._int(0, TS_BYTES // 4 - 1)) if ts \
            else lo + 4 * self._int(0, (hi - TS_BYTES - lo) // 4 - 1)
        fields = {"header": {"opcode": Opcode.FENCE, "flags": {"irq": int(self._chance(0.5))}},
                  "body": {"fence": {"addr": addr, "value": self._int(0, 2**32 - 1),
                                     "timestamp": int(ts)}}}
        sig, wait = self._flags()
        if self.g.add(q, fields, [] if ts else [("dram", addr, addr + 4, True)], sig, wait) \
                and ts:
            self.g.cmds[-1].ts_addr = addr

    def _nop(self, q: int) -> None:
        self._add(q, Opcode.NOP, None, [])

    def _barrier(self, q: int) -> None:
        self._add(q, Opcode.BARRIER, None, [])

    def _tlb_invalidate(self, q: int) -> None:
        """TLB_INVALIDATE (all entries, or one address space): ordered as a BARRIER; the page
        tables do not change while a stream runs (a fault's fix only makes an invalid entry
        valid), so it changes no result, only which translations walk again."""
        body = {"tlb": {"all": 1} if self.rng.random() < 0.5
                else {"asid": self.rng.randrange(256)}}
        self._add(q, Opcode.TLB_INVALIDATE, body, [])

    def _signal(self, q: int) -> None:
        self.g.add(q, {"header": {"opcode": Opcode.SIGNAL, "flags": {}}}, [], True, False)

    def _wait(self, q: int) -> None:
        sems = [s for s, lst in self.g.signallers.items() if lst]
        if not sems:
            return self._nop(q)
        s = self.rng.choice(sems)
        count = self._int(1, self.g._count(s))
        fields = {"header": {"opcode": Opcode.WAIT, "flags": {}, "wait_sem": s,
                             "wait_value": self.g._target(s, count)}}
        self.g.add(q, fields, [], self._chance(self.g.s.p_signal), False)

    # -- page faults (translated queues) -------------------------------------------------

    def vm_fault(self, q: int, kind: str) -> None:
        """The command planted to page-fault on queue ``q``'s fault page (:meth:`Layout.vm_of`,
        touched by nothing else): a one-page DMA load or store, or a fence, whose page is not
        mapped (``*_not_mapped``) or lacks the permission (``*_permission``: a store or fence
        to a read-only page, a load from a write-only one)."""
        page = self.lay.vm_of(q)[0]
        what = kind.split("_")[0]
        if what == "fence":
            addr = page + 4 * self._int(0, 1023)
            fields = {"header": {"opcode": Opcode.FENCE, "flags": {"irq": int(self._chance(0.5))}},
                      "body": {"fence": {"addr": addr, "value": self._int(0, 2**32 - 1)}}}
            foot = [("dram", addr, addr + 4, True)]
            write = True
        else:
            load = what == "load"
            mem = LocalMem.ACC if self._chance(0.4) else LocalMem.SPAD
            body, local, g, span = self._dma_shape(mem, q, load)
            addr = self._place(page, page + 4096, span, g)
            if addr is None:
                return
            body["dram_addr"] = addr
            fields = {"header": {"opcode": Opcode.DMA_LOAD if load else Opcode.DMA_STORE,
                                 "flags": {}}, "body": {"dma": body}}
            foot = local + self._dram_foot(body, not load)
            write = not load
        sig, wait = self._flags()
        if not self.g.add(q, fields, foot, sig, wait):
            return
        code = (ErrorCode.PAGE_PERMISSION if kind.endswith("permission")
                else ErrorCode.PAGE_NOT_MAPPED)
        self.vm_planted[q] = {"kind": kind, "index": self.g.position(q) - 1, "code": code.value,
                              "opcode": fields["header"]["opcode"].value, "pa": addr,
                              "write": write}

    # -- invalid commands ----------------------------------------------------------------

    def bad(self, q: int) -> None:
        """Draw one invalid command for queue ``q`` among the kinds possible here."""
        kinds = ["opcode", "sem", "dma_dram", "dma_local",
                 "matmul_local", "requant_local", "softmax_overlap", "softmax_local",
                 "fence_align", "fence_dram", "matmul_format", "gelu_local", "eltwise_size",
                 "eltwise_local"]
        if self.translated.get(q):          # (a translated queue's DRAM is virtual)
            kinds = [k for k in kinds if k not in ("dma_dram", "fence_dram")]
        if self.cfg.rows != self.cfg.cols:
            kinds.append("matmul_transpose")
        axi = []
        if self.windowed[q]:
            kinds += ["dma_window", "fence_window"]
        elif self.plan == "data":
            f = self.g.fault
            axi = (["axi_load"] if f.reads else []) + (["axi_store", "axi_fence"]
                                                       if f.writes else [])
        if self.plan == "fetch" and self.g.fault is None \
                and self.g.position(q) + 1 < self.ring_sizes[q]:
            axi = ["axi_fetch"]
        if axi and self._chance(0.5):      # a scenario with a fault mostly uses it
            kinds = axi
        getattr(self, f"_bad_{kinds[self._int(0, len(kinds) - 1)]}")(q)

    def _hdr(self, op, **kw) -> dict:
        return {"opcode": op, "flags": {}, **kw}

    def _bad_opcode(self, q: int) -> None:
        valid = {o.value for o in Opcode}
        op = self.rng.choice([v for v in range(256) if v not in valid])
        raw = self.rng.getrandbits(192)
        self.g.add_bad(q, {"header": self._hdr(op), "body": {"raw": raw}}, E.BAD_OPCODE)

    def _bad_sem(self, q: int) -> None:
        op = [Opcode.NOP, Opcode.DMA_LOAD, Opcode.WAIT, Opcode.SIGNAL, Opcode.FENCE][
            self._int(0, 4)]
        sem = self._int(self.cfg.n_sems, 255)
        h = self._hdr(op)
        if op in (Opcode.WAIT,) or self._chance(0.5) and op != Opcode.SIGNAL:
            h.update(wait_sem=sem, wait_value=0)
            if op != Opcode.WAIT:
                h["flags"]["wait"] = 1
        else:
            h["signal_sem"] = sem
            if op != Opcode.SIGNAL:
                h["flags"]["signal"] = 1
        self.g.add_bad(q, {"header": h}, E.BAD_SEM)

    def _bad_dma(self, q: int, code: ErrorCode, change) -> None:
        mem = LocalMem.ACC if self._chance(0.5) else LocalMem.SPAD
        load = self._chance(0.5)
        body, _, g, span = self._dma_shape(mem, q, load)
        body["dram_addr"] = self._place(*self._dram(q), span, g) or self._dram(q)[0]
        change(body, g)
        op = Opcode.DMA_LOAD if load else Opcode.DMA_STORE
        self.g.add_bad(q, {"header": self._hdr(op), "body": {"dma": body}}, code)

    def _bad_dma_dram(self, q: int) -> None:
        def change(b, g):
            # the first row ends past the DRAM (row_bytes is a multiple of g), or starts there
            top = self.cfg.dram_bytes
            b["dram_addr"] = top - b["row_bytes"] + g * self._int(1, 4) if self._chance(0.6) \
                else top + g * self._int(0, 99)
        self._bad_dma(q, E.BAD_DRAM_ADDR, change)

    def _bad_dma_window(self, q: int) -> None:
        def change(b, g):
            b["dram_addr"] = self.lay.shared[0] + g * self._int(0, 64)
        self._bad_dma(q, E.WINDOW, change)

    def _bad_dma_local(self, q: int) -> None:
        def change(b, g):
            mem = LocalMem.ACC if b["mem"] == LocalMem.ACC else LocalMem.SPAD
            L, _, _ = self._local(mem, q)
            depth = self.cfg.acc_rows if mem == LocalMem.ACC else self.cfg.spad_rows
            b["local_row"] = depth - b["row_bytes"] // L + 1 + self._int(0, 1)
        self._bad_dma(q, E.BAD_LOCAL_ADDR, change)

    def _bad_matmul_local(self, q: int) -> None:
        c = self.cfg
        m = self._int(1, 16)
        b = {"a_row": 0, "w_row": 0, "acc_row": 0, "m": m}
        which = ["a_row", "w_row", "acc_row"][self._int(0, 2)]
        depth = c.acc_rows if which == "acc_row" else c.spad_rows
        b[which] = depth - (c.rows if which == "w_row" else m) + 1 + self._int(0, 1)
        self.g.add_bad(q, {"header": self._hdr(Opcode.MATMUL), "body": {"matmul": b}},
                       E.BAD_LOCAL_ADDR)

    def _bad_matmul_format(self, q: int) -> None:
        """A format the configuration does not have: the reserved ``w_fmt`` 3, MXINT8 without
        the MX stage, transposed int4 or MXINT8 weights (:func:`hw.isa.format_error`)."""
        h = self._hdr(Opcode.MATMUL)
        kinds = ["reserved", "transpose"] + ([] if self.cfg.mx else ["mx_w", "mx_a"])
        kind = kinds[self._int(0, len(kinds) - 1)]
        b = {"m": self._int(1, 8), "w_fmt": 3 if kind == "reserved" else self._int(1, 2),
             "a_fmt": int(kind == "mx_a")}
        if kind == "mx_a":
            b["w_fmt"] = 0
        if kind == "mx_w":
            b["w_fmt"] = 2
        if kind == "transpose":
            h["flags"]["transpose"] = 1
            if not self.cfg.mx:
                b["w_fmt"] = 1
        self.g.add_bad(q, {"header": h, "body": {"matmul": b}}, E.BAD_SIZE)

    def _bad_matmul_transpose(self, q: int) -> None:
        h = self._hdr(Opcode.MATMUL)
        h["flags"]["transpose"] = 1
        self.g.add_bad(q, {"header": h, "body": {"matmul": {"m": self._int(1, 8)}}},
                       E.BAD_SIZE)

    def _bad_requant_local(self, q: int) -> None:
        c = self.cfg
        b = {"acc_row": 0, "spad_row": 0, "n_rows": self._int(1, 8), "param_row": 0}
        which = ["acc_row", "spad_row", "param_row"][self._int(0, 2)]
        n = 3 if which == "param_row" else b["n_rows"]
        b[which] = (c.spad_rows if which == "spad_row" else c.acc_rows) - n + 1 + self._int(0, 1)
        self.g.add_bad(q, {"header": self._hdr(Opcode.REQUANT), "body": {"requant": b}},
                       E.BAD_LOCAL_ADDR)

    def _bad_gelu_local(self, q: int) -> None:
        c = self.cfg
        b = {"acc_row": 0, "spad_row": 0, "n_rows": self._int(1, 8), "param_row": 0}
        which = ["acc_row", "spad_row", "param_row"][self._int(0, 2)]
        n = 4 if which == "param_row" else b["n_rows"]
        b[which] = (c.spad_rows if which == "spad_row" else c.acc_rows) - n + 1 + self._int(0, 1)
        self.g.add_bad(q, {"header": self._hdr(Opcode.GELU), "body": {"requant": b}},
                       E.BAD_LOCAL_ADDR)

    def _bad_eltwise_size(self, q: int) -> None:
        """Overlapping blocks, an output overlapping an input, or a LAYERNORM row too long."""
        op = Opcode.LAYERNORM if self._chance(0.5) else Opcode.ADD
        body, span = self._eltwise_body(q, op)
        kind = self._int(0, 2 if op == Opcode.LAYERNORM else 1)
        if kind == 0:
            body["n_rows"] = max(2, body["n_rows"])
            body["n_blocks"] = max(2, body["n_blocks"])
            body["stride"] = self._int(1, body["n_rows"] - 1)
        elif kind == 1:
            body["out_row"] = body[["a_row", "b_row"][self._int(0, 1)]] + self._int(0, span - 1)
        else:
            body["n_blocks"] = LN_MAX_ELEMS // self.cfg.cols + 1 + self._int(0, 3)
            body["stride"] = body["n_rows"]
        self.g.add_bad(q, {"header": self._hdr(op), "body": {"eltwise": body}}, E.BAD_SIZE)

    def _bad_eltwise_local(self, q: int) -> None:
        c = self.cfg
        op = Opcode.LAYERNORM if self._chance(0.5) else Opcode.ADD
        body, span = self._eltwise_body(q, op)
        which = ["a_row", "b_row", "out_row", "param_row"][self._int(0, 3)]
        n = eltwise_param_rows(op, body["n_blocks"]) if which == "param_row" else span
        depth = c.acc_rows if which == "param_row" else c.spad_rows
        body[which] = depth - n + 1 + self._int(0, 1)
        # the others in rows of their own (an output over an input would be BAD_SIZE)
        for k, other in enumerate(o for o in ("a_row", "b_row", "out_row") if o != which):
            body[other] = k * span
        self.g.add_bad(q, {"header": self._hdr(op), "body": {"eltwise": body}},
                       E.BAD_LOCAL_ADDR)

    def _bad_softmax_overlap(self, q: int) -> None:
        body, _ = self._softmax_body(q, overlap=True)
        self.g.add_bad(q, {"header": self._hdr(Opcode.SOFTMAX), "body": {"softmax": body}},
                       E.BAD_SIZE)

    def _bad_softmax_local(self, q: int) -> None:
        body, _ = self._softmax_body(q)
        span = (body["n_blocks"] - 1) * body["stride"] + body["n_rows"]
        body["acc_row"] = self.cfg.acc_rows - span + 1 + self._int(0, 1)
        self.g.add_bad(q, {"header": self._hdr(Opcode.SOFTMAX), "body": {"softmax": body}},
                       E.BAD_LOCAL_ADDR)

    def _bad_fence(self, q: int, code: ErrorCode, addr: int) -> None:
        body = {"fence": {"addr": addr, "value": self._int(0, 2**32 - 1)}}
        self.g.add_bad(q, {"header": self._hdr(Opcode.FENCE), "body": body}, code)

    def _bad_fence_align(self, q: int) -> None:
        self._bad_fence(q, E.MISALIGNED, self._dram(q)[0] + 4 * self._int(0, 64)
                        + self._int(1, 3))

    def _bad_fence_dram(self, q: int) -> None:
        self._bad_fence(q, E.BAD_DRAM_ADDR, self.cfg.dram_bytes - 4 * self._int(0, 1) + 4)

    def _bad_fence_window(self, q: int) -> None:
        self._bad_fence(q, E.WINDOW, self.lay.shared[0] + 4 * self._int(0, 64))

    def _bad_axi_fence(self, q: int) -> None:
        lo, _ = self.lay.poison(q)
        addr = lo + 4 * self._int(0, 63)
        body = {"fence": {"addr": addr, "value": self._int(0, 2**32 - 1)}}
        self.g.add_bad(q, {"header": self._hdr(Opcode.FENCE), "body": body}, E.AXI_ERROR,
                       [("dram", addr, addr + 4, True)])

    def _bad_axi_dma(self, q: int, load: bool) -> None:
        """Two DRAM rows: the first in private memory, the second in the poison area."""
        mem = LocalMem.ACC if self._chance(0.5) else LocalMem.SPAD
        L, llo, lhi = self._local(mem, q)
        k = self._int(1, max(1, min(8, 256 // L)))
        lo, hi = self._dram(q)
        plo, _ = self.lay.poison(q)
        first = self._place(lo, hi, k * L, min(L, self.cfg.axi_data_bytes))
        stride = plo - first + min(L, self.cfg.axi_data_bytes) * self._int(0, 8)
        local_row = self._rows(llo, lhi, 2 * k)
        body = {"dram_addr": first, "dram_stride": stride, "row_bytes": k * L, "n_rows": 2,
                "local_row": local_row, "local_stride": k, "mem": mem}
        space = "acc" if mem == LocalMem.ACC else "spad"
        foot = [(space, local_row, local_row + 2 * k, load)] + self._dram_foot(body, not load)
        op = Opcode.DMA_LOAD if load else Opcode.DMA_STORE
        self.g.add_bad(q, {"header": self._hdr(op), "body": {"dma": body}}, E.AXI_ERROR, foot)

    def _bad_axi_load(self, q: int) -> None:
        self._bad_axi_dma(q, True)

    def _bad_axi_store(self, q: int) -> None:
        self._bad_axi_dma(q, False)

    def _bad_axi_fetch(self, q: int) -> None:
        """A plain NOP whose ring slot the DRAM answers with an error."""
        g = self.g
        ids = g.by_queue.get(q, [])
        if not ids or g.cmds[ids[-1]].kind != "BARRIER":
            g.barrier(q)
        pos = g.position(q)
        base = self.lay.region(q)
        slot = base + (pos % self.ring_sizes[q]) * 32
        g.fault = BusFault(reads=True, writes=False, resp=["slverr", "decerr"][self._int(0, 1)],
                           lo=slot, hi=slot + 32)
        g.add_bad(q, {"header": self._hdr(Opcode.NOP)}, E.AXI_ERROR, kind="NOP (fetch fault)")
