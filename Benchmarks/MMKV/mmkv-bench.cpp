// mmkv-bench: MMKV (Tencent's C++ key-value store) measured the way coffer-bench measures Coffer,
// so that BENCHMARKS.md can set the two side by side. Not part of Coffer: it is built against an
// MMKV checkout by build.sh in this folder, and compare.sh runs it next to coffer-bench.
//
// Usage: mmkv-bench <empty directory>   (MMKV's root directory; the caller removes it)
//
// Prints one line per row: name<TAB>median ns per operation. Each row is calibrated (with a
// warm-up) so that one timed run lasts about 100 ms, then timed over 7 runs; the median run's
// time divided by its operation count is printed. MMKV_BENCH_FILTER=mmkv.set.durable,mmkv.open.
// runs only the rows whose names start with one of those prefixes.
//
// What one operation is, per row:
//   mmkv.set.multiprocess            set(int64) of a changing value to one key, MMKV_MULTI_PROCESS
//   mmkv.set.singleprocess           the same, MMKV_SINGLE_PROCESS
//   mmkv.set.encrypted.multiprocess  set(std::string) of a changing 32-byte value to one key,
//                                    MMKV_MULTI_PROCESS, 16-byte crypt key (AES-128-CFB)
//   mmkv.set.durable                 single-process set(int64), then sync(MMKV_SYNC) (msync MS_SYNC)
//   mmkv.set.durable.encrypted       the same with the crypt key and a 32-byte string value
//   mmkv.open.10k.multiprocess       mmkvWithID of a multi-process instance holding 10,000 int64
//                                    values, getInt64 of one key, close()
//   mmkv.open.10k.encrypted          the same, single-process, crypt key, 10,000 32-byte strings
//
// MMKV keeps one instance per ID in a process-wide table and loads the file on the first access.
// close() removes the instance from that table and deletes it (munmap, close the files), so the
// next mmkvWithID builds a new instance that maps the file and decodes every item again.

#include <MMKV/MMKV.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <time.h>
#include <vector>

