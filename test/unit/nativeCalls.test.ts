// nativeCalls.test.ts: the contract between lib/native.ts and the addon. Every call of more than one argument takes one
// object of named fields; the addon declares each call's fields (bindings/core/args.h's CallSpec) and an error names
// the call and the field.
import { describe, expect, it } from "vitest";

import {
    native,
    nativeCallFields,
    type NativeBinding,
    type NativeGaeCall,
    type NativePolicyLossCall,
} from "../../lib/native.js";

// The calls lib/native.ts types as taking one object (with or without a model handle before it).
const OBJECT_CALLS: (keyof NativeBinding)[] = [
    "gae",
    "gaeAsync",
    "reinforceReturns",
    "reinforceReturnsAsync",
    "groupAdvantages",
    "groupAdvantagesAsync",
    "broadcastRows",
    "policyLoss",
    "policyLossAsync",
    "valueLoss",
    "valueLossAsync",
    "logprobs",
    "logprobsAsync",
    "fusedPolicyLoss",
    "fusedPolicyLossAsync",
    "rolloutCorrection",
    "rolloutCorrectionAsync",
    "sample",
    "sampleAsync",
    "sampleLogprobs",
    "sampleLogprobsAsync",
    "gptCreate",
    "llamaCreate",
    "gptSetTensor",
    "gptScore",
    "gptScoreAsync",
    "gptScoreBackward",
    "gptScoreBackwardAsync",
    "loraAdd",
    "gptGet",
    "gptSet",
    "gptForward",
    "gptForwardAsync",
    "gptBackward",
    "gptBackwardAsync",
    "gptStep",
    "gptStepAsync",
    "gptCacheReset",
    "gptDecode",
    "gptDecodeAsync",
    "gptPrefillAsync",
    "gptDecodeRowsAsync",
];

function gaeCall(): NativeGaeCall {
    const n = 6;
    return {
        rewards: new Float32Array(n).fill(1),
        values: new Float32Array(n),
        mask: new Uint8Array(n).fill(1),
        B: 2,
        T: 3,
        gamma: 1,
        lambda: 1,
        whiten: false,
        device: 0,
        advantages: new Float32Array(n),
        returns: new Float32Array(n),
    };
}

describe("the addon's calls of named arguments", () => {
    it("are exactly the calls lib/native.ts types as taking one object, each with its field list", () => {
        const fields = nativeCallFields();
        expect(Object.keys(fields).sort()).toEqual([...OBJECT_CALLS].sort());
        expect(fields.gae).toEqual(Object.keys(gaeCall()));
        for (const [name, list] of Object.entries(fields)) {
            expect(new Set(list).size, name).toBe(list.length);
            if (name.endsWith("Async") && fields[name.slice(0, -5)]) expect(list).toEqual(fields[name.slice(0, -5)]);
        }
    });

    it("read the fields by name: the order of the object's keys does not matter", () => {
        const a = gaeCall(),
            b = gaeCall();
        native.gae(a);
        const reversed = Object.fromEntries(Object.entries(b).reverse()) as unknown as NativeGaeCall;
        native.gae(reversed);
        expect(Array.from(b.advantages)).toEqual(Array.from(a.advantages));
        expect(Array.from(a.advantages)).toEqual([3, 2, 1, 3, 2, 1]);
    });

    it("name the call and the field in every error", () => {
        const bad = (patch: Record<string, unknown>) => ({ ...gaeCall(), ...patch });
        expect(() => native.gae(bad({ gamma: "1" }))).toThrow(/^gae: gamma: expected a number$/);
        expect(() => native.gae(bad({ advantages: undefined }))).toThrow(
            /^gae: advantages: expected Float32Array, got nothing$/,
        );
        expect(() => native.gae(bad({ mask: new Int32Array(6) }))).toThrow(
            /^gae: mask: expected Uint8Array or Float32Array, got Int32Array$/,
        );
        expect(() => native.gae(bad({ returns: new Float32Array(5) }))).toThrow(
            /^gae: returns: expected 6 elements, got 5$/,
        );
        expect(() => native.gae(bad({ B: 1.5 }))).toThrow(/^gae: B: expected an integer/);
        expect(() => native.gae(null as unknown as NativeGaeCall)).toThrow(
            /^gae: expected one object of named arguments$/,
        );
        // a nested object's fields carry its name
        const n = 4;
        const loss: NativePolicyLossCall = {
            logp: new Float32Array(n),
            oldLogp: null,
            advantages: new Float32Array(n),
            advPerSeq: false,
            mask: new Uint8Array(n).fill(1),
            refLogp: null,
            entropy: null,
            B: 1,
            T: n,
            params: { clipLow: "x" } as unknown as NativePolicyLossCall["params"],
            device: 0,
            gradLogp: new Float32Array(n),
            gradEntropy: null,
        };
        expect(() => native.policyLoss(loss)).toThrow(/^policyLoss: params\.type: expected a number$/);
        // a model call: the handle, then the object
        const h = native.gptCreate({
            vocab: 8,
            context: 4,
            layers: 1,
            heads: 1,
            dModel: 4,
            mlpRatio: 4,
            tieEmbeddings: true,
            seed: 1,
        });
        try {
            const tokens = new Int32Array(4);
            expect(() => native.gptForward(h, { tokens, B: 1, T: 3, logits: null, values: null })).toThrow(
                /^gptForward: tokens: expected 3 elements, got 4$/,
            );
            expect(() => native.gptGet(h, { which: 3 as 0, out: new Float32Array(1) })).toThrow(
                /^gptGet: which: expected an integer in \[0, 2\], got 3/,
            );
        } finally {
            native.gptFree(h);
        }
    });
});
