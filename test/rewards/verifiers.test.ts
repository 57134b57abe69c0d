// verifiers.test.ts: the GSM8K verifier against the 5,276 labelled real model solutions (labels nobody here
// wrote), answer extraction edge cases, the label / exact / regex / fn verifiers, HttpVerifier against a
// loopback server (malformed reply, timeout, 500 then success, abort), and scoreAll recording failures.
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import {
    exactVerifier,
    extractFinalNumber,
    fnVerifier,
    gsm8kVerifier,
    HttpVerifier,
    labelVerifier,
    regexVerifier,
    scoreAll,
} from "../../lib/index.js";

const DATA = new URL("../fixtures/gsm8k/example_model_solutions.jsonl", import.meta.url);

describe("gsm8kVerifier", () => {
    it("agrees with the labels of the 5,276 real model solutions (>= 99.5%)", async () => {
        const v = gsm8kVerifier();
        const rows = readFileSync(DATA, "utf8")
            .trim()
            .split("\n")
            .map((l) => JSON.parse(l) as Record<string, unknown>);
        let agree = 0,
            total = 0;
        const disagreements: string[] = [];
        for (const r of rows) {
            for (const k of ["6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification"]) {
                const s = r[k] as { is_correct: boolean; solution: string };
                const verdict = await v.score({
                    question: r.question as string,
                    response: s.solution,
                    reference: r.ground_truth as string,
                });
                total++;
                if ((verdict.score === 1) === s.is_correct) agree++;
                else disagreements.push(`${k}: label ${s.is_correct}, extracted ${verdict.extracted}`);
            }
        }
        expect(total).toBe(5276);
        expect(agree / total, disagreements.slice(0, 10).join("\n")).toBeGreaterThanOrEqual(0.995);
    });

    it("extracts final numbers in every common format", () => {
        const cases: [string, number | null][] = [
            ["so the total is \\boxed{1,234}.", 1234],
            ["#### 72", 72],
            ["A: 18", 18],
            ["Answer: $1,000.50", 1000.5],
            ["The answer is -3.", -3],
            ["She has 5 apples and eats 2, leaving 3 apples.", 3],
            ["#### 1,000 dollars", 1000],
            ["Answer: \\boxed{\\frac{3}{4}}", 0.75],
            ["the answer is 3/4", 0.75],
            ["It costs $.5 each", 0.5],
            ["Answer: 2 + 3 = 5", 5],
            ["no numbers here", null],
            ["A: −7", -7],
            ["\\boxed{42} but later 17", 42],
            ["Answer: 12.", 12],
            ["#### 3\n", 3],
        ];
        for (const [text, want] of cases) {
            const got = extractFinalNumber(text);
            if (want === null) expect(got, text).toBeNull();
            else expect(got?.value, text).toBeCloseTo(want, 9);
        }
    });

    it("scores against a number or a reference solution, and explains a miss", async () => {
        const v = gsm8kVerifier();
        expect((await v.score({ response: "A: 8.999999999999998", reference: 9 })).score).toBe(1);
        expect((await v.score({ response: "#### 10", reference: "so 9\n#### 9" })).score).toBe(0);
        const none = await v.score({ response: "I do not know", reference: 9 });
        expect(none).toEqual({ score: 0, extracted: null, reason: "no number in the response" });
        await expect(v.score({ response: "A: 1", reference: "none" })).rejects.toThrow(
            /item.reference: expected a number/,
        );
        await expect(v.score({ response: 1 as unknown as string, reference: 1 })).rejects.toThrow(
            /item.response: expected a string/,
        );
    });
});

