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
