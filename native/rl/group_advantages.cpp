// group_advantages.cpp: CPU group-relative advantages and the row broadcast, plus their C entry points.
// Group statistics are accumulated in double, member by member in index order, on one of three paths that
// give the same bits: ids ascending with every group of one size (verl's layout) -> the gather
// kernels, 16 or 8 groups per lane (group_advantages_avx512.cpp, _avx2.cpp); ids ascending otherwise -> one run per group;
// anything else -> a statistics table indexed by (id - min id), or by dense ids from a sort when the ids
// span a wide range. Nothing depends on the thread count. The batch whitening runs on the pool too.
#include "native/rl/group_advantages.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "native/core/core.h"
#include "native/rl/gae_scan.h"  // whiten_mean, whiten_from_m2
#include "native/core/isa.h"
#include "native/core/scratch.h"
#include "native/core/threadpool.h"

namespace maporl {
namespace {

constexpr int64_t kChunk = 1 << 16;  // fixed reduction chunk: partial sums never depend on the thread count

// The first pass over the ids: descents and steps (adjacent pairs with id[i] < id[i-1], id[i] != id[i-1],
// counting the pair across the start of [b, e)) and the id range.
struct IdScan {
    int64_t descents = 0, steps = 0;
    int32_t lo = std::numeric_limits<int32_t>::max(), hi = std::numeric_limits<int32_t>::min();
    void merge(const IdScan & o) {
        descents += o.descents;
        steps += o.steps;
        lo = std::min(lo, o.lo);
        hi = std::max(hi, o.hi);
    }
};

IdScan scan_ids(const int32_t * g, int64_t b, int64_t e) {  // e - b <= kChunk: int32 counts (vectorises)
    IdScan s;
    int32_t d = 0, st = 0, lo = s.lo, hi = s.hi;
    if (b > 0) {
        d += g[b] < g[b - 1];
        st += g[b] != g[b - 1];
    }
    for (int64_t i = b; i < e; ++i) {
        lo = std::min(lo, g[i]);
        hi = std::max(hi, g[i]);
    }
    for (int64_t i = b + 1; i < e; ++i) {
        d += g[i] < g[i - 1];
        st += g[i] != g[i - 1];
    }
    s.descents = d;
    s.steps = st;
    s.lo = lo;
    s.hi = hi;
    return s;
}

// Slot of element i in the statistics table: ids[i] - lo, with the ids themselves when they span at most about
// 2N values (lo = min id), else their dense ranks from a sort (dense_ids; lo = 0).
struct SlotOf {
    const int32_t * ids;
    int32_t lo;
    int64_t operator()(int64_t i) const { return (int64_t)ids[i] - (int64_t)lo; }
};

// Dense ranks of the ids (0 .. K-1 in id order); *K gets how many distinct ids there are.
std::vector<int32_t> dense_ids(const int32_t * g, int64_t N, int64_t * K) {
    std::vector<int64_t> order((size_t)N);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return g[a] < g[b]; });
    std::vector<int32_t> dense((size_t)N);
    int32_t next = -1;
    for (int64_t k = 0; k < N; ++k) {
        if (k == 0 || g[order[k]] != g[order[k - 1]]) ++next;
        dense[order[k]] = next;
    }
    *K = (int64_t)next + 1;
    return dense;
}

// A member in its bucket: its slot within the bucket and its score (8 B: one write stream per bucket).
struct Member {
    uint32_t slot;
    float score;
};

