/* maporl.h: the whole C interface of the maporl core (CPU kernels, optional CUDA kernels, device layer).
 * Usable from C, the C++ tests and the N-API bindings. Not a place for templates or CUDA types.
 *
 * Conventions
 *   - Every function returns maporl_status (0 = ok, < 0 = error). On error, maporl_last_error() holds a
 *     message for the calling thread that names the parameter, what was expected and what was given.
 *   - No exception crosses this interface and nothing here calls exit() or abort().
 *   - Arrays are row-major and contiguous. With MAPORL_DEVICE_CPU every pointer is host memory; with
 *     MAPORL_DEVICE_CUDA every array pointer is device memory (see maporl_device_malloc / maporl_memcpy).
 *   - Outputs are written (=), never accumulated, unless a comment says "+=".
 *   - Shape letters: B rows/sequences, T steps/tokens, N tokens, V vocab, G group size, A agents, Q questions.
 *   - Masks are 0/1 (any other value is MAPORL_ERR_INVALID_ARG). Masked positions are skipped by scans,
 *     excluded from reductions, and written as 0 in outputs.
 *   - CUDA: kernels run on the calling thread's current device (cudaSetDevice; device 0 unless the caller chose
 *     another) and on the default stream, and a call returns once its results are written (it synchronizes), so
 *     device pointers from any stream may be passed once that stream's work on them is done. There is no stream
 *     parameter in this version. Grids beyond CUDA's limits (2^31 - 1 blocks in x, 65,535 in y) are
 *     MAPORL_ERR_INVALID_ARG naming the call, not a wrapped launch.
 */
#ifndef MAPORL_H
#define MAPORL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MAPORL_VERSION_MAJOR 0
#define MAPORL_VERSION_MINOR 1
#define MAPORL_VERSION_PATCH 0

typedef enum maporl_status {
    MAPORL_OK = 0,
    MAPORL_ERR_INVALID_ARG = -1, /* a shape, pointer, value or hyperparameter is out of range */
    MAPORL_ERR_OUT_OF_MEMORY = -2,
    MAPORL_ERR_NO_DEVICE = -3, /* built without CUDA, or no GPU visible */
    MAPORL_ERR_CUDA = -4,      /* a CUDA call failed; maporl_last_error() has CUDA's message */
    MAPORL_ERR_ABORTED = -5,   /* a cancel flag was raised or a progress callback returned false */
    MAPORL_ERR_INTERNAL = -6   /* a bug: please report with maporl_last_error() */
} maporl_status;

typedef enum maporl_device { MAPORL_DEVICE_CPU = 0, MAPORL_DEVICE_CUDA = 1 } maporl_device;

/* Element type of a mask argument. */
typedef enum maporl_mask_type {
    MAPORL_MASK_U8 = 0, /* uint8_t, 0 or 1 */
    MAPORL_MASK_F32 = 1 /* float, 0.0f or 1.0f */
} maporl_mask_type;

/* ---- errors and build info ---------------------------------------------------------------------- */

/* Message for the last non-OK status returned on this thread; "" when none. Never NULL. */
const char * maporl_last_error(void);
/* "MAPORL_ERR_INVALID_ARG" etc.; "MAPORL_ERR_UNKNOWN" for a value outside the enum. Never NULL. */
const char * maporl_status_name(maporl_status status);
/* "0.1.0" */
const char * maporl_version(void);
/* SIMD level the CPU kernels use now: "avx512", "avx2" or "scalar". The best the CPU supports, unless lowered
 * by maporl_set_simd() or the environment variable MAPORL_SIMD (read once, at first use). */
const char * maporl_simd(void);
/* Lowers (or restores, with "best") the SIMD level: "scalar", "avx2", "avx512" or "best". A level the CPU
 * lacks is MAPORL_ERR_INVALID_ARG. Meant for tests and for reproducing another machine's code path; every
 * level gives results within float rounding of the others. */
maporl_status maporl_set_simd(const char * level);

/* ---- CPU thread pool (shared by every CPU kernel) ------------------------------------------------ */

/* Sets the number of threads the CPU kernels use, the calling thread included. n = 0 means the number of
 * hardware threads. 1 <= n <= 1024 otherwise. Results never depend on the thread count. */
maporl_status maporl_set_threads(int n);
int maporl_get_threads(void);

/* ---- float32 matmul precision on CUDA (PyTorch's torch.set_float32_matmul_precision) ----------------- */

typedef enum maporl_matmul_precision {
    MAPORL_MATMUL_HIGHEST = 0, /* float32 FMA (the default; within float rounding of the CPU) */
    MAPORL_MATMUL_HIGH = 1     /* TF32 tensor cores (sm_80+): inputs rounded to 10-bit mantissas, float32 sums */
} maporl_matmul_precision;

/* Process-wide, read at each CUDA matmul launch (the embedded GPT's linear layers, forward and backward). The CPU
 * kernels always compute in float32. A value outside the enum is MAPORL_ERR_INVALID_ARG. */
maporl_status maporl_set_matmul_precision(int precision);
maporl_matmul_precision maporl_get_matmul_precision(void);

/* ---- devices ------------------------------------------------------------------------------------ */

typedef struct maporl_device_info {
    char name[256];       /* e.g. "NVIDIA H200" */
    int64_t total_memory; /* bytes */
    int compute_major;    /* compute capability, e.g. 9 */
    int compute_minor;    /* e.g. 0 */
    int multiprocessors;  /* SM count */
} maporl_device_info;

/* 1 when the core was built with CUDA kernels, else 0. */
int maporl_cuda_compiled(void);
/* Number of usable CUDA devices. 0 (and MAPORL_OK) without CUDA, without a driver or without a GPU. */
maporl_status maporl_cuda_device_count(int * count_out);
maporl_status maporl_cuda_device_info(int index, maporl_device_info * info_out);

