// trainStep.ts: NativePolicy's scoring and training: logprobs, values, and one training step (forward, the loss's
// gradient from the loss kernels, backward, clip, AdamW), through full logits (embedded GPT) or log-probs scored in
// row chunks (Llama family).
import { native, type GptHandle, type NativeAdamWCall } from "../native.js";
import { fusedPolicyLoss, logprobs as logprobsKernel } from "../rl/logits.js";
import { type LossOptions, type PolicyLossStats, policyLoss, valueLoss } from "../rl/policyLoss.js";
import {
    describe,
    requireArray,
    requireInteger,
    requireBoolean,
    requireNumber,
    requireOptions,
    requireShape2,
} from "../validate.js";
import type { EngineView } from "./core.js";
import type { TrainBatch, TrainOptions, TrainResult } from "./options.js";

const TRAIN_OPTION_KEYS = [
    "loss",
    "valueClip",
    "lr",
    "beta1",
    "beta2",
    "eps",
    "weightDecay",
    "maxGradNorm",
    "accumulate",
    "signal",
    "onProgress",
    "keepLogitsBytes",
];

/** log p(tokens[b, t + 1] | tokens[b, <= t]) at temperature 1, [B, T] (0 at the last position). */
export async function logprobs(
    self: EngineView,
    batch: { tokens: Int32Array; shape: readonly [number, number] },
): Promise<Float32Array> {
    const [B, T] = checkBatch(self, "logprobs", batch);
    return self.serial(async () => {
        // Position t is scored against token t + 1; the last position of a row against itself, then zeroed.
        const targets = new Int32Array(B * T);
        for (let b = 0; b < B; b++)
            for (let t = 0; t < T; t++) targets[b * T + t] = batch.tokens[b * T + Math.min(t + 1, T - 1)]!;
        let out: Float32Array;
        if (self.family === "llama") {
            // the LM head in row chunks: never [B, T, V] logits
            out = new Float32Array(B * T);
            await native.gptScoreAsync(self.h(), {
                tokens: batch.tokens,
                targets,
                B,
                T,
                temperature: 1,
                chunk: 0,
                logp: out,
                entropy: null,
                values: null,
            });
        } else {
            const logits = new Float32Array(B * T * self.V);
            await native.gptForwardAsync(self.h(), { tokens: batch.tokens, B, T, logits, values: null });
            out = logprobsKernel({ logits, targets, shape: [B * T, self.V] }, { device: "cpu" }).logp;
        }
        for (let b = 0; b < B; b++) out[b * T + T - 1] = 0;
        return out;
    });
}

/**
 * The scalar value head on the final hidden state, V[b, t] for the state after tokens[b, <= t], [B, T]. A critic
 * is a NativePolicy trained with `loss: 'value'` (the trainers keep critics separate from the actors, as
 * MAPoRL's value adapters and CoMLRL's separate critics are).
 */
export async function values(
    self: EngineView,
    batch: { tokens: Int32Array; shape: readonly [number, number] },
): Promise<Float32Array> {
    const [B, T] = checkBatch(self, "values", batch);
    return self.serial(async () => {
        const values = new Float32Array(B * T);
        await native.gptForwardAsync(self.h(), { tokens: batch.tokens, B, T, logits: null, values });
        return values;
    });
}

// The batch object, its shape [B, T] (T within the context) and its tokens; returns [B, T].

function checkBatch(
    self: EngineView,
    fn: string,
    batch: { tokens: Int32Array; shape: readonly [number, number] },
): [number, number] {
    const where = `${self.name}.${fn}`;
    if (batch === null || typeof batch !== "object")
        throw new TypeError(`${where}: batch: expected an object with tokens and shape, got ${describe(batch)}`);
    const [B, T] = requireShape2(where, batch.shape, ["B", "T"]);
    if (!(T >= 1 && T <= self.config.contextLength))
        throw new RangeError(`${where}: shape[1] (T): expected 1..${self.config.contextLength}, got ${T}`);
    requireArray(where, "tokens", batch.tokens, [Int32Array], B * T);
    return [B, T];
}

/**
 * One training step: forward, the loss's gradient w.r.t. the logits from the fused kernel (SFT = cross-entropy),
 * backward, global-norm clip and AdamW. With `accumulate`, gradients add up over calls until a step.
 */
