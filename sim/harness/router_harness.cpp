// The router's fuzz harness: one Verilated router (module `wse_router`, the ports of
// rtl/router.py's Router: i_n__payload ... o_r__ready, drops, idle) driven by C++ stream
// drivers with seeded random idle and backpressure, in batches sent over a pipe by
// sim/router_compiled.py. Little-endian 64-bit words on stdin and stdout:
//
//   request : op (0 quit, 1 batch); a batch then has a seed, per input (N, E, S, W, R) the
//             millionths of the cycles in which a free driver offers its next word, per output
//             the millionths of the cycles it is ready, then per input a count and that many
//             packed 38-bit wavelets.
//   reply   : 0, the first cycle of the batch, cycles, drops (the router's counter), then per
//             input the cycle in which each of its words was taken (count, cycles), then per
//             output a count and the words it delivered; or 1, a byte count and a message (the
//             router is stuck: the simulation ends after it).
//
// A batch ends two cycles after the first in which every driver is drained and the router's
// `idle` is high. A driver offers a word and holds it until it is taken (the stream rule).
//
// Usage: router_harness [--watchdog N]

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "Vwse_router.h"
#include "verilated.h"

namespace {

constexpr int PORTS = 5;
static const char *const NAMES[PORTS] = {"N", "E", "S", "W", "R"};

struct InPort {
    QData *payload;
    CData *valid, *ready;
    std::vector<uint64_t> words, taken;
    size_t next = 0;
    bool offering = false;
    uint32_t on = 1000000;
    bool idle() const { return !offering && next == words.size(); }
};

struct OutPort {
    QData *payload;
    CData *valid, *ready;
    std::vector<uint64_t> received;
    uint32_t on = 1000000;
};

bool read_exact(void *buffer, size_t bytes) {
    return std::fread(buffer, 1, bytes, stdin) == bytes;
}

bool read_word(uint64_t &word) { return read_exact(&word, sizeof word); }

void write_word(uint64_t word) { std::fwrite(&word, sizeof word, 1, stdout); }

void write_words(const std::vector<uint64_t> &words) {
    write_word(words.size());
    if (!words.empty()) std::fwrite(words.data(), sizeof(uint64_t), words.size(), stdout);
}

class Harness {
  public:
    explicit Harness(uint64_t watchdog) : top_(new Vwse_router{&context_}), watchdog_(watchdog) {
        Vwse_router *t = top_.get();
        // Verilator spells Amaranth's "__" in a port name as "___05F".
#define WSE_BIND(port, k, d)                                                               \
        port[k].payload = &t->d##___05Fpayload;                                            \
        port[k].valid = &t->d##___05Fvalid;                                                \
        port[k].ready = &t->d##___05Fready;
        WSE_BIND(in_, 0, i_n) WSE_BIND(in_, 1, i_e) WSE_BIND(in_, 2, i_s)
        WSE_BIND(in_, 3, i_w) WSE_BIND(in_, 4, i_r)
        WSE_BIND(out_, 0, o_n) WSE_BIND(out_, 1, o_e) WSE_BIND(out_, 2, o_s)
        WSE_BIND(out_, 3, o_w) WSE_BIND(out_, 4, o_r)
#undef WSE_BIND
        for (auto &p : in_) { *p.valid = 0; *p.payload = 0; }
        for (auto &p : out_) *p.ready = 0;
        // Reset longer than the route state's walk of the colors (one a cycle, 32 at most).
        top_->clk = 0;
        top_->rst = 1;
        top_->eval();
        for (int i = 0; i < 40; ++i) { edge(); fall(); }
        top_->rst = 0;
    }

    ~Harness() { top_->final(); }

    InPort &input(int k) { return in_[k]; }
    OutPort &output(int k) { return out_[k]; }
    uint64_t cycle() const { return cycle_; }
    uint64_t drops() const { return top_->drops; }