/* Device memory for MAPORL_DEVICE_CUDA arguments. Without a device these return MAPORL_ERR_NO_DEVICE. */
maporl_status maporl_device_malloc(size_t bytes, void ** ptr_out);
maporl_status maporl_device_free(void * ptr); /* NULL-safe */
maporl_status maporl_memcpy_to_device(void * dst_device, const void * src_host, size_t bytes);
maporl_status maporl_memcpy_to_host(void * dst_host, const void * src_device, size_t bytes);

/* ---- GAE: generalized advantage estimation, verl's compute_gae_advantage_return ----------------- */

typedef struct maporl_gae_params {
    float gamma;  /* discount, finite, in [0, 1]. Default 1.0 */
    float lambda; /* GAE lambda, finite, in [0, 1]. Default 0.95 */
    int whiten;   /* 1: whiten advantages over all unmasked tokens of the batch (unbiased var, eps 1e-8). Default 0 */
} maporl_gae_params;

maporl_gae_params maporl_gae_default_params(void);

/* Scans each row from t = T-1 down to 0 with bootstrap 0 after the last step:
 *   delta_t = r_t + gamma * nextvalue - V_t;  A_t = delta_t + gamma * lambda * A_{t+1}
 * where nextvalue and A_{t+1} come from the next unmasked position (masked positions are skipped: the
 * carries pass through them unchanged). returns = A + V (before whitening). Outputs at masked positions are 0.
 *   rewards, values: [B, T] float;  mask: [B, T] of mask_type;  advantages_out, returns_out: [B, T] float (=).
 * B >= 0, T >= 0. A mask value other than 0 or 1 is MAPORL_ERR_INVALID_ARG (outputs then unspecified).
 * NaN or Inf in rewards/values at unmasked positions propagate; at masked positions they are never read. */
maporl_status maporl_gae(maporl_device device, const float * rewards, const float * values, const void * mask,
                         maporl_mask_type mask_type, int64_t B, int64_t T, maporl_gae_params params,
                         float * advantages_out, float * returns_out);

/* ---- REINFORCE++ discounted returns ------------------------------------------------------------ */

typedef struct maporl_returns_params {
    float gamma; /* discount, finite, in [0, 1]. Default 1.0 */
    int whiten;  /* 1: advantages = returns whitened over all unmasked tokens (verl's masked_whiten). Default 1 */
} maporl_returns_params;

maporl_returns_params maporl_returns_default_params(void);

/* verl's reinforce_plus_plus: per row from t = T-1 down, G_t = r_t + gamma * G_{t+1} at unmasked positions;
 * a masked position resets the running return to 0 (so a sequence's return never reaches past its end, and
 * nothing at or after a masked position, NaN included, flows across it). returns_out = G (0 where masked);
 * advantages_out = G, whitened when params.whiten. rewards: [B, T] float; mask: [B, T] of mask_type. */
maporl_status maporl_reinforce_returns(maporl_device device, const float * rewards, const void * mask,
                                       maporl_mask_type mask_type, int64_t B, int64_t T, maporl_returns_params params,
                                       float * returns_out, float * advantages_out);

/* ---- group-relative advantages (GRPO, Dr.GRPO, RLOO, REINFORCE++-baseline, MAGRPO) ---------------- */

typedef enum maporl_group_baseline {
    MAPORL_BASELINE_MEAN = 0, /* A = s - mean_g                      (GRPO, Dr.GRPO, MAGRPO 'mean') */
    MAPORL_BASELINE_RLOO = 1, /* A = s - mean of the other members   (RLOO, MAGRPO 'rloo') */
    MAPORL_BASELINE_MAX = 2,  /* A = s - max_g                       (MAGRPO 'max', MA-ReMax) */
    MAPORL_BASELINE_NONE = 3  /* A = s                               (MAGRPO 'none', MA-REINFORCE) */
} maporl_group_baseline;

typedef struct maporl_group_params {
    maporl_group_baseline baseline; /* default MAPORL_BASELINE_MEAN */
    int scale_by_std;               /* 1: divide by (std_g + eps), GRPO. Default 1 */
    int std_unbiased;               /* 1: std with n - 1 (verl, TRL, OpenRLHF); 0: with n. Default 1 */
    float eps;                      /* finite, >= 0, added to std. verl 1e-6 (default), TRL 1e-4, OpenRLHF 1e-9 */
    int singleton_zero;             /* a group with one counted member: 0 -> its raw score (verl, default), 1 -> 0 */
    int nan_exclude;                /* 1: NaN scores are left out of group statistics and get 0 (TRL); 0: NaN propagates
                              through its group (default) */
    int whiten; /* then whiten over the batch (REINFORCE++-baseline), weighted by `weights` (e.g. token
                              counts, as verl's token-level masked_whiten); rows of weight 0 and excluded NaN rows
                              get 0. 1: verl's (unbiased variance, 1 / sqrt(var + 1e-8)); 2: OpenRLHF's (biased
                              variance, 1 / sqrt(max(var, 1e-8))); the mean exact in both. Default 0 (off) */
} maporl_group_params;

maporl_group_params maporl_group_default_params(void);

/* One advantage per response from its outcome score and its group id (any int32, in any order, groups need not
 * be contiguous). scores, weights: [N] float (weights may be NULL: all 1; only used with whiten, finite >= 0);
 * groups: [N] int32; advantages_out: [N] float (=). Group statistics are summed in index order in double, so the
 * result does not depend on the thread count. */
maporl_status maporl_group_advantages(maporl_device device, const float * scores, const int32_t * groups,
                                      const float * weights, int64_t N, maporl_group_params params,
                                      float * advantages_out);

/* out[n, t] = values[n] where mask[n, t] = 1, else 0. values: [N]; mask: [N, T] of mask_type (0/1 only);
 * out: [N, T] float (=). For per-response advantages expanded to tokens. */
maporl_status maporl_broadcast_rows(maporl_device device, const float * values, const void * mask,
                                    maporl_mask_type mask_type, int64_t N, int64_t T, float * out);

/* ---- policy losses (PPO clip family, GSPO, CISPO, REINFORCE) with their gradients -------------------- */

