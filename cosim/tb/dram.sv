// AXI4 subordinate DRAM model for co-simulation (the fast path: no Python per beat).
//
// * INCR bursts of 1..256 beats, any AxSIZE up to the bus width (narrow transfers use the
//   beat address to pick the word; the manager picks the byte lanes), WSTRB byte enables.
// * Reads: up to OUTSTANDING read bursts are queued (ARREADY low when the queue is full) and
//   answered strictly in order (so same-ID order holds trivially), at most one beat per
//   cycle, one idle cycle between bursts. RVALID/RDATA are registered; RREADY backpressure
//   is honoured.
// * Writes: one burst's data at a time (AW, then its W beats), WREADY only after AW was
//   accepted (AXI allows it); up to OUTSTANDING bursts wait for their B response, in order.
//   The next AW is taken one idle cycle after a burst's last W beat. (Before the timing
//   parameters, the model held the next AW until the B handshake; with BREADY high when
//   BVALID rises, as the NPU's DMA and command processor keep it, the two are the same
//   cycle for cycle.)
// * A burst that touches any byte outside [0, BYTES), or whose AxBURST is not INCR, is
//   answered with DECERR (reads: RDATA = 0 on every beat; writes: nothing is written). There
//   is never a silent wrap.
// * Protocol checks: a burst that crosses a 4 KiB boundary, a WLAST that does not match AWLEN
//   or a non-INCR burst increments `prot_errors` and prints a message; the testbench fails
//   the run when it is non-zero.
// * Host backdoor, synchronous to clk: hold bd_op (1 = load words [bd_first, bd_last] from
//   the hex file with $readmemh, 2 = dump them with $writememh) for one rising edge; bd_ack
//   is high in the cycle after. Loads read PATH, dumps write PATH.out, where PATH comes from
//   the plusarg +npu_dram_file=PATH.
//   Word i holds bytes [i*DATA_BYTES, (i+1)*DATA_BYTES), little-endian.
//
// Timing, from plusargs read at time 0 (no rebuild; sw/dram.py defines and documents them,
// DramTiming.to_plusargs() writes them). Without any, the model is the ideal one.
//   +npu_dram_rd_latency=N  AR handshake to first R handshake, cycles (>= 3, the pipeline):
//                           each queued burst carries its ready time (AR cycle + N - 2 for
//                           its fetch), so outstanding bursts' latencies overlap.
//   +npu_dram_wr_latency=N  last W handshake to B handshake, cycles (>= 1), per queued burst.
//   +npu_dram_bw_num=N, +npu_dram_bw_den=D
//                           peak bandwidth N/D bytes per cycle, a token bucket shared by R
//                           and W beats (one DRAM data bus): tokens (1/D byte each) refill by
//                           N per cycle up to one beat + N; a beat (R presented, W accepted)
//                           needs one beat of tokens and costs one beat, whatever its strobes.
//                           R and W may both go in one cycle (the bucket goes negative).
//                           N = 0 or absent: no limit.
//   +npu_dram_<ch>_stall=T  ch in ar, r, aw, w, b: withhold ARREADY, RVALID, AWREADY, WREADY
//                           or BVALID in a cycle when a 32-bit draw is below T (probability
//                           T / 2**32). RVALID and BVALID, once high, stay high until their
//                           handshake, so for them the draw only delays the next beat/response.
//   +npu_dram_seed=S        seeds one xorshift32 generator per channel, reseeded at reset
//                           (sw/dram.py: stall_draws() is the same sequence in Python).
//
// Fault injection (sw/model/faults.py: BusFault describes it, to_plusargs() writes the
// plusargs, the functional model applies the same rule). A chosen burst is answered with
// SLVERR or DECERR instead of OKAY:
//   * reads: every beat of the burst carries the response, with RDATA = the inverted memory
//     word (poison, so that a manager that uses the data shows it);
//   * writes: nothing of the burst is written; its B response carries the error.
// Which bursts: mode 1 (range) every burst of a selected direction whose bytes
// [address aligned down to the size, + beats << size) meet [lo, hi) (hi = 0: 2**32); mode 2
// (count) the nth burst (from 1) of the selected directions since the configuration was
// written, counted at the AR/AW handshake (an AR before an AW of the same cycle), once. A
// burst that is bad anyway (outside the memory, not INCR) stays DECERR. Timing never
// changes. The configuration comes from plusargs at time 0 (+npu_dram_fault_mode=M,
// _dir=D (bit 0 reads, bit 1 writes), _resp=R (2 SLVERR, 3 DECERR), _lo=, _hi=, _nth=) and
// is replaced at run time by a backdoor write: fault_we high for one rising edge with the
// fault_* inputs (mode 0 switches injection off). fault_hits counts the bursts answered with
// an injected error since the last write (or reset).
module npu_dram #(
    parameter int DATA_BITS = 64,
    parameter int ADDR_BITS = 32,
    parameter int ID_BITS = 4,
    parameter longint BYTES = 64'd16777216,
    parameter int OUTSTANDING = 16       // read bursts queued; a power of two
) (
    input  logic                   clk,
    input  logic                   rst,

    input  logic [ID_BITS-1:0]     awid,
    input  logic [ADDR_BITS-1:0]   awaddr,
    input  logic [7:0]             awlen,
    input  logic [2:0]             awsize,
    input  logic [1:0]             awburst,
    input  logic                   awvalid,
    output logic                   awready,
    input  logic [DATA_BITS-1:0]   wdata,
    input  logic [DATA_BITS/8-1:0] wstrb,
    input  logic                   wlast,
    input  logic                   wvalid,
    output logic                   wready,
    output logic [ID_BITS-1:0]     bid,
    output logic [1:0]             bresp,
    output logic                   bvalid,
    input  logic                   bready,
    input  logic [ID_BITS-1:0]     arid,
    input  logic [ADDR_BITS-1:0]   araddr,
    input  logic [7:0]             arlen,
    input  logic [2:0]             arsize,
    input  logic [1:0]             arburst,
    input  logic                   arvalid,
    output logic                   arready,
    output logic [ID_BITS-1:0]     rid,
    output logic [DATA_BITS-1:0]   rdata,
    output logic [1:0]             rresp,
    output logic                   rlast,
    output logic                   rvalid,
    input  logic                   rready,

    input  logic [1:0]             bd_op,      // 0 idle, 1 load (file -> mem), 2 dump (mem -> file)
    input  logic [31:0]            bd_first,   // first word index
    input  logic [31:0]            bd_last,    // last word index (inclusive)
    output logic                   bd_ack,
    output logic [31:0]            prot_errors,

    input  logic                   fault_we,   // backdoor write of the fault configuration
    input  logic [1:0]             fault_mode, // 0 off, 1 address range, 2 nth burst
    input  logic [1:0]             fault_dir,  // bit 0 reads, bit 1 writes
    input  logic [1:0]             fault_resp, // 2 SLVERR, 3 DECERR
    input  logic [31:0]            fault_lo,
    input  logic [31:0]            fault_hi,   // exclusive; 0 = 2**32
    input  logic [31:0]            fault_nth,
    output logic [31:0]            fault_hits
);
    localparam int DATA_BYTES = DATA_BITS / 8;
    localparam int SHIFT = $clog2(DATA_BYTES);
    localparam longint WORDS = BYTES / DATA_BYTES;
    localparam int WBITS = $clog2(WORDS);
    localparam int QBITS = $clog2(OUTSTANDING);
    localparam logic [1:0] OKAY = 2'b00, DECERR = 2'b11;

    logic [DATA_BITS-1:0] mem [0:WORDS-1];

    string bd_file, bd_out_file;
    initial begin
        if (!$value$plusargs("npu_dram_file=%s", bd_file)) bd_file = "npu_dram.hex";
        bd_out_file = {bd_file, ".out"};
    end

    // A burst is bad if any byte is outside the memory or it is not INCR.
    function automatic logic burst_bad(input logic [ADDR_BITS-1:0] addr, input logic [7:0] len,
                                       input logic [2:0] size, input logic [1:0] burst);
        longint unsigned first_aligned, end_addr;
        first_aligned = 64'(addr) & ~((64'd1 << size) - 1);
        end_addr = first_aligned + ((64'(len) + 1) << size);
        return burst != 2'b01 || end_addr > 64'(BYTES) || size > 3'(SHIFT);
    endfunction

    function automatic logic crosses_4k(input logic [ADDR_BITS-1:0] addr, input logic [7:0] len,
                                        input logic [2:0] size);
        longint unsigned first_aligned, last_byte;
        first_aligned = 64'(addr) & ~((64'd1 << size) - 1);
        last_byte = first_aligned + ((64'(len) + 1) << size) - 1;
        return (64'(addr) >> 12) != (last_byte >> 12);
    endfunction

    function automatic logic [ADDR_BITS-1:0] next_addr(input logic [ADDR_BITS-1:0] addr,
                                                       input logic [2:0] size);
        return (addr & ~((ADDR_BITS'(1) << size) - 1)) + (ADDR_BITS'(1) << size);
    endfunction

    // -- timing parameters (plusargs, see the header; defaults: the ideal model) ----------------
    localparam longint unsigned MIN_RD_LATENCY = 3, MIN_WR_LATENCY = 1;
    localparam int N_CH = 5;                                   // sw/dram.py CHANNELS order
    localparam int CH_AR = 0, CH_R = 1, CH_AW = 2, CH_W = 3, CH_B = 4;
    longint unsigned rd_latency, wr_latency;
    longint bw_num, bw_den, beat_tokens, cap_tokens;
    logic [31:0] stall_t [N_CH];
    logic [31:0] seed;

    function automatic longint unsigned plusarg_or(input string fmt, input longint unsigned dflt);
        longint unsigned v;
        return $value$plusargs(fmt, v) ? v : dflt;
    endfunction

    initial begin
        rd_latency = plusarg_or("npu_dram_rd_latency=%d", MIN_RD_LATENCY);
        wr_latency = plusarg_or("npu_dram_wr_latency=%d", MIN_WR_LATENCY);
        if (rd_latency < MIN_RD_LATENCY) rd_latency = MIN_RD_LATENCY;
        if (wr_latency < MIN_WR_LATENCY) wr_latency = MIN_WR_LATENCY;
        bw_num = longint'(plusarg_or("npu_dram_bw_num=%d", 0));
        bw_den = longint'(plusarg_or("npu_dram_bw_den=%d", 1));
        if (bw_den < 1) bw_den = 1;
        beat_tokens = longint'(DATA_BYTES) * bw_den;
        cap_tokens = beat_tokens + bw_num;
        stall_t[CH_AR] = 32'(plusarg_or("npu_dram_ar_stall=%d", 0));
        stall_t[CH_R] = 32'(plusarg_or("npu_dram_r_stall=%d", 0));
        stall_t[CH_AW] = 32'(plusarg_or("npu_dram_aw_stall=%d", 0));
        stall_t[CH_W] = 32'(plusarg_or("npu_dram_w_stall=%d", 0));
        stall_t[CH_B] = 32'(plusarg_or("npu_dram_b_stall=%d", 0));
        seed = 32'(plusarg_or("npu_dram_seed=%d", 1));
        if (rd_latency != MIN_RD_LATENCY || wr_latency != MIN_WR_LATENCY || bw_num != 0
                || (stall_t[CH_AR] | stall_t[CH_R] | stall_t[CH_AW] | stall_t[CH_W]
                    | stall_t[CH_B]) != 0) begin
            $display("npu_dram: timing: read latency %0d, write latency %0d, bandwidth %0d/%0d B/cycle (0: no limit)",
                     rd_latency, wr_latency, bw_num, bw_den);
            $display("npu_dram: stall thresholds (/2^32): ar %0d r %0d aw %0d w %0d b %0d, seed %0d",
                     stall_t[CH_AR], stall_t[CH_R], stall_t[CH_AW], stall_t[CH_W], stall_t[CH_B], seed);
        end
    end

    // -- fault injection: configuration (plusargs, then backdoor writes) and the choice -------
    localparam logic [1:0] F_OFF = 2'd0, F_RANGE = 2'd1, F_NTH = 2'd2;
    logic [1:0] pa_mode, pa_dir, pa_resp;
    logic [31:0] pa_lo, pa_hi, pa_nth;
    initial begin
        pa_mode = 2'(plusarg_or("npu_dram_fault_mode=%d", 0));
        pa_dir = 2'(plusarg_or("npu_dram_fault_dir=%d", 3));
        pa_resp = 2'(plusarg_or("npu_dram_fault_resp=%d", 2));
        pa_lo = 32'(plusarg_or("npu_dram_fault_lo=%d", 0));
        pa_hi = 32'(plusarg_or("npu_dram_fault_hi=%d", 0));
        pa_nth = 32'(plusarg_or("npu_dram_fault_nth=%d", 1));
        if (pa_mode != F_OFF)
            $display("npu_dram: fault injection: mode %0d dir %0d resp %0d range [%h, %h) nth %0d",
                     pa_mode, pa_dir, pa_resp, pa_lo, pa_hi, pa_nth);
    end
    logic f_written;                // a backdoor write replaced the plusargs
    logic [1:0] f_mode_r, f_dir_r, f_resp_r;
    logic [31:0] f_lo_r, f_hi_r, f_nth_r, f_count;
    wire [1:0] f_mode = f_written ? f_mode_r : pa_mode;
    wire [1:0] f_dir = f_written ? f_dir_r : pa_dir;
    wire [1:0] f_resp = f_written ? f_resp_r : pa_resp;
    wire [31:0] f_lo = f_written ? f_lo_r : pa_lo;
    wire [31:0] f_hi = f_written ? f_hi_r : pa_hi;
    wire [31:0] f_nth = f_written ? f_nth_r : pa_nth;

    function automatic logic in_range(input logic [ADDR_BITS-1:0] addr, input logic [7:0] len,
                                      input logic [2:0] size);
        longint unsigned first_aligned, end_addr, hi;
        first_aligned = 64'(addr) & ~((64'd1 << size) - 1);
        end_addr = first_aligned + ((64'(len) + 1) << size);
        hi = f_hi == 32'd0 ? 64'h1_0000_0000 : 64'(f_hi);
        return first_aligned < hi && end_addr > 64'(f_lo);
    endfunction

    logic ar_hs, aw_hs;             // AR / AW handshakes in this cycle (assigned below)
    wire count_rd = f_mode == F_NTH && f_dir[0] && ar_hs;
    wire count_wr = f_mode == F_NTH && f_dir[1] && aw_hs;
    wire ar_fault = (f_mode == F_RANGE && f_dir[0] && in_range(araddr, arlen, arsize))
                    || (count_rd && f_count + 32'd1 == f_nth);
    wire aw_fault = (f_mode == F_RANGE && f_dir[1] && in_range(awaddr, awlen, awsize))
                    || (count_wr && f_count + 32'(count_rd) + 32'd1 == f_nth);

    always_ff @(posedge clk) begin
        if (fault_we) begin
            f_written <= 1'b1;
            f_mode_r <= fault_mode;
            f_dir_r <= fault_dir;
            f_resp_r <= fault_resp;
            f_lo_r <= fault_lo;
            f_hi_r <= fault_hi;
            f_nth_r <= fault_nth;
            f_count <= '0;
            fault_hits <= '0;
        end else if (rst) begin
            f_count <= '0;
            fault_hits <= '0;
        end else begin
            f_count <= f_count + 32'(count_rd) + 32'(count_wr);
            fault_hits <= fault_hits + 32'(ar_hs && ar_fault) + 32'(aw_hs && aw_fault);
        end
    end
    initial f_written = 1'b0;

    // -- cycle counter, random backpressure, bandwidth tokens -----------------------------------
    longint unsigned now;           // rising edges since reset was released
    always_ff @(posedge clk) now <= rst ? 64'd0 : now + 64'd1;

    // MurmurHash3's 32-bit finalizer (seed spreading) and Marsaglia's xorshift32 (13, 17, 5);
    // sw/dram.py stall_draws() is the same computation.
    function automatic logic [31:0] fmix32(input logic [31:0] x);
        x ^= x >> 16;
        x *= 32'h85EBCA6B;
        x ^= x >> 13;
        x *= 32'hC2B2AE35;
        return x ^ (x >> 16);
    endfunction

    function automatic logic [31:0] xorshift32(input logic [31:0] x);
        x ^= x << 13;
        x ^= x >> 17;
        return x ^ (x << 5);
    endfunction

    function automatic logic [31:0] channel_seed(input logic [31:0] s, input int c);
        logic [31:0] h;
        h = fmix32(s ^ (32'h9E3779B9 * 32'(c + 1)));
        return h == 32'd0 ? 32'd1 : h;
    endfunction

    logic [31:0] prng [N_CH];
    logic [N_CH-1:0] stall;         // stall[c]: channel c is withheld in this cycle
    always_ff @(posedge clk) begin
        for (int c = 0; c < N_CH; c++) begin
            if (rst) begin
                prng[c] <= channel_seed(seed, c);
                stall[c] <= 1'b0;
            end else begin
                prng[c] <= xorshift32(prng[c]);
                stall[c] <= xorshift32(prng[c]) < stall_t[c];
            end
        end
    end

    // Token bucket in 1/bw_den bytes: R and W beats share it (one DRAM data bus).
    logic r_take, w_take;           // an R beat is loaded / a W beat is taken at this edge
    longint tokens, tokens_next;
    wire tok_ok = bw_num == 0 || tokens >= beat_tokens;
    always_comb begin
        tokens_next = tokens + bw_num - (longint'(r_take) + longint'(w_take)) * beat_tokens;
        if (tokens_next > cap_tokens) tokens_next = cap_tokens;
    end
    always_ff @(posedge clk) tokens <= rst ? cap_tokens : tokens_next;

    // -- write channel and backdoor (the only writers of mem) ------------------------------------
    typedef enum logic [1:0] { W_IDLE, W_DATA, W_TURN } wstate_t;
    wstate_t wstate;
    logic [ADDR_BITS-1:0] w_addr;
    logic [7:0] w_left;
    logic [2:0] w_size;
    logic [ID_BITS-1:0] w_id;
    logic w_err;                    // bad burst (DECERR) or injected fault: nothing written
    logic [1:0] w_resp;             // its B response
    logic [31:0] w_prot, r_prot;

    // B responses wait in order, each with the cycle it is due.
    logic [ID_BITS-1:0] b_id_q [OUTSTANDING];
    logic [1:0] b_resp_q [OUTSTANDING];
    longint unsigned b_due [OUTSTANDING];
    logic [QBITS:0] b_wp, b_rp;
    logic b_shown;                  // BVALID was high and not taken: it must stay high

    wire b_due_now = b_wp != b_rp && now >= b_due[b_rp[QBITS-1:0]];
    assign bvalid = b_due_now && (b_shown || !stall[CH_B]);
    assign bid = b_id_q[b_rp[QBITS-1:0]];
    assign bresp = b_resp_q[b_rp[QBITS-1:0]];
    assign awready = wstate == W_IDLE && (b_wp - b_rp) != (QBITS+1)'(OUTSTANDING)
                     && !stall[CH_AW];
    assign wready = wstate == W_DATA && !stall[CH_W] && tok_ok;
    assign w_take = wvalid && wready;
    assign prot_errors = w_prot + r_prot;
    assign aw_hs = awvalid && awready;

    always_ff @(posedge clk) begin
        if (rst) begin
            wstate <= W_IDLE;
            b_wp <= '0;
            b_rp <= '0;
            b_shown <= 1'b0;
            w_prot <= '0;
            bd_ack <= 1'b0;
        end else begin
            bd_ack <= bd_op != 2'd0;
            if (bd_op == 2'd1) $readmemh(bd_file, mem, bd_first, bd_last);
            if (bd_op == 2'd2) $writememh(bd_out_file, mem, bd_first, bd_last);

            b_shown <= bvalid && !bready;
            if (bvalid && bready) b_rp <= b_rp + 1'b1;

            case (wstate)
                W_IDLE: if (awvalid && awready) begin
                    w_addr <= awaddr;
                    w_left <= awlen;
                    w_size <= awsize;
                    w_id <= awid;
                    w_err <= burst_bad(awaddr, awlen, awsize, awburst) || aw_fault;
                    w_resp <= burst_bad(awaddr, awlen, awsize, awburst) ? DECERR
                              : aw_fault ? f_resp : OKAY;
                    if (awburst != 2'b01 || crosses_4k(awaddr, awlen, awsize)) begin
                        $display("npu_dram: AXI violation: AW addr=%h len=%0d size=%0d burst=%0d",
                                 awaddr, awlen, awsize, awburst);
                        w_prot <= w_prot + 1;
                    end
                    wstate <= W_DATA;
                end
                W_DATA: if (w_take) begin
                    if (!w_err)
                        for (int b = 0; b < DATA_BYTES; b++)
                            if (wstrb[b]) mem[w_addr[WBITS+SHIFT-1:SHIFT]][8*b +: 8] <= wdata[8*b +: 8];
                    if (wlast != (w_left == 8'd0)) begin
                        $display("npu_dram: AXI violation: WLAST=%0d with %0d beats left", wlast, w_left);
                        w_prot <= w_prot + 1;
                    end
                    w_addr <= next_addr(w_addr, w_size);
                    w_left <= w_left - 8'd1;
                    if (w_left == 8'd0) begin
                        b_id_q[b_wp[QBITS-1:0]] <= w_id;
                        b_resp_q[b_wp[QBITS-1:0]] <= w_resp;
                        b_due[b_wp[QBITS-1:0]] <= now + wr_latency;
                        b_wp <= b_wp + 1'b1;
                        wstate <= W_TURN;
                    end
                end
                W_TURN: wstate <= W_IDLE;   // one idle cycle before the next AW
                default: wstate <= W_IDLE;
            endcase
        end
    end

    // -- read channel: AR queue, bursts answered in order ----------------------------------------
    logic [ADDR_BITS-1:0] q_addr [OUTSTANDING];
    logic [7:0] q_len [OUTSTANDING];
    logic [2:0] q_size [OUTSTANDING];
    logic [1:0] q_resp [OUTSTANDING];  // OKAY, DECERR (bad burst: data 0) or an injected error
    logic q_poison [OUTSTANDING];      // injected: data inverted
    logic [ID_BITS-1:0] q_id [OUTSTANDING];
    longint unsigned q_due [OUTSTANDING];   // first edge at which the burst may be fetched
    logic [QBITS:0] q_wp, q_rp;

    logic r_busy, r_poison;
    logic [1:0] r_resp;
    logic [ADDR_BITS-1:0] r_addr;
    logic [7:0] r_left;
    logic [2:0] r_size;
    logic [ID_BITS-1:0] r_id;

    assign arready = (q_wp - q_rp) != (QBITS+1)'(OUTSTANDING) && !stall[CH_AR];
    assign ar_hs = arvalid && arready;
    assign r_take = (!rvalid || rready) && r_busy && !stall[CH_R] && tok_ok;

    always_ff @(posedge clk) begin
        if (rst) begin
            q_wp <= '0;
            q_rp <= '0;
            r_busy <= 1'b0;
            rvalid <= 1'b0;
            rlast <= 1'b0;
            r_prot <= '0;
        end else begin
            if (arvalid && arready) begin
                q_addr[q_wp[QBITS-1:0]] <= araddr;
                q_len[q_wp[QBITS-1:0]] <= arlen;
                q_size[q_wp[QBITS-1:0]] <= arsize;
                q_id[q_wp[QBITS-1:0]] <= arid;
                q_resp[q_wp[QBITS-1:0]] <= burst_bad(araddr, arlen, arsize, arburst) ? DECERR
                                           : ar_fault ? f_resp : OKAY;
                q_poison[q_wp[QBITS-1:0]] <= !burst_bad(araddr, arlen, arsize, arburst)
                                             && ar_fault;
                // fetched rd_latency - 2 edges later: first beat registered one edge after
                // the fetch, taken one edge after that
                q_due[q_wp[QBITS-1:0]] <= now + rd_latency - 64'd2;
                if (arburst != 2'b01 || crosses_4k(araddr, arlen, arsize)) begin
                    $display("npu_dram: AXI violation: AR addr=%h len=%0d size=%0d burst=%0d",
                             araddr, arlen, arsize, arburst);
                    r_prot <= r_prot + 1;
                end
                q_wp <= q_wp + 1'b1;
            end

            if (!rvalid || rready) begin
                if (r_take) begin
                    rvalid <= 1'b1;
                    rid <= r_id;
                    rdata <= r_poison ? ~mem[r_addr[WBITS+SHIFT-1:SHIFT]]
                             : r_resp != OKAY ? '0 : mem[r_addr[WBITS+SHIFT-1:SHIFT]];
                    rresp <= r_resp;
                    rlast <= r_left == 8'd0;
                    r_addr <= next_addr(r_addr, r_size);
                    r_left <= r_left - 8'd1;
                    if (r_left == 8'd0) r_busy <= 1'b0;
                end else begin
                    rvalid <= 1'b0;
                end
            end

            if (!r_busy && q_wp != q_rp && now >= q_due[q_rp[QBITS-1:0]]) begin
                r_busy <= 1'b1;
                r_addr <= q_addr[q_rp[QBITS-1:0]];
                r_left <= q_len[q_rp[QBITS-1:0]];
                r_size <= q_size[q_rp[QBITS-1:0]];
                r_id <= q_id[q_rp[QBITS-1:0]];
                r_resp <= q_resp[q_rp[QBITS-1:0]];
                r_poison <= q_poison[q_rp[QBITS-1:0]];
                q_rp <= q_rp + 1'b1;
            end
        end
    end
endmodule