    // Runs one batch; false (and `message`) when the watchdog fired.
    bool batch(uint64_t seed, uint64_t &cycles, std::string &message) {
        rng_ = seed * 0x9E3779B97F4A7C15ull + 1;
        const uint64_t start = cycle_;
        uint64_t quiet = 0, done_at = 0;
        bool done = false;
        for (auto &p : out_) p.received.clear();
        for (auto &p : in_) { p.taken.clear(); p.next = 0; }
        while (true) {
            edge();
            for (auto &p : in_) {             // drive: what the router sees during this cycle
                if (!p.offering && p.next < p.words.size() && chance(p.on)) {
                    *p.payload = p.words[p.next++];
                    p.offering = true;
                }
                *p.valid = p.offering;
            }
            for (auto &p : out_) *p.ready = chance(p.on);
            fall();                           // settles the handshakes
            bool moved = false;
            for (auto &p : in_) {             // sample: the transfers this cycle's edge makes
                if (p.offering && *p.ready) {
                    p.offering = false;
                    p.taken.push_back(cycle_);
                    moved = true;
                }
            }
            for (auto &p : out_) {
                if (*p.valid && *p.ready) {
                    p.received.push_back(*p.payload);
                    moved = true;
                }
            }
            ++cycle_;
            bool drained = true;
            for (auto &p : in_) drained = drained && p.idle();
            if (drained && top_->idle) {
                if (!done) { done = true; done_at = cycle_; }
                if (cycle_ - done_at >= 2) break;
            } else {
                done = false;
            }
            quiet = moved ? 0 : quiet + 1;
            if (quiet >= watchdog_) {
                message = stuck();
                return false;
            }
        }
        cycles = cycle_ - start;
        return true;
    }

  private:
    bool chance(uint32_t millionths) {
        if (millionths >= 1000000) return true;
        rng_ ^= rng_ >> 12; rng_ ^= rng_ << 25; rng_ ^= rng_ >> 27;   // xorshift64*
        return (rng_ * 0x2545F4914F6CDD1Dull >> 32) % 1000000 < millionths;
    }

    void edge() { top_->clk = 1; top_->eval(); }
    void fall() { top_->clk = 0; top_->eval(); }

    std::string stuck() const {
        std::string text = "watchdog: the router was busy and no port moved for " +
                           std::to_string(watchdog_) + " cycles (cycle " +
                           std::to_string(cycle_) + ")";
        for (int k = 0; k < PORTS; ++k) {
            const InPort &p = in_[k];
            if (!p.offering) continue;
            text += "\n  input " + std::string(NAMES[k]) + " stuck offering color " +
                    std::to_string((*p.payload >> 32) & 0x1F) + " (word " +
                    std::to_string(p.next - 1) + " of " + std::to_string(p.words.size()) + ")";
        }
        return text;
    }

    VerilatedContext context_;
    std::unique_ptr<Vwse_router> top_;
    InPort in_[PORTS];
    OutPort out_[PORTS];
    uint64_t cycle_ = 0, watchdog_, rng_ = 1;
};

int fail(const char *what) {
    std::fprintf(stderr, "router_harness: %s\n", what);
    return 2;
}

}  // namespace

int main(int argc, char **argv) {
    uint64_t watchdog = 20000;
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (i + 1 < argc && arg == "--watchdog") watchdog = std::strtoull(argv[++i], nullptr, 10);
        else return fail(("unknown argument " + arg).c_str());
    }
    if (watchdog < 1) return fail("--watchdog must be >= 1");
    Harness harness(watchdog);
    while (true) {
        uint64_t op, seed, value;
        if (!read_word(op)) return fail("the host hung up without quit");
        if (op == 0) break;
        if (op != 1) return fail("unknown request");
        if (!read_word(seed)) return fail("a request ended early");
        for (int k = 0; k < PORTS; ++k) {
            if (!read_word(value)) return fail("a request ended early");
            harness.input(k).on = static_cast<uint32_t>(value);
        }
        for (int k = 0; k < PORTS; ++k) {
            if (!read_word(value)) return fail("a request ended early");
            harness.output(k).on = static_cast<uint32_t>(value);
        }
        for (int k = 0; k < PORTS; ++k) {
            uint64_t count;
            if (!read_word(count)) return fail("a request ended early");
            std::vector<uint64_t> &words = harness.input(k).words;
            words.resize(count);
            if (count && !read_exact(words.data(), count * sizeof(uint64_t)))
                return fail("a request ended early");
        }
        const uint64_t first = harness.cycle();
        uint64_t cycles = 0;
        std::string message;
        if (!harness.batch(seed, cycles, message)) {
            write_word(1);
            write_word(message.size());
            std::fwrite(message.data(), 1, message.size(), stdout);
            std::fflush(stdout);
            return 1;
        }
        write_word(0);
        write_word(first);
        write_word(cycles);
        write_word(harness.drops());
        for (int k = 0; k < PORTS; ++k) write_words(harness.input(k).taken);
        for (int k = 0; k < PORTS; ++k) write_words(harness.output(k).received);
        std::fflush(stdout);
    }
    return 0;
}
