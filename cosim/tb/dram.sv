// AXI4 subordinate DRAM model for co-simulation (the fast path: no Python per beat).
//
// * INCR bursts of 1..256 beats, any AxSIZE up to the bus width (narrow transfers use the
//   beat address to pick the word; the manager picks the byte lanes), WSTRB byte enables.
// * Reads: up to OUTSTANDING read bursts are queued (ARREADY low when the queue is full) and
//   answered strictly in order (so same-ID order holds trivially), one beat per cycle, one
//   idle cycle between bursts. RVALID/RDATA are registered; RREADY backpressure is honoured.
// * Writes: one burst at a time (AW, then its W beats, then B). WREADY is only raised after
//   AW was accepted, which AXI allows.
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
    output logic [31:0]            prot_errors
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

    // -- write channel and backdoor (the only writers of mem) ------------------------------------
    typedef enum logic [1:0] { W_IDLE, W_DATA, W_RESP } wstate_t;
    wstate_t wstate;
    logic [ADDR_BITS-1:0] w_addr;
    logic [7:0] w_left;
    logic [2:0] w_size;
    logic w_err;
    logic [31:0] w_prot, r_prot;

    assign awready = wstate == W_IDLE;
    assign wready = wstate == W_DATA;
    assign prot_errors = w_prot + r_prot;

    always_ff @(posedge clk) begin
        if (rst) begin
            wstate <= W_IDLE;
            bvalid <= 1'b0;
            bresp <= OKAY;
            bid <= '0;
            w_prot <= '0;
            bd_ack <= 1'b0;
        end else begin
            bd_ack <= bd_op != 2'd0;
            if (bd_op == 2'd1) $readmemh(bd_file, mem, bd_first, bd_last);
            if (bd_op == 2'd2) $writememh(bd_out_file, mem, bd_first, bd_last);

            case (wstate)
                W_IDLE: if (awvalid) begin
                    w_addr <= awaddr;
                    w_left <= awlen;
                    w_size <= awsize;
                    bid <= awid;
                    w_err <= burst_bad(awaddr, awlen, awsize, awburst);
                    if (awburst != 2'b01 || crosses_4k(awaddr, awlen, awsize)) begin
                        $display("npu_dram: AXI violation: AW addr=%h len=%0d size=%0d burst=%0d",
                                 awaddr, awlen, awsize, awburst);
                        w_prot <= w_prot + 1;
                    end
                    wstate <= W_DATA;
                end
                W_DATA: if (wvalid) begin
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
                        bvalid <= 1'b1;
                        bresp <= w_err ? DECERR : OKAY;
                        wstate <= W_RESP;
                    end
                end
                W_RESP: if (bready) begin
                    bvalid <= 1'b0;
                    wstate <= W_IDLE;
                end
                default: wstate <= W_IDLE;
            endcase
        end
    end

    // -- read channel: AR queue, bursts answered in order ----------------------------------------
    logic [ADDR_BITS-1:0] q_addr [OUTSTANDING];
    logic [7:0] q_len [OUTSTANDING];
    logic [2:0] q_size [OUTSTANDING];
    logic q_err [OUTSTANDING];
    logic [ID_BITS-1:0] q_id [OUTSTANDING];
    logic [QBITS:0] q_wp, q_rp;

    logic r_busy, r_err;
    logic [ADDR_BITS-1:0] r_addr;
    logic [7:0] r_left;
    logic [2:0] r_size;
    logic [ID_BITS-1:0] r_id;

    assign arready = (q_wp - q_rp) != (QBITS+1)'(OUTSTANDING);

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
                q_err[q_wp[QBITS-1:0]] <= burst_bad(araddr, arlen, arsize, arburst);
                if (arburst != 2'b01 || crosses_4k(araddr, arlen, arsize)) begin
                    $display("npu_dram: AXI violation: AR addr=%h len=%0d size=%0d burst=%0d",
                             araddr, arlen, arsize, arburst);
                    r_prot <= r_prot + 1;
                end
                q_wp <= q_wp + 1'b1;
            end

            if (!rvalid || rready) begin
                if (r_busy) begin
                    rvalid <= 1'b1;
                    rid <= r_id;
                    rdata <= r_err ? '0 : mem[r_addr[WBITS+SHIFT-1:SHIFT]];
                    rresp <= r_err ? DECERR : OKAY;
                    rlast <= r_left == 8'd0;
                    r_addr <= next_addr(r_addr, r_size);
                    r_left <= r_left - 8'd1;
                    if (r_left == 8'd0) r_busy <= 1'b0;
                end else begin
                    rvalid <= 1'b0;
                end
            end

            if (!r_busy && q_wp != q_rp) begin
                r_busy <= 1'b1;
                r_addr <= q_addr[q_rp[QBITS-1:0]];
                r_left <= q_len[q_rp[QBITS-1:0]];
                r_size <= q_size[q_rp[QBITS-1:0]];
                r_id <= q_id[q_rp[QBITS-1:0]];
                r_err <= q_err[q_rp[QBITS-1:0]];
                q_rp <= q_rp + 1'b1;
            end
        end
    end
endmodule