typedef enum maporl_loss_type {
    MAPORL_LOSS_PPO = 0,      /* verl compute_policy_loss_vanilla: clipped surrogate, optional dual clip */
    MAPORL_LOSS_GSPO = 1,     /* verl gspo: sequence-level ratio exp(mean_t(logp - old)), standard clip */
    MAPORL_LOSS_CISPO = 2,    /* verl cispo: -sg(clamp(rho, 1 - low, 1 + high)) * A * logp */
    MAPORL_LOSS_REINFORCE = 3 /* -A * logp (MAGRPO / CoLLM actor loss, verl bypass mode) */
} maporl_loss_type;

typedef enum maporl_kl_estimator {
    MAPORL_KL_NONE = 0,
    MAPORL_KL_K1 = 1,  /* d = logp - ref */
    MAPORL_KL_ABS = 2, /* |d| */
    MAPORL_KL_K2 = 3,  /* 0.5 d^2 */
    MAPORL_KL_K3 = 4   /* e = clamp(ref - logp, -20, 20); clamp(exp(e) - e - 1, -10, 10) (verl low_var_kl) */
} maporl_kl_estimator;

typedef enum maporl_loss_agg {
    MAPORL_AGG_TOKEN_MEAN = 0,             /* sum(L m) / normalizer (default: local sum(m)) */
    MAPORL_AGG_SEQ_MEAN_TOKEN_SUM = 1,     /* sum_b(sum_t L m) / normalizer (default: rows with a valid token) */
    MAPORL_AGG_SEQ_MEAN_TOKEN_MEAN = 2,    /* sum_b(sum_t L m / len_b) / normalizer (same default) */
    MAPORL_AGG_SEQ_MEAN_TOKEN_SUM_NORM = 3 /* sum_b(sum_t L m) / normalizer (default: T), no division by B */
} maporl_loss_agg;

typedef struct maporl_policy_loss_params {
    maporl_loss_type type;     /* default MAPORL_LOSS_PPO */
    float clip_low, clip_high; /* ratio clip range [1 - low, 1 + high], finite, low in [0, 1), high >= 0. 0.2 */
    float dual_clip;           /* ppo: cap -A*c on A < 0 tokens, c > 1; 0 = off. Default 3 (verl) */
    float log_ratio_clamp;     /* > 0: ppo/cispo clamp logp - old to [-x, x] (20); gspo: upper clamp (10) */
    maporl_kl_estimator kl;    /* default MAPORL_KL_NONE; needs ref_logp */
    int kl_straight_through;   /* 1: value of `kl`, gradient of k2 (verl's "+" suffix). Default 0 */
    float kl_coef;             /* finite. Default 0 */
    float entropy_coef;        /* finite; loss -= coef * agg(entropy). Default 0; needs entropy */
    maporl_loss_agg agg;       /* default MAPORL_AGG_TOKEN_MEAN. GSPO: applies to the KL and entropy terms only
                                      (verl's compute_policy_loss_gspo always aggregates its policy term as
                                      seq-mean-token-mean) */
    double normalizer;         /* > 0: the global count (tokens, sequences) or scale factor of `agg`, so that
                                      micro-batches sum to the full-batch loss and gradient; 0: local default */
    double seq_normalizer;     /* GSPO only: the global sequence count of its policy term's seq-mean-token-mean
                                      (> 0), or 0: `normalizer` when `agg` is a seq-mean mode, else local */
} maporl_policy_loss_params;

maporl_policy_loss_params maporl_policy_loss_default_params(void);

typedef struct maporl_policy_loss_stats {
    double loss;            /* pg_loss + kl_coef * kl_loss - entropy_coef * entropy_loss */
    double pg_loss;         /* agg(policy-gradient term) */
    double kl_loss;         /* agg(kl); 0 without kl */
    double entropy_loss;    /* agg(entropy); 0 without entropy (the fused kernel computes it whenever it returns it) */
    double clip_frac;       /* masked mean of "the clipped term is active" (cispo: the IS weight was clamped) */
    double clip_frac_lower; /* masked mean of "the dual-clip cap is active" (ppo, A < 0) */
    double approx_kl;       /* masked mean of old - logp (verl's ppo_kl) */
    double kl_mean;         /* masked mean of the kl estimator's value */
    double entropy_mean;    /* masked mean of the entropy */
    double ratio_mean;      /* masked mean of the ratio (gspo: the sequence ratio per token) */
    double ratio_max;       /* its max; -Inf (ratio_mean NaN) when no token is valid */
    double tokens;          /* unmasked tokens */
    double sequences;       /* rows with at least one unmasked token */
} maporl_policy_loss_stats;

/* Loss and d loss / d logp over a [B, T] batch, verl's formulas (see lib/rl/policyLoss.ts for the list).
 *   logp, old_logp: [B, T] (old_logp may be NULL only for REINFORCE: ratio 1); advantages: [B, T], or [B] with
 *   adv_per_seq = 1; mask: [B, T]; ref_logp: [B, T] or NULL (required when kl != NONE); entropy: [B, T] or NULL
 *   (required when entropy_coef != 0; otherwise only summarised in stats).
 *   grad_logp_out: [B, T] or NULL (=): 0 at masked tokens and wherever a clip is active.
 *   grad_entropy_out: [B, T] or NULL (=): d loss / d entropy (= -entropy_coef * weight, 0 at masked tokens).
 * Values at masked positions are never read (NaN there is harmless). NaN at unmasked positions propagates. */
maporl_status maporl_policy_loss(maporl_device device, const float * logp, const float * old_logp,
                                 const float * advantages, int adv_per_seq, const void * mask,
                                 maporl_mask_type mask_type, const float * ref_logp, const float * entropy, int64_t B,
                                 int64_t T, maporl_policy_loss_params params, float * grad_logp_out,
                                 float * grad_entropy_out, maporl_policy_loss_stats * stats_out);

