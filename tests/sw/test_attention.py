"""Attention in software: the kernel on the functional model against the golden integer
reference, the softmax reference's edge cases, and the accuracy of the quantized MiniLM
attention block against float32 (L=128, evaluation text != calibration text)."""

from itertools import pairwise

import numpy as np
import pytest

from hw.config import NPUConfig
from sw.golden import attention_head_int, exp2_int, row_reciprocal, softmax_int
from sw.kernels.attention import (
    attention_launch,
    attention_with_stats,
    pack_attention_params,
    plan_attention,
)
from sw.kernels.linear import pack_activations
from sw.model import ModelBackend
from sw.runtime import Device, OutOfSemaphoresError
from tests.support import rtl_jobs, runtime_jobs
from tests.support.device_state import device_state


def test_softmax_reference_edges():
    s = np.array([[5, 3, 1, -(2**31)], [0, 0, 0, 0]], np.int64)
    p, sums, recip = softmax_int(s, mult=1 << 15, shift=15, kv_len=3)
    assert p[0, 0] == 127 and p[0, 3] == 0                      # max -> 127, masked -> 0
    assert list(p[1, :3]) == [127] * 3 and sums[1] == 381
    p, sums, recip = softmax_int(s, mult=1, shift=0, kv_len=0)   # fully masked rows
    assert not p.any() and not sums.any() and not recip.any()
    assert exp2_int([16 * 8 - 1, 16 * 8, 10**9]).tolist()[1:] == [0, 0]  # beyond the range: 0
    assert row_reciprocal([127])[0] == (2**32 + 63) // 127


@pytest.mark.parametrize("config", [NPUConfig(), NPUConfig(rows=4, cols=4)], ids=["8x8", "4x4"])
def test_attention_kernel_matches_golden_on_model(config):
    cases = [{"seq": s, "heads": 2, "d": 20, "mask": m}
             for s in (1, 7, 17) for m in ("none", "causal", "padding")]
    cases.append({"seq": 6, "heads": 1, "d": 32, "mask": "padding", "kv_len": 0})
    res = rtl_jobs.attention_cases(ModelBackend(config), cases=cases)["cases"]
    assert all(r["bit_exact"] for r in res)
    assert res[-1]["all_zero"]


@pytest.mark.parametrize("near_wrap", [False, True], ids=["from0", "across_wrap"])
@pytest.mark.parametrize("config", [NPUConfig(), NPUConfig(rows=4, cols=4)], ids=["8x8", "4x4"])
def test_attention_twice_beside_another_stream_on_model(config, near_wrap):
    """Two attention calls on stream 0 while stream 1 runs linear kernels and copies (some
    launched before, some gated on an event between the calls); with ``across_wrap`` every
    semaphore starts at 2**32 - 1, so all of them (and the event wait) cross the wrap, and
    semaphore 0 passes 2**31 (where the kernel used to reset the device)."""
    r = runtime_jobs.attention_beside_stream(ModelBackend(config), seq=17, heads=2, d=12,
                                             near_wrap=near_wrap)
    assert r["attention"] == [True, True] and r["linear"] == [True, True]
    assert r["copies"] == [True, True]
    assert r["gated_until_event"] == {"copy_untouched": True, "stream_busy": True}
    assert r["semaphores_exact"] and not r["overlap"]     # untimed: every timestamp is 0


def test_attention_kernel_frees_its_semaphore_and_buffers():
    dev = Device(ModelBackend(NPUConfig(rows=4, cols=4)))
    q, k, v, sm, ss, om, osh = rtl_jobs.random_attention_operands(np.random.default_rng(1),
                                                                 5, 1, 8)
    before = dev.memory_stats()
    sems = [dev.alloc_semaphore() for _ in range(dev.config.n_sems - 2)]   # all but one
    attention_with_stats(dev, q, k, v, heads=1, score_mult=sm, score_shift=ss, out_mult=om,
                         out_shift=osh)
    sems.append(dev.alloc_semaphore())       # the kernel gave its semaphore back
    with pytest.raises(OutOfSemaphoresError):
        attention_with_stats(dev, q, k, v, heads=1, score_mult=sm, score_shift=ss,
                             out_mult=om, out_shift=osh)
    for s in sems:
        s.free()
    assert dev.memory_stats() == before


