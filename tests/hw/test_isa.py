"""The fast command codec in hw.isa agrees with Amaranth's own layout encoding; the packed
register layouts fill their 32-bit CSRs."""

import enum
import random

import pytest

from hw.isa import (
    REGISTER_STRUCTS,
    Command,
    LocalMem,
    Opcode,
    SemLast,
    decode,
    encode,
    pack_fields,
    unpack_fields,
)


def random_fields(rng: random.Random) -> dict:
    header = {"opcode": rng.choice(list(Opcode)),
              "flags": {k: rng.randrange(2) for k in ("wait", "signal", "irq", "accumulate",
                                                        "relu")},
              "wait_sem": rng.randrange(256), "signal_sem": rng.randrange(256),
              "wait_value": rng.randrange(1 << 32)}
    kind = rng.choice(["dma", "matmul", "requant", "fence"])
    body = {
        "dma": {"dram_addr": rng.randrange(1 << 32), "dram_stride": rng.randrange(1 << 32),
                "row_bytes": rng.randrange(1 << 16), "n_rows": rng.randrange(1 << 16),
                "local_row": rng.randrange(1 << 16), "local_stride": rng.randrange(1 << 16),
                "mem": rng.choice(list(LocalMem))},
        "matmul": {k: rng.randrange(1 << 16) for k in ("a_row", "w_row", "acc_row", "m")},
        "requant": {k: rng.randrange(1 << 16)
                    for k in ("acc_row", "spad_row", "n_rows", "param_row")},
        "fence": {"addr": rng.randrange(1 << 32), "value": rng.randrange(1 << 32)},
    }[kind]
    return {"header": header, "body": {kind: body}}, kind


def test_encode_matches_amaranth_layout():
    rng = random.Random(0)
    for _ in range(300):
        fields, kind = random_fields(rng)
        raw = encode(fields)
        assert raw == Command.const(fields).as_bits().to_bytes(32, "little")
        view = decode(raw)
        assert view.header.opcode == fields["header"]["opcode"]
        assert view.header.wait_value == fields["header"]["wait_value"]
        for name, value in fields["body"][kind].items():
            assert getattr(getattr(view.body, kind), name) == value


def test_encode_rejects_bad_fields():
    with pytest.raises(ValueError, match="not a field"):
        encode({"header": {"opcodee": 1}})
    with pytest.raises(ValueError, match="does not fit"):
        encode({"body": {"matmul": {"m": 1 << 16}}})
    with pytest.raises(ValueError, match="32 bytes"):
        decode(b"\0" * 31)


def test_register_structs_are_32_bit_and_round_trip():
    """Every packed register layout fills one 32-bit CSR, and pack/unpack are inverses."""
    rng = random.Random(1)
    for name, struct in REGISTER_STRUCTS.items():
        layout = struct.as_shape()
        assert layout.size == 32, name
        for _ in range(50):
            word = rng.randrange(1 << 32)
            view = unpack_fields(struct, word)
            values = {}
            for field, f in layout:
                v = getattr(view, field)
                values[field] = v.value if isinstance(v, enum.Enum) else v
                assert values[field] == (word >> f.offset) & ((1 << f.width) - 1), (name, field)
            assert pack_fields(struct, values) == word, name
    with pytest.raises(ValueError, match="does not fit"):
        unpack_fields(SemLast, 1 << 32)


# -- every field and flag of every command, both ways ----------------------------------------------

BODIES = {"dma": "DmaBody", "matmul": "MatmulBody", "requant": "RequantBody",
          "softmax": "SoftmaxBody", "fence": "FenceBody"}


def _leaf_fields(layout, prefix=()):
    """``(path, width, enum class or None)`` of every non-padding leaf field of ``layout``."""
    from amaranth.lib import data
    from amaranth.lib import enum as amaranth_enum
    for name, field in layout:
        if name.startswith("_"):
            continue
        shape = field.shape
        if isinstance(shape, type) and issubclass(shape, data.Struct):
            yield from _leaf_fields(shape.as_shape(), (*prefix, name))
        elif isinstance(shape, type) and issubclass(shape, amaranth_enum.Enum):
            yield (*prefix, name), shape.as_shape().width, shape
        else:
            yield (*prefix, name), field.width, None


def _nest(path, value):
    out = value
    for name in reversed(path):
        out = {name: out}
    return out


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and k in out else v
    return out


