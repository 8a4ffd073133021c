// The compiled backend's simulator: the Verilated mesh driven by C++ stream drivers.
//
// One process keeps one mesh's state from exchange to exchange, like the cocotb path
// (tb/mesh_tb.py's MeshTB.exchange, which this loop reproduces cycle for cycle: every source
// offers a word as soon as it has one and holds it until taken, every sink is always ready,
// and an exchange ends two cycles after the first cycle in which every source is drained and
// the mesh's `idle` is high). The ports come from `ports.h`, written per design by
// sim/compiled.py. docs/sim.md has the protocol; in short, little-endian 64-bit words on
// stdin and stdout:
//
//   request  : op (0 quit, 1 exchange); an exchange then has, per input port in ports.h's
//              order, a count and that many packed 38-bit wavelets.
//   reply    : 0, cycles, error, overflow, loop nanoseconds, then per output port a count and
//              its words; or 1, a byte count and a message (the mesh is stuck: the simulation
//              ends after it).
//
// Usage: mesh_harness [--reset-cycles N] [--watchdog N] [--waves FILE.fst]

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "verilated.h"
#include "ports.h"    // TOP_CLASS, N_IN, N_OUT, IN_NAMES, OUT_NAMES, bind_ports()
#ifdef WSE_WAVES
#include "verilated_fst_c.h"
#endif

namespace {

constexpr uint64_t DATA_MASK = 0xFFFFFFFFull;

struct InPort {
    IData *tdata;
    CData *tdest, *tuser, *tvalid, *tready;
    std::deque<uint64_t> queue;
    bool offering = false;
    uint64_t offered = 0;
    bool idle() const { return !offering && queue.empty(); }
};

struct OutPort {           // always ready: sim/compiled.py's wrapper ties tready high
    IData *tdata;
    CData *tdest, *tuser, *tvalid;
    std::vector<uint64_t> received;
};

uint64_t pack(uint64_t data, uint64_t color, uint64_t ctrl) {
    return (data & DATA_MASK) | ((color & 0x1F) << 32) | ((ctrl & 1) << 37);
}

bool read_exact(void *buffer, size_t bytes) {
    return std::fread(buffer, 1, bytes, stdin) == bytes;
}

bool read_word(uint64_t &word) { return read_exact(&word, sizeof word); }

void write_word(uint64_t word) { std::fwrite(&word, sizeof word, 1, stdout); }

class Harness {
  public:
    Harness(int reset_cycles, uint64_t watchdog, const char *waves)
        : top_(new TOP_CLASS{&context_}), watchdog_(watchdog) {
        bind_ports(top_.get(), in_, out_);
#ifdef WSE_WAVES
        if (waves) {
            context_.traceEverOn(true);
            trace_.reset(new VerilatedFstC);
            top_->trace(trace_.get(), 99);
            trace_->open(waves);
        }
#else
        (void)waves;
#endif
        for (auto &p : in_) { *p.tvalid = 0; *p.tdata = 0; *p.tdest = 0; *p.tuser = 0; }
        // The wrapper registers the reset: rst_in high before edges 0 .. reset_cycles - 1
        // holds the mesh in reset for edges 1 .. reset_cycles, as the cocotb path's
        // reset_cycles edges with rst high (edge 0 runs the power-up state, which is the
        // reset state).
        top_->clk = 0;
        top_->rst_in = 1;
        top_->eval();
        dump();
        for (int i = 0; i <= reset_cycles; ++i) {
            if (i == reset_cycles) top_->rst_in = 0;
            edge();
            fall();
        }
    }

    ~Harness() {
#ifdef WSE_WAVES
        if (trace_) trace_->close();
#endif
        top_->final();
    }

    // Runs one exchange; false (and `message`) when the watchdog fired.
    bool exchange(uint64_t &cycles, double &seconds, std::string &message) {
        auto started = std::chrono::steady_clock::now();
        const uint64_t start = cycle_;
        uint64_t quiet = 0, done_at = 0;
        bool done = false;
        for (auto &p : out_) p.received.clear();
        while (true) {
            const uint64_t moved_before = moved_;
            edge();
            ++cycle_;
            for (auto &p : in_) {             // drive: what the mesh sees during this cycle
                if (!p.offering && !p.queue.empty()) {
                    p.offered = p.queue.front();
                    p.queue.pop_front();
                    p.offering = true;
                    *p.tdata = static_cast<IData>(p.offered & DATA_MASK);
                    *p.tdest = static_cast<CData>((p.offered >> 32) & 0x1F);
                    *p.tuser = static_cast<CData>((p.offered >> 37) & 1);
                }
                *p.tvalid = p.offering;
            }
            fall();                           // settles the handshakes
            for (auto &p : in_) {             // sample: the transfers the next edge makes
                if (p.offering && *p.tready) {
                    p.offering = false;
                    ++moved_;
                }
            }
            for (auto &p : out_) {
                if (*p.tvalid) {
                    p.received.push_back(pack(*p.tdata, *p.tdest, *p.tuser));
                    ++moved_;
                }
            }
            bool drained = true;
            for (auto &p : in_) drained = drained && p.idle();
            if (drained && top_->idle) {
                if (!done) { done = true; done_at = cycle_; }
                if (cycle_ - done_at >= 2) break;
            } else {
                done = false;
            }
            quiet = moved_ != moved_before ? 0 : quiet + 1;
            if (quiet >= watchdog_) {
                message = stuck();
                return false;
            }
        }
        cycles = done_at - start;
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
                      .count();
        return true;
    }