export async function trainStep(self: EngineView, batch: TrainBatch, options: TrainOptions = {}): Promise<TrainResult> {
    const [B, T] = checkBatch(self, "trainStep", batch);
    const fn = `${self.name}.trainStep`;
    const o = requireOptions<TrainOptions>(fn, "options", options, TRAIN_OPTION_KEYS);
    if (
        o.loss !== undefined &&
        o.loss !== "sft" &&
        o.loss !== "value" &&
        (o.loss === null || typeof o.loss !== "object" || Array.isArray(o.loss))
    )
        throw new (typeof o.loss === "string" ? RangeError : TypeError)(
            `${fn}: loss: expected 'sft', 'value' or policy-loss options, got ${describe(o.loss)}`,
        );
    const lr = requireNumber(fn, "lr", o.lr, 3e-4, 0, Number.MAX_VALUE);
    const beta1 = requireNumber(fn, "beta1", o.beta1, 0.9, 0, 1),
        beta2 = requireNumber(fn, "beta2", o.beta2, 0.95, 0, 1);
    if (beta1 === 1 || beta2 === 1)
        throw new RangeError(`${fn}: ${beta1 === 1 ? "beta1" : "beta2"}: expected a number in [0, 1), got 1`);
    const eps = requireNumber(fn, "eps", o.eps, 1e-8, Number.MIN_VALUE, Number.MAX_VALUE);
    const weightDecay = requireNumber(fn, "weightDecay", o.weightDecay, 0, 0, Number.MAX_VALUE);
    const maxGradNorm = requireNumber(fn, "maxGradNorm", o.maxGradNorm, 1, -Number.MAX_VALUE, Number.MAX_VALUE);
    const accumulate = requireBoolean(fn, "accumulate", o.accumulate, false);
    const keepLogitsBytes =
        o.keepLogitsBytes === undefined
            ? 2 ** 28
            : requireInteger(fn, "keepLogitsBytes", o.keepLogitsBytes, 0, 2 ** 40);
    if (o.valueClip !== undefined && o.valueClip !== null)
        requireNumber(fn, "valueClip", o.valueClip, 0, Number.MIN_VALUE, Number.MAX_VALUE);
    if (o.signal !== undefined && !(o.signal instanceof AbortSignal))
        throw new TypeError(`${fn}: signal: expected an AbortSignal, got ${describe(o.signal)}`);
    if (!(batch.targets instanceof Int32Array) || batch.targets.length !== B * T)
        throw new TypeError(`${fn}: targets: expected Int32Array of ${B * T} elements`);
    const loss = o.loss ?? "sft";
    if (loss === "value") {
        if (!(batch.returns instanceof Float32Array) || batch.returns.length !== B * T)
            throw new TypeError(`${fn}: returns: expected a Float32Array of ${B * T} elements for loss 'value'`);
    } else if (loss !== "sft" && !(batch.advantages instanceof Float32Array))
        throw new TypeError(`${fn}: advantages: expected a Float32Array ([B] or [B, T]) for a policy loss`);
    if (o.onProgress !== undefined && typeof o.onProgress !== "function")
        throw new TypeError(`${fn}: onProgress: expected a function, got ${describe(o.onProgress)}`);
    return self.serial(async () => {
        const h = self.h();
        const phases = accumulate ? 3 : 4;
        const phase = (done: number) => {
            o.onProgress?.(done, phases);
        };
        o.signal?.throwIfAborted();
        const isValue = loss === "value";
        if (self.family === "llama" && !isValue) {
            const r = await scoredLoss(self, batch, loss, keepLogitsBytes, o.signal, phase);
            return finishStep(self, h, r, accumulate, { lr, beta1, beta2, eps, weightDecay, maxGradNorm }, phase);
        }
        const logits = isValue ? null : new Float32Array(B * T * self.V),
            values = isValue ? new Float32Array(B * T) : null;
        if (self.family === "llama") native.gptSetTraining(h, true);
        try {
            await native.gptForwardAsync(h, { tokens: batch.tokens, B, T, logits, values });
        } finally {
            if (self.family === "llama") native.gptSetTraining(h, false);
        }
        phase(1);
        o.signal?.throwIfAborted();
        const sft = loss === "sft";
        const r = isValue
            ? valueGrad(self, values!, batch, o.valueClip ?? null)
            : fusedPolicyLoss(
                  {
                      logits: logits!,
                      targets: batch.targets,
                      mask: batch.mask,
                      shape: [B, T, self.V],
                      advantages: sft ? new Float32Array(B * T).fill(1) : batch.advantages!,
                      ...(batch.oldLogp ? { oldLogp: batch.oldLogp } : {}),
                      ...(batch.refLogp ? { refLogp: batch.refLogp } : {}),
                      ...(batch.rolloutIsWeights && !sft ? { rolloutIsWeights: batch.rolloutIsWeights } : {}),
                  },
                  sft
                      ? { type: "reinforce", aggregation: "token-mean", inPlace: true, device: "cpu" }
                      : { ...loss, inPlace: true, device: "cpu" },
              );
        phase(2);
        o.signal?.throwIfAborted();
        if (self.needZero) native.gptZeroGrad(h);
        await native.gptBackwardAsync(h, {
            dlogits: "gradValues" in r ? null : r.gradLogits,
            dvalues: "gradValues" in r ? r.gradValues : null,
        });
        phase(3);
        return finishStep(self, h, r, accumulate, { lr, beta1, beta2, eps, weightDecay, maxGradNorm }, phase);
    });
}

