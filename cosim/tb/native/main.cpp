// Pure Verilator C++ replay harness of tb_top (NPU + DRAM model), no cocotb, no Python.
//
//   npu_replay RECORDING +npu_dram_file=PATH [+npu_dram_<timing>=N ...]
//
// RECORDING is written by cosim/replay.py (Recorder) during a cocotb run: the input pins the
// host drove, the output pins it sampled, and the DRAM backdoor files it wrote and read, each
// at its simulated time. This program drives the same pins at the same times (the clock runs
// inside the model, built with --timing), compares every sampled output and every DRAM dump
// with the recording, and runs to the recorded end time. It prints one JSON line:
//   {"cycles", "end_step", "sim_wall_seconds", "sim_cpu_seconds", "checks", "mismatches",
//    "first_mismatch", "reached_end", "events", "evals", ...}
// The DRAM timing plusargs of the recorded run (cosim/tb/replay.py passes those of the
// recording's sidecar; sw/dram.py DramTiming.to_plusargs) reach the DRAM model through
// commandArgs like +npu_dram_file=, so the model runs with the same latency, bandwidth and
// seeded backpressure; they are echoed in "dram_plusargs".
// Only the replay loop is timed (the model is constructed and the file read before).
// Exit status: 0 replay matched, 2 mismatch or end not reached, 1 usage/file error.

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "Vtop.h"
#include "verilated.h"

namespace {

enum Op : uint32_t { OP_DRIVE = 1, OP_CHECK = 2, OP_LOAD = 3, OP_DUMP = 4 };

struct Event {
    uint64_t step;
    uint32_t op;
    uint32_t sig;
    uint64_t value;
    const char* data;
    uint64_t len;
};

struct Port {
    const char* name;
    void* ptr;
    int bytes;
    bool input;
};

template <typename T>
T rd(const std::vector<char>& b, size_t& off) {
    if (off + sizeof(T) > b.size()) throw std::runtime_error("recording truncated");
    T v;
    std::memcpy(&v, b.data() + off, sizeof(T));
    off += sizeof(T);
    return v;
}

uint64_t get(const Port& p) {
    switch (p.bytes) {
        case 1: return *static_cast<uint8_t*>(p.ptr);
        case 2: return *static_cast<uint16_t*>(p.ptr);
        case 4: return *static_cast<uint32_t*>(p.ptr);
        default: return *static_cast<uint64_t*>(p.ptr);
    }
}

void set(const Port& p, uint64_t v) {
    switch (p.bytes) {
        case 1: *static_cast<uint8_t*>(p.ptr) = static_cast<uint8_t>(v); break;
        case 2: *static_cast<uint16_t*>(p.ptr) = static_cast<uint16_t>(v); break;
        case 4: *static_cast<uint32_t*>(p.ptr) = static_cast<uint32_t>(v); break;
        default: *static_cast<uint64_t*>(p.ptr) = v; break;
    }
}

bool read_file(const std::string& path, std::vector<char>& out) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    out.clear();
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
    std::fclose(f);
    return true;
}

bool write_file(const std::string& path, const char* data, size_t len) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return false;
    bool ok = std::fwrite(data, 1, len, f) == len;
    return std::fclose(f) == 0 && ok;
}

double cpu_now() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

std::string json_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        if (static_cast<unsigned char>(c) < 0x20) { o += ' '; continue; }
        o += c;
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s RECORDING +npu_dram_file=PATH\n", argv[0]);
        return 1;
    }
    std::string dram_file = "npu_dram.hex", dram_plusargs;
    for (int i = 2; i < argc; i++) {
        if (std::strncmp(argv[i], "+npu_dram_file=", 15) == 0) {
            dram_file = argv[i] + 15;
        } else if (std::strncmp(argv[i], "+npu_dram_", 10) == 0) {
            dram_plusargs += std::string(dram_plusargs.empty() ? "" : ", ") + "\"" +
                             json_escape(argv[i]) + "\"";
        }
    }
    const std::string dump_file = dram_file + ".out";

    // -- read the recording ---------------------------------------------------------------------
    std::vector<char> rec;
    if (!read_file(argv[1], rec)) {
        std::fprintf(stderr, "cannot read %s: %s\n", argv[1], std::strerror(errno));
        return 1;
    }

    auto ctx = std::make_unique<VerilatedContext>();
    ctx->commandArgs(argc, argv);  // the DRAM model reads +npu_dram_file=
    auto top = std::make_unique<Vtop>(ctx.get(), "");