// One bucket's statistics, from its members in index order, then its folds.
void bucket_stats(const Member * m, int64_t count, Slot * t, int64_t nslots, const maporl_group_params & p,
                  Fold * folds) {
    const bool excl = p.nan_exclude != 0, use_max = p.baseline == MAPORL_BASELINE_MAX;
    for (int64_t j = 0; j < nslots; ++j) t[j] = Slot{0.0, 0.0, 0.0, use_max ? -INFINITY : 0.0};
    // Pass 1, its loop specialised per mode (the flags are constant here; the members' order is index order).
    if (use_max) {
        for (int64_t j = 0; j < count; ++j)
            if (!(excl && m[j].score != m[j].score)) add_member(t[m[j].slot], m[j].score, true);
    } else if (excl) {
        for (int64_t j = 0; j < count; ++j)
            if (m[j].score == m[j].score) add_member(t[m[j].slot], m[j].score, false);
    } else {
        for (int64_t j = 0; j < count; ++j) add_member(t[m[j].slot], m[j].score, false);
    }
    for (int64_t j = 0; j < nslots; ++j) t[j].mean = t[j].sum / t[j].n;
    if (p.scale_by_std && !use_max)
        for (int64_t j = 0; j < count; ++j)
            if (!(excl && m[j].score != m[j].score)) add_deviation(t[m[j].slot], m[j].score);
    for (int64_t j = 0; j < nslots; ++j) folds[j] = fold(t[j], p);
}

// Arbitrary ids: a statistics table of K slots. The members are first bucketed by slot range (a stable
// counting partition into at most kBuckets sequential streams of 8 B members; two streams per bucket, 4 B
// each, cost 3x more here: past ~64 streams the stores stop combining), so that each bucket's statistics live
// in a table small enough for L1 instead of random updates all over a multi-MiB table. Buckets keep index
// order, so every group is still accumulated member by member in index order: the same bits as the adjacent
// paths, for any thread count. Then one pass over the elements writes the advantages from the folds (16 B per
// slot, L2-resident at K = 65536). The buffers are leased (scratch.h): fresh ones would fault in 11 MiB of pages
// at N = 2^20.
constexpr int64_t kBuckets = 64;

void table_path(const float * scores, int64_t N, const maporl_group_params & p, float * out, SlotOf slot_of,
                int64_t K) {
    int shift = 0;
    while (((K - 1) >> shift) >= kBuckets) ++shift;
    const int64_t nb = ((K - 1) >> shift) + 1;
    // The table first: Slot needs 32-byte alignment (the lease gives 64); Fold and Member need less.
    const size_t at_folds = (size_t)K * sizeof(Slot), at_members = at_folds + (size_t)K * sizeof(Fold);
    ScratchLease lease(at_members + (size_t)N * sizeof(Member));
    unsigned char * base = static_cast<unsigned char *>(lease.data());
    static_assert(alignof(Slot) <= 64 && alignof(Fold) <= alignof(Slot) && alignof(Member) <= alignof(Fold),
                  "scratch layout");
    Slot * table = reinterpret_cast<Slot *>(base);
    Fold * folds = reinterpret_cast<Fold *>(base + at_folds);
    Member * members = reinterpret_cast<Member *>(base + at_members);
    // Counts per (index part, bucket); the parts are fixed fractions of [0, N), and the partition is stable, so
    // nothing depends on how many there are.
    const int64_t P = std::max<int64_t>(1, std::min<int64_t>(pool_threads(), 8));
    std::vector<int64_t> cursor((size_t)(P * nb), 0);
    parallel_for(P, 1, [&](int64_t q0, int64_t q1) {
        for (int64_t q = q0; q < q1; ++q) {
            int64_t c[kBuckets] = {0};
            for (int64_t i = q * N / P, e = (q + 1) * N / P; i < e; ++i) ++c[slot_of(i) >> shift];
            std::copy(c, c + nb, cursor.begin() + q * nb);
        }
    });
    std::vector<int64_t> bucket_start((size_t)nb + 1, 0);
    int64_t at = 0;
    for (int64_t b = 0; b < nb; ++b) {
        bucket_start[(size_t)b] = at;
        for (int64_t q = 0; q < P; ++q) {
            const int64_t c = cursor[(size_t)(q * nb + b)];
            cursor[(size_t)(q * nb + b)] = at;
            at += c;
        }
    }
    bucket_start[(size_t)nb] = at;
    parallel_for(P, 1, [&](int64_t q0, int64_t q1) {
        for (int64_t q = q0; q < q1; ++q) {
            int64_t cur[kBuckets];
            std::copy(cursor.begin() + q * nb, cursor.begin() + (q + 1) * nb, cur);
            for (int64_t i = q * N / P, e = (q + 1) * N / P; i < e; ++i) {
                const int64_t k = slot_of(i), b = k >> shift;
                members[cur[b]++] = Member{(uint32_t)(k - (b << shift)), scores[i]};
            }
        }
    });
    parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t e0 = bucket_start[(size_t)b], k0 = b << shift;
            bucket_stats(members + e0, bucket_start[(size_t)b + 1] - e0, table + k0, std::min(K, (b + 1) << shift) - k0,
                         p, folds + k0);
        }
    });
    const bool excl = p.nan_exclude != 0;
    const Isa isa = K < ((int64_t)1 << 30) ? active_isa() : Isa::Scalar;  // 32-bit gather offsets
    parallel_for(N, 4096, [&](int64_t b, int64_t e) {
        if (isa == Isa::Avx512)
            avx512::write_from_folds(scores, slot_of.ids, slot_of.lo, folds, out, b, e, excl);
        else if (isa == Isa::Avx2)
            avx2::write_from_folds(scores, slot_of.ids, slot_of.lo, folds, out, b, e, excl);
        else
            for (int64_t i = b; i < e; ++i) out[i] = write_one(scores[i], folds[slot_of(i)], excl);
    });
}

}  // namespace