// The optimizer step after a backward (or, with accumulate, the gradients kept for the next call).

async function finishStep(
    self: EngineView,
    h: GptHandle,
    r: { loss: number; stats: PolicyLossStats },
    accumulate: boolean,
    adam: NativeAdamWCall,
    phase: (done: number) => void,
): Promise<TrainResult> {
    if (accumulate) {
        self.needZero = false;
        return { loss: r.loss, gradNorm: NaN, stats: r.stats, step: native.gptGetStep(h) };
    }
    const gradNorm = await native.gptStepAsync(h, adam);
    self.needZero = true;
    phase(4);
    return { loss: r.loss, gradNorm, stats: r.stats, step: native.gptGetStep(h) };
}

// A Llama-family step through log-probs: the forward scores the targets (log-prob and entropy per token, the LM
// head in row chunks), the policy loss runs on those [B, T] values (SFT = REINFORCE with advantage 1 and
// token-mean, which is the mean cross-entropy), and the backward turns d loss / d logp and d loss / d entropy
// into the gradients, recomputing each chunk's logits (or reusing the forward's, when they fit keepLogitsBytes).
// The same loss and gradient as the fused kernel on the full logits, without them.

async function scoredLoss(
    self: EngineView,
    batch: TrainBatch,
    loss: "sft" | LossOptions,
    keepLogitsBytes: number,
    signal: AbortSignal | undefined,
    phase: (done: number) => void,
): Promise<{ loss: number; stats: PolicyLossStats }> {
    const [B, T] = batch.shape,
        N = B * T,
        h = self.h();
    const logp = new Float32Array(N),
        entropy = new Float32Array(N);
    native.gptSetScoreKeep(h, keepLogitsBytes);
    native.gptSetTraining(h, true); // (the adapter's dropout; the rest of the model has none; the logits kept)
    try {
        await native.gptScoreAsync(h, {
            tokens: batch.tokens,
            targets: batch.targets,
            B,
            T,
            temperature: 1,
            chunk: 0,
            logp,
            entropy,
            values: null,
        });
    } finally {
        native.gptSetTraining(h, false);
    }
    phase(1);
    signal?.throwIfAborted();
    const sft = loss === "sft";
    const r = policyLoss(
        {
            logp,
            mask: batch.mask,
            shape: [B, T],
            entropy,
            advantages: sft ? new Float32Array(N).fill(1) : batch.advantages!,
            ...(batch.oldLogp ? { oldLogp: batch.oldLogp } : {}),
            ...(batch.refLogp ? { refLogp: batch.refLogp } : {}),
            ...(batch.rolloutIsWeights && !sft ? { rolloutIsWeights: batch.rolloutIsWeights } : {}),
        },
        sft ? { type: "reinforce", aggregation: "token-mean", device: "cpu" } : { ...loss, device: "cpu" },
    );
    phase(2);
    signal?.throwIfAborted();
    if (self.needZero) native.gptZeroGrad(h);
    await native.gptScoreBackwardAsync(h, { gradLogp: r.gradLogp, gradEntropy: r.gradEntropy ?? null, dvalues: null });
    phase(3);
    return r;
}

// verl's (clipped) value loss on the value head's outputs, and its gradient w.r.t. them.

function valueGrad(
    self: EngineView,
    values: Float32Array,
    batch: TrainBatch,
    clip: number | null,
): { loss: number; gradValues: Float32Array; stats: PolicyLossStats } {
    const [B, T] = batch.shape;
    const r = valueLoss(
        {
            values,
            returns: batch.returns!,
            mask: batch.mask,
            shape: [B, T],
            ...(batch.oldValues ? { oldValues: batch.oldValues } : {}),
        },
        { clip, device: "cpu" },
    );
    let sequences = 0;
    for (let b = 0; b < B; b++)
        for (let t = 0; t < T; t++)
            if (batch.mask[b * T + t]) {
                sequences++;
                break;
            }
    const stats: PolicyLossStats = {
        pgLoss: r.loss,
        klLoss: 0,
        entropyLoss: 0,
        clipFrac: r.stats.clipFrac,
        clipFracLower: 0,
        approxKl: 0,
        klMean: 0,
        entropyMean: 0,
        ratioMean: 1,
        ratioMax: 1,
        tokens: r.stats.tokens,
        sequences,
    };
    return { loss: r.loss, gradValues: r.gradValues, stats };
}