typedef struct maporl_value_loss_stats {
    double loss;       /* 0.5 * agg(max((v - R)^2, (clip(v, old +- clip) - R)^2)) (verl compute_value_loss) */
    double clip_frac;  /* masked mean of "the clipped branch is larger" */
    double value_mean; /* masked mean of v */
    double tokens;
} maporl_value_loss_stats;

/* Clipped value loss and d loss / d values. clip <= 0: unclipped 0.5 * agg((v - R)^2). values, old_values (may be
 * NULL when clip <= 0), returns: [B, T]; grad_values_out: [B, T] or NULL (=). agg and normalizer as above. */
maporl_status maporl_value_loss(maporl_device device, const float * values, const float * old_values,
                                const float * returns, const void * mask, maporl_mask_type mask_type, int64_t B,
                                int64_t T, float clip, maporl_loss_agg agg, double normalizer, float * grad_values_out,
                                maporl_value_loss_stats * stats_out);

/* ---- Rollout correction: the sampler is not the trainer (verl's rollout_corr_helper) -------------------- */

typedef enum maporl_rollout_is {
    MAPORL_ROLLOUT_IS_NONE = 0,
    MAPORL_ROLLOUT_IS_TOKEN = 1,    /* rho_t = exp(old_t - rollout_t) */
    MAPORL_ROLLOUT_IS_SEQUENCE = 2, /* rho = exp(sum_t (old_t - rollout_t)) for every token of the row */
    MAPORL_ROLLOUT_IS_GEOMETRIC = 3 /* rho = exp(mean_t (old_t - rollout_t)) */
} maporl_rollout_is;

typedef enum maporl_rollout_is_mode {
    MAPORL_ROLLOUT_IS_TRUNCATE = 0, /* w = min(rho, is_threshold) (TIS) */
    MAPORL_ROLLOUT_IS_MASK = 1      /* w = rho inside [is_threshold_lower, is_threshold], else 0 (MIS, icepop) */
} maporl_rollout_is_mode;

/* verl's rejection-sampling options: the k estimators of the clamped log ratio lr = old - rollout (k1 = -lr,
 * k2 = lr^2 / 2, k3 = exp(lr) - 1 - lr), per token, or summed / averaged / maximised over the row. */
typedef enum maporl_rollout_rs {
    MAPORL_ROLLOUT_RS_TOKEN_K1 = 1,
    MAPORL_ROLLOUT_RS_TOKEN_K2 = 2,
    MAPORL_ROLLOUT_RS_TOKEN_K3 = 3,
    MAPORL_ROLLOUT_RS_SEQ_SUM_K1 = 4,
    MAPORL_ROLLOUT_RS_SEQ_SUM_K2 = 5,
    MAPORL_ROLLOUT_RS_SEQ_SUM_K3 = 6,
    MAPORL_ROLLOUT_RS_SEQ_MEAN_K1 = 7,
    MAPORL_ROLLOUT_RS_SEQ_MEAN_K2 = 8,
    MAPORL_ROLLOUT_RS_SEQ_MEAN_K3 = 9,
    MAPORL_ROLLOUT_RS_SEQ_MAX_K2 = 10,
    MAPORL_ROLLOUT_RS_SEQ_MAX_K3 = 11
} maporl_rollout_rs;

#define MAPORL_ROLLOUT_RS_MAX 4

typedef struct maporl_rollout_rs_criterion {
    maporl_rollout_rs option;
    double
        lower; /* k1 options: a token / row passes when log(lower) <= k1 statistic <= log(upper); 0 < lower < upper */
    double upper; /* other options: passes when the statistic <= upper; upper > 0 */
} maporl_rollout_rs_criterion;

typedef struct maporl_rollout_correction_params {
    maporl_rollout_is is;           /* Default NONE */
    maporl_rollout_is_mode is_mode; /* Default TRUNCATE */
    double is_threshold;            /* > 0, finite. Default 2 (verl's rollout_is_threshold) */
    double is_threshold_lower;      /* mask mode's lower bound, in [0, is_threshold). Default 0 */
    int batch_normalize; /* 1: weights divided by their batch mean (verl's rollout_is_batch_normalize). Default 0 */
    int rs_count;        /* criteria in rs (0 to MAPORL_ROLLOUT_RS_MAX); a token must pass all. Default 0 */
    maporl_rollout_rs_criterion rs[MAPORL_ROLLOUT_RS_MAX];
} maporl_rollout_correction_params;

maporl_rollout_correction_params maporl_rollout_correction_default_params(void);

typedef struct maporl_rollout_correction_stats {
    double tokens, sequences; /* valid tokens; rows with at least one */
    /* IS (0 when is is NONE), verl's rollout_is_*: over valid tokens of the raw weight rho (before truncation) */
    double is_mean, is_max, is_min;
    double is_std, is_ess; /* of rho clamped to [1/threshold, threshold]; ESS = 1 / mean((w/mean)^2) */
    double is_fraction_high, is_fraction_low; /* rho > threshold, rho < 1/threshold (token: of tokens; else of rows) */
    double is_corrected_fraction;             /* tokens whose weight truncation or masking changed */
    double batch_norm_factor;                 /* the mean the weights were divided by (1 when off) */
    /* rejection: tokens removed, and rows with at least one removed token, of the valid ones */
    double rs_masked_fraction, rs_seq_masked_fraction;
    /* mismatch (verl's compute_offpolicy_metrics): kl = mean(rollout - old); k3_kl = mean(exp(lr) - 1 - lr);
     * chi2_token = mean(rho_t^2) - 1; chi2_seq = mean over rows of exp(2 sum lr) - 1 (log ratios clamped to
     * [-20, 20]); the perplexities are means over rows of exp(-mean log-prob) */
    double kl, k3_kl, chi2_token, chi2_seq;
    double training_ppl, rollout_ppl, log_ppl_diff, log_ppl_abs_diff;
} maporl_rollout_correction_stats;

