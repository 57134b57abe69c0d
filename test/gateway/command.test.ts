// commandProgram: an unchanged agent program run as a command per episode (a node script with the openai SDK, which
// reads OPENAI_BASE_URL from the environment); its output scored, or its own posted reward; a crash, a hang and a
// flood of output each fail only their episode, with why.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { NativePolicy } from "../../lib/index.js";
import { commandProgram } from "../../lib/gateway/command.js";
import { type Gateway, startGateway } from "../../lib/gateway/gateway.js";
import { trainGatewayIteration } from "../../lib/gateway/train.js";
import { tinyHfModel } from "../helpers/serve.js";

const AGENT = join(import.meta.dirname, "..", "fixtures", "gateway", "agent.mjs");
let work: string, a: NativePolicy, b: NativePolicy, gw: Gateway;
beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "maporl-gwcmd-"));
    await tinyHfModel(join(work, "m"), 5);
    a = await NativePolicy.load(join(work, "m"));
    b = await NativePolicy.load(join(work, "m"));
    gw = await startGateway({ agents: { researcher: a, solver: b }, port: 0 });
});
afterAll(async () => {
    await gw.close();
    await a.dispose();
    await b.dispose();
    rmSync(work, { recursive: true, force: true });
});

describe("commandProgram", () => {
    it("runs the command per episode with the episode's base URL; its output is scored, the agents trained", async () => {
        const outputs: string[] = [];
        const r = await trainGatewayIteration(["2 + 3?", "4 + 1?"], {
            gateway: gw,
            models: { researcher: a, solver: b },
            program: commandProgram({ command: process.execPath, args: [AGENT] }),
            reward: (_item, out, ep) => {
                outputs.push(String(out));
                expect(String(out)).toBe(ep.calls[1].samples[0].text.trim());
                return String(out).length;
            },
            groups: 2,
            lr: 1e-3,
        });
        expect(r.failed).toEqual([]);
        expect(r.episodes.map((e) => e.calls.map((c) => c.agent))).toEqual(Array(4).fill(["researcher", "solver"]));
        expect(r.episodes.map((e) => e.calls[0].messages[0].content)).toEqual(["2 + 3?", "2 + 3?", "4 + 1?", "4 + 1?"]);
        expect(outputs).toHaveLength(4);
        expect(r.agents.solver.rows).toBe(4);
    }, 60_000);

    it("a program that posts its own reward; a crash, a hang and a flood fail only their episodes, with why", async () => {
        const modes = ["reward", "crash", "hang", "flood"];
        const r = await trainGatewayIteration(modes, {
            gateway: gw,
            models: { solver: b },
            program: (run) =>
                commandProgram<string>({
                    command: process.execPath,
                    args: [AGENT],
                    env: { MAPORL_AGENT_MODE: run.item },
                    timeoutMs: 3000,
                    maxOutputBytes: 1 << 20,
                })(run),
            groups: 2,
            lr: 1e-3,
        });
        const why = (mode: string) => r.failed.find((f) => f.episode.endsWith(`-${modes.indexOf(mode)}-0`))?.reason;
        expect(r.failed).toHaveLength(6);
        expect(why("crash")).toMatch(/exited with code 1: something broke/);
        expect(why("hang")).toMatch(/ran past 3000 ms \(timeoutMs\)/);
        expect(why("flood")).toMatch(/over 1048576 bytes .*maxOutputBytes/);
        const rewarded = r.episodes.filter((e) => e.status === "rewarded");
        expect(rewarded).toHaveLength(2);
        expect(rewarded.map((e) => e.reward)).toEqual(rewarded.map((e) => e.calls[1].samples[0].text.length));
    }, 60_000);

    it("refuses bad options with their names", () => {
        expect(() => commandProgram({ command: "" })).toThrow(/command: expected/);
        expect(() => commandProgram({ command: "x", timeoutMs: 0 })).toThrow(/timeoutMs/);
        expect(() => commandProgram({ command: "x", maxOutputBytes: 1.5 })).toThrow(/maxOutputBytes/);
    });
});
