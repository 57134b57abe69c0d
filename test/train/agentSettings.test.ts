// agentSettings.test.ts: per-agent settings. The config checks every entry and names agentSettings[i].key; in an
// iteration each agent samples at its own temperature (a greedy agent answers the same whatever the seed, a hot one
// does not; the trace records both temperatures) and trains at its own learning rate (lr 0 leaves its model
// untouched while its partner's changes), and the metrics report both.
import { describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import { native } from "../../lib/native.js";
import { resolveConfig, type Algo } from "../../lib/train/job/config.js";
import { runIteration, stageModels } from "../../lib/train/trainers/stage.js";
import { tinyTeam } from "../helpers/team.js";

const params = (m: NativePolicy) => {
    const p = new Float32Array(m.parameterCount);
    native.gptGet(m.h(), { which: 0, out: p });
    return p;
};

describe("agentSettings in the config", () => {
    it("is checked entry by entry, naming agentSettings[i].key", () => {
        expect(resolveConfig({ agentSettings: [{ lr: 0.01 }, { temperature: 0.5 }] }).agentSettings).toEqual([
            { lr: 0.01 },
            { temperature: 0.5 },
        ]);
        const bad: [unknown, RegExp][] = [
            [{ agentSettings: [{ lrr: 0.1 }] }, /agentSettings\[0\]\.lrr: unknown key \(did you mean lr\?\)/],
            [
                { agentSettings: [{}, { temperature: -1 }] },
                /agentSettings\[1\]\.temperature: expected a number in \[0, 10\]/,
            ],
            [{ agentSettings: [{ maxTokens: 2.5 }] }, /agentSettings\[0\]\.maxTokens: expected an integer/],
            [{ agentSettings: [{ lr: "0.1" }] }, /agentSettings\[0\]\.lr: expected a number/],
            [{ agentSettings: [{}, {}, {}, {}] }, /at most one entry per agent \(3\), got 4/],
            [{ agentSettings: { lr: 1 } }, /agentSettings: expected an array/],
            [{ agentSettings: [null] }, /agentSettings\[0\]: expected an object/],
            [
                { overlong: { buffer: 10 }, agentSettings: [{ maxTokens: 5 }] },
                /agentSettings\[0\]\.maxTokens: expected at least overlong.buffer \(10\)/,
            ],
        ];
        for (const [c, re] of bad) expect(() => resolveConfig(c), JSON.stringify(c)).toThrow(re);
    });
});

async function iterate(algo: Algo, seed: number) {
    const { cfg, task, base } = await tinyTeam({
        algo,
        shareParameters: false,
        separateTurn0: false,
        sampling: { temperature: 1, maxTokens: 10 },
        agentSettings: [
            { lr: 2e-2, temperature: 1.5 },
            { lr: 0, temperature: 0 },
        ],
    });
    const m = await stageModels(cfg, "joint", base);
    const before = m.agents.map(params);
    const r = await runIteration(cfg, task, task.generate(3, 42), "joint", m, base, 0, seed);
    return { r, changed: m.agents.map((x, a) => params(x).some((v, i) => v !== before[a][i])) };
}

describe("per-agent settings in an iteration", () => {
    for (const algo of ["maporl", "magrpo", "collm-dc"] as Algo[])
        it(`${algo}: each agent samples at its own temperature and trains at its own learning rate`, async () => {
            const a = await iterate(algo, 42),
                b = await iterate(algo, 4242);
            // lr 0: agent 1's model is untouched; agent 0's moves
            expect(a.changed).toEqual([true, false]);
            expect(a.r.stats[0].lr).toBe(2e-2);
            expect(a.r.stats[0].temperature).toBe(1.5);
            expect(a.r.stats[1].lr).toBe(0);
            expect(a.r.stats[1].temperature).toBe(0);
            // temperature 0 is greedy: agent 1's first answers do not depend on the seed; agent 0's do
            const first = (x: typeof a, agent: number) => x.r.rollout!.entries.map((ep) => ep[0][agent].text);
            expect(first(a, 1)).toEqual(first(b, 1));
            expect(first(a, 0)).not.toEqual(first(b, 0));
            if (algo !== "magrpo") {
                // the trace records the temperature each answer was sampled at
                expect(a.r.trace.turns[0].map((e) => e.temperature)).toEqual([1.5, 0]);
            }
        });
});
