// workflowTrain.test.ts: trainWorkflow co-trains the roles of a sequential Workflow played by native models. The
// properties: the joint reward moves the role it depends on (a writer paid when its message starts with a digit: the
// team's reward rises well above its random-initialisation rate, measured on fresh episodes before and after); every
// trained turn carries its group-relative credit (the joint reward minus its item's group mean, the same for both
// roles of an episode when nothing is shaped; shaped rewards enter their role's credit only); a failed episode is
// left out while the others train; misuse is named.
import { describe, expect, it } from "vitest";

import { Workflow, type WorkflowSpec } from "../../lib/env/workflow.js";
import { trainWorkflow } from "../../lib/env/workflowTrain.js";
import { NativePolicy } from "../../lib/model/nativePolicy.js";

const tiny = (seed: number, name: string) =>
    NativePolicy.create({ contextLength: 64, layers: 1, heads: 2, dModel: 32, seed, name });

function spec(writer: NativePolicy, checker: NativePolicy, milestone = 0): WorkflowSpec<number> {
    return {
        roles: [
            { name: "writer", policy: writer, instructions: "w", sampling: { temperature: 1, maxTokens: 2 } },
            { name: "checker", policy: checker, instructions: "c", sampling: { temperature: 1, maxTokens: 2 } },
        ],
        start: "writer",
        observe: (role, st) => (role === "writer" ? `n${st.item % 4}` : `>${st.turns[st.turns.length - 1].text}`),
        next: (st) => (st.turns.length === 1 ? "checker" : null),
        reward: (st) => (/^\d/.test(st.turns[0].text) ? 1 : 0),
        milestones: (turn) => (turn.role === "checker" ? milestone : 0),
        horizon: 2,
        maxToolRounds: 0,
        loops: { stop: false },
    };
}
const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
const items = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);

describe("trainWorkflow", () => {
    it("the joint reward moves the role it depends on: the team's reward rises above its initial rate", async () => {
        const writer = await tiny(1, "writer"),
            checker = await tiny(2, "checker");
        const before = mean(
            (await new Workflow(spec(writer, checker), { seed: 99 }).runBatch(items(256, 1000))).map((e) => e.reward),
        );
        const wf = new Workflow(spec(writer, checker), { seed: 5 });
        for (let it = 0; it < 40; it++)
            await trainWorkflow(wf, items(8, it * 8), { writer, checker }, { groups: 8, lr: 3e-3 });
        const after = mean(
            (await new Workflow(spec(writer, checker), { seed: 99 }).runBatch(items(256, 1000))).map((e) => e.reward),
        );
        console.log(`writer's digit-first rate: ${before.toFixed(3)} -> ${after.toFixed(3)}`);
        expect(before).toBeLessThan(0.3);
        expect(after - before).toBeGreaterThan(0.5);
        await writer.dispose();
        await checker.dispose();
    }, 120_000);

    it("credit: the reward minus its item's group mean on every trained turn; shaped rewards count for their role only; failed episodes left out", async () => {
        const writer = await tiny(3, "writer"),
            checker = await tiny(4, "checker");
        const orig = writer.generate.bind(writer);
        writer.generate = async (reqs, o) => {
            if (reqs.some((r) => JSON.stringify(r.messages).includes("n3"))) throw new Error("server gone");
            return orig(reqs, o);
        };
        const wf = new Workflow(spec(writer, checker, 0.25), { seed: 7 });
        const G = 4,
            r = await trainWorkflow(wf, items(4), { writer, checker }, { groups: G, lr: 1e-3 });
        expect(r.episodes.length).toBe(16);
        expect(r.failed).toBe(G); // item 3's episodes
        r.episodes.forEach((ep, k) => {
            if (Math.floor(k / G) === 3) {
                expect(ep.stoppedBy).toBe("error");
                expect(ep.turns.every((t) => t.credit === undefined)).toBe(true);
                return;
            }
            const group = r.episodes.slice(Math.floor(k / G) * G, Math.floor(k / G) * G + G),
                m = mean(group.map((e) => e.reward));
            const [w, c] = ep.turns;
            expect(w.credit).toBeCloseTo(ep.reward - m, 6);
            expect(c.credit).toBeCloseTo(ep.reward + 0.25 - (m + 0.25), 6); // the milestone is the same in every episode
            expect(w.samples!.length).toBe(1);
            expect(w.samples![0].tokenIds.length).toBeGreaterThan(0);
        });
        expect(r.roles.writer.rows).toBe(12);
        expect(r.roles.checker.meanReturn).toBeCloseTo(r.roles.writer.meanReturn + 0.25, 6);
        const unshaped = await trainWorkflow(wf, items(2), { checker }, { groups: 2, shaped: false, lr: 1e-3 });
        expect(Object.keys(unshaped.roles)).toEqual(["checker"]);
        await writer.dispose();
        await checker.dispose();
    }, 120_000);

    it("misuse is named", async () => {
        const writer = await tiny(5, "writer"),
            checker = await tiny(6, "checker"),
            other = await tiny(7, "other");
        const wf = new Workflow(spec(writer, checker));
        await expect(trainWorkflow(wf, [], { writer })).rejects.toThrow(/items: expected a non-empty array/);
        await expect(trainWorkflow(wf, [1], { coder: writer })).rejects.toThrow(
            /models\.coder: the workflow has no role 'coder' \(roles: writer, checker\)/,
        );
        await expect(trainWorkflow(wf, [1], { writer: other })).rejects.toThrow(
            /models\.writer: not the policy that plays 'writer'/,
        );
        await expect(trainWorkflow(wf, [1], { writer }, { groups: 1 })).rejects.toThrow(
            /groups: expected an integer >= 2/,
        );
        await expect(trainWorkflow(wf, [1], { writer }, { lr: NaN })).rejects.toThrow(
            /lr: expected a positive number, got NaN/,
        );
        for (const p of [writer, checker, other]) await p.dispose();
    });
});
