// The credit of recorded calls (gateway/credit.ts) against float64 loops written from the definitions: MAGRPO's
// group-relative return per (episode, agent), and MAPoRL's influence-aware reward per turn (an agent's t-th call) with
// the group mean at the same (turn, agent) as the baseline; CoLLM-DC's TD(0) from each agent's critic (its values
// read one prompt at a time, the targets and normalisation in float64); an episode without a turn structure is left
// out.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import { criticCredit, influenceCredit, magrpoCredit } from "../../lib/gateway/credit.js";
import { packRows } from "../../lib/train/trainers/rollout.js";
import { tinyHfModel } from "../helpers/serve.js";
import type { GatewayCall, GatewayEpisode, Milestone } from "../../lib/gateway/episodes.js";

let serial = 0;
// An episode whose agents call in the order given; scores[i] is a milestone on call i (undefined: none).
function episode(order: string[], scores: (number | undefined)[], reward: number, own: Record<string, number> = {}) {
    const calls: GatewayCall[] = order.map((agent, index) => ({
        index,
        agent,
        startedAt: 0,
        latencyMs: 0,
        messages: [],
        sampling: {},
        // (an answered call; a call without samples failed, and is not a turn)
        samples: [
            {
                text: "",
                promptTokenIds: [1],
                tokenIds: [2],
                logprobs: [0],
                tokenIdsExact: true,
                finishReason: "stop",
                seed: "0",
            },
        ],
    }));
    const milestones: Milestone[] = scores.flatMap((r, call) =>
        r === undefined ? [] : [{ agent: order[call], reward: r, call }],
    );
    const ep: GatewayEpisode = {
        id: `e${serial++}`,
        status: "rewarded",
        openedAt: 0,
        reward,
        agentRewards: own,
        milestones,
        calls,
        meta: {},
    };
    return ep;
}