def _get(view, path):
    for name in path:
        view = getattr(view, name)
    return view.value if isinstance(view, enum.Enum) else view


def _all_fields():
    """Every leaf of the header and of each body, as paths into :class:`Command`."""
    from hw.isa import Header, commands
    fields = [(("header", *p), w, e) for p, w, e in _leaf_fields(Header.as_shape())]
    for kind, struct in BODIES.items():
        layout = getattr(commands, struct).as_shape()
        fields += [(("body", kind, *p), w, e) for p, w, e in _leaf_fields(layout)]
    return fields


def test_every_field_alone_at_its_maximum_round_trips_and_touches_nothing_else():
    """One field at a time at ``2**width - 1`` (the largest enum member for an enum): decode
    gives it back, every other field of the header and of its body reads 0, and the bytes
    equal Amaranth's own encoding of the layout."""
    fields = _all_fields()
    for path, width, enum_cls in fields:
        value = max(m.value for m in enum_cls) if enum_cls else (1 << width) - 1
        raw = encode(_nest(path, value))
        assert raw == Command.const(_nest(path, value)).as_bits().to_bytes(32, "little"), path
        view = decode(raw)
        for other, _, _ in fields:
            if other[0] == "body" and other[1] != (path[1] if path[0] == "body" else None):
                continue                    # another view of the same body bits
            want = value if other == path else 0
            assert _get(view, other) == want, (path, other)


def test_every_field_distinct_non_default_values_round_trip():
    """All fields of the header and of one body set together to distinct non-zero values
    (max, max - 1, alternating bits, ...): each decodes to its own value."""
    rng = random.Random(19)
    fields = _all_fields()
    header = [f for f in fields if f[0][0] == "header"]
    for kind in BODIES:
        body = [f for f in fields if f[0][:2] == ("body", kind)]
        for trial in range(20):
            values, cmd = {}, {}
            for n, (path, width, enum_cls) in enumerate(header + body):
                if enum_cls:
                    members = sorted(m.value for m in enum_cls)
                    v = members[(trial + n) % len(members)]
                elif trial < 4:     # max, max - 1 (1 for a flag), alternating bit patterns
                    top = (1 << width) - 1
                    v = [top, max(top - 1, 1), top & 0x5555_5555, top & 0xAAAA_AAAA or 1][trial]
                else:
                    v = rng.randrange(1, 1 << width)
                values[path] = v
                cmd = _merge(cmd, _nest(path, v))
            raw = encode(cmd)
            assert raw == Command.const(cmd).as_bits().to_bytes(32, "little"), kind
            view = decode(raw)
            for path, v in values.items():
                assert _get(view, path) == v, (kind, path, v)


#: One command per opcode, built with the runtime's CommandList, and its bytes written by hand
#: from the layouts in hw/isa/commands.py (header: byte 0 opcode, byte 1 flags -- bit 0 wait,
#: 1 signal, 2 irq, 3 accumulate, 4 relu, 5 transpose, 6 row_scale --, byte 2 wait_sem, byte 3
#: signal_sem, bytes 4-7 wait_value; body from byte 8, every field little-endian).
HAND_VECTORS = [
    ("dma_load", dict(mem=1, dram_addr=0x11223344, dram_stride=0x55667788, row_bytes=0x99AA,
                      n_rows=0xBBCC, local_row=0xDDEE, local_stride=0xFF01, wait=(0x12, 7),
                      signal=0x34),
     "01 03 12 34 07000000 44332211 88776655 AA99 CCBB EEDD 01FF 01" + " 00" * 7),
    ("dma_store", dict(mem=0, dram_addr=0xFFFFFFFF, dram_stride=1, row_bytes=0xFFFF, n_rows=2,
                       local_row=3, local_stride=0xFFFF),
     "02 00 00 00 00000000 FFFFFFFF 01000000 FFFF 0200 0300 FFFF 00" + " 00" * 7),
    ("matmul", dict(a_row=0x0102, w_row=0x0304, acc_row=0x0506, m=0xFFFF, accumulate=True,
                    transpose=True, wait=(0xFF, 0xFFFFFFFF)),
     "03 29 FF 00 FFFFFFFF 0201 0403 0605 FFFF" + " 00" * 16),
    ("requant", dict(acc_row=0x1001, spad_row=0x2002, n_rows=0x3003, param_row=0x4004,
                     scale_row=0xFFFF, relu=True, signal=0xFF),
     "04 52 00 FF 00000000 0110 0220 0330 0440 FFFF" + " 00" * 14),
    ("softmax", dict(acc_row=1, spad_row=2, n_rows=3, n_blocks=4, stride=5, scale_row=6,
                     kv_len=0xFFFF, q_offset=0x8001, mult=0xFEDC, shift=63, causal=True),
     "08 00 00 00 00000000 0100 0200 0300 0400 0500 0600 FFFF 0180 DCFE 7F" + " 00" * 5),
    ("fence", dict(addr=0xFFFFFFFC, value=0xCAFEF00D, irq=True, timestamp=True, signal=2),
     "05 06 00 02 00000000 FCFFFFFF 0DF0FECA 01" + " 00" * 15),
    ("fence", dict(addr=0x100, value=0xFFFFFFFF),
     "05 00 00 00 00000000 00010000 FFFFFFFF 00" + " 00" * 15),
    ("barrier", dict(wait=(1, 0x80000000), signal=3),
     "10 03 01 03 00000080" + " 00" * 24),
    ("wait", dict(sem=0xFE, value=0xDEADBEEF),
     "06 01 FE 00 EFBEADDE" + " 00" * 24),
    ("signal", dict(sem=0xFD, wait=(2, 1)),
     "07 03 02 FD 01000000" + " 00" * 24),
    ("nop", dict(), "00" + " 00" * 31),
    ("nop", dict(wait=(0xFF, 0xFFFFFFFF), signal=0xFF),
     "00 03 FF FF FFFFFFFF" + " 00" * 24),
]


