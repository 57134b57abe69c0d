// policyLoss.ts (bench): the policy loss + gradient at B=64, T=4096 (ppo with k3 KL, token-mean) and the fused
// logits -> loss -> dlogits path at N=2048, V=32768, against the PyTorch baselines in the same run
// (bench/python/policy_loss.py: verl's vanilla loss with autograd; log_softmax + gather + the loss + backward).
import { fusedPolicyLoss } from "../rl/logits.js";
import { policyLoss } from "../rl/policyLoss.js";
import { peakExtraBytes, timeMedian } from "./measure.js";
import { runPython } from "./python.js";
import { type BenchContext, type BenchRow } from "./types.js";
import { freshRows } from "./freshRows.js";
import { fusedBatch, policyLossBatch, SHAPES } from "./batches.js";

const [B, T] = SHAPES.policyLoss,
    [N, V] = SHAPES.fusedPolicyLoss;

export async function benchPolicyLoss(ctx: BenchContext): Promise<BenchRow[]> {
    const n = B * T;
    const batch = policyLossBatch();
    const opts = { kl: { coef: 0.001, estimator: "k3" as const }, device: "cpu" as const };
    const base = ctx.python
        ? runPython({ kernel: "policy_loss", B, T, threads: ctx.threads, reps: ctx.pythonReps * 4 })
        : { ok: false as const, error: "skipped" };
    const t = await timeMedian(() => policyLoss(batch, opts), ctx.reps);
    const out = { gradLogp: new Float32Array(n) };
    const tOut = await timeMedian(() => policyLoss(batch, { ...opts, out }), ctx.reps);
    const bytes = n * (16 + 1 + 4); // read logp, old, A, ref (f32) and the u8 mask; write the gradient
    const size = `B=${B} T=${T}`;
    const baselineMs = base.ok ? base.median_ms! : null;
    return [
        {
            kernel: "policyLoss",
            size,
            impl: "maporl policyLoss ppo+k3, grad",
            medianMs: t.medianMs,
            peakExtraBytes: await peakExtraBytes(() => policyLoss(batch, opts)),
            bytesMoved: bytes,
            baselineMs,
        },
        {
            kernel: "policyLoss",
            size,
            impl: "maporl policyLoss ppo+k3, grad, out= reused",
            medianMs: tOut.medianMs,
            peakExtraBytes: await peakExtraBytes(() => policyLoss(batch, { ...opts, out })),
            bytesMoved: bytes,
            baselineMs,
        },
        ...freshRows("policyLoss", size, ctx, bytes, baselineMs, "ppo+k3, grad"),
        {
            kernel: "policyLoss",
            size,
            impl: "PyTorch verl vanilla + k3, autograd",
            medianMs: baselineMs,
            peakExtraBytes: base.ok ? (base.peak_extra_bytes ?? null) : null,
            bytesMoved: bytes,
            baselineMs: null,
            note: base.ok ? `torch ${base.torch}, ${base.threads} threads` : base.error,
        },
    ];
}

export async function benchFusedPolicyLoss(ctx: BenchContext): Promise<BenchRow[]> {
    const batch = fusedBatch(),
        logits = batch.logits;
    const base = ctx.python
        ? runPython({ kernel: "fused_policy_loss", N, V, threads: ctx.threads, reps: ctx.pythonReps })
        : { ok: false as const, error: "skipped" };
    const reps = Math.max(5, Math.floor(ctx.reps / 3));
    const opts = { device: "cpu" as const };
    const t = await timeMedian(() => fusedPolicyLoss(batch, opts), reps);
    const out = {
        gradLogits: new Float32Array(N * V),
        logp: new Float32Array(N),
        entropy: new Float32Array(N),
        gradLogp: new Float32Array(N),
    };
    const tOut = await timeMedian(() => fusedPolicyLoss(batch, { ...opts, out }), reps);
    // bfloat16 logits (the same values truncated), out reused: 2 bytes read per logit instead of 4. No ratio: the
    // baseline reads float32 logits.
    const bf16 = new Uint16Array(N * V);
    const u32 = new Uint32Array(logits.buffer);
    for (let i = 0; i < bf16.length; i++) bf16[i] = u32[i]! >>> 16;
    const bfBatch = { ...batch, logits: bf16 };
    const tBf = await timeMedian(() => fusedPolicyLoss(bfBatch, { ...opts, out, logitsDtype: "bf16" }), reps);
    // In place overwrites the logits with the gradient each call (values in [-1, 1], so later calls stay finite).
    const tIn = await timeMedian(() => fusedPolicyLoss(batch, { ...opts, inPlace: true }), reps);
    const bytes = N * V * 8; // one read of the logits, one write of the gradient
    const size = `N=${N} V=${V}`;
    const baselineMs = base.ok ? base.median_ms! : null;
    return [
        {
            kernel: "fusedPolicyLoss",
            size,
            impl: "maporl fusedPolicyLoss ppo, dlogits",
            medianMs: t.medianMs,
            peakExtraBytes: await peakExtraBytes(() => fusedPolicyLoss(batch, opts)),
            bytesMoved: bytes,
            baselineMs,
        },
        {
            kernel: "fusedPolicyLoss",
            size,
            impl: "maporl fusedPolicyLoss, out= reused",
            medianMs: tOut.medianMs,
            peakExtraBytes: await peakExtraBytes(() => fusedPolicyLoss(batch, { ...opts, out })),
            bytesMoved: bytes,
            baselineMs,
        },
        {
            kernel: "fusedPolicyLoss",
            size,
            impl: "maporl fusedPolicyLoss, inPlace",
            medianMs: tIn.medianMs,
            peakExtraBytes: await peakExtraBytes(() => fusedPolicyLoss(batch, { ...opts, inPlace: true })),
            bytesMoved: bytes,
            baselineMs,
        },
        {
            kernel: "fusedPolicyLoss",
            size,
            impl: "maporl fusedPolicyLoss, bf16 logits, out= reused",
            medianMs: tBf.medianMs,
            peakExtraBytes: null,
            bytesMoved: N * V * 6,
            baselineMs: null,
        },
        ...freshRows("fusedPolicyLoss", size, { ...ctx, reps }, bytes, baselineMs, "ppo, dlogits"),
        {
            kernel: "fusedPolicyLoss",
            size,
            impl: "PyTorch log_softmax+gather+loss, autograd",
            medianMs: baselineMs,
            peakExtraBytes: base.ok ? (base.peak_extra_bytes ?? null) : null,
            bytesMoved: bytes,
            baselineMs: null,
            note: base.ok ? `torch ${base.torch}, ${base.threads} threads` : base.error,
        },
    ];
}