describe("gateway credit", () => {
    it("influence: R(t, a) of Definition 1 from per-call scores, minus the group mean at (turn, agent)", () => {
        const d = 0.3,
            agents = ["r", "s"];
        // item 0: two episodes, two turns (r, s, r, s); item 1: one episode rewarded, one ragged (s called once more)
        const eps = [
            episode(["r", "s", "r", "s"], [0, 1, 1, 0], 1),
            episode(["r", "s", "s", "r"], [1, 0, 0.5, 0], 0, { s: 0.25 }),
            episode(["r", "s", "r", "s"], [0.5, 0.5, 0, 1], 1),
            episode(["r", "s", "s"], [1, 1, 1], 1),
        ];
        // (a failed call, a retried one say, is not a turn: episode 2 stays two turns a side)
        const retried = episode(["r", "s", "s", "r", "s"], [0.5, undefined, 0.5, 0, 1], 1);
        retried.calls[1].samples = [];
        retried.calls[1].error = "the upstream gave no answer";
        eps[2] = retried;
        const c = influenceCredit(eps, [0, 1, 2, 3], 2, agents, agents, { discount: d });
        expect(c.ragged).toBe(1);
        // float64 reference: s(t, a) per episode; the last turn adds the joint reward and the agent's own
        const turns = (ep: GatewayEpisode) =>
            agents.map((a) => {
                const calls = ep.calls.filter((x) => x.agent === a && x.samples.length > 0);
                return calls.map((call, t) => {
                    const m = ep.milestones.filter((x) => x.call === call.index).reduce((s, x) => s + x.reward, 0);
                    return m + (t === calls.length - 1 ? ep.reward + (ep.agentRewards[a] ?? 0) : 0);
                });
            });
        const R = (ep: GatewayEpisode, t: number, j: number) => {
            const s = turns(ep);
            let num = s[j][t],
                den = 1,
                w = 1;
            for (let u = t + 1; u < s[0].length; u++) {
                w *= d;
                num += (w * (s[0][u] + s[1][u])) / 2;
                den += w;
            }
            return num / den;
        };
        const expected = (k: number, t: number, j: number) => {
            const group = k < 2 ? [0, 1] : [2]; // (episode 3 is ragged: not in item 1's group)
            return R(eps[k], t, j) - group.reduce((x, g) => x + R(eps[g], t, j), 0) / group.length;
        };
        for (const k of [0, 1, 2])
            for (const [j, a] of agents.entries()) {
                const calls = eps[k].calls.filter((x) => x.agent === a && x.samples.length > 0);
                calls.forEach((call, t) => expect(c.of(k, call)).toBeCloseTo(expected(k, t, j), 5));
            }
        expect(c.of(3, eps[3].calls[0])).toBeUndefined();
        expect(c.of(2, retried.calls[1])).toBeUndefined(); // (the failed call)
        expect(expected(2, 0, 0)).toBe(0); // (a group of one: no signal)
        expect(Math.abs(expected(0, 0, 1))).toBeGreaterThan(0.1); // (the test compares non-trivial values)
        expect(c.meanReturn.r).toBeCloseTo((R(eps[0], 0, 0) + R(eps[1], 0, 0) + R(eps[2], 0, 0)) / 3, 5);
    });

    it("magrpo: the shaped return (joint + own + milestones) minus the item's group mean, for every call of the agent", () => {
        const eps = [
            episode(["r", "s"], [0.5, undefined], 1, { s: 2 }),
            episode(["r", "s"], [undefined, 1], 0),
            episode(["r", "s"], [undefined, undefined], 1),
            episode(["r", "s"], [undefined, undefined], 3),
        ];
        const c = magrpoCredit(eps, [0, 1, 3], 2, ["r", "s"], true); // (episode 2 not rewarded)
        const ret = { r: [1.5, 0, NaN, 3], s: [3, 1, NaN, 3] };
        expect(c.of(0, eps[0].calls[0])).toBeCloseTo(ret.r[0] - (ret.r[0] + ret.r[1]) / 2, 6);
        expect(c.of(1, eps[1].calls[1])).toBeCloseTo(ret.s[1] - (ret.s[0] + ret.s[1]) / 2, 6);
        expect(c.of(3, eps[3].calls[0])).toBe(0);
        expect(c.of(2, eps[2].calls[0])).toBeUndefined();
        expect(c.meanReturn.s).toBeCloseTo((3 + 1 + 3) / 3, 6);
        const plain = magrpoCredit(eps, [0, 1], 2, ["s"], false);
        expect(plain.of(0, eps[0].calls[1])).toBeCloseTo(0.5, 6); // (joint rewards 1 and 0)
    });

    it("critic (CoLLM-DC): TD(0) from the agent's critic, normalised per turn; the critic learns the targets", async () => {
        const work = mkdtempSync(join(tmpdir(), "maporl-credit-"));
        await tinyHfModel(join(work, "m"), 4);
        const base = await NativePolicy.load(join(work, "m"));
        try {
            const critic = await base.withAdapter("critic", { rank: 4, alpha: 8, seed: 3 });
            const agents = ["r", "s"];
            // four episodes of two turns (r, s, r, s); every call carries exact prompt ids (different per call)
            const eps = [0, 1, 2, 3].map((e) => {
                const ep = episode(["r", "s", "r", "s"], [e % 2, 1, 0, e / 4], e === 3 ? 0 : 1);
                ep.calls.forEach((c, i) => {
                    const promptTokenIds = base.tokenizer.encodeChat([{ role: "user", content: `q${e} turn ${i}` }]);
                    c.samples = [
                        {
                            text: "",
                            promptTokenIds,
                            tokenIds: [1],
                            logprobs: [0],
                            tokenIdsExact: true,
                            finishReason: "stop",
                            seed: "0",
                        },
                    ];
                });
                return ep;
            });
            const gamma = 0.9;
            // the reference: V one prompt at a time; r_t the mean over agents of s(t, j)
            const V = async (ids: number[]) => {
                const b = packRows([{ prompt: ids, completion: [], stopped: false }], base.tokenizer.eos, 1 << 20);
                return (await critic.values(b))[ids.length - 1];
            };
            const s = (ep: GatewayEpisode, a: string, t: number) => {
                const call = ep.calls.filter((c) => c.agent === a)[t];
                const m = ep.milestones.filter((x) => x.call === call.index).reduce((x, y) => x + y.reward, 0);
                return m + (t === 1 ? ep.reward : 0);
            };
            const delta: number[][] = [[], []]; // [turn][episode], agent r
            for (const ep of eps) {
                const calls = ep.calls.filter((c) => c.agent === "r");
                const v = [await V(calls[0].samples[0].promptTokenIds), await V(calls[1].samples[0].promptTokenIds)];
                const r = [0, 1].map((t) => (s(ep, "r", t) + s(ep, "s", t)) / 2);
                delta[0].push(r[0] + gamma * v[1] - v[0]);
                delta[1].push(r[1] - v[1]);
            }
            const norm = (xs: number[]) => {
                const m = xs.reduce((a, b) => a + b, 0) / xs.length;
                const sd = Math.sqrt(xs.reduce((a, b) => a + (b - m) ** 2, 0) / xs.length);
                return xs.map((x) => (x - m) / Math.max(sd, 1e-6));
            };
            const want = delta.map(norm);
            const c = await criticCredit(eps, [0, 1, 2, 3], ["r"], agents, { r: critic }, { gamma, lr: 1e-2 });
            eps.forEach((ep, e) =>
                ep.calls
                    .filter((x) => x.agent === "r")
                    .forEach((call, t) => expect(c.of(e, call)).toBeCloseTo(want[t][e], 4)),
            );
            expect(c.of(0, eps[0].calls[1])).toBeUndefined(); // (s has no critic here: not credited)
            // the critic moves towards the targets: its loss falls over steps on the same episodes
            const losses = [c.valueLoss.r];
            for (let k = 0; k < 15; k++)
                losses.push(
                    (await criticCredit(eps, [0, 1, 2, 3], ["r"], agents, { r: critic }, { gamma, lr: 1e-2 })).valueLoss
                        .r,
                );
            expect(losses[losses.length - 1]).toBeLessThan(losses[0] * 0.5);
        } finally {
            await base.dispose();
            rmSync(work, { recursive: true, force: true });
        }
    });
});
