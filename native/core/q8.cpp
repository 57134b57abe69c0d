// q8.cpp: the half -> float table of q8.h, built here (baseline ISA flags) so that no per-ISA unit's copy of it runs.
#include "native/core/q8.h"

namespace maporl {

const float * f16_table() {
    static const float * table = [] {
        float * t = new float[65536];
        for (uint32_t h = 0; h < 65536; ++h) t[h] = f16_to_float((uint16_t)h);
        return t;
    }();
    return table;
}

}  // namespace maporl