void group_advantages_cpu(const float * scores, const int32_t * groups, const float * weights, int64_t N,
                          const maporl_group_params & p, float * out) {
    if (N == 0) return;
    if (weights != nullptr)
        for (int64_t i = 0; i < N; ++i)
            if (!group_weight_ok(weights[i]))
                throw_error(MAPORL_ERR_INVALID_ARG, "weights: expected finite values >= 0, got %g at index %lld",
                            (double)weights[i], (long long)i);
    const bool use_max = p.baseline == MAPORL_BASELINE_MAX;
    // One pass: are the ids ascending, how many group boundaries are there, and the id range? (Integer
    // results: any split of the range gives the same totals.)
    const int64_t id_chunks = (N + kChunk - 1) / kChunk;
    std::vector<IdScan> part((size_t)id_chunks);
    parallel_for(id_chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) part[(size_t)c] = scan_ids(groups, c * kChunk, std::min(N, (c + 1) * kChunk));
    });
    IdScan ids = part[0];
    for (int64_t c = 1; c < id_chunks; ++c) ids.merge(part[(size_t)c]);
    const bool sorted = ids.descents == 0;
    int64_t G = 1;
    while (sorted && G < N && groups[G] == groups[0]) ++G;
    // Uniform: N / G runs of exactly G (N / G - 1 boundaries, all at multiples of G).
    const Isa isa = active_isa();
    bool uniform = sorted && !use_max && N % G == 0 && ids.steps == N / G - 1 && isa != Isa::Scalar;
    for (int64_t k = G; uniform && k < N; k += G) uniform = groups[k] != groups[k - 1];
    if (uniform) {
        parallel_for(N / G, std::max<int64_t>(16, 8192 / G), [&](int64_t k0, int64_t k1) {
            if (isa == Isa::Avx512)
                avx512::group_uniform_f32(scores, out, G, k0, k1, p);
            else
                avx2::group_uniform_f32(scores, out, G, k0, k1, p);
        });
    } else if (sorted) {
        // verl's layout (the responses of a prompt adjacent, ids ascending): every group is one run. Chunks are
        // widened to run boundaries; each run in index order.
        parallel_for(N, 8192, [&](int64_t b, int64_t e) {
            while (b > 0 && b < N && groups[b] == groups[b - 1]) ++b;
            while (e < N && groups[e] == groups[e - 1]) ++e;
            for (int64_t r = b; r < e;) {
                int64_t q = r + 1;
                while (q < e && groups[q] == groups[r]) ++q;
                group_run_sequential(scores + r, out + r, q - r, p);
                r = q;
            }
        });
    } else {
        const int64_t range = (int64_t)ids.hi - (int64_t)ids.lo + 1;
        if (range <= 2 * N + 1024) {
            table_path(scores, N, p, out, SlotOf{groups, ids.lo}, range);
        } else {
            int64_t K = 0;
            const std::vector<int32_t> dense = dense_ids(groups, N, &K);
            table_path(scores, N, p, out, SlotOf{dense.data(), 0}, K);
        }
    }
    if (!p.whiten) return;
    // Weighted batch whitening; excluded rows (NaN excluded, weight 0) do not count and get 0.
    auto counted = [&](float s) { return !(p.nan_exclude && std::isnan(s)); };
    auto w_of = [&](int64_t i) -> double {
        if (!counted(scores[i])) return 0.0;
        return weights ? (double)weights[i] : 1.0;
    };
    const int64_t chunks = (N + kChunk - 1) / kChunk;
    std::vector<double> ps((size_t)chunks), ps2((size_t)chunks), pw((size_t)chunks);
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
            double s = 0, s2 = 0, w = 0;
            for (int64_t i = c * kChunk, e = std::min(N, (c + 1) * kChunk); i < e; ++i) {
                const double wi = w_of(i);
                if (wi == 0.0) continue;
                const double a = out[i];
                s += wi * a;
                s2 += wi * a * a;
                w += wi;
            }
            ps[c] = s;
            ps2[c] = s2;
            pw[c] = w;
        }
    });
    double s = 0, s2 = 0, w = 0;
    for (int64_t c = 0; c < chunks; ++c) {
        s += ps[c];
        s2 += ps2[c];
        w += pw[c];
    }
    const double mean = whiten_mean(s, w);
    double m2 = whiten_m2_one_pass(s, s2, mean);
    if (!whiten_one_pass_ok(s2, m2)) {  // the exact second pass, chunk by chunk in order
        parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
            for (int64_t c = c0; c < c1; ++c) {
                double d = 0;
                for (int64_t i = c * kChunk, e = std::min(N, (c + 1) * kChunk); i < e; ++i) {
                    const double wi = w_of(i);
                    if (wi != 0.0) d += wi * ((double)out[i] - mean) * ((double)out[i] - mean);
                }
                ps2[c] = d;
            }
        });
        m2 = 0;
        for (int64_t c = 0; c < chunks; ++c) m2 += ps2[c];
    }
    const WhitenStats st = whiten_from_m2(mean, m2, w, p.whiten == 2);
    parallel_for(N, 4096, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = w_of(i) == 0.0 ? 0.0f : (float)(((double)out[i] - st.mean) * st.rstd);
    });
}