@pytest.mark.parametrize("method,args,hex_bytes", HAND_VECTORS,
                         ids=[f"{v[0]}{i}" for i, v in enumerate(HAND_VECTORS)])
def test_command_list_matches_hand_written_bytes(method, args, hex_bytes):
    from sw.runtime import CommandList
    c = CommandList()
    args = dict(args)
    if method in ("dma_load", "dma_store"):
        args["mem"] = LocalMem(args["mem"])
    if method in ("wait", "signal"):
        getattr(c, method)(args.pop("sem"), *([args.pop("value")] if "value" in args else []),
                           **args)
    else:
        getattr(c, method)(**args)
    want = bytes.fromhex(hex_bytes.replace(" ", ""))
    assert len(want) == 32
    assert c[0].raw.hex() == want.hex()


@pytest.mark.parametrize("method,args,hex_bytes", HAND_VECTORS,
                         ids=[f"{v[0]}{i}" for i, v in enumerate(HAND_VECTORS)])
def test_description_shows_every_argument(method, args, hex_bytes):
    """``describe_command`` names every body field with its value (addresses in hex, the
    local memory by name), the wait, the signal and each set flag."""
    from sw.runtime import describe_command
    text = describe_command(bytes.fromhex(hex_bytes.replace(" ", "")))
    assert text.split()[0] == method.upper()
    args = dict(args)
    if method in ("wait", "signal"):
        sem = args.pop("sem")
        args["wait" if method == "wait" else "signal"] = (sem, args.pop("value", 0))
    if "wait" in args:
        assert f"wait sem{args['wait'][0]}>={args['wait'][1]}" in text
    if "signal" in args:
        sem = args["signal"][0] if method == "signal" else args["signal"]
        assert f"signal sem{sem}" in text
    for name, value in args.items():
        if name in ("wait", "signal"):
            continue
        if name in ("irq", "accumulate", "relu", "transpose"):
            assert name in text.split("[")[1], (name, text)
        elif name == "mem":
            assert f"mem={LocalMem(value).name}" in text.split(), text
        else:
            shown = f"{value:#x}" if name.endswith("addr") else str(int(value))
            assert f"{name}={shown}" in text.split(), (name, text)


