// splitsum.test.ts: split-sum needs collaboration: each of 2 agents sees only its own digit, so alone it is at
// chance (~0.1). Co-trained with MAPoRL (3 turns, the wrongButUseful incentive: an agent whose wrong answer lets a
// peer turn right is paid), the team discovers a protocol (announce your digit, then add the peer's) and far
// exceeds chance; the independent control (agent 0 trained against the frozen warm-started partner, which builds
// on a peer's answer only 15 % of the time) stays at chance. The recipe is the README's; numbers are
// deterministic for a seed and a SIMD level (the model's float sums differ between AVX2 and AVX-512, and so does
// the trajectory): calibration runs at turn 3, AVX-512 untrained .105, MAPoRL .282, control .100; AVX2 .107, .237,
// .090. The test runs at AVX2 (every x86-64 CI machine has it, so it gives the same numbers everywhere); the
// thresholds, 2x chance and a 0.1 gap over the control, are over 4 standard errors at 200 held-out questions.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

import { backend, setSimd } from "../../lib/index.js";
import { trainJob } from "../../lib/train/job/job.js";
import { formatSummary } from "../../lib/train/job/summary.js";

const work = mkdtempSync(join(tmpdir(), "maporl-splitsum-"));
afterAll(() => {
    rmSync(work, { recursive: true, force: true });
    setSimd("best");
});

describe("train: split-sum (2 agents, 3 turns)", () => {
    it("co-trained agents far exceed chance; the independent control does not", async () => {
        if (backend().simd !== "scalar") setSimd("avx2");
        const s = await trainJob({
            out: join(work, "run"),
            config: {
                task: "split-sum",
                agents: 2,
                turns: 3,
                iterations: 400,
                evalEvery: 1000,
                sft: { steps: 400, batchSize: 32, lr: 2e-3 },
                taskOptions: { steps: 3, maxOperand: 9, digits: 1, peerUse: 0.15 },
                maporl: {
                    bonus: {
                        correctedAlone: 0,
                        persuadedCorrectly: 0,
                        wrongButUseful: 2,
                        persuasive: 0,
                        signs: "paper",
                    },
                },
            },
        });
        console.log(formatSummary(s));
        const [untrained, maporl, independent] = s.rows.map((r) => r.majorityAccuracy[2]);
        const chance = 0.1; // one digit alone: the other is uniform over 10
        expect(untrained).toBeLessThan(chance + 0.05);
        expect(maporl).toBeGreaterThan(2 * chance);
        expect(independent).toBeLessThan(chance + 0.05);
        expect(maporl - independent).toBeGreaterThan(0.1);
    }, 900_000);
});