/* Importance weights and a rejection keep-mask for a batch the rollout engine sampled and the trainer scores:
 *   old_logp: [B, T], the trainer's log-probs of the sampled ids (verl's old_log_probs); rollout_logp: [B, T], the
 *   sampler's (rollout_log_probs); mask: [B, T] of mask_type.
 *   weights_out: [B, T] or NULL (=), the IS weights (0 at masked positions); required unless is is NONE. The policy
 *   loss multiplies its policy-gradient term by them (PolicyLossBatch.rolloutIsWeights).
 *   keep_out: [B, T] float or NULL (=): 1 where every rejection criterion passes, 0 elsewhere and at masked
 *   positions; the loss's mask becomes mask * keep. Required when rs_count > 0.
 * Values at masked positions are never read. */
maporl_status maporl_rollout_correction(maporl_device device, const float * old_logp, const float * rollout_logp,
                                        const void * mask, maporl_mask_type mask_type, int64_t B, int64_t T,
                                        maporl_rollout_correction_params params, float * weights_out, float * keep_out,
                                        maporl_rollout_correction_stats * stats_out);

/* ---- log-probs from logits, and the fused logits -> loss -> dlogits kernel ------------------------------ */

/* Selective log-softmax: logp_out[n] = z[n, y_n]/temp - logsumexp(z[n, :]/temp), one online pass per row;
 * entropy_out[n] (or NULL) = H of softmax(z[n, :]/temp). logits: [N, V] float; targets: [N] int32 in [0, V).
 * temperature: finite > 0. A row whose logits are all -Inf gives NaN. */
maporl_status maporl_logprobs(maporl_device device, const float * logits, const int32_t * targets, int64_t N, int64_t V,
                              float temperature, float * logp_out, float * entropy_out);

/* Policy loss from logits. Rows n = b * T + t of logits [B*T, V] are the tokens of `maporl_policy_loss`; the other
 * arguments are as there. Writes logp_out [B*T] and entropy_out [B*T] (entropy only when entropy_coef != 0 or
 * entropy_out != NULL; 0 at masked rows, whose logits and targets are not read), optionally grad_logp_out [B*T],
 * and grad_logits_out [B*T, V] = (1[v = y] - p_v) * dlogp / temp + dentropy * dH/dz_v (0 rows where masked).
 * grad_logits_out may equal logits (in place). Each valid row is read twice and written once. */
maporl_status maporl_fused_policy_loss(maporl_device device, const float * logits, const int32_t * targets,
                                       const float * old_logp, const float * advantages, int adv_per_seq,
                                       const void * mask, maporl_mask_type mask_type, const float * ref_logp, int64_t B,
                                       int64_t T, int64_t V, float temperature, maporl_policy_loss_params params,
                                       float * grad_logits_out, float * logp_out, float * entropy_out,
                                       float * grad_logp_out, maporl_policy_loss_stats * stats_out);

/* bfloat16 logits (each uint16 the upper half of a float32, as torch.bfloat16 stores them): maporl_logprobs and
 * maporl_fused_policy_loss on the widened float32 values, with the same results bit for bit. Rows are widened one
 * at a time into per-thread scratch (nothing [N, V] is allocated), so the logits are read at 2 bytes each. The
 * gradient stays float32 and must not overlap the logits (no in place). */
maporl_status maporl_logprobs_bf16(maporl_device device, const uint16_t * logits, const int32_t * targets, int64_t N,
                                   int64_t V, float temperature, float * logp_out, float * entropy_out);
maporl_status maporl_fused_policy_loss_bf16(maporl_device device, const uint16_t * logits, const int32_t * targets,
                                            const float * old_logp, const float * advantages, int adv_per_seq,
                                            const void * mask, maporl_mask_type mask_type, const float * ref_logp,
                                            int64_t B, int64_t T, int64_t V, float temperature,
                                            maporl_policy_loss_params params, float * grad_logits_out, float * logp_out,
                                            float * entropy_out, float * grad_logp_out,
                                            maporl_policy_loss_stats * stats_out);

/* ---- token sampling ------------------------------------------------------------------------------- */

typedef enum maporl_filter_order {
    MAPORL_FILTER_TOP_K_FIRST = 0, /* top-p applies to the top-k set renormalised (FlashInfer "top_k_first") */
    MAPORL_FILTER_JOINT = 1        /* a token must be in the top-k and in the top-p set of the full distribution */
} maporl_filter_order;

/* Per-row sampling parameters: each is an array of B values, or NULL to use the scalar that follows it. */
typedef struct maporl_sample_params {
    const float * temperature;
    float temperature_all; /* finite >= 0; 0 (or below 2^-126) = greedy. Default 1 */
    const int32_t * top_k;
    int32_t top_k_all; /* >= 0; 0 or >= V = off. Default 0 */
    const float * top_p;
    float top_p_all; /* in [0, 1]; 0 or 1 = off. Default 1 */
    const float * min_p;
    float min_p_all; /* in [0, 1]; 0 = off. Default 0 */
    const uint64_t * seed;
    uint64_t seed_all; /* Philox key. Default 0 */
    const int64_t * position;
    int64_t position_all;             /* Philox counter (e.g. the token's index). Default 0 */
    maporl_filter_order filter_order; /* default MAPORL_FILTER_TOP_K_FIRST */
} maporl_sample_params;

maporl_sample_params maporl_sample_default_params(void);

/* Samples one token per row of logits [B, V] (float). The support is the top-k (total order: logit, then the
 * lower index first), then the top-p prefix of that order (a token is kept while the probability mass ranked
 * before it is < p), intersected with the min-p set (p_i >= min_p * p_max); the token is the Gumbel-max
 * argmax over the support of z / temperature + Gumbel(seed, position, index), ties to the lower index.
 *   tokens_out [B] int32, logprobs_out [B]: log-prob under the renormalised support at that temperature
 *   (0 when greedy), raw_logprobs_out [B]: under softmax(z) (may be NULL, which saves a second exp per element
 *   when the temperature is not 1), valid_out [B] (uint8, may be NULL). logprobs_out may be NULL.
 * A row with a NaN or +Inf logit, or with every logit -Inf, gets valid 0, token -1 and NaN log-probs; it is
 * not an error. A row of finite logits is always valid: where max z / temperature overflows float32, or the
 * temperature is below 2^-126, the row is sampled as at temperature 0 (first argmax, log-prob 0). Parameters out of range are MAPORL_ERR_INVALID_ARG (nothing written). */