def test_every_command_list_method_round_trips_every_argument():
    """Each CommandList method with every argument at distinct values (including each field's
    maximum) and every flag on and off: the decoded command gives each one back."""
    from sw.runtime import CommandList
    top16, top32 = (1 << 16) - 1, (1 << 32) - 1
    sync = [dict(), dict(wait=(0xFF, top32), signal=0xFE), dict(wait=(3, 5)), dict(signal=0)]
    calls = []
    for s in sync:
        for mem in LocalMem:
            dma = dict(mem=mem, dram_addr=top32 - 3, dram_stride=top32, row_bytes=top16,
                       n_rows=top16 - 1, local_row=top16 - 2, local_stride=top16 - 3)
            calls += [("dma_load", dma | s, Opcode.DMA_LOAD, "dma", {}),
                      ("dma_store", dma | s, Opcode.DMA_STORE, "dma", {})]
        for acc_flag in (False, True):
            for tr in (False, True):
                calls.append(("matmul", dict(a_row=top16, w_row=top16 - 1, acc_row=top16 - 2,
                                             m=top16 - 3, accumulate=acc_flag, transpose=tr) | s,
                              Opcode.MATMUL, "matmul",
                              {"accumulate": acc_flag, "transpose": tr}))
        for relu in (False, True):
            for scale_row in (None, 0, top16):
                a = dict(acc_row=top16, spad_row=top16 - 1, n_rows=top16 - 2,
                         param_row=top16 - 3, relu=relu, scale_row=scale_row)
                calls.append(("requant", a | s, Opcode.REQUANT, "requant",
                              {"relu": relu, "row_scale": scale_row is not None}))
        for causal in (False, True):
            a = dict(acc_row=top16, spad_row=top16 - 1, n_rows=top16 - 2, n_blocks=top16 - 3,
                     stride=top16 - 4, scale_row=top16 - 5, kv_len=top16 - 6,
                     q_offset=top16 - 7, mult=top16 - 8, shift=63, causal=causal)
            calls.append(("softmax", a | s, Opcode.SOFTMAX, "softmax", {}))
        calls.append(("gelu", dict(acc_row=top16, spad_row=top16 - 1, n_rows=top16 - 2,
                                   param_row=top16 - 3) | s, Opcode.GELU, "requant", {}))
        elt = dict(a_row=top16, b_row=top16 - 1, out_row=top16 - 2, n_rows=top16 - 3,
                   n_blocks=top16 - 4, stride=top16 - 5, param_row=top16 - 6, shift=63)
        calls.append(("add", elt | s, Opcode.ADD, "eltwise", {}))
        calls.append(("layernorm", elt | dict(g_shift=62) | s, Opcode.LAYERNORM, "eltwise", {}))
        for irq in (False, True):
            for ts in (False, True):
                calls.append(("fence", dict(addr=top32 - 3, value=top32 - 1, irq=irq,
                                            timestamp=ts) | s, Opcode.FENCE, "fence",
                              {"irq": irq}))
        calls += [("barrier", s, Opcode.BARRIER, None, {}), ("nop", s, Opcode.NOP, None, {})]
    flag_names = ("wait", "signal", "irq", "accumulate", "relu", "transpose", "row_scale")
    for method, args, opcode, kind, flags in calls:
        c = CommandList()
        getattr(c, method)(**args)
        view = decode(c[0].raw)
        h = view.header
        assert h.opcode == opcode, method
        want_flags = {f: int(bool(flags.get(f, 0))) for f in flag_names}
        want_flags["wait"] = int("wait" in args)
        want_flags["signal"] = int("signal" in args)
        assert {f: getattr(h.flags, f) for f in flag_names} == want_flags, (method, args)
        assert (h.wait_sem, h.wait_value) == (args.get("wait") or (0, 0)), (method, args)
        assert h.signal_sem == (args.get("signal") or 0), (method, args)
        if kind is None:
            assert view.body.raw == 0, method
            continue
        body = getattr(view.body, kind)
        for name, value in args.items():
            if name in ("wait", "signal", "accumulate", "transpose", "relu", "irq"):
                continue
            if name == "scale_row":
                value = value or 0
            got = getattr(body, name)
            assert got == (int(value) if not isinstance(value, enum.Enum) else value), \
                (method, name, value, got)
    # the two sync-only methods
    for method, args, want in (("wait", (7, top32), (1, 0, 7, top32, 0)),
                               ("signal", (top16 & 0xFF,), (0, 1, 0, 0, 0xFF))):
        c = CommandList()
        getattr(c, method)(*args)
        h = decode(c[0].raw).header
        assert (h.flags.wait, h.flags.signal, h.wait_sem, h.wait_value, h.signal_sem) == want
        c = CommandList()
        getattr(c, method)(*args, **({"signal": 9} if method == "wait" else {"wait": (9, 4)}))
        h = decode(c[0].raw).header
        assert (h.flags.wait, h.flags.signal) == (1, 1)
