// AXI protocol checkers of the testbench: a monitor on the NPU's AXI4 master port and one on
// its AXI4-Lite CSR port (ARM IHI 0022, AMBA AXI and ACE Protocol Specification, issue H:
// A3.2.1 handshake rules, A3.3 channel dependencies, A3.4.1 burst rules, B1 AXI4-Lite).
//
// They only watch: every rising edge they check the rules below and count the violations,
// print "axi_checker <port>: cycle <n>: <RULE>: <detail>" for each, and hold the number, the
// first rule and its cycle on their outputs; cocotb_entry fails the run when the count is
// not zero (cosim/tb/rtl_backend.py names the rule from its number). No Python runs per beat.
//
// Rule numbers (cosim/tb/axi_rules.py holds the same table; a test compares the two):
//   1 AR_DROP     ARVALID fell before ARREADY           2 AR_CHANGE  AR payload changed while waiting
//   3 AW_DROP     AWVALID fell before AWREADY           4 AW_CHANGE  AW payload changed while waiting
//   5 W_DROP      WVALID fell before WREADY             6 W_CHANGE   W payload changed while waiting
//   7 R_DROP      RVALID fell before RREADY             8 R_CHANGE   R payload changed while waiting
//   9 B_DROP      BVALID fell before BREADY            10 B_CHANGE   B payload changed while waiting
//  11 AR_4K       INCR read burst crosses 4 KiB        12 AW_4K      INCR write burst crosses 4 KiB
//  13 AR_BURST    ARBURST reserved, bad WRAP length or alignment, or ARSIZE above the bus width
//  14 AW_BURST    the same for AW
//  15 W_LAST      WLAST not on beat AWLEN + 1 of its burst (W bursts follow AW order)
//  16 R_LAST      RLAST not on beat ARLEN + 1 of its burst (per ID, in AR order)
//  17 R_UNEXPECTED RVALID with no read burst outstanding for its ID (Lite: no AR outstanding),
//                 counting only requests whose handshake was in an earlier cycle (A3.3.1)
//  18 B_UNEXPECTED BVALID with no write burst of its ID whose AW and last W beat were both
//                 taken in earlier cycles (Lite: no write whose AW and W were taken)
//  19 RESET_VALID a VALID high while reset is asserted
// AXI4-Lite checks 1..10, 17..19 (its transactions are single beats, no ID).
// The checks assume a manager that sends W beats in AW order (AXI4 has no WID) and at most
// DEPTH bursts outstanding per ID.

// Rule names, by number (printed with each violation).
function automatic string npu_axi_rule_name(input int rule);
    case (rule)
        1: return "AR_DROP";       2: return "AR_CHANGE";
        3: return "AW_DROP";       4: return "AW_CHANGE";
        5: return "W_DROP";        6: return "W_CHANGE";
        7: return "R_DROP";        8: return "R_CHANGE";
        9: return "B_DROP";       10: return "B_CHANGE";
        11: return "AR_4K";       12: return "AW_4K";
        13: return "AR_BURST";    14: return "AW_BURST";
        15: return "W_LAST";      16: return "R_LAST";
        17: return "R_UNEXPECTED"; 18: return "B_UNEXPECTED";
        19: return "RESET_VALID";
        default: return "?";
    endcase
endfunction