maporl_status maporl_sample(maporl_device device, const float * logits, int64_t B, int64_t V,
                            const maporl_sample_params * params, int32_t * tokens_out, float * logprobs_out,
                            float * raw_logprobs_out, uint8_t * valid_out);

/* Log-probs of given tokens [B] under the same processed distribution as maporl_sample (the seed and position
 * are unused): -Inf for a token outside the support, 0 / -Inf under greedy (the argmax / any other), NaN for
 * an invalid row. raw_logprobs_out under softmax(z). A token outside [0, V) is MAPORL_ERR_INVALID_ARG. */
maporl_status maporl_sample_logprobs(maporl_device device, const float * logits, int64_t B, int64_t V,
                                     const maporl_sample_params * params, const int32_t * tokens, float * logprobs_out,
                                     float * raw_logprobs_out);

/* ---- the embedded GPT policy (CPU, or CUDA after maporl_gpt_set_device) ------------------------------ */

typedef struct maporl_gpt maporl_gpt; /* opaque; one call at a time per handle */

typedef struct maporl_gpt_config {
    int64_t vocab;   /* 2 .. 2^24 */
    int64_t context; /* maximum sequence length, 1 .. 65536 */
    int64_t layers;  /* 1 .. 256 */
    int64_t heads;   /* divides d_model */
    int64_t d_model;
    int64_t mlp_ratio;  /* hidden = mlp_ratio * d_model; default 4 */
    int tie_embeddings; /* 1: the LM head is the token embedding (default) */
} maporl_gpt_config;

typedef struct maporl_adamw_params {
    float lr, beta1, beta2, eps, weight_decay; /* defaults 3e-4, 0.9, 0.95, 1e-8, 0.0 */
} maporl_adamw_params;

maporl_gpt_config maporl_gpt_default_config(void);
maporl_adamw_params maporl_adamw_default_params(void);

/* A model with GPT-2 initialisation from `seed` (normal(0, 0.02), residual projections / sqrt(2 layers)). */
maporl_status maporl_gpt_create(const maporl_gpt_config * config, uint64_t seed, maporl_gpt ** out);
void maporl_gpt_free(maporl_gpt * gpt); /* NULL-safe */
/* Number of parameters, and the tensors in checkpoint order: name (NUL-terminated, <= 63 chars), up to 2 dims
 * (dims[1] = 0 for a vector), and the element offset into the flat parameter array. */
maporl_status maporl_gpt_param_count(const maporl_gpt * gpt, int64_t * count_out);
maporl_status maporl_gpt_tensor_count(const maporl_gpt * gpt, int64_t * count_out);
maporl_status maporl_gpt_tensor_info(const maporl_gpt * gpt, int64_t index, char name_out[64], int64_t dims_out[2],
                                     int64_t * offset_out);
/* Copy the flat parameters (or the AdamW moments and step) out of / into the model: `which` 0 params, 1 m, 2 v. */
maporl_status maporl_gpt_get(const maporl_gpt * gpt, int which, float * out, int64_t count);
maporl_status maporl_gpt_set(maporl_gpt * gpt, int which, const float * in, int64_t count);
maporl_status maporl_gpt_get_step(const maporl_gpt * gpt, int64_t * step_out);
maporl_status maporl_gpt_set_step(maporl_gpt * gpt, int64_t step);
/* Forward over tokens [B, T] (T <= context): logits_out [B, T, vocab] and values_out [B, T], either may be NULL.
 * The activations are kept for maporl_gpt_backward. */
maporl_status maporl_gpt_forward(maporl_gpt * gpt, const int32_t * tokens, int64_t B, int64_t T, float * logits_out,
                                 float * values_out);
/* Adds d loss / d params from dlogits [B, T, vocab] and dvalues [B, T] of the last forward (either may be NULL). */
maporl_status maporl_gpt_backward(maporl_gpt * gpt, const float * dlogits, const float * dvalues);
maporl_status maporl_gpt_zero_grad(maporl_gpt * gpt);
/* Clips the global gradient norm to max_grad_norm (<= 0: no clip), then one AdamW step. grad_norm_out may be NULL. */
maporl_status maporl_gpt_step(maporl_gpt * gpt, const maporl_adamw_params * params, double max_grad_norm,
                              double * grad_norm_out);
/* KV-cache decoding: reset for `batch` rows and up to max_len positions, then decode the tokens [batch] of
 * position pos (0, 1, 2, ... in order) into logits_out [batch, vocab] and values_out [batch] (either may be NULL: that
 * head is then not run, so a prompt position whose next token no row samples costs no LM head). */
maporl_status maporl_gpt_cache_reset(maporl_gpt * gpt, int64_t batch, int64_t max_len);
/* Gives the cache's memory back (after a generation: a server keeps no cache sized for its largest request while
 * idle). On the CPU the cache is then empty (cache_info 0, 0); on a GPU it shrinks to one row of one position. */
maporl_status maporl_gpt_cache_release(maporl_gpt * gpt);
/* Exchanges the cache (its keys, values, batch, max_len and rows' adapters) with stored slot `slot`, any integer
 * (created empty when absent; dropped once it holds an empty cache): a caller running several generation batches gives
 * each a slot and swaps its cache in before each of its decode steps (two swaps: the live one out to its slot, the next
 * in). CPU models only (MAPORL_ERR_INVALID_ARG on a model on a GPU). */
maporl_status maporl_gpt_cache_swap(maporl_gpt * gpt, int64_t slot);
maporl_status maporl_gpt_decode(maporl_gpt * gpt, const int32_t * tokens, int64_t pos, float * logits_out,
                                float * values_out);
