// bf16.h: bfloat16 <-> float on the CPU. Widening is exact (the 16 bits become the float's top half); narrowing
// rounds to nearest, ties to even, as torch's .to(torch.bfloat16) (NaN stays a quiet NaN of the same sign).
#pragma once

#include <stdint.h>

#include <cstring>

namespace maporl {

static inline float bf16_to_float(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);  // NaN: keep it a (quiet) NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

}  // namespace maporl
