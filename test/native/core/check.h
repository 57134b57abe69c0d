// check.h: a minimal harness for the C++ test binaries (plain main(), no framework). Each TEST is one
// counted test; CHECK failures inside it print the condition and a message. main() ends with the line
// "# <name>: N passed, M failed" (read by scripts/test-native.mjs) and returns non-zero on any failure.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace check {

struct Test {
    const char * name;
    std::function<void()> fn;
};

inline std::vector<Test> & registry() {
    static std::vector<Test> r;
    return r;
}
inline int & failures_in_test() {
    static int f = 0;
    return f;
}

struct Register {
    Register(const char * name, std::function<void()> fn) { registry().push_back({name, std::move(fn)}); }
};

inline int run_all(const char * binary) {
    int passed = 0, failed = 0;
    for (auto & t : registry()) {
        failures_in_test() = 0;
        t.fn();
        if (failures_in_test() == 0) {
            ++passed;
            std::printf("OK %s\n", t.name);
        } else {
            ++failed;
            std::printf("NOT OK %s\n", t.name);
        }
        std::fflush(stdout);
    }
    std::printf("# %s: %d passed, %d failed\n", binary, passed, failed);
    return failed == 0 ? 0 : 1;
}

// |got - want| <= atol + rtol * scale, NaN only against NaN.
inline bool close(double got, double want, double rtol, double atol, double scale) {
    if (std::isnan(want)) return std::isnan(got);
    return std::fabs(got - want) <= atol + rtol * scale;
}

}  // namespace check

#define CHECK_CONCAT2(a, b) a##b
#define CHECK_CONCAT(a, b) CHECK_CONCAT2(a, b)
#define TEST(name)                                                      \
    static void name();                                                 \
    static check::Register CHECK_CONCAT(check_reg_, name)(#name, name); \
    static void name()

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            ++check::failures_in_test();                                    \
            std::printf("  failed %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            std::printf(__VA_ARGS__);                                       \
            std::printf("\n");                                              \
        }                                                                   \
    } while (0)