/* Llama family: fills cache row b at positions 0 .. lens[b] - 1 from tokens [batch, P] (row-major; lens[b] <= P,
 * max_len), every (row, position) through the GEMM, no head; rows then decode their own positions with
 * maporl_gpt_decode_rows (pos[b] per row). Each row's results are the same bits whatever the other rows (and, for a
 * decode step, as long as the batch has at most 8 rows: above that the step runs the GEMM instead of dot products).
 * The GPT family: MAPORL_ERR_INVALID_ARG (it decodes one position for every row, maporl_gpt_decode). */
maporl_status maporl_gpt_prefill(maporl_gpt * gpt, const int32_t * tokens, const int64_t * lens, int64_t P);
maporl_status maporl_gpt_decode_rows(maporl_gpt * gpt, const int32_t * tokens, const int64_t * pos, float * logits_out,
                                     float * values_out);
/* The cache's batch and max_len (0, 0 before maporl_gpt_cache_reset), and the model's vocabulary size. */
maporl_status maporl_gpt_cache_info(const maporl_gpt * gpt, int64_t * batch_out, int64_t * max_len_out,
                                    int64_t * vocab_out);
/* B and T of the last forward (0, 0 before any): the shapes maporl_gpt_backward reads. */
maporl_status maporl_gpt_forward_shape(const maporl_gpt * gpt, int64_t * B_out, int64_t * T_out);
/* Moves the model (parameters, AdamW moments, gradients) to MAPORL_DEVICE_CUDA or back to MAPORL_DEVICE_CPU.
 * Every other call keeps its host-array interface: tokens, logits, dlogits and parameters cross to the device and
 * back. The last forward and the KV cache are dropped. Without a GPU (or CUDA in the build) moving to CUDA is
 * MAPORL_ERR_NO_DEVICE and the model stays on the CPU, unchanged. */
maporl_status maporl_gpt_set_device(maporl_gpt * gpt, maporl_device device);
maporl_status maporl_gpt_get_device(const maporl_gpt * gpt, maporl_device * device_out);
/* For tests: moves a Llama-family model onto the CPU emulation of its CUDA model (the same composition of the same
 * layer contracts over host memory, llama_device_host.h), so every device branch of these calls runs without a GPU.
 * get_device then answers MAPORL_DEVICE_CUDA; maporl_gpt_set_device(MAPORL_DEVICE_CPU) moves it back. */
maporl_status maporl_llama_emulate_device(maporl_gpt * gpt);

/* ---- the Llama model family (Hugging Face Llama / Mistral / Qwen2 / Qwen3) on the same handle --------------
 * A model made by maporl_llama_create answers every maporl_gpt_* call above (forward, backward, step, cache,
 * get / set, tensors with transformers' names), on the CPU or on CUDA (maporl_gpt_set_device), with its LoRA
 * adapters; a frozen bfloat16 or int8 base moves as it is held, its adapters train there, its own training is
 * refused by name (on either device). On CUDA, LoRA dropout in training and lora_merge are refused, naming them.
 * Its gradients and AdamW moments are allocated on the first training call. */

typedef struct maporl_llama_config {
    int64_t vocab, context, layers, d_model, heads, kv_heads, head_dim, intermediate;
    double rms_eps, rope_theta;
    int rope_scaling; /* 0 none, 1 linear, 2 llama3 */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max_position;
    int qkv_bias, o_bias, qk_norm, tie_embeddings; /* 0 / 1 */
    /* 1: the matrices (embedding, projections, LM head) are stored as bfloat16 and frozen: half their memory, widened
     * exactly inside the kernels. Training the model itself is then an error; LoRA adapters on it train (float32).
     * Their tensor_info offset is -1 and get / set / param_count address the other (float) tensors; set_tensor
     * stores BF16 as it is and rounds F32 / F16 to nearest even. */
    int bf16_matrices;
    /* 1: the matrices stored as int8 in llama.cpp's Q8_0 blocks (32 values and one half scale: about 1.06 bytes a
     * weight) and frozen, as bf16_matrices (not both); a matrix whose rows are not a multiple of 32 long is held as
     * bfloat16. set_tensor quantizes F32 / BF16 / F16 (d = half(max |x| / 127), q = round(x / d)) and stores Q8_0 as
     * it is (a q of -128, which llama.cpp's quantizer never writes, as -127); a non-finite value is an error naming the
     * tensor. The forward computes them W8A8 (activations quantized per block of 32 too: native/model/w8a8.h). */
    int int8_matrices;
} maporl_llama_config;

maporl_llama_config maporl_llama_default_config(void);
/* A model initialised from `seed` (matrices normal(0, 0.02), norms 1, biases 0). */
maporl_status maporl_llama_create(const maporl_llama_config * config, uint64_t seed, maporl_gpt ** out);
/* The same model with every parameter 0 (no initialisation pass): for a loader that writes every tensor. */
maporl_status maporl_llama_create_zeroed(const maporl_llama_config * config, maporl_gpt ** out);

/* MAPORL_DTYPE_Q8_0: GGUF's Q8_0 blocks, 34 bytes per 32 values (a little-endian half scale d, then 32 int8 q),
 * count values in count / 32 blocks; for an int8 base's matrices only. */
typedef enum maporl_dtype {
    MAPORL_DTYPE_F32 = 0,
    MAPORL_DTYPE_BF16 = 1,
    MAPORL_DTYPE_F16 = 2,
    MAPORL_DTYPE_Q8_0 = 3
} maporl_dtype;
/* Writes tensor `index`'s parameters from `count` elements of `dtype` (widened exactly to float; a checkpoint is
 * loaded one tensor at a time, without a whole float copy of the file). count must be the tensor's size. CPU only. */
maporl_status maporl_gpt_set_tensor(maporl_gpt * gpt, int64_t index, int dtype, const void * data, int64_t count);