describe("rule verifiers", () => {
    it("labelVerifier reads NLI labels in free text", async () => {
        const v = labelVerifier();
        expect(
            (await v.score({ response: "Reasoning... Final answer: Contradiction.", reference: "contradiction" }))
                .score,
        ).toBe(1);
        expect(
            (await v.score({ response: "It is neutral, not entailment. Answer: neutral", reference: "neutral" })).score,
        ).toBe(1);
        expect((await v.score({ response: "ENTAILMENT", reference: "neutral" })).score).toBe(0);
        const custom = labelVerifier({ labels: ["yes", "no", "not sure"] });
        expect((await custom.score({ response: "I am not sure", reference: "not sure" })).extracted).toBe("not sure");
        expect(() => labelVerifier({ labels: [] })).toThrow(/labels: expected a non-empty array/);
    });

    it("exact, regex and fn verifiers", async () => {
        expect(
            (await exactVerifier({ normalize: "case" }).score({ response: " Paris ", reference: "paris" })).score,
        ).toBe(1);
        expect((await exactVerifier().score({ response: "Paris", reference: "paris" })).score).toBe(0);
        const rx = regexVerifier(/ANSWER\((\w+)\)/);
        expect(await rx.score({ response: "ANSWER(a) then ANSWER(b)", reference: "b" })).toEqual({
            score: 1,
            extracted: "b",
        });
        const f = fnVerifier("len", (it) => (it.response.length > 3 ? 1 : 0));
        expect((await f.score({ response: "long", reference: "" })).score).toBe(1);
        const bad = fnVerifier("bad", () => 2);
        await expect(bad.score({ response: "x", reference: "" })).rejects.toThrow(
            /bad: expected a score in \[0, 1\], got 2/,
        );
    });
});

describe("HttpVerifier", () => {
    let server: Server;
    let url = "";
    const script: ((body: string, res: import("node:http").ServerResponse) => void)[] = [];
    let hits = 0;
    beforeAll(async () => {
        server = createServer((req, res) => {
            let body = "";
            req.on("data", (c) => (body += c));
            req.on("end", () => {
                hits++;
                const step = script.shift();
                if (step) step(body, res);
                else {
                    res.writeHead(200, { "content-type": "application/json" });
                    res.end(JSON.stringify({ results: JSON.parse(body).items.map(() => ({ score: 0.25 })) }));
                }
            });
        });
        await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
        url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/verify`;
    });
    afterAll(() => new Promise<void>((r) => server.close(() => r())));

    it("posts a batch and reads the scores; retries a 500 and then succeeds", async () => {
        const v = new HttpVerifier({ url, retries: 2, backoffMs: 5 });
        script.push((_, res) => {
            res.writeHead(500);
            res.end("boom");
        });
        hits = 0;
        const out = await v.scoreBatch([
            { response: "a", reference: 1 },
            { response: "b", reference: 2 },
        ]);
        expect(out.map((o) => o.score)).toEqual([0.25, 0.25]);
        expect(hits).toBe(2);
    });

    it("rejects a malformed reply clearly, times out, and honours abort", async () => {
        const v = new HttpVerifier({ url, retries: 0, timeoutMs: 200 });
        script.push((_, res) => {
            res.writeHead(200);
            res.end("{not json");
        });
        await expect(v.score({ response: "a", reference: 1 })).rejects.toThrow(/malformed reply: expected JSON/);
        script.push((_, res) => {
            res.writeHead(200);
            res.end(JSON.stringify({ results: [{ score: 7 }] }));
        });
        await expect(v.score({ response: "a", reference: 1 })).rejects.toThrow(
            /results\[0\].score: expected a number in \[0, 1\]/,
        );
        script.push(() => {
            /* never answers */
        });
        await expect(v.score({ response: "a", reference: 1 })).rejects.toThrow(/failed after 1 attempts/);
        script.push(() => {
            /* never answers */
        });
        const ac = new AbortController();
        const p = new HttpVerifier({ url, retries: 0, timeoutMs: 10_000 }).score(
            { response: "a", reference: 1 },
            { signal: ac.signal },
        );
        setTimeout(() => ac.abort(new Error("stopped")), 20);
        const t0 = Date.now();
        await expect(p).rejects.toThrow(/stopped/);
        expect(Date.now() - t0).toBeLessThan(2000);
        expect(() => new HttpVerifier({ url: "not a url" })).toThrow();
    });

    it("scoreAll records failures instead of scoring them 0", async () => {
        const flaky = fnVerifier("flaky", (it) => {
            if (it.response === "x") throw new Error("service down");
            return 1;
        });
        const out = await scoreAll(
            flaky,
            [
                { response: "a", reference: 1 },
                { response: "x", reference: 1 },
            ],
            { concurrency: 2 },
        );
        expect(out[0]).toEqual({ ok: true, verdict: { score: 1, extracted: null } });
        expect(out[1]).toEqual({ ok: false, error: "service down" });
    });
});