# L=16, d=8, heads=2 with the trial's score parameters; out_mult/out_shift per channel (16)
_L, _D, _H = 16, 8, 2
_HD = _H * _D


def _attention_args() -> tuple:
    q, k, v, _, _, om, osh = rtl_jobs.random_attention_operands(np.random.default_rng(4), _L,
                                                               _H, _D)
    return (q, k, v), {"heads": _H, "score_mult": [300] * _H, "score_shift": [12] * _H,
                       "out_mult": om, "out_shift": osh}


BAD_ATTENTION = [
    # (overrides, error, message): before, the first four ran and differed from the golden
    # model (or, out_shift=-1, ran where the golden model raises), heads=0 raised
    # ZeroDivisionError, a wrong length a numpy reshape error
    ({"out_mult": np.full(_HD, -1)}, ValueError,
     r"out_mult outside \[0, 2147483647\]: got -1 at index 0"),
    ({"out_mult": np.full(_HD, 2**31)}, ValueError,
     r"out_mult outside \[0, 2147483647\]: got 2147483648 at index 0"),
    ({"out_shift": np.full(_HD, 99)}, ValueError, r"out_shift outside \[0, 63\]: got 99"),
    ({"out_shift": np.full(_HD, -1)}, ValueError, r"out_shift outside \[0, 63\]: got -1"),
    ({"heads": 0}, ValueError, r"heads outside \[1, 16\]: got 0"),
    ({"heads": 1.5}, TypeError, "heads must be an integer, got 1.5"),
    ({"score_mult": [300] * 3}, ValueError,
     r"score_mult must have shape \(2,\) \(one per head, heads=2\), got shape \(3,\)"),
    ({"score_shift": [12]}, ValueError, r"score_shift must have shape \(2,\)"),
    ({"out_mult": np.full(_HD + 1, 1 << 30)}, ValueError,
     r"out_mult must have shape \(16,\) \(one per context channel, heads \* d = 2 \* 8\)"),
    ({"score_mult": [300, 65536]}, ValueError,
     r"score_mult outside \[0, 65535\]: got 65536 at index 1"),
    ({"score_mult": [-1, 300]}, ValueError, r"score_mult outside \[0, 65535\]: got -1"),
    ({"score_shift": [12, 64]}, ValueError, r"score_shift outside \[0, 63\]: got 64"),
    ({"score_mult": [300.5, 300]}, TypeError, "score_mult must hold integers, got 300.5"),
    ({"out_mult": np.full(_HD, 1 / 2000)}, TypeError,
     "out_mult must hold integers, got 0.0005 at index 0.*quantize_multipliers"),
    ({"out_shift": np.full(_HD, 30.9)}, TypeError, "out_shift must hold integers, got 30.9"),
    ({"kv_len": 3.5}, TypeError, "kv_len must be an integer, got 3.5"),
    ({"kv_len": _L + 1}, ValueError, r"kv_len outside \[0, 16\]: got 17"),
]


@pytest.mark.parametrize("over,error,message", BAD_ATTENTION,
                         ids=[f"{next(iter(b[0]))}-{i}" for i, b in enumerate(BAD_ATTENTION)])
def test_attention_refuses_bad_parameters_before_launching(over, error, message):
    """Each bad argument raises a typed error naming it, its range and the bad value; no
    buffer, semaphore or command is left behind (nothing was uploaded or launched)."""
    dev = Device(ModelBackend(NPUConfig()))
    qkv, kw = _attention_args()
    before = device_state(dev)
    with pytest.raises(error, match=message):
        attention_with_stats(dev, *qkv, **{**kw, **over})
    assert device_state(dev) == before


@pytest.mark.parametrize("over,error,message",
                         [b for b in BAD_ATTENTION if not set(b[0]) & {"out_mult", "out_shift"}],
                         ids=lambda x: None)