/* Scoring through log-probs, never [B, T, V] logits (the Llama family's path for large vocabularies; the GPT family
 * answers it too, over its full logits). logp_out[n] = log softmax(z_n / temperature)[targets[n]], entropy_out[n]
 * (or NULL) = the entropy of that distribution, values_out (or NULL) the value head's outputs, all [B*T]. The LM
 * head runs over `chunk` rows at a time (<= 0: even chunks of at most 64 MB of logits). CPU only. The forward's
 * activations are kept for maporl_gpt_score_backward, which adds (+=) the gradients of a loss given through
 * grad_logp [B*T] (d loss / d logp), grad_entropy [B*T] (or NULL) and dvalues [B*T] (or NULL): the LM head's
 * logits are recomputed chunk by chunk. One backward per score. */
maporl_status maporl_gpt_score(maporl_gpt * gpt, const int32_t * tokens, const int32_t * targets, int64_t B, int64_t T,
                               float temperature, int64_t chunk, float * logp_out, float * entropy_out,
                               float * values_out);
maporl_status maporl_gpt_score_backward(maporl_gpt * gpt, const float * grad_logp, const float * grad_entropy,
                                        const float * dvalues);
/* The most bytes of float logits ([B*T, V] x 4) a training score (maporl_gpt_set_training 1) keeps for its backward,
 * which then reuses them instead of recomputing the LM head chunk by chunk (the same bits, one LM-head GEMM fewer:
 * about 7% of a full fine-tuning step at the SmolLM2-135M shape). Larger scores, and scores outside training, keep
 * only one chunk. The backward frees them. 0 always recomputes; default 256 MiB. bytes: 0 .. 2^40. */
maporl_status maporl_gpt_set_score_keep(maporl_gpt * gpt, int64_t bytes);

/* ---- LoRA adapters on a Llama-family model (PEFT's LoraLayer) --------------------------------------------
 * An adapter adds scale * dropout(x) A^T B^T to each targeted projection (A [rank, in] Kaiming-uniform as PEFT, B
 * [out, rank] zero: a new adapter changes nothing; scale alpha / rank, or alpha / sqrt(rank) with use_rslora) and
 * owns a value head (initially the base's). Many adapters share one base. While one is selected (maporl_lora_select)
 * every maporl_gpt_* call runs base + adapter, and the calls that address parameters (param_count, tensor_count /
 * tensor_info with PEFT's names, get / set, set_tensor, get_step / set_step, zero_grad, step) address the
 * adapter's alone: the base is frozen and holds no gradients or moments. Selected -1, the base runs alone (the
 * reference model). Adapter ids are never reused; a removed or merged id is invalid. CPU only. */
enum {
    MAPORL_LORA_Q_PROJ = 1,
    MAPORL_LORA_K_PROJ = 2,
    MAPORL_LORA_V_PROJ = 4,
    MAPORL_LORA_O_PROJ = 8,
    MAPORL_LORA_GATE_PROJ = 16,
    MAPORL_LORA_UP_PROJ = 32,
    MAPORL_LORA_DOWN_PROJ = 64,
    MAPORL_LORA_ALL = 127
};
typedef struct maporl_lora_config {
    int64_t rank;            /* 1 .. 4096; default 8 */
    double alpha;            /* > 0; default 8 */
    uint32_t target_modules; /* MAPORL_LORA_* bits; default MAPORL_LORA_ALL */
    double dropout;          /* [0, 1), on the adapter's input, in training forwards only (maporl_gpt_set_training) */
    int use_rslora;          /* 0 / 1 */
} maporl_lora_config;
maporl_lora_config maporl_lora_default_config(void);
maporl_status maporl_lora_add(maporl_gpt * gpt, const maporl_lora_config * config, uint64_t seed, int64_t * id_out);
maporl_status maporl_lora_remove(maporl_gpt * gpt, int64_t id);
maporl_status maporl_lora_select(maporl_gpt * gpt, int64_t id); /* -1: the base alone */
maporl_status maporl_lora_selected(const maporl_gpt * gpt, int64_t * id_out);
/* The adapter's config, parameter count and seed (of A's initialisation and the dropout masks); id need not be
 * selected; any output may be NULL. */
maporl_status maporl_lora_info(const maporl_gpt * gpt, int64_t id, maporl_lora_config * config_out, int64_t * count_out,
                               uint64_t * seed_out);
/* Folds adapter `id` into the base (W += scale B A in double, its value head becomes the base's) and removes it. */
maporl_status maporl_lora_merge(maporl_gpt * gpt, int64_t id);
/* The adapter of each cache row for maporl_gpt_decode (-1: the base), after maporl_gpt_cache_reset (which sets every
 * row to the selected adapter): one decode step runs several adapters, the base projections once for the batch. */
maporl_status maporl_lora_cache_rows(maporl_gpt * gpt, const int64_t * ids, int64_t batch);
/* 1: forwards apply the adapters' dropout (training); 0 (default): they do not. */
maporl_status maporl_gpt_set_training(maporl_gpt * gpt, int training);

/* ---- benchmarking helpers ----------------------------------------------------------------------- */

/* Measures host copy bandwidth with the thread pool: copies `bytes` `reps` times and reports the median
 * rate in bytes per second counted as read + write (2 * bytes / time). */
maporl_status maporl_measure_copy_bandwidth(size_t bytes, int reps, double * bytes_per_second_out);

/* Measures host read bandwidth with the thread pool: sums `bytes` (as 64-bit words, every pool thread streaming its
 * own contiguous part) `reps` times and reports the median rate in bytes read per second. The floor of a kernel that
 * only reads its operands (a decoding step reads every weight once). On the project's 2-core AVX-512 Xeon VM this is
 * ~0.78x the copy rate above: a read-only stream per core is bound by its outstanding misses, while a copy's writes
 * add traffic a read stream cannot use. */
maporl_status maporl_measure_read_bandwidth(size_t bytes, int reps, double * bytes_per_second_out);

/* Measures the peak float FMA rate of the active SIMD level on every pool thread (independent FMA chains, no
 * memory traffic): the median over `reps` of the floating-point operations per second (2 per FMA lane). The
 * denominator of a GEMM's efficiency. */
maporl_status maporl_measure_peak_flops(int reps, double * flops_per_second_out);

#ifdef __cplusplus
}
#endif

#endif /* MAPORL_H */
