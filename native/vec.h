// vec.h: W-lane float vectors (GCC/Clang vector extension) for the per-ISA kernel translation units.
// Include only from a <stem>_<isa>.cpp that defines MAPORL_ISA (a namespace name) and MAPORL_VEC_W (8 or 16)
// and is compiled with the matching -m flags; the types live in namespace maporl::MAPORL_ISA.
#include <cstddef>
#include <cstdint>
#include <utility>

#if !defined(MAPORL_ISA) || !defined(MAPORL_VEC_W)
#error "define MAPORL_ISA and MAPORL_VEC_W before including vec.h"
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#define MAPORL_INLINE inline __attribute__((always_inline))

namespace maporl {
namespace MAPORL_ISA {

constexpr int W = MAPORL_VEC_W;
typedef float vf __attribute__((vector_size(4 * W)));
typedef int32_t vi __attribute__((vector_size(4 * W)));
typedef uint8_t vb __attribute__((vector_size(W)));
typedef double vd __attribute__((vector_size(8 * W / 2)));  // half the lanes, in double

MAPORL_INLINE vf splat(float x) { return vf{} + x; }

MAPORL_INLINE vf load(const float * p) {
    vf v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}
MAPORL_INLINE vf load(const uint8_t * p) {  // W bytes widened to floats
    vb b;
    __builtin_memcpy(&b, p, sizeof b);
    return __builtin_convertvector(b, vf);
}
MAPORL_INLINE void store(float * p, vf v) { __builtin_memcpy(p, &v, sizeof v); }

namespace detail {
template <int K, size_t... I>
MAPORL_INLINE vf shift_down(vf x, vf fill, std::index_sequence<I...>) {
    return __builtin_shufflevector(x, fill, ((I + K < W) ? (int)(I + K) : (int)(W + I))...);
}
template <size_t... I>
MAPORL_INLINE vd low_half(vf x, std::index_sequence<I...>) {
    return __builtin_convertvector(__builtin_shufflevector(x, x, (int)I...), vd);
}
template <size_t... I>
MAPORL_INLINE vd high_half(vf x, std::index_sequence<I...>) {
    return __builtin_convertvector(__builtin_shufflevector(x, x, (int)(I + W / 2)...), vd);
}
}  // namespace detail

// Lane i gets x[i + K]; lanes past the end get fill[i].
template <int K>
MAPORL_INLINE vf shift_down(vf x, vf fill) {
    return detail::shift_down<K>(x, fill, std::make_index_sequence<W>{});
}
MAPORL_INLINE vd low_half(vf x) { return detail::low_half(x, std::make_index_sequence<W / 2>{}); }
MAPORL_INLINE vd high_half(vf x) { return detail::high_half(x, std::make_index_sequence<W / 2>{}); }

}  // namespace MAPORL_ISA
}  // namespace maporl
