// dapo.test.ts: DAPO in the trainers. Dynamic sampling (filterGroups, MAGRPO) with a verifier built so that half of
// the questions give every answer the same score: those trees are dropped, more questions are sampled, the batch is
// full again and the figures say how many were dropped; with every question flat, the first batch trains anyway. The
// overlong punishment lands on each training answer's score (rollout entries hold it); the overlong filter counts the
// cut answers it leaves out of the loss. Config errors name the key.
import { describe, expect, it } from "vitest";

import { fnVerifier } from "../../lib/index.js";
import { overlongPenalty } from "../../lib/rl/dapo.js";
import { resolveConfig, type Algo } from "../../lib/train/job/config.js";
import { runIteration, stageModels } from "../../lib/train/trainers/stage.js";
import { tinyTeam } from "../helpers/team.js";

// A question is "flat" (score 0 whatever the answer) when its characters sum to an even number.
const flat = (q: string) => [...q].reduce((s, c) => s + c.charCodeAt(0), 0) % 2 === 0;

async function iterate(algo: Algo, extra: Record<string, unknown>, score: (q: string, response: string) => number) {
    const { cfg, task, base } = await tinyTeam(
        { algo, episodesPerIteration: 4, sampling: { temperature: 1, maxTokens: 12 }, ...extra },
        fnVerifier("constructed", ({ question, response }) => score(question ?? "", response)),
    );
    const m = await stageModels(cfg, "independent", base);
    const items = task.generate(4, 42);
    return { r: await runIteration(cfg, task, items, "independent", m, base, 0, 42), items };
}

describe("DAPO's dynamic sampling in MAGRPO", () => {
    it("drops the trees of flat questions, samples more, and trains a full batch of questions with a signal", async () => {
        const { r, items } = await iterate(
            "magrpo",
            { filterGroups: { enable: true, maxNumGenBatches: 6 } },
            (q, resp) => (flat(q) ? 0 : resp.length % 2),
        );
        const s = r.stats[0];
        expect(items.some((x) => flat(x.question))).toBe(true); // the constructed case has flat questions
        expect(s.filterBatches).toBeGreaterThanOrEqual(2);
        expect(s.filterDroppedFraction).toBeGreaterThan(0);
        expect(s.filterDroppedFraction).toBeLessThan(1);
        expect(r.rollout!.items.length).toBe(4); // refilled to the batch size
        expect(r.rollout!.items.every((x) => !flat(x.question))).toBe(true);
        expect(r.stats[1].filterBatches).toBeUndefined(); // the frozen partner trains nothing
    });

    it("with every question flat: maxNumGenBatches batches, everything dropped, the first batch trains", async () => {
        const { r, items } = await iterate(
            "magrpo",
            { filterGroups: { enable: true, maxNumGenBatches: 3 } },
            () => 0.5,
        );
        expect(r.stats[0].filterBatches).toBe(3);
        expect(r.stats[0].filterDroppedFraction).toBe(1);
        expect(r.rollout!.items.map((x) => x.id)).toEqual(items.map((x) => x.id));
    });
});

describe("DAPO's overlong punishment and filter", () => {
    it("MAPoRL: every training answer's score is the verifier's plus the penalty of its length", async () => {
        const { r } = await iterate(
            "maporl",
            { overlong: { buffer: 12, penaltyFactor: 1, filter: false }, feedback: false },
            () => 0,
        );
        let n = 0;
        for (const ep of r.rollout!.entries)
            for (const turn of ep)
                for (const e of turn) {
                    const len = e.completion.length + (e.stopped ? 1 : 0);
                    expect(e.score).toBeCloseTo(overlongPenalty(len, { maxTokens: 12, buffer: 12 }), 12);
                    n++;
                }
        expect(n).toBe(4 * 2 * 2);
    });

    for (const algo of ["maporl", "magrpo", "collm-dc"] as Algo[])
        it(`${algo}: the overlong filter reports the share of trained answers cut at maxTokens`, async () => {
            const { r } = await iterate(
                algo,
                { overlong: { buffer: 0, penaltyFactor: 1, filter: true } },
                (_, x) => x.length % 2,
            );
            const f = r.stats[0].truncatedFraction!;
            expect(f).toBeGreaterThanOrEqual(0);
            expect(f).toBeLessThanOrEqual(1);
            if (algo !== "magrpo") {
                const trained = r.rollout!.entries.flatMap((ep) => ep.map((t) => t[0]));
                const cut = trained.filter((e) => !e.stopped).length;
                expect(f).toBeCloseTo(cut / trained.length, 12);
                expect(cut).toBeGreaterThan(0); // an untrained model often writes to the token limit
                expect(cut).toBeLessThan(trained.length);
            }
        });

    it("config errors name the key", () => {
        expect(() => resolveConfig({ overlong: { buffer: 40 } })).toThrow(
            /overlong.buffer: expected at most sampling.maxTokens \(30\)/,
        );
        expect(() => resolveConfig({ filterGroups: { enable: true } })).toThrow(
            /filterGroups.enable: dynamic sampling is for algo 'magrpo'/,
        );
        expect(() => resolveConfig({ filterGroups: { maxNumGenBatches: 0 } })).toThrow(/filterGroups.maxNumGenBatches/);
    });
});