    std::vector<InPort> &inputs() { return in_; }
    std::vector<OutPort> &outputs() { return out_; }
    bool error() const { return top_->error; }
    bool overflow() const { return top_->overflow; }

  private:
    void edge() {
        top_->clk = 1;
        top_->eval();
        context_.timeInc(5);
        dump();
    }

    void fall() {
        top_->clk = 0;
        top_->eval();
        context_.timeInc(5);
        dump();
    }

    void dump() {
#ifdef WSE_WAVES
        if (trace_) trace_->dump(context_.time());
#endif
    }

    // The watchdog's report, as tb/mesh_tb.py words it.
    std::string stuck() const {
        std::string text = "watchdog: the mesh was busy and no port moved for " +
                           std::to_string(watchdog_) + " cycles (cycle " +
                           std::to_string(cycle_) + ")";
        for (size_t i = 0; i < in_.size(); ++i) {
            const InPort &p = in_[i];
            if (!p.offering) continue;
            text += "\n  input " + std::string(IN_NAMES[i]) + " stuck offering color " +
                    std::to_string((p.offered >> 32) & 0x1F) + " (" +
                    std::to_string(p.queue.size()) + " more queued)";
        }
        return text;
    }

    VerilatedContext context_;
    std::unique_ptr<TOP_CLASS> top_;
#ifdef WSE_WAVES
    std::unique_ptr<VerilatedFstC> trace_;
#endif
    std::vector<InPort> in_{N_IN};
    std::vector<OutPort> out_{N_OUT};
    uint64_t cycle_ = 0, moved_ = 0, watchdog_;
};

int fail(const char *what) {
    std::fprintf(stderr, "mesh_harness: %s\n", what);
    return 2;
}

}  // namespace

int main(int argc, char **argv) {
    int reset_cycles = 3;
    uint64_t watchdog = 5000;
    const char *waves = nullptr;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (i + 1 < argc && arg == "--reset-cycles") reset_cycles = std::atoi(argv[++i]);
        else if (i + 1 < argc && arg == "--watchdog") watchdog = std::strtoull(argv[++i], nullptr, 10);
        else if (i + 1 < argc && arg == "--waves") waves = argv[++i];
        else return fail(("unknown argument " + arg).c_str());
    }
#ifndef WSE_WAVES
    if (waves) return fail("--waves needs a build with waveforms (sim/compiled.py waves=True)");
#endif
    if (reset_cycles < 1 || watchdog < 1) return fail("--reset-cycles and --watchdog must be >= 1");
    Harness harness(reset_cycles, watchdog, waves);
    while (true) {
        uint64_t op;
        if (!read_word(op)) return fail("the host hung up without quit");
        if (op == 0) break;
        if (op != 1) return fail("unknown request");
        for (auto &p : harness.inputs()) {
            uint64_t count;
            if (!read_word(count)) return fail("a request ended early");
            std::vector<uint64_t> words(count);
            if (count && !read_exact(words.data(), count * sizeof(uint64_t)))
                return fail("a request ended early");
            p.queue.insert(p.queue.end(), words.begin(), words.end());
        }
        uint64_t cycles = 0;
        double seconds = 0;
        std::string message;
        if (!harness.exchange(cycles, seconds, message)) {
            write_word(1);
            write_word(message.size());
            std::fwrite(message.data(), 1, message.size(), stdout);
            std::fflush(stdout);
            return 1;
        }
        write_word(0);
        write_word(cycles);
        write_word(harness.error());
        write_word(harness.overflow());
        write_word(static_cast<uint64_t>(seconds * 1e9));
        for (auto &p : harness.outputs()) {
            write_word(p.received.size());
            if (!p.received.empty())
                std::fwrite(p.received.data(), sizeof(uint64_t), p.received.size(), stdout);
        }
        std::fflush(stdout);
    }
    return 0;
}
