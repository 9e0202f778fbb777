// Simulation top: the NPU (module `npu` from amaranth.back.verilog) wired to the DRAM model.
//
// Ports seen by cocotb: clk (driven by cocotb unless TB_INTERNAL_CLOCK is defined, then a
// 10 ns clock runs inside the simulation), rst, irq, the AXI4-Lite host port csr__*, the DRAM
// backdoor (bd_op, bd_first, bd_last, bd_ack), dram_prot_errors (AXI violations seen by the
// DRAM model), the DRAM's fault injection (fault_*, see dram.sv), the AXI protocol checkers'
// results (chk_errors: violations on both ports; chk_rule / chk_cycle: the first one, rule
// number of axi_checker.sv, +64 when it was on the CSR port) and trace_on (traced builds
// write a VCD step only while it is 1, see cosim/verilator_main.cpp). Parameters come from
// NPUConfig through cosim/build.py.
//
// The checkers (axi_checker.sv) watch the NPU's AXI4 master port to the DRAM model and its
// AXI4-Lite CSR port in every run.
module tb_top #(
    parameter int DATA_BITS = 64,
    parameter int ADDR_BITS = 32,
    parameter int ID_BITS = 4,
    parameter longint DRAM_BYTES = 64'd16777216,
    parameter int DRAM_OUTSTANDING = 16
) (
`ifndef TB_INTERNAL_CLOCK
    input  logic        clk,
`endif
    input  logic        rst,
    output logic        irq,
    input  logic        trace_on,

    input  logic [11:0] csr__awaddr,
    input  logic        csr__awvalid,
    output logic        csr__awready,
    input  logic [31:0] csr__wdata,
    input  logic [3:0]  csr__wstrb,
    input  logic        csr__wvalid,
    output logic        csr__wready,
    output logic [1:0]  csr__bresp,
    output logic        csr__bvalid,
    input  logic        csr__bready,
    input  logic [11:0] csr__araddr,
    input  logic        csr__arvalid,
    output logic        csr__arready,
    output logic [31:0] csr__rdata,
    output logic [1:0]  csr__rresp,
    output logic        csr__rvalid,
    input  logic        csr__rready,

    input  logic [1:0]  bd_op,
    input  logic [31:0] bd_first,
    input  logic [31:0] bd_last,
    output logic        bd_ack,
    output logic [31:0] dram_prot_errors,

    input  logic        fault_we,
    input  logic [1:0]  fault_mode,
    input  logic [1:0]  fault_dir,
    input  logic [1:0]  fault_resp,
    input  logic [31:0] fault_lo,
    input  logic [31:0] fault_hi,
    input  logic [31:0] fault_nth,
    output logic [31:0] fault_hits,

    output logic [31:0] chk_errors,
    output logic [7:0]  chk_rule,
    output logic [31:0] chk_cycle
);
`ifdef TB_INTERNAL_CLOCK
    logic clk = 1'b1;  // same phase as cocotb's Clock: high at 0, falling at 5 ns
    always #5ns clk = ~clk;
`endif

    logic [ID_BITS-1:0]     awid, bid, arid, rid;
    logic [ADDR_BITS-1:0]   awaddr, araddr;
    logic [7:0]             awlen, arlen;
    logic [2:0]             awsize, arsize;
    logic [1:0]             awburst, arburst, bresp, rresp;
    logic                   awvalid, awready, wlast, wvalid, wready, bvalid, bready;
    logic                   arvalid, arready, rlast, rvalid, rready;
    logic [DATA_BITS-1:0]   wdata, rdata;
    logic [DATA_BITS/8-1:0] wstrb;

    npu u_npu (
        .clk(clk), .rst(rst), .irq(irq),
        .csr__awaddr(csr__awaddr), .csr__awvalid(csr__awvalid), .csr__awready(csr__awready),
        .csr__wdata(csr__wdata), .csr__wstrb(csr__wstrb), .csr__wvalid(csr__wvalid),
        .csr__wready(csr__wready), .csr__bresp(csr__bresp), .csr__bvalid(csr__bvalid),
        .csr__bready(csr__bready), .csr__araddr(csr__araddr), .csr__arvalid(csr__arvalid),
        .csr__arready(csr__arready), .csr__rdata(csr__rdata), .csr__rresp(csr__rresp),
        .csr__rvalid(csr__rvalid), .csr__rready(csr__rready),
        .mem__awid(awid), .mem__awaddr(awaddr), .mem__awlen(awlen), .mem__awsize(awsize),
        .mem__awburst(awburst), .mem__awvalid(awvalid), .mem__awready(awready),
        .mem__wdata(wdata), .mem__wstrb(wstrb), .mem__wlast(wlast), .mem__wvalid(wvalid),
        .mem__wready(wready), .mem__bid(bid), .mem__bresp(bresp), .mem__bvalid(bvalid),
        .mem__bready(bready), .mem__arid(arid), .mem__araddr(araddr), .mem__arlen(arlen),
        .mem__arsize(arsize), .mem__arburst(arburst), .mem__arvalid(arvalid),
        .mem__arready(arready), .mem__rid(rid), .mem__rdata(rdata), .mem__rresp(rresp),
        .mem__rlast(rlast), .mem__rvalid(rvalid), .mem__rready(rready)
    );

    npu_dram #(
        .DATA_BITS(DATA_BITS), .ADDR_BITS(ADDR_BITS), .ID_BITS(ID_BITS),
        .BYTES(DRAM_BYTES), .OUTSTANDING(DRAM_OUTSTANDING)
    ) u_dram (
        .clk(clk), .rst(rst),
        .awid(awid), .awaddr(awaddr), .awlen(awlen), .awsize(awsize), .awburst(awburst),
        .awvalid(awvalid), .awready(awready),
        .wdata(wdata), .wstrb(wstrb), .wlast(wlast), .wvalid(wvalid), .wready(wready),
        .bid(bid), .bresp(bresp), .bvalid(bvalid), .bready(bready),
        .arid(arid), .araddr(araddr), .arlen(arlen), .arsize(arsize), .arburst(arburst),
        .arvalid(arvalid), .arready(arready),
        .rid(rid), .rdata(rdata), .rresp(rresp), .rlast(rlast), .rvalid(rvalid), .rready(rready),
        .bd_op(bd_op), .bd_first(bd_first), .bd_last(bd_last), .bd_ack(bd_ack),
        .prot_errors(dram_prot_errors),
        .fault_we(fault_we), .fault_mode(fault_mode), .fault_dir(fault_dir),
        .fault_resp(fault_resp), .fault_lo(fault_lo), .fault_hi(fault_hi),
        .fault_nth(fault_nth), .fault_hits(fault_hits)
    );

    // -- AXI protocol checkers on both ports ------------------------------------------------------
    logic [31:0] mem_chk_errors, csr_chk_errors, mem_chk_cycle, csr_chk_cycle;
    logic [7:0] mem_chk_rule, csr_chk_rule;
    npu_axi_checker #(
        .NAME("mem"), .DATA_BITS(DATA_BITS), .ADDR_BITS(ADDR_BITS), .ID_BITS(ID_BITS)
    ) u_mem_checker (
        .clk(clk), .rst(rst), .clear(1'b0),
        .awid(awid), .awaddr(awaddr), .awlen(awlen), .awsize(awsize), .awburst(awburst),
        .awvalid(awvalid), .awready(awready),
        .wdata(wdata), .wstrb(wstrb), .wlast(wlast), .wvalid(wvalid), .wready(wready),
        .bid(bid), .bresp(bresp), .bvalid(bvalid), .bready(bready),
        .arid(arid), .araddr(araddr), .arlen(arlen), .arsize(arsize), .arburst(arburst),
        .arvalid(arvalid), .arready(arready),
        .rid(rid), .rdata(rdata), .rresp(rresp), .rlast(rlast), .rvalid(rvalid), .rready(rready),
        .errors(mem_chk_errors), .first_rule(mem_chk_rule), .first_cycle(mem_chk_cycle)
    );
    npu_axil_checker #(.NAME("csr"), .ADDR_BITS(12)) u_csr_checker (
        .clk(clk), .rst(rst), .clear(1'b0),
        .awaddr(csr__awaddr), .awvalid(csr__awvalid), .awready(csr__awready),
        .wdata(csr__wdata), .wstrb(csr__wstrb), .wvalid(csr__wvalid), .wready(csr__wready),
        .bresp(csr__bresp), .bvalid(csr__bvalid), .bready(csr__bready),
        .araddr(csr__araddr), .arvalid(csr__arvalid), .arready(csr__arready),
        .rdata(csr__rdata), .rresp(csr__rresp), .rvalid(csr__rvalid), .rready(csr__rready),
        .errors(csr_chk_errors), .first_rule(csr_chk_rule), .first_cycle(csr_chk_cycle)
    );
    // the first violation of either port (the memory port's when both start in one cycle)
    wire csr_first = csr_chk_errors != 0
                     && (mem_chk_errors == 0 || csr_chk_cycle < mem_chk_cycle);
    assign chk_errors = mem_chk_errors + csr_chk_errors;
    assign chk_rule = csr_first ? csr_chk_rule + 8'd64 : mem_chk_rule;
    assign chk_cycle = csr_first ? csr_chk_cycle : mem_chk_cycle;
endmodule