module npu_axi_checker #(
    parameter string NAME = "mem",
    parameter int DATA_BITS = 64,
    parameter int ADDR_BITS = 32,
    parameter int ID_BITS = 4,
    parameter int DEPTH = 32            // bursts tracked per ID and in the W/AW pairing
) (
    input  logic                   clk,
    input  logic                   rst,
    input  logic                   clear,      // forget the violations seen so far
    input  logic [ID_BITS-1:0]     awid,
    input  logic [ADDR_BITS-1:0]   awaddr,
    input  logic [7:0]             awlen,
    input  logic [2:0]             awsize,
    input  logic [1:0]             awburst,
    input  logic                   awvalid,
    input  logic                   awready,
    input  logic [DATA_BITS-1:0]   wdata,
    input  logic [DATA_BITS/8-1:0] wstrb,
    input  logic                   wlast,
    input  logic                   wvalid,
    input  logic                   wready,
    input  logic [ID_BITS-1:0]     bid,
    input  logic [1:0]             bresp,
    input  logic                   bvalid,
    input  logic                   bready,
    input  logic [ID_BITS-1:0]     arid,
    input  logic [ADDR_BITS-1:0]   araddr,
    input  logic [7:0]             arlen,
    input  logic [2:0]             arsize,
    input  logic [1:0]             arburst,
    input  logic                   arvalid,
    input  logic                   arready,
    input  logic [ID_BITS-1:0]     rid,
    input  logic [DATA_BITS-1:0]   rdata,
    input  logic [1:0]             rresp,
    input  logic                   rlast,
    input  logic                   rvalid,
    input  logic                   rready,
    output logic [31:0]            errors,
    output logic [7:0]             first_rule,
    output logic [31:0]            first_cycle
);
    localparam int N_ID = 1 << ID_BITS;
    localparam int QB = $clog2(DEPTH);
    localparam int MAX_SIZE = $clog2(DATA_BITS / 8);
    localparam int N_RULES = 19;
    localparam int AXW = ADDR_BITS + 8 + 3 + 2 + ID_BITS;

    wire ar_take = arvalid && arready, aw_take = awvalid && awready, w_take = wvalid && wready;
    wire r_take = rvalid && rready, b_take = bvalid && bready;
    wire w_end = w_take && wlast;

    logic [31:0] cycle;
    // the previous cycle's handshake state and payloads (A3.2.1)
    logic p_arv, p_arr, p_awv, p_awr, p_wv, p_wr, p_rv, p_rr, p_bv, p_br;
    logic [AXW-1:0] p_ar, p_aw;
    logic [DATA_BITS+DATA_BITS/8:0] p_w;
    logic [DATA_BITS+2+1+ID_BITS-1:0] p_r;
    logic [2+ID_BITS-1:0] p_b;
    wire [AXW-1:0] ar_pl = {araddr, arlen, arsize, arburst, arid};
    wire [AXW-1:0] aw_pl = {awaddr, awlen, awsize, awburst, awid};
    wire [DATA_BITS+DATA_BITS/8:0] w_pl = {wdata, wstrb, wlast};
    wire [DATA_BITS+2+1+ID_BITS-1:0] r_pl = {rdata, rresp, rlast, rid};
    wire [2+ID_BITS-1:0] b_pl = {bresp, bid};

    // W bursts pair with AWs in order (A3.3: AXI4 has no WID). awq: lengths of AWs whose W
    // burst has not ended; wq: beats of W bursts that ended before their AW. At most one of
    // the two holds entries.
    logic [7:0] awq [DEPTH];
    logic [QB:0] awq_wp, awq_rp;
    logic [8:0] wq [DEPTH];
    logic [QB:0] wq_wp, wq_rp;
    logic [8:0] w_beat;             // beats of the current W burst before this cycle's
    // the k-th AW and the k-th WLAST make the k-th complete write burst; its ID waits for B
    logic [ID_BITS-1:0] idq [DEPTH];
    logic [QB:0] idq_wp, idq_rp;
    logic [31:0] n_aw, n_wlast;
    logic [15:0] b_due [N_ID];
    // per ID, lengths of read bursts outstanding (in AR order) and beats of the current one
    logic [7:0] rq [N_ID][DEPTH];
    logic [QB:0] rq_wp [N_ID], rq_rp [N_ID];
    logic [8:0] r_beat [N_ID];

    function automatic logic crosses_4k(input logic [ADDR_BITS-1:0] addr, input logic [7:0] len,
                                        input logic [2:0] size);
        longint unsigned first_aligned, last_byte;
        first_aligned = 64'(addr) & ~((64'd1 << size) - 1);
        last_byte = first_aligned + ((64'(len) + 1) << size) - 1;
        return (64'(addr) >> 12) != (last_byte >> 12);
    endfunction

    function automatic logic burst_illegal(input logic [ADDR_BITS-1:0] addr, input logic [7:0] len,
                                           input logic [2:0] size, input logic [1:0] burst);
        if (32'(size) > MAX_SIZE || burst == 2'b11) return 1'b1;
        if (burst == 2'b10)     // WRAP: 2, 4, 8 or 16 beats, address aligned to the size
            return !(len == 8'd1 || len == 8'd3 || len == 8'd7 || len == 8'd15)
                   || (64'(addr) & ((64'd1 << size) - 1)) != 0;
        return 1'b0;
    endfunction

    // -- what this cycle's W beat and AW pair with --------------------------------------------
    wire awq_any = awq_wp != awq_rp, wq_any = wq_wp != wq_rp;
    wire [7:0] awq_head = awq[awq_rp[QB-1:0]];
    wire [8:0] wq_head = wq[wq_rp[QB-1:0]];
    // the current W burst's AW: the oldest waiting one, else one taken in this very cycle
    wire w_has_aw = awq_any || (aw_take && !wq_any);
    wire [7:0] w_len = awq_any ? awq_head : awlen;
    wire aw_pops_wq = aw_take && wq_any;                  // pairs with a W burst already ended
    wire aw_pairs_now = aw_take && !awq_any && !wq_any && w_end;   // ends in this cycle
    wire w_pops_awq = w_end && awq_any;
    wire w_pushes_wq = w_end && !w_has_aw;

    logic [N_RULES:0] v;            // rules violated in this cycle (bit 0 unused: a zero-based
                                    // range names the vector alike in VCD and FST)
    logic [15:0] due [N_ID];        // b_due after this cycle
    logic [ID_BITS-1:0] done_id;
    logic burst_done;
    always_comb begin
        v = '0;
        for (int i = 0; i < N_ID; i++) due[i] = b_due[i];
        burst_done = ((n_aw + 32'(aw_take)) < (n_wlast + 32'(w_end)) ? (n_aw + 32'(aw_take))
                      : (n_wlast + 32'(w_end))) != (n_aw < n_wlast ? n_aw : n_wlast);
        done_id = idq_wp != idq_rp ? idq[idq_rp[QB-1:0]] : awid;
        if (rst) begin
            v[19] = arvalid || awvalid || wvalid || rvalid || bvalid;
        end else begin
            // A3.2.1: once VALID is high it stays high, with its payload, until READY
            v[1] = p_arv && !p_arr && !arvalid;
            v[2] = p_arv && !p_arr && arvalid && ar_pl != p_ar;
            v[3] = p_awv && !p_awr && !awvalid;
            v[4] = p_awv && !p_awr && awvalid && aw_pl != p_aw;
            v[5] = p_wv && !p_wr && !wvalid;
            v[6] = p_wv && !p_wr && wvalid && w_pl != p_w;
            v[7] = p_rv && !p_rr && !rvalid;
            v[8] = p_rv && !p_rr && rvalid && r_pl != p_r;
            v[9] = p_bv && !p_br && !bvalid;
            v[10] = p_bv && !p_br && bvalid && b_pl != p_b;
            // A3.4.1: 4 KiB, burst type, size
            v[11] = ar_take && arburst == 2'b01 && crosses_4k(araddr, arlen, arsize);
            v[12] = aw_take && awburst == 2'b01 && crosses_4k(awaddr, awlen, awsize);
            v[13] = ar_take && burst_illegal(araddr, arlen, arsize, arburst);
            v[14] = aw_take && burst_illegal(awaddr, awlen, awsize, awburst);
            // WLAST on beat AWLEN + 1
            if (w_take && w_has_aw && wlast != (w_beat == 9'(w_len))) v[15] = 1'b1;
            if (w_take && !w_has_aw && !wlast && w_beat == 9'd255) v[15] = 1'b1;
            if (aw_pops_wq && wq_head != 9'(awlen) + 9'd1) v[15] = 1'b1;
            // R: only for an outstanding burst of its ID, RLAST on beat ARLEN + 1
            // (A3.3.1: a response comes after its request's handshake, never in that cycle)
            if (rvalid && rq_wp[rid] == rq_rp[rid]) v[17] = 1'b1;
            else if (r_take && rlast != (r_beat[rid] == 9'(rq[rid][rq_rp[rid][QB-1:0]])))
                v[16] = 1'b1;
            // B: only for a write burst of its ID whose AW and last W beat were taken before
            if (bvalid && b_due[bid] == 16'd0) v[18] = 1'b1;
            if (b_take && due[bid] != 16'd0) due[bid] = due[bid] - 16'd1;
            if (burst_done) due[done_id] = due[done_id] + 16'd1;
        end
    end

    always_ff @(posedge clk) begin
        for (int i = 1; i <= N_RULES; i++)
            if (v[i]) $display("axi_checker %s: cycle %0d: %s (araddr %h awaddr %h arlen %0d awlen %0d rid %0d bid %0d)",
                               NAME, cycle, npu_axi_rule_name(i), araddr, awaddr, arlen, awlen, rid, bid);
        if (clear) begin
            errors <= '0;
            first_rule <= '0;
            first_cycle <= '0;
        end else begin
            if (v != '0 && errors == 32'd0) begin
                for (int i = N_RULES; i >= 1; i--) if (v[i]) first_rule <= 8'(i);
                first_cycle <= cycle;
            end
            errors <= errors + 32'($countones(v));
        end
        cycle <= cycle + 32'd1;
        {p_arv, p_arr, p_awv, p_awr, p_wv, p_wr, p_rv, p_rr, p_bv, p_br} <= rst ? '0 :
            {arvalid, arready, awvalid, awready, wvalid, wready, rvalid, rready, bvalid, bready};
        p_ar <= ar_pl;
        p_aw <= aw_pl;
        p_w <= w_pl;
        p_r <= r_pl;
        p_b <= b_pl;
        if (rst) begin
            awq_wp <= '0; awq_rp <= '0; wq_wp <= '0; wq_rp <= '0; w_beat <= '0;
            idq_wp <= '0; idq_rp <= '0; n_aw <= '0; n_wlast <= '0;
            for (int i = 0; i < N_ID; i++) begin
                b_due[i] <= '0;
                rq_wp[i] <= '0;
                rq_rp[i] <= '0;
                r_beat[i] <= '0;
            end
        end else begin
            // W/AW pairing
            if (w_take) w_beat <= w_end ? 9'd0 : w_beat + 9'd1;
            if (aw_pops_wq) wq_rp <= wq_rp + 1'b1;
            else if (aw_take && !aw_pairs_now) begin
                awq[awq_wp[QB-1:0]] <= awlen;
                awq_wp <= awq_wp + 1'b1;
            end
            if (w_pops_awq) awq_rp <= awq_rp + 1'b1;
            else if (w_pushes_wq) begin
                wq[wq_wp[QB-1:0]] <= w_beat + 9'd1;
                wq_wp <= wq_wp + 1'b1;
            end
            // complete bursts and their B
            if (aw_take) begin
                idq[idq_wp[QB-1:0]] <= awid;
                idq_wp <= idq_wp + 1'b1;
            end
            if (burst_done) idq_rp <= idq_rp + 1'b1;
            n_aw <= n_aw + 32'(aw_take);
            n_wlast <= n_wlast + 32'(w_end);
            for (int i = 0; i < N_ID; i++) b_due[i] <= due[i];
            // reads
            if (ar_take) begin
                rq[arid][rq_wp[arid][QB-1:0]] <= arlen;
                rq_wp[arid] <= rq_wp[arid] + 1'b1;
            end
            if (r_take && rq_wp[rid] != rq_rp[rid]) begin
                if (rlast || r_beat[rid] == 9'(rq[rid][rq_rp[rid][QB-1:0]])) begin
                    rq_rp[rid] <= rq_rp[rid] + 1'b1;
                    r_beat[rid] <= 9'd0;
                end else r_beat[rid] <= r_beat[rid] + 9'd1;
            end
        end
    end

    initial begin
        errors = '0;
        first_rule = '0;
        first_cycle = '0;
        cycle = '0;
    end
endmodule


// AXI4-Lite: single-beat transactions, no ID, no bursts (ARM IHI 0022 B1.1).
module npu_axil_checker #(
    parameter string NAME = "csr",
    parameter int ADDR_BITS = 12
) (
    input  logic                 clk,
    input  logic                 rst,
    input  logic                 clear,
    input  logic [ADDR_BITS-1:0] awaddr,
    input  logic                 awvalid,
    input  logic                 awready,
    input  logic [31:0]          wdata,
    input  logic [3:0]           wstrb,
    input  logic                 wvalid,
    input  logic                 wready,
    input  logic [1:0]           bresp,
    input  logic                 bvalid,
    input  logic                 bready,
    input  logic [ADDR_BITS-1:0] araddr,
    input  logic                 arvalid,
    input  logic                 arready,
    input  logic [31:0]          rdata,
    input  logic [1:0]           rresp,
    input  logic                 rvalid,
    input  logic                 rready,
    output logic [31:0]          errors,
    output logic [7:0]           first_rule,
    output logic [31:0]          first_cycle
);
    localparam int N_RULES = 19;
    wire ar_take = arvalid && arready, aw_take = awvalid && awready, w_take = wvalid && wready;
    wire r_take = rvalid && rready, b_take = bvalid && bready;
    logic [31:0] cycle;
    logic p_arv, p_arr, p_awv, p_awr, p_wv, p_wr, p_rv, p_rr, p_bv, p_br;
    logic [ADDR_BITS-1:0] p_ar, p_aw;
    logic [35:0] p_w;
    logic [33:0] p_r;
    logic [1:0] p_b;
    logic [15:0] n_ar, n_r, n_aw, n_w, n_b;     // handshakes, modulo 2**16

    logic [N_RULES:0] v;            // bit 0 unused, as above
    always_comb begin
        v = '0;
        if (rst) begin
            v[19] = arvalid || awvalid || wvalid || rvalid || bvalid;
        end else begin
            v[1] = p_arv && !p_arr && !arvalid;
            v[2] = p_arv && !p_arr && arvalid && araddr != p_ar;
            v[3] = p_awv && !p_awr && !awvalid;
            v[4] = p_awv && !p_awr && awvalid && awaddr != p_aw;
            v[5] = p_wv && !p_wr && !wvalid;
            v[6] = p_wv && !p_wr && wvalid && {wdata, wstrb} != p_w;
            v[7] = p_rv && !p_rr && !rvalid;
            v[8] = p_rv && !p_rr && rvalid && {rdata, rresp} != p_r;
            v[9] = p_bv && !p_br && !bvalid;
            v[10] = p_bv && !p_br && bvalid && bresp != p_b;
            // a response needs its request: R after an AR, B after both AW and W (B1.1)
            v[17] = rvalid && n_r == n_ar;
            v[18] = bvalid && (n_aw < n_w ? n_aw : n_w) == n_b;
        end
    end

    always_ff @(posedge clk) begin
        for (int i = 1; i <= N_RULES; i++)
            if (v[i]) $display("axi_checker %s: cycle %0d: %s (araddr %h awaddr %h)", NAME, cycle,
                               npu_axi_rule_name(i), araddr, awaddr);
        if (clear) begin
            errors <= '0;
            first_rule <= '0;
            first_cycle <= '0;
        end else begin
            if (v != '0 && errors == 32'd0) begin
                for (int i = N_RULES; i >= 1; i--) if (v[i]) first_rule <= 8'(i);
                first_cycle <= cycle;
            end
            errors <= errors + 32'($countones(v));
        end
        cycle <= cycle + 32'd1;
        {p_arv, p_arr, p_awv, p_awr, p_wv, p_wr, p_rv, p_rr, p_bv, p_br} <= rst ? '0 :
            {arvalid, arready, awvalid, awready, wvalid, wready, rvalid, rready, bvalid, bready};
        p_ar <= araddr;
        p_aw <= awaddr;
        p_w <= {wdata, wstrb};
        p_r <= {rdata, rresp};
        p_b <= bresp;
        if (rst) begin
            n_ar <= '0; n_r <= '0; n_aw <= '0; n_w <= '0; n_b <= '0;
        end else begin
            n_ar <= n_ar + 16'(ar_take);
            n_r <= n_r + 16'(r_take);
            n_aw <= n_aw + 16'(aw_take);
            n_w <= n_w + 16'(w_take);
            n_b <= n_b + 16'(b_take);
        end
    end

    initial begin
        errors = '0;
        first_rule = '0;
        first_cycle = '0;
        cycle = '0;
    end
endmodule
