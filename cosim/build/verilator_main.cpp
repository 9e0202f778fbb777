// Verilator main loop of the traced co-simulation build, with a waveform window.
//
// Same VPI scheduling as cocotb's share/lib/verilator/verilator.cpp (cocotb 2.1, BSD-3-Clause;
// cosim/build swaps this file in for that one in the `sim-waves` builds only), with two
// changes:
//  - a time step is written to the waveform only while the testbench input `trace_on` is 1,
//    and the file is closed the first time `trace_on` falls after having been 1. So the file
//    holds one contiguous window [first step with trace_on, last step with trace_on], with
//    absolute simulation times, opened by a full dump of every traced signal.
//    cosim/tb/cocotb_entry.py drives `trace_on` (always 1 without a window; from/to a cycle,
//    or around a named kernel);
//  - `--trace-vars LEVEL:SCOPE` (repeatable) chooses what is traced, as $dumpvars(LEVEL,
//    SCOPE) would (VerilatedTrace::dumpvars; cosim.build.trace_vars gives the arguments).
//    Without it, everything is traced.
//
// The build's format is VCD, or FST with --trace-fst (VM_TRACE_FST).
// Options: --trace, --trace-file FILE (as cocotb's main), --trace-vars LEVEL:SCOPE.

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "Vtop.h"
#include "verilated.h"
#include "verilated_vpi.h"
#if VM_TRACE_FST
#include "verilated_fst_c.h"
using TraceFile = VerilatedFstC;
#else
#include "verilated_vcd_c.h"
using TraceFile = VerilatedVcdC;
#endif

static vluint64_t main_time = 0;

double sc_time_stamp() { return main_time; }

extern "C" void vlog_startup_routines_bootstrap(void);

static TraceFile *tfp = nullptr;
static bool window_seen = false;  // trace_on has been 1 at a dumped step
static bool window_done = false;  // ... and has fallen since: the file is closed

static void settle_value_callbacks() {
    while (VerilatedVpi::callValueCbs()) {
    }
}

static void close_trace() {
    if (tfp && !window_done) {
        tfp->close();
        window_done = true;
    }
}

static void wrap_up() {
    VerilatedVpi::callCbs(cbEndOfSimulation);
    close_trace();
}

int main(int argc, char **argv) {
    const char *trace_file = "dump.vcd";
    bool trace = false;
    std::vector<std::pair<int, std::string>> vars;  // --trace-vars LEVEL:SCOPE
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        if (arg == "--trace") {
            trace = true;
        } else if ((arg == "--trace-file" || arg == "--trace-vars") && i + 1 == argc) {
            fprintf(stderr, "Error: %s requires a parameter\n", arg.c_str());
            return 2;
        } else if (arg == "--trace-file") {
            trace_file = argv[++i];
        } else if (arg == "--trace-vars") {
            std::string spec = argv[++i];
            size_t colon = spec.find(':');
            int level = colon == std::string::npos ? 0 : std::atoi(spec.substr(0, colon).c_str());
            if (level < 1 || colon + 1 >= spec.size()) {
                fprintf(stderr, "Error: --trace-vars %s: expected LEVEL:SCOPE, LEVEL >= 1\n",
                        spec.c_str());
                return 2;
            }
            vars.emplace_back(level, spec.substr(colon + 1));
        }
    }
    Verilated::commandArgs(argc, argv);
    std::unique_ptr<Vtop> top(new Vtop(""));
    Verilated::fatalOnVpiError(false);  // cocotb's system tasks are not errors
    Verilated::traceEverOn(true);
    if (trace) {
        tfp = new TraceFile;
        top->trace(tfp, 99);
        for (const auto &v : vars) tfp->dumpvars(v.first, v.second);
        tfp->open(trace_file);
    }

    vlog_startup_routines_bootstrap();
    Verilated::addExitCb([](void *) { wrap_up(); }, nullptr);
    VerilatedVpi::callCbs(cbStartOfSimulation);
    settle_value_callbacks();

    const vluint64_t none = ~static_cast<vluint64_t>(0);
    while (!Verilated::gotFinish()) {
        do {  // evaluate until no VPI write asks for another pass
            do {
                top->eval_step();
                VerilatedVpi::clearEvalNeeded();
                VerilatedVpi::doInertialPuts();
                settle_value_callbacks();
            } while (VerilatedVpi::evalNeeded());
            VerilatedVpi::callCbs(cbReadWriteSynch);
            VerilatedVpi::doInertialPuts();
            settle_value_callbacks();
        } while (VerilatedVpi::evalNeeded());
        top->eval_end_step();
        VerilatedVpi::callCbs(cbReadOnlySynch);

        if (tfp && !window_done) {
            if (top->trace_on) {
                tfp->dump(main_time);
                window_seen = true;
            } else if (window_seen) {
                close_trace();
            }
        }

        vluint64_t next_cocotb = VerilatedVpi::cbNextDeadline();
        vluint64_t next_timing = top->eventsPending() ? top->nextTimeSlot() : none;
        vluint64_t next = next_cocotb < next_timing ? next_cocotb : next_timing;
        if (next == none) break;
        main_time = next;
        VerilatedVpi::callCbs(cbNextSimTime);
        settle_value_callbacks();
        VerilatedVpi::callTimedCbs();
        settle_value_callbacks();
    }
    top->final();
    wrap_up();
    return Verilated::threadContextp()->errorCount() > 0 ? 1 : 0;
}