namespace {

constexpr uint64_t kBudgetNs = 100'000'000; // one timed run
constexpr int kRuns = 7;
constexpr int kOpenCount = 10'000;

uint64_t nowNs() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// Results go through here so the compiler keeps the reads.
volatile uint64_t g_sink = 0;

[[noreturn]] void fail(const std::string &message) {
    std::fprintf(stderr, "mmkv-bench: %s\n", message.c_str());
    std::exit(1);
}

// A body runs `n` operations and returns a checksum of what they produced.
using Body = std::function<uint64_t(size_t n)>;

// Grows the operation count until a round takes a fifth of the budget (the first rounds are the
// warm-up), then returns the count that fills the budget.
size_t calibrate(const Body &body, size_t maxIterations) {
    size_t iterations = 1;
    uint64_t elapsed = 0;
    while (true) {
        const uint64_t start = nowNs();
        g_sink = g_sink + body(iterations);
        elapsed = nowNs() - start;
        if (elapsed >= kBudgetNs / 5 || iterations >= maxIterations) {
            break;
        }
        const uint64_t factor = elapsed == 0 ? 100 : std::min<uint64_t>(100, std::max<uint64_t>(2, kBudgetNs / 4 / elapsed));
        iterations = std::min<size_t>(maxIterations, iterations * factor);
    }
    const double perOp = std::max(1.0, double(elapsed) / double(iterations));
    return std::max<size_t>(1, std::min<size_t>(maxIterations, size_t(double(kBudgetNs) / perOp)));
}

double measure(const Body &body, size_t maxIterations) {
    const size_t n = calibrate(body, maxIterations);
    std::vector<double> samples;
    for (int run = 0; run < kRuns; run++) {
        const uint64_t start = nowNs();
        g_sink = g_sink + body(n);
        samples.push_back(double(nowNs() - start) / double(n));
    }
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
}

std::vector<std::string> filterPrefixes() {
    std::vector<std::string> prefixes;
    const char *env = std::getenv("MMKV_BENCH_FILTER");
    if (!env) {
        return prefixes;
    }
    std::string all(env);
    size_t start = 0;
    while (start <= all.size()) {
        size_t comma = all.find(',', start);
        if (comma == std::string::npos) {
            comma = all.size();
        }
        if (comma > start) {
            prefixes.push_back(all.substr(start, comma - start));
        }
        start = comma + 1;
    }
    return prefixes;
}

bool selected(const std::string &name) {
    static const std::vector<std::string> prefixes = filterPrefixes();
    if (prefixes.empty()) {
        return true;
    }
    return std::any_of(prefixes.begin(), prefixes.end(),
                       [&](const std::string &prefix) { return name.compare(0, prefix.size(), prefix) == 0; });
}

void report(const std::string &name, double nsPerOp) {
    std::printf("%s\t%.1f\n", name.c_str(), nsPerOp);
    std::fflush(stdout);
}

// A 32-byte value whose first 8 bytes are the counter, so each set writes a new value.
std::string value32(uint64_t counter) {
    std::string value(32, 'Z');
    std::memcpy(value.data(), &counter, sizeof counter);
    return value;
}

const std::string kCryptKey = "coffer-bench-key"; // 16 bytes: AES-128
constexpr std::string_view kKey = "bench";

MMKV *openInstance(const std::string &id, MMKVMode mode, bool encrypted) {
    MMKV *kv = MMKV::mmkvWithID(id, mode, encrypted ? &kCryptKey : nullptr);
    if (!kv) {
        fail("cannot open MMKV instance " + id);
    }
    return kv;
}

// set(int64) of a changing value; with `durable`, sync(MMKV_SYNC) after each.
void setInt64Row(const std::string &name, const std::string &id, MMKVMode mode, bool durable) {
    if (!selected(name)) {
        return;
    }
    MMKV *kv = openInstance(id, mode, false);
    int64_t counter = 0;
    const Body body = [&](size_t n) -> uint64_t {
        for (size_t i = 0; i < n; i++) {
            if (!kv->set(counter++, kKey)) {
                fail(name + ": set failed");
            }
            if (durable) {
                kv->sync(MMKV_SYNC);
            }
        }
        return uint64_t(kv->getInt64(kKey));
    };
    report(name, measure(body, durable ? 100'000 : 50'000'000));
    kv->close();
}

// set(std::string) of a changing 32-byte value on an encrypted instance.
void setEncryptedRow(const std::string &name, const std::string &id, MMKVMode mode, bool durable) {
    if (!selected(name)) {
        return;
    }
    MMKV *kv = openInstance(id, mode, true);
    uint64_t counter = 0;
    std::string value = value32(0);
    const Body body = [&](size_t n) -> uint64_t {
        for (size_t i = 0; i < n; i++) {
            counter++;
            std::memcpy(value.data(), &counter, sizeof counter);
            if (!kv->set(value, kKey)) {
                fail(name + ": set failed");
            }
            if (durable) {
                kv->sync(MMKV_SYNC);
            }
        }
        std::string back;
        kv->getString(kKey, back);
        return back.size();
    };
    report(name, measure(body, durable ? 100'000 : 50'000'000));
    kv->close();
}

// Writes 10,000 items, closes, then times mmkvWithID + one read + close().
void openRow(const std::string &name, const std::string &id, MMKVMode mode, bool encrypted) {
    if (!selected(name)) {
        return;
    }
    {
        MMKV *kv = openInstance(id, mode, encrypted);
        for (int i = 0; i < kOpenCount; i++) {
            const std::string key = "key-" + std::to_string(i);
            const bool ok = encrypted ? kv->set(value32(uint64_t(i)), key) : kv->set(int64_t(i), key);
            if (!ok) {
                fail(name + ": set failed while filling");
            }
        }
        kv->sync(MMKV_SYNC);
        kv->close();
    }
    const int probeIndex = kOpenCount / 2;
    const std::string probe = "key-" + std::to_string(probeIndex);
    const std::string expected = value32(uint64_t(probeIndex));
    // Once, untimed: the file really holds the 10,000 items.
    {
        MMKV *kv = openInstance(id, mode, encrypted);
        if (kv->count() != size_t(kOpenCount)) {
            fail(name + ": the instance does not hold 10,000 items");
        }
        kv->close();
    }
    const Body body = [&](size_t n) -> uint64_t {
        uint64_t sum = 0;
        std::string value;
        for (size_t i = 0; i < n; i++) {
            MMKV *kv = openInstance(id, mode, encrypted);
            if (encrypted) {
                if (!kv->getString(probe, value) || value != expected) {
                    fail(name + ": wrong value read back");
                }
                sum += value.size();
            } else {
                bool has = false;
                const int64_t got = kv->getInt64(probe, -1, &has);
                if (!has || got != probeIndex) {
                    fail(name + ": wrong value read back");
                }
                sum += uint64_t(got);
            }
            kv->close();
        }
        return sum;
    };
    report(name, measure(body, 100'000));
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: mmkv-bench <empty directory>\n");
        return 2;
    }
    struct stat st{};
    if (stat(argv[1], &st) != 0 || !S_ISDIR(st.st_mode)) {
        fail(std::string("not a directory: ") + argv[1]);
    }
    MMKV::initializeMMKV(argv[1], MMKVLogNone);

    setInt64Row("mmkv.set.multiprocess", "bench-mp", MMKV_MULTI_PROCESS, false);
    setInt64Row("mmkv.set.singleprocess", "bench-sp", MMKV_SINGLE_PROCESS, false);
    setEncryptedRow("mmkv.set.encrypted.multiprocess", "bench-mp-crypt", MMKV_MULTI_PROCESS, false);
    setInt64Row("mmkv.set.durable", "bench-durable", MMKV_SINGLE_PROCESS, true);
    setEncryptedRow("mmkv.set.durable.encrypted", "bench-durable-crypt", MMKV_SINGLE_PROCESS, true);
    openRow("mmkv.open.10k.multiprocess", "bench-open-10k", MMKV_MULTI_PROCESS, false);
    openRow("mmkv.open.10k.encrypted", "bench-open-10k-crypt", MMKV_SINGLE_PROCESS, true);

    MMKV::onExit();
    return 0;
}
