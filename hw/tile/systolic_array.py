"""Weight-stationary systolic array of int8 x int8 -> int32 processing elements."""

from amaranth.hdl import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

__all__ = ["SystolicArray"]


class SystolicArray(wiring.Component):
    """Weight-stationary ``rows x cols`` systolic array with input skew and output de-skew.

    Processing element ``PE(k, n)`` holds the int8 weight ``W[k, n]``. Activation ``a[k]`` (int8)
    enters array row ``k`` from the left and moves right one PE per cycle; partial sums move down
    column ``n`` one PE per cycle; the bottom of column ``n`` produces ``sum_k a[k] * W[k, n]``.
    Every PE registers its activation, partial sum and swap token, so the critical path is one
    8x8 multiply and one add, independent of the array size.

    The array skews its input (row ``k`` is delayed ``k`` cycles) and de-skews its output
    (column ``n`` is delayed ``cols - 1 - n`` cycles), so a whole input row goes in and a whole
    output row comes out, one row per cycle in steady state.

    Latency: a row presented in cycle ``t`` (``i_valid`` high) appears on ``o_c`` with
    ``o_valid`` high in cycle ``t + rows + cols - 1`` (:attr:`latency`). The pipeline never
    stalls, so it has no ``ready``: every cycle advances it. Rows with ``i_valid`` low flow
    through as bubbles and come out with ``o_valid`` low.

    The column sums are exact (at most ``32 * 2**14`` in magnitude, kept in
    ``16 + ceil_log2(rows)`` bits inside the array) and sign-extended to int32 at the output.

    Weights (double-buffered)
    -------------------------
    Each PE has a *shadow* and an *active* weight register. ``w_en`` writes ``w_data`` into the
    shadow weights of array row ``w_addr`` (one weight row per cycle, any order). ``i_swap``
    travels with the input row presented in the same cycle, through the same skew and the same
    PE registers as the activations: each PE makes its shadow weight active exactly when that row
    reaches it. Rows presented before the swap row use the old weights, the swap row and all
    later rows use the new ones, with no bubble between them. Hence the next weight tile can be
    loaded while the current one computes.

    Timing rules for a swap in cycle ``t``: shadow row ``k`` must be written in a cycle
    ``<= t + k - 1`` (all rows written before cycle ``t`` is always enough), and must not be
    written again before cycle ``t + k + cols - 1`` (the swap wavefront still reads it until
    then). Loading the next tile in row order starting ``cols - 1`` or more cycles after the swap
    is always safe.

    MX exponent stage (``mx=True``)
    --------------------------------
    Below the last PE row, each column ``n`` has a *shadow* and an *active* exponent register
    (E8M0 bytes; ``w_x_en`` writes ``w_x_data`` into the shadow of every column, with the same
    timing rules as shadow row ``rows - 1``; the swap token of PE ``(rows - 1, n)`` makes it
    active), and each input row carries an exponent term ``i_x`` (signed, skewed like
    ``a[rows - 1]``). The column sum of a row leaves PE ``(rows - 1, n)`` registered together
    with ``d = i_x + x[n]``, and is aligned by ``d`` (:func:`sw.golden.mx_align`: ``p * 2**d``
    wrapped to 32 bits for ``d >= 0``, ``p / 2**-d`` rounded half up for ``d < 0``) on its way
    to the de-skew registers: combinational, so :attr:`latency` is the same. With ``i_x =
    -127`` and an exponent of 127 the stage passes the sum unchanged (int8 commands).

    Parameters
    ----------
    rows, cols : int
        Array size in PEs, 2..32 each. ``rows`` is the reduction (K) extent, ``cols`` the number
        of outputs (N).
    mx : bool
        Build the MX exponent stage (and its ports ``w_x_data``, ``w_x_en``, ``i_x``).

    Members
    -------
    w_data : ``In(ArrayLayout(signed(8), cols))``
        One weight row ``W[w_addr, 0:cols]``.
    w_addr : ``In(range(rows))``
        Which shadow row ``w_en`` writes.
    w_en : ``In(1)``
        Write ``w_data`` into shadow row ``w_addr`` at the end of this cycle.
    w_col : ``In(1)``
        With ``w_en``: write ``w_data[k]`` into shadow column ``w_addr``, row ``k`` instead
        (``k < min(rows, cols)``): loading a tile column by column transposes it (attention's
        ``K^T``). Timing rules as for rows, with "row ``k``" read as "every row".
    i_a : ``In(ArrayLayout(signed(8), rows))``
        One activation row ``a[0:rows]``.
    i_valid : ``In(1)``
        ``i_a`` holds a row this cycle.
    i_swap : ``In(1)``
        Make the shadow weights active, starting with the row presented this cycle.
    o_c : ``Out(ArrayLayout(signed(32), cols))``
        ``a @ W_active`` for the row presented :attr:`latency` cycles ago.
    o_valid : ``Out(1)``
        ``o_c`` holds a result row this cycle.
    w_x_data : ``In(ArrayLayout(unsigned(8), cols))``
        (``mx``) The weight exponents of the next tile, one per column.
    w_x_en : ``In(1)``
        (``mx``) Write ``w_x_data`` into the shadow exponents at the end of this cycle.
    i_x : ``In(signed(X_TERM_BITS))``
        (``mx``) The exponent term of the row presented this cycle (its activation exponent
        minus the command's base, :class:`hw.tile.MatrixEngine`).
    """

    #: Width of the signed exponent term ``i_x`` (E8M0 byte minus a 10-bit base: -1023..255).
    X_TERM_BITS = 11

    def __init__(self, rows: int, cols: int, mx: bool = False):
        for name, value in (("rows", rows), ("cols", cols)):
            if not isinstance(value, int) or isinstance(value, bool):
                self._MustUse__silence = True  # no "created but never used" warning on top
                raise TypeError(f"SystolicArray {name} must be an integer, not {value!r}")
            if not 2 <= value <= 32:
                self._MustUse__silence = True
                raise ValueError(f"SystolicArray {name} must be in 2..32, not {value!r}")
        self.rows = rows
        self.cols = cols
        self.mx = bool(mx)
        #: cycles from a row on ``i_a`` to its result on ``o_c``
        self.latency = rows + cols - 1
        ports = {
            "w_data": In(data.ArrayLayout(signed(8), cols)),
            "w_addr": In(range(max(rows, cols))),
            "w_en": In(1),
            "w_col": In(1),
            "i_a": In(data.ArrayLayout(signed(8), rows)),
            "i_valid": In(1),
            "i_swap": In(1),
            "o_c": Out(data.ArrayLayout(signed(32), cols)),
            "o_valid": Out(1),
        }
        if self.mx:
            ports.update({"w_x_data": In(data.ArrayLayout(unsigned(8), cols)), "w_x_en": In(1),
                          "i_x": In(signed(self.X_TERM_BITS))})
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        rows, cols = self.rows, self.cols
        psum_shape = signed(16 + ceil_log2(rows))

        def delay(value, cycles, name):
            for i in range(cycles):
                reg = Signal.like(value, name=f"{name}_d{i + 1}")
                m.d.sync += reg.eq(value)
                value = reg
            return value

        # -- input skew: array row k sees the input row k cycles late --------------------------
        swap_chain = [self.i_swap]
        for k in range(1, rows):
            reg = Signal(name=f"swap_skew{k}")
            m.d.sync += reg.eq(swap_chain[-1])
            swap_chain.append(reg)
        a_left = [delay(self.i_a[k], k, f"a_skew{k}") for k in range(rows)]
        x_in = delay(self.i_x, rows - 1, "x_skew") if self.mx else None

        # -- the PE grid ------------------------------------------------------------------------
        # PE(k, n): w_shadow, w_active; registers a and swap to the right, psum downwards.
        psum = [None] * cols
        load_col = []       # column-write strobes, shared by all rows of a column
        for n in range(cols):
            strobe = Signal(name=f"w_load_col{n}")
            m.d.comb += strobe.eq(self.w_en & self.w_col & (self.w_addr == n))
            load_col.append(strobe)
        for k in range(rows):
            load_row = Signal(name=f"w_load_row{k}")
            m.d.comb += load_row.eq(self.w_en & ~self.w_col & (self.w_addr == k))
            a_in, swap_in = a_left[k], swap_chain[k]
            for n in range(cols):
                w_shadow = Signal(signed(8), name=f"pe{k}_{n}_w_shadow")
                w_active = Signal(signed(8), name=f"pe{k}_{n}_w_active")
                s_out = Signal(psum_shape, name=f"pe{k}_{n}_psum")
                with m.If(load_row):
                    m.d.sync += w_shadow.eq(self.w_data[n])
                if k < cols:
                    with m.If(load_col[n]):
                        m.d.sync += w_shadow.eq(self.w_data[k])
                with m.If(swap_in):
                    m.d.sync += w_active.eq(w_shadow)
                product = a_in * Mux(swap_in, w_shadow, w_active)
                m.d.sync += s_out.eq(product if psum[n] is None else psum[n] + product)
                psum[n] = s_out
                if self.mx and k == rows - 1:
                    psum[n] = self._exponent_stage(m, n, s_out, swap_in, x_in)
                if n < cols - 1:
                    a_out = Signal(signed(8), name=f"pe{k}_{n}_a")
                    swap_out = Signal(name=f"pe{k}_{n}_swap")
                    m.d.sync += [a_out.eq(a_in), swap_out.eq(swap_in)]
                    a_in, swap_in = a_out, swap_out
                    if self.mx and k == rows - 1:
                        x_out = Signal(signed(self.X_TERM_BITS), name=f"x{n}_term")
                        m.d.sync += x_out.eq(x_in)
                        x_in = x_out

        # -- output de-skew: column n waits cols - 1 - n cycles --------------------------------
        for n in range(cols):
            m.d.comb += self.o_c[n].eq(delay(psum[n], cols - 1 - n, f"c_deskew{n}"))
        m.d.comb += self.o_valid.eq(delay(self.i_valid, self.latency, "valid"))
        return m

    def _exponent_stage(self, m: Module, n: int, p, swap_in, x_in):
        """Column ``n``'s exponent registers (swapped with PE ``(rows - 1, n)``), the shift
        ``d`` registered with the column sum ``p``, and the alignment of ``p`` by ``d``
        (combinational, 32 bits)."""
        x_shadow = Signal(8, name=f"x{n}_shadow")
        x_active = Signal(8, name=f"x{n}_active")
        with m.If(self.w_x_en):
            m.d.sync += x_shadow.eq(self.w_x_data[n])
        with m.If(swap_in):
            m.d.sync += x_active.eq(x_shadow)
        d = Signal(signed(self.X_TERM_BITS + 1), name=f"x{n}_shift")
        m.d.sync += d.eq(x_in + Mux(swap_in, x_shadow, x_active))
        # d >= 0: p << d, low 32 bits (0 from d = 32 on)
        left = Signal(32, name=f"x{n}_left")
        dl = Signal(6, name=f"x{n}_dl")
        m.d.comb += dl.eq(Mux(d > 32, 32, d[:6]))
        m.d.comb += left.eq((p.as_signed() << dl)[:32])
        # d < 0: (p + 2**(r - 1)) >> r, r = -d; p is 0 or -1... rounded to 0 from r = width
        width = len(p)
        r = Signal(range(width + 1), name=f"x{n}_r")
        neg = Signal(signed(self.X_TERM_BITS + 2))
        m.d.comb += [neg.eq(-d), r.eq(Mux(neg > width, width, neg))]
        wide = Signal(signed(width + 1), name=f"x{n}_round")
        m.d.comb += wide.eq(p + ((Const(1, width + 1) << r) >> 1))
        right = Signal(signed(width + 1), name=f"x{n}_right")
        m.d.comb += right.eq(wide >> r)
        out = Signal(signed(32), name=f"x{n}_aligned")
        m.d.comb += out.eq(Mux(d >= 0, left, right))
        return out