def test_attention_launch_refuses_bad_parameters_before_launching(over, error, message):
    """The device-resident launch checks ``heads``, ``kv_len`` and the score parameters
    before it launches (its ``out_mult``/``out_shift`` are :func:`pack_attention_params`')."""
    dev = Device(ModelBackend(NPUConfig()))
    s = dev.default_stream
    buf = s.alloc(1 << 16)
    sem = dev.alloc_semaphore()
    _, kw = _attention_args()
    kw = {**kw, **over}
    if "heads" in over and isinstance(over["heads"], int):
        message = message.replace("16", "2147483647")     # no width to bound it here
    args = {x: kw[x] for x in ("heads", "score_mult", "score_shift")}
    before = device_state(dev)
    with pytest.raises(error, match=message):
        attention_launch(s, buf, buf, buf, buf, buf, seq=_L, head_dim=_D, sem=sem,
                         kv_len=kw.get("kv_len"), **args)
    assert device_state(dev) == before and sem.issued == 0


_BUFS = ("q_buf", "k_buf", "v_buf", "p_buf", "o_buf")


def _launch_sizes(c: NPUConfig, seq: int, heads: int, d: int) -> dict[str, int]:
    """The bytes :func:`attention_launch` reads or writes per buffer: Q, K, V and O in the
    activation layout ``(heads * DB, L, spad_row_bytes)`` int8 (:func:`pack_activations`' when
    ``cols`` divides ``d``), P what :func:`pack_attention_params` packs."""
    act = heads * -(-d // c.cols) * seq * c.spad_row_bytes
    if d % c.cols == 0:
        assert act == pack_activations(c, np.zeros((seq, heads * d), np.int8)).nbytes
    params = pack_attention_params(c, heads, d, np.ones(heads * d, np.int64),
                                   np.zeros(heads * d, np.int64)).nbytes
    return {"q_buf": act, "k_buf": act, "v_buf": act, "p_buf": params, "o_buf": act}


@pytest.mark.parametrize("d", [16, 12], ids=["d16", "d12"])
@pytest.mark.parametrize("small", _BUFS)
def test_attention_launch_refuses_a_too_small_buffer_before_launching(small, d):
    """A buffer smaller than its layout (by one byte) is refused, naming it, the bytes needed
    and given; nothing is launched or counted (it ran, reading or writing past the buffer)."""
    dev = Device(ModelBackend(NPUConfig()))
    s = dev.default_stream
    sem = dev.alloc_semaphore()
    need = _launch_sizes(dev.config, _L, _H, d)
    bufs = {x: s.alloc(need[x] - (x == small)) for x in _BUFS}
    before = device_state(dev)
    with pytest.raises(ValueError, match=rf"^{small} too small for seq={_L}, heads={_H}, "
                       rf"head_dim={d}: needs {need[small]} bytes \(.*\), got "
                       rf"{need[small] - 1}$"):
        attention_launch(s, *bufs.values(), seq=_L, heads=_H, head_dim=d,
                         score_mult=[300] * _H, score_shift=[12] * _H, sem=sem)
    assert device_state(dev) == before and sem.issued == 0


def test_attention_launch_takes_buffers_of_exactly_their_layout():
    """Buffers of exactly the packers' sizes: the launch gives attention_with_stats' output."""
    d = 16
    dev = Device(ModelBackend(NPUConfig()))
    c, s = dev.config, dev.default_stream
    q, k, v, _, _, om, osh = rtl_jobs.random_attention_operands(np.random.default_rng(5), _L,
                                                               _H, d)
    score = {"score_mult": [300] * _H, "score_shift": [12] * _H}
    want, _ = attention_with_stats(dev, q, k, v, heads=_H, out_mult=om, out_shift=osh, **score)
    need = _launch_sizes(c, _L, _H, d)
    bufs = [s.upload(pack_activations(c, x)) for x in (q, k, v)]
    bufs += [s.upload(pack_attention_params(c, _H, d, om, osh)), s.alloc(need["o_buf"])]
    assert [b.nbytes for b in bufs] == [need[x] for x in _BUFS]
    sem = dev.alloc_semaphore()
    attention_launch(s, *bufs, seq=_L, heads=_H, head_dim=d, sem=sem, **score)
    s.synchronize()
    o = dev.download(bufs[4], np.int8, (_H * 2, _L, c.spad_row_bytes))
    got = o[:, :, :c.cols].transpose(1, 0, 2).reshape(_L, _H * d)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("over,error,message",
                         [b for b in BAD_ATTENTION if set(b[0]) & {"out_mult", "out_shift"}] +
                         [({"heads": 0}, ValueError, r"heads outside \[1, 2147483647\]: got 0")],
                         ids=lambda x: None)
def test_pack_attention_params_refuses_bad_parameters(over, error, message):
    _, kw = _attention_args()
    kw = {**kw, **over}
    with pytest.raises(error, match=message):
        pack_attention_params(NPUConfig(), kw["heads"], _D, kw["out_mult"], kw["out_shift"])


def test_attention_accepts_integral_floats():
    """Integral float parameters (``300.0``) give the integer parameters' output, bit-exact
    with the golden model per head."""
    dev = Device(ModelBackend(NPUConfig()))
    (q, k, v), kw = _attention_args()
    want = np.concatenate([
        attention_head_int(q[:, h * _D:(h + 1) * _D], k[:, h * _D:(h + 1) * _D],
                           v[:, h * _D:(h + 1) * _D], score_mult=300, score_shift=12,
                           out_mult=kw["out_mult"][h * _D:(h + 1) * _D],
                           out_shift=kw["out_shift"][h * _D:(h + 1) * _D])
        for h in range(_H)], axis=1)
    got, _ = attention_with_stats(dev, q, k, v, **kw)
    np.testing.assert_array_equal(got, want)
    floats = {x: np.asarray(val, np.float64) for x, val in kw.items() if x != "heads"}
    got_f, _ = attention_with_stats(dev, q, k, v, heads=2.0, **floats)
    np.testing.assert_array_equal(got_f, want)


def test_attention_regions_are_checked():
    with pytest.raises(ValueError, match="scratchpad region"):
        plan_attention(NPUConfig(), 8, 32, spad_region=(4000, 200))
    with pytest.raises(ValueError, match="does not fit the local memories of the regions"):
        plan_attention(NPUConfig(), 8, 32, acc_region=(0, 8))
    p = plan_attention(NPUConfig(), 8, 32, spad_region=(100, 900), acc_region=(10, 500))
    assert p.k_base == 100 and p.param_base == 10
    assert p.o_spad + p.db * p.m_tile <= 1000 and p.o_acc + p.db * p.m_tile <= 510



def _plan_pieces(c: NPUConfig, p) -> tuple[list, list]:
    """The row ranges ``[lo, hi)`` the kernel's commands touch: scratchpad (K, V, Q, P, O) and
    accumulator (REQUANT parameters, SOFTMAX reciprocals, scores, P V), from the plan's
    addresses and the command shapes (reciprocals: one accumulator row per ``cols`` score
    rows, rounded up: :class:`hw.isa.SoftmaxBody`)."""
    db, lp, mt, n = p.db, p.lp, p.m_tile, c.cols
    spad = [(p.k_base, p.k_base + db * lp), (p.v_base, p.v_base + db * lp),
            (p.q_base, p.q_base + db * mt), (p.p_base, p.p_base + p.kb * mt),
            (p.o_spad, p.o_spad + db * mt)]
    acc = [(p.param_base, p.param_base + 3 * db), (p.sc_base, p.sc_base + (mt + n - 1) // n),
           (p.s_base, p.s_base + p.kb * mt), (p.o_acc, p.o_acc + db * mt)]
    return spad, acc


def _inside_and_disjoint(pieces: list, lo: int, hi: int) -> bool:
    s = sorted(pieces)
    return s[0][0] >= lo and s[-1][1] <= hi and all(a[1] <= b[0] for a, b in pairwise(s))


@pytest.mark.parametrize("config", [NPUConfig(), NPUConfig(rows=4, cols=4)],
                         ids=lambda c: c.name)
def test_attention_plan_fits_every_region_it_accepts(config):
    """Every plan's pieces lie inside the regions and do not overlap, for accumulator and
    scratchpad regions of every size around the smallest that fits, with query tiles that
    are not a multiple of the array width (the reciprocal rows round up)."""
    c = config
    checked = 0
    for seq, d in ((13, 20), (37, 8), (20, 32)):
        for rows in range(1, 260):
            for spad_region, acc_region in (((0, c.spad_rows), (5, rows)),
                                            ((7, rows), (0, c.acc_rows))):
                try:
                    p = plan_attention(c, seq, d, spad_region=spad_region,
                                       acc_region=acc_region)
                except ValueError:
                    continue
                spad, acc = _plan_pieces(c, p)
                s0, sn = spad_region
                a0, an = acc_region
                assert _inside_and_disjoint(spad, s0, s0 + sn), (seq, d, spad_region, p)
                assert _inside_and_disjoint(acc, a0, a0 + an), (seq, d, acc_region, p)
                checked += p.m_tile % c.cols != 0
    assert checked > 50

def test_attention_needs_square_array():
    with pytest.raises(ValueError, match="square"):
        plan_attention(NPUConfig(rows=4, cols=8), 8, 32)


def test_minilm_attention_block_accuracy_l128():
    from sw.models.attention_block import (
        calibrate_block,
        dequantize_output,
        embed_ids,
        float_block,
        golden_block,
        tokens_for_length,
    )
    from sw.models.minilm import DEFAULT_CALIBRATION_TEXT, DEFAULT_EVAL_TEXT, load_minilm
    from sw.quant import sqnr_db

    assert DEFAULT_EVAL_TEXT not in DEFAULT_CALIBRATION_TEXT
    model = load_minilm()
    bq = calibrate_block(model)
    ids, kv = tokens_for_length(model, DEFAULT_EVAL_TEXT, 128)
    x = embed_ids(model, ids)
    ref = float_block(model, x, kv)["output"]
    out = dequantize_output(bq, golden_block(bq, x, kv)["output"])
    assert sqnr_db(ref, out) >= 25.0


def test_softmax_and_row_scale_reference_by_hand():
    """Hand-computed vectors beside the golden model (hw.isa.SoftmaxBody, RequantBody):
    the table entries are ``T[f] = floor(127 * 128 * 2**(-f/16) + 1/2)`` = 16256, 15567,
    14907, 14275, 13670 for f = 0..4; ``p = (T[f] + 64) >> 7`` for ``q = 0``."""
    from sw.golden import requantize_rows
    # mult / 2**shift = 1 (2**15 / 2**15: mult is a 16-bit field): n = d (F = 4 fractional
    # bits): p = 127, T[2] -> 116, T[4] -> 107
    p, sums, recip = softmax_int(np.array([[5, 3, 1]]), mult=1 << 15, shift=15)
    assert p.tolist() == [[127, 116, 107]] and sums.tolist() == [350]
    assert recip.tolist() == [12271335]              # floor((2**32 + 175) / 350)
    # mult / 2**shift = 1/2 (8 / 16): d = 1, 3 are exact ties 0.5, 1.5 -> n = 1, 2 (ties up)
    p, sums, recip = softmax_int(np.array([[4, 3, 1], [4, 3, 1]]), mult=8, shift=4,
                                 kv_len=3)
    assert p.tolist() == [[127, 122, 116]] * 2 and sums.tolist() == [365] * 2
    assert recip.tolist() == [11767034] * 2          # floor((2**32 + 182) / 365)
    p, _, recip = softmax_int(np.array([[4, 3, 1]]), mult=8, shift=4, kv_len=2)
    assert p.tolist() == [[127, 122, 0]] and recip.tolist() == [17248865]  # (2**32+124)//249
    # causal: row i keeps key k while k <= q_offset + i (the diagonal included); equal scores
    # give 127 for every kept key
    p, sums, _ = softmax_int(np.zeros((3, 4), np.int64), mult=1 << 15, shift=15, causal=True)
    assert p.tolist() == [[127, 0, 0, 0], [127, 127, 0, 0], [127, 127, 127, 0]]
    assert sums.tolist() == [127, 254, 381]
    # with q_offset 1 and kv_len 3 (key 3 masked in every row): rows keep keys 0..1, 0..2,
    # 0..2; scores 0, 1, 2 against the row's max give d = 1 -> T[1] -> 122, d = 2 -> 116
    p, sums, _ = softmax_int(np.array([[0, 1, 2, 3]] * 3), mult=1 << 15, shift=15,
                             causal=True, q_offset=1, kv_len=3)
    assert p.tolist() == [[122, 127, 0, 0], [116, 122, 127, 0], [116, 122, 127, 0]]
    assert sums.tolist() == [249, 365, 365]
    # row scale r / 2**16 = 1/2, 3/4, 0, then multiplier 2**30 / 2**30 (= 1) or / 2**31 (1/2):
    # 3/2 -> 2, -3/2 -> -1, 5/2 -> 3, 7/2 -> 4 -> 4/2 = 2; 3/2 -> 2, -3/2 -> -1, 9/2 -> 5,
    # 21/4 -> 5 -> 5/2 -> 3; a fully masked row (r = 0) gives 0
    acc = np.array([[3, -3, 5, 7], [2, -2, 6, 7], [100, -100, 7, 9]])
    got = requantize_rows(acc, [1 << 15, 3 << 14, 0], [0, 0, 0, 0], [1 << 30] * 4,
                          [30, 30, 30, 31])
    assert got.tolist() == [[2, -1, 3, 2], [2, -1, 5, 3], [0, 0, 0, 0]]


def test_requantize_rows_int64_path_equals_python_integers():
    """``requantize_rows`` computes in int64 when the operands' extremes prove that no
    intermediate overflows, else in Python integers; both give the same bytes, for operands
    across their documented ranges (to the extremes: int32 accumulators and bias, reciprocals
    up to 2**31 - 1, multipliers up to 2**31 - 1, shifts 0..63, ReLU or not; shifts the int64
    path cannot take); beyond them (64-bit values) it refuses them, as the kernels do."""
    from sw.golden.core import _requantize_rows_object, requantize_rows
    rng = np.random.default_rng(12)
    i32 = (-(1 << 31), (1 << 31) - 1)
    cases = 0
    for trial in range(400):
        rows, n = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        big = trial % 4 == 0
        acc = rng.integers(*i32, (rows, n)) if big else rng.integers(-5000, 5000, (rows, n))
        bias = rng.integers(*i32, n) if big else rng.integers(-300, 300, n)
        recip = rng.integers(0, 1 << 31, rows) if trial % 3 else rng.integers(0, 1 << 18, rows)
        mult = rng.integers(0, 1 << 31, n)
        shift = rng.integers(0, 64 if trial % 5 == 0 else 40, n)
        if trial % 7 == 0:
            acc[0, 0], bias[0], recip[0], mult[0] = i32[1], i32[1], (1 << 31) - 1, (1 << 31) - 1
        if trial % 11 == 0:
            acc[-1, -1], bias[-1] = i32[0], i32[0]
        relu = bool(trial % 2)
        want = _requantize_rows_object(*(np.asarray(v, np.int64) for v in
                                         (acc, recip, bias, mult, shift)), relu)
        got = requantize_rows(acc, recip, bias, mult, shift, relu=relu)
        assert got.dtype == np.int8 and got.tolist() == want.tolist(), trial
        cases += int(np.abs(want).max() > 0)
    assert cases > 100
    # beyond the documented ranges: refused (the Python-integer path took 64-bit values)
    a = np.array([[(1 << 62), -(1 << 62)]], np.int64)
    with pytest.raises(ValueError, match=r"acc outside \[-2147483648, 2147483647\]: got "
                       r"4611686018427387904 at index \(0, 0\)"):
        requantize_rows(a, [3], [0, 0], [5, 7], [63, 2])
