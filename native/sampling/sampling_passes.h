// sampling_passes.h: internals shared by the CPU sampler's files (sampling.cpp, sampling_top_p.cpp): the table of
// row passes of the active SIMD level, the candidate type with the sampler's total order, and top-p's cut.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "native/sampling/sampling_radix.h"
#include "native/sampling/sampling_row.h"

namespace maporl {

// The row passes of one SIMD level (sampling_row.h's templates; sampling.cpp's passes() picks the level).
struct Passes {
    RowMax (*max)(const float *, int64_t, float, bool, bool, bool);
    double (*sum_exp)(const float *, int64_t, float, float, float);
    double (*sum_x)(const float *, int64_t, float, float);  // row_sum_x_t
    float (*exp_one)(float, float);
    uint64_t (*fixed_mass)(const float *, int64_t, float, float, int);
    uint64_t (*top_p_hist)(const float *, int64_t, float, float, float, float, int, int, uint64_t *, int32_t *,
                           uint16_t *, int64_t *);
    int64_t (*next)(const float *, int64_t, int64_t, float, float, bool);
    int64_t (*cands)(const float *, int64_t, float, int32_t *);
    int64_t (*gumbel)(const float *, const int32_t *, int64_t, float, uint64_t, int64_t);
    // The race over a whole row (no filter): the gumbel winner over the candidates x >= floor_x.
    int64_t (*race)(const float *, int64_t, float, float, int64_t, uint64_t, int64_t, int32_t *);
};

// A candidate token; `better` is the sampler's total order (logit descending, then the lower index).
struct Cand {
    float z;
    int32_t i;
};
inline bool better(const Cand & a, const Cand & b) { return a.z > b.z || (a.z == b.z && a.i < b.i); }

// Token i's top-p weight: sampling_radix.h's fixed point of exp(z_i / T - M) (scale = radix_scale(V)), the same
// integer as the vector passes' and CUDA's.
inline uint64_t fixed_weight(const Passes & P, const float * z, int64_t i, float T, float M, double scale) {
    return radix_fixed(P.exp_one(T == 1.0f ? z[i] : z[i] / T, M), scale);
}

// Top-p without top-k: the nucleus's last element in the sampler's order, found without sorting the row. One pass
// (top_p_hist) sums the row's fixed-point weights and adds those of the elements at or above lo into a histogram
// over their logit, kCutBins bins from lo to the max (vectors wholly below lo only add to the total; the mass
// below lo is the total's rest). lo is chosen so that what lies below it weighs under (1 - p) / 2 of the max's
// weight, V * exp(lo_x - M) <= (1 - p) / 2, so the cut lies above it (if not, the pass is redone from kCutSpan /
// temperature below the max, then everything below is searched). From the top, the bin where the mass reaches
// the target is the cut's; only its elements are sorted and walked (binned again over their own range while there
// are more than kCutSort). Integer masses make this the walk over the whole sorted row: the bins above hold mass
// < target, those below start at >= target. The nucleus is {z > cut.z} and the elements with z == cut.z up to
// index cut.i; cut.kept is its mass.
struct Cut {
    float z;
    int32_t i;
    uint64_t kept;
};
// The scratch top_p_cut needs (64-byte aligned): the histogram, and the index and bin of each element above lo.
size_t cut_scratch_bytes(int64_t V);
Cut top_p_cut(const Passes & P, const float * z, int64_t V, float zmax, float T, float M, float top_p, void * scratch);

}  // namespace maporl
