// init.h: the random initialisation shared by the model families: a normal deviate from two uniforms
// (Box-Muller), independent of the standard library's distributions, so initial weights are the same with any
// libstdc++ / libc++.
#pragma once

#include <cmath>
#include <random>

namespace maporl {

inline double init_normal(std::mt19937_64 & g) {
    const double u1 = ((double)(g() >> 11) + 0.5) / 9007199254740992.0, u2 = (double)(g() >> 11) / 9007199254740992.0;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace maporl
