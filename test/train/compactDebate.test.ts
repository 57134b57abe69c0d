// compactDebate.test.ts: a model trained by `maporl train` on the embedded GPT, served by `maporl serve`, debated with
// through `Debate` + `compactDebate` (the documented path): every request is the trainers' one message per turn,
// equal to what the training rollout (turnPrompt) would have sent for the same answers and verdicts, it fits the
// model's 64-token context, and the debate completes; the server says which protocol the checkpoint speaks.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import {
    arithDebateTask,
    compactDebate,
    Debate,
    OpenAICompatiblePolicy,
    turnPrompt,
    type ChatMessage,
    type GenerateRequest,
    type Policy,
} from "../../lib/index.js";
import { extractAnswer } from "../../lib/train/trainers/rollout.js";
import { trainJob } from "../../lib/train/job/job.js";
import { startServe, type ServeProcess } from "../helpers/serve.js";

const work = mkdtempSync(join(tmpdir(), "maporl-compact-"));
const run = join(work, "run"),
    actor = join(run, "models", "maporl-actor-0");
let server: ServeProcess;

beforeAll(async () => {
    await trainJob({
        out: run,
        config: {
            iterations: 2,
            episodesPerIteration: 4,
            evalEpisodes: 6,
            evalEvery: 2,
            controls: false,
            sft: { steps: 20, batchSize: 16 },
            model: { layers: 1, heads: 2, dModel: 32, contextLength: 64 },
            critic: { layers: 1, heads: 2, dModel: 32 },
        },
    });
    server = await startServe(actor);
}, 240_000);
afterAll(async () => {
    await server?.stop();
    rmSync(work, { recursive: true, force: true });
});

// A Policy in front of another that records every request's messages.
function recording(inner: Policy): { policy: Policy; seen: ChatMessage[][] } {
    const seen: ChatMessage[][] = [];
    const policy: Policy = {
        name: inner.name,
        generate: (reqs: GenerateRequest[], o?: object) => {
            for (const r of reqs) seen.push(r.messages ?? []);
            return inner.generate(reqs, o);
        },
    };
    return { policy, seen };
}

describe("serving a trained checkpoint: Debate with compactDebate", () => {
    it("the checkpoint records its protocol, and the server says it", async () => {
        const t = JSON.parse(readFileSync(join(actor, "maporl-task.json"), "utf8")) as Record<string, unknown>;
        expect(t).toMatchObject({
            task: "arith-debate",
            protocol: "compact",
            agents: 3,
            turns: 3,
            feedback: true,
            example: "7+2*3-4|????,????,????",
        });
        for (let i = 0; i < 100 && !server.output().includes("compact protocol"); i++)
            await new Promise((r) => setTimeout(r, 20));
        expect(server.output()).toMatch(
            /trained on arith-debate's compact protocol.*"7\+2\*3-4\|\?\?\?\?,\?\?\?\?,\?\?\?\?"/,
        );
    });

    it("every request is the trainers' message for the same answers and verdicts, fits the context, and the debate completes", async () => {
        const task = arithDebateTask({ agents: 3, format: "compact" });
        const items = task.generate(4, 11).map((it) => ({ question: it.question, reference: it.reference }));
        const served = new OpenAICompatiblePolicy({ baseUrl: server.baseUrl, model: "actor-0", dialect: "vllm" });
        const { policy, seen } = recording(served);
        const debate = new Debate({
            agents: [policy, policy, policy],
            turns: 3,
            ...compactDebate({ agents: 3, feedback: true }),
            verifier: task.verifier,
            feedback: true,
            sampling: { temperature: 0.7, maxTokens: 24 },
            seed: 5,
        });
        const transcripts = await debate.runBatch(items);
        expect(transcripts.map((t) => [t.error, t.turns.length])).toEqual(items.map(() => [undefined, 3]));
        expect(seen.length).toBe(items.length * 3 * 3);
        expect(seen.every((m) => m.length === 1 && m[0].role === "user")).toBe(true); // history 'last'
        for (const t of transcripts) {
            for (let turn = 0; turn < 3; turn++)
                for (let a = 0; a < 3; a++) {
                    const prev = turn === 0 ? null : t.turns[turn - 1];
                    const want = turnPrompt(
                        t.question,
                        a,
                        3,
                        prev ? prev.map((e) => extractAnswer(e.text)) : null,
                        prev ? prev.map((e) => e.score ?? 0) : "empty",
                    );
                    const sent = t.turns[turn][a].prompt;
                    expect(sent.length).toBe(1);
                    expect(sent[0].content).toBe(want);
                    expect(t.turns[turn][a].usage.promptTokens).toBeLessThanOrEqual(64);
                }
        }
    }, 120_000);

    it("refuses what the protocol cannot express, naming the parameter", () => {
        expect(() => compactDebate({ agents: 0 })).toThrow(
            /compactDebate: agents: expected an integer in \[1, 64\], got 0/,
        );
        expect(() => compactDebate({ agents: 3, feedback: "yes" as unknown as boolean })).toThrow(
            /compactDebate: feedback: expected a boolean/,
        );
        expect(
            () => new Debate({ agents: [{ name: "x", generate: async () => [] }], turns: 1, history: "all" as "full" }),
        ).toThrow(/Debate: history: expected 'full' or 'last'/);
    });
});