void broadcast_rows_cpu(const float * values, const void * mask, maporl_mask_type mask_type, int64_t N, int64_t T,
                        float * out) {
    std::vector<int64_t> bad_row((size_t)std::max<int64_t>(N, 1), -1);
    auto rows = [&](auto * m) {
        parallel_for(N, 16, [&](int64_t b, int64_t e) {
            for (int64_t n = b; n < e; ++n) {
                const float v = values[n];
                bool bad = false;
                for (int64_t t = 0; t < T; ++t) {
                    const auto mv = m[n * T + t];
                    bad |= !(mv == 0 || mv == 1);
                    out[n * T + t] = mv == 1 ? v : 0.0f;
                }
                if (bad)
                    for (int64_t t = 0; t < T; ++t)
                        if (!(m[n * T + t] == 0 || m[n * T + t] == 1)) {
                            bad_row[n] = t;
                            break;
                        }
            }
        });
        for (int64_t n = 0; n < N; ++n)
            if (bad_row[n] >= 0)
                throw_error(MAPORL_ERR_INVALID_ARG,
                            "mask: expected 0 or 1 at every position, got %g at index %lld (row %lld, t %lld)",
                            (double)m[n * T + bad_row[n]], (long long)(n * T + bad_row[n]), (long long)n,
                            (long long)bad_row[n]);
    };
    if (mask_type == MAPORL_MASK_U8)
        rows(static_cast<const uint8_t *>(mask));
    else
        rows(static_cast<const float *>(mask));
}

}  // namespace maporl