#define PORT(n, in) Port{#n, &top->n, static_cast<int>(sizeof(top->n)), in}
    // Verilator escapes the double underscore of csr__x as csr___05Fx
#define CSR(n, in) \
    Port{"csr__" #n, &top->csr___05F##n, static_cast<int>(sizeof(top->csr___05F##n)), in}
    const Port ports[] = {
        PORT(rst, true), CSR(awaddr, true), CSR(awvalid, true), CSR(wdata, true),
        CSR(wstrb, true), CSR(wvalid, true), CSR(bready, true), CSR(araddr, true),
        CSR(arvalid, true), CSR(rready, true), PORT(bd_op, true), PORT(bd_first, true),
        PORT(bd_last, true), PORT(irq, false), CSR(awready, false), CSR(wready, false),
        CSR(bresp, false), CSR(bvalid, false), CSR(arready, false), CSR(rdata, false),
        CSR(rresp, false), CSR(rvalid, false), PORT(bd_ack, false),
        PORT(dram_prot_errors, false), PORT(fault_we, true), PORT(fault_mode, true),
        PORT(fault_dir, true), PORT(fault_resp, true), PORT(fault_lo, true),
        PORT(fault_hi, true), PORT(fault_nth, true), PORT(fault_hits, false),
        PORT(chk_errors, false), PORT(chk_rule, false), PORT(chk_cycle, false),
    };
#undef CSR
#undef PORT

    std::vector<const Port*> sigmap;
    std::vector<Event> events;
    uint64_t end_step = 0, period = 0;
    try {
        if (rec.size() < 8 || std::memcmp(rec.data(), "NPUREC1\0", 8) != 0)
            throw std::runtime_error("not an NPU recording");
        size_t off = 8;
        end_step = rd<uint64_t>(rec, off);
        period = rd<uint64_t>(rec, off);
        uint64_t n_sig = rd<uint64_t>(rec, off), n_ev = rd<uint64_t>(rec, off);
        for (uint64_t i = 0; i < n_sig; i++) {
            uint64_t n = rd<uint64_t>(rec, off);
            std::string name(rec.data() + off, n);
            off += n + (-n & 7);
            const Port* found = nullptr;
            for (const Port& p : ports)
                if (name == p.name) found = &p;
            if (!found) throw std::runtime_error("unknown signal in recording: " + name);
            sigmap.push_back(found);
        }
        events.reserve(n_ev);
        for (uint64_t i = 0; i < n_ev; i++) {
            Event e;
            e.step = rd<uint64_t>(rec, off);
            e.op = rd<uint32_t>(rec, off);
            e.sig = rd<uint32_t>(rec, off);
            e.value = rd<uint64_t>(rec, off);
            e.len = rd<uint64_t>(rec, off);
            if (off + e.len > rec.size()) throw std::runtime_error("recording truncated");
            e.data = rec.data() + off;
            off += e.len + (-e.len & 7);
            if ((e.op == OP_DRIVE || e.op == OP_CHECK) && e.sig >= sigmap.size())
                throw std::runtime_error("bad signal index");
            if (e.op == OP_DRIVE && !sigmap[e.sig]->input)
                throw std::runtime_error(std::string("drive of output ") + sigmap[e.sig]->name);
            if (i && e.step < events.back().step) throw std::runtime_error("events out of order");
            events.push_back(e);
        }
    } catch (const std::exception& ex) {
        std::fprintf(stderr, "%s: %s\n", argv[1], ex.what());
        return 1;
    }

    // -- replay ---------------------------------------------------------------------------------
    uint64_t checks = 0, mismatches = 0, evals = 0, slots = 0, load_bytes = 0, dump_bytes = 0;
    std::string first_mismatch;
    std::vector<char> dump;
    auto mismatch = [&](uint64_t step, const std::string& what) {
        if (!mismatches++) first_mismatch = "at step " + std::to_string(step) + ": " + what;
    };
    size_t i = 0;
    const size_t n = events.size();
    // Apply the recorded events of the current time slot, after the model evaluated it (host
    // writes follow a clock edge in the cocotb run; samples are taken in the ReadOnly phase).
    auto apply = [&](uint64_t now) {
        bool dirty = false;
        for (; i < n && events[i].step == now; i++) {
            const Event& e = events[i];
            switch (e.op) {
                case OP_DRIVE:
                    set(*sigmap[e.sig], e.value);
                    dirty = true;
                    break;
                case OP_CHECK: {
                    if (dirty) { top->eval(); evals++; dirty = false; }
                    checks++;
                    uint64_t got = get(*sigmap[e.sig]);
                    if (got != e.value)
                        mismatch(now, std::string(sigmap[e.sig]->name) + " = " +
                                      std::to_string(got) + ", recorded " +
                                      std::to_string(e.value));
                    break;
                }
                case OP_LOAD:
                    if (!write_file(dram_file, e.data, e.len))
                        mismatch(now, "cannot write " + dram_file);
                    load_bytes += e.len;
                    break;
                case OP_DUMP:
                    checks++;
                    if (!read_file(dump_file, dump)) {
                        mismatch(now, "no DRAM dump file " + dump_file);
                    } else {
                        if (dump.size() != e.len || std::memcmp(dump.data(), e.data, e.len) != 0)
                            mismatch(now, "DRAM dump differs from the recorded one");
                        std::remove(dump_file.c_str());
                    }
                    dump_bytes += e.len;
                    break;
            }
        }
        if (dirty) { top->eval(); evals++; }
    };

    const auto w0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    ctx->time(0);
    apply(0);  // reset and idle levels at time 0, before the first evaluation (as in cocotb)
    bool reached_end = false;
    while (!ctx->gotFinish()) {
        const uint64_t now = ctx->time();
        top->eval();
        evals++;
        slots++;
        if (i < n && events[i].step < now) {
            mismatch(now, "event time already passed");
            break;
        }
        apply(now);
        if (now >= end_step) {
            reached_end = now == end_step;
            break;
        }
        uint64_t next = top->eventsPending() ? top->nextTimeSlot() : UINT64_MAX;
        if (i < n && events[i].step < next) next = events[i].step;
        if (end_step < next) next = end_step;
        ctx->time(next);
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    const double cpu = cpu_now() - c0;
    if (i < n) mismatch(ctx->time(), std::to_string(n - i) + " events not replayed");
    top->final();

    const uint64_t cycles = period ? ctx->time() / period : 0;
    std::printf(
        "{\"cycles\": %llu, \"end_step\": %llu, \"recorded_end_step\": %llu, "
        "\"reached_end\": %s, \"sim_wall_seconds\": %.6f, \"sim_cpu_seconds\": %.6f, "
        "\"checks\": %llu, \"mismatches\": %llu, \"first_mismatch\": %s, \"events\": %llu, "
        "\"evals\": %llu, \"time_slots\": %llu, \"load_bytes\": %llu, \"dump_bytes\": %llu, "
        "\"dram_plusargs\": [%s]}\n",
        (unsigned long long)cycles, (unsigned long long)ctx->time(),
        (unsigned long long)end_step, reached_end ? "true" : "false", wall, cpu,
        (unsigned long long)checks, (unsigned long long)mismatches,
        mismatches ? ("\"" + json_escape(first_mismatch) + "\"").c_str() : "null",
        (unsigned long long)n, (unsigned long long)evals, (unsigned long long)slots,
        (unsigned long long)load_bytes, (unsigned long long)dump_bytes, dram_plusargs.c_str());
    return (mismatches || !reached_end) ? 2 : 0;
}