extern "C" {

maporl_group_params maporl_group_default_params(void) {
    maporl_group_params p;
    p.baseline = MAPORL_BASELINE_MEAN;
    p.scale_by_std = 1;
    p.std_unbiased = 1;
    p.eps = 1e-6f;
    p.singleton_zero = 0;
    p.nan_exclude = 0;
    p.whiten = 0;
    return p;
}

maporl_status maporl_group_advantages(maporl_device device, const float * scores, const int32_t * groups,
                                      const float * weights, int64_t N, maporl_group_params p, float * out) {
    using namespace maporl;
    return guarded([&] {
        require_device(device);
        if (N < 0) throw_error(MAPORL_ERR_INVALID_ARG, "N: expected >= 0, got %lld", (long long)N);
        require_ptr(scores, "scores", N);
        require_ptr(groups, "groups", N);
        require_ptr(out, "advantages_out", N);
        if ((unsigned)enum_int(p.baseline) > (unsigned)MAPORL_BASELINE_NONE)
            throw_error(MAPORL_ERR_INVALID_ARG, "baseline: expected MAPORL_BASELINE_MEAN..NONE (0..3), got %d",
                        enum_int(p.baseline));
        if (p.baseline == MAPORL_BASELINE_MAX && p.scale_by_std)
            throw_error(MAPORL_ERR_INVALID_ARG, "scale_by_std: the max baseline has no std scaling (use 0), got 1");
        if (!(p.eps >= 0.0f && p.eps <= 1.0f))
            throw_error(MAPORL_ERR_INVALID_ARG, "eps: expected a finite number in [0, 1], got %g", (double)p.eps);
        for (auto [flag, name] : {std::pair<int, const char *>{p.scale_by_std, "scale_by_std"},
                                  {p.std_unbiased, "std_unbiased"},
                                  {p.singleton_zero, "singleton_zero"},
                                  {p.nan_exclude, "nan_exclude"}})
            if (flag != 0 && flag != 1) throw_error(MAPORL_ERR_INVALID_ARG, "%s: expected 0 or 1, got %d", name, flag);
        if (p.whiten < 0 || p.whiten > 2)
            throw_error(MAPORL_ERR_INVALID_ARG, "whiten: expected 0 (off), 1 (verl) or 2 (OpenRLHF), got %d", p.whiten);
        if (device == MAPORL_DEVICE_CUDA) return group_advantages_cuda(scores, groups, weights, N, p, out);
        group_advantages_cpu(scores, groups, weights, N, p, out);
        return MAPORL_OK;
    });
}

maporl_status maporl_broadcast_rows(maporl_device device, const float * values, const void * mask,
                                    maporl_mask_type mask_type, int64_t N, int64_t T, float * out) {
    using namespace maporl;
    return guarded([&] {
        require_device(device);
        require_mask_type(mask_type);
        require_dims(N, T, "N", "T");
        require_ptr(values, "values", N);
        require_ptr(mask, "mask", N * T);
        require_ptr(out, "out", N * T);
        if (device == MAPORL_DEVICE_CUDA) return broadcast_rows_cuda(values, mask, mask_type, N, T, out);
        broadcast_rows_cpu(values, mask, mask_type, N, T, out);
        return MAPORL_OK;
    });
}

}  // extern "C"
