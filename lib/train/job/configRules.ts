// configRules.ts: the training config's value rules (ranges and choices per dotted key) and the merge of a partial
// config over the defaults' shape that applies them; config.ts resolves the whole config with it.
import { editDistance } from "../../validate.js";

/** The choices of the keys the command line offers as flags (lib/cli/commands/train.ts lists and checks them from here). */
export const TASKS = ["arith-debate", "split-sum", "tool-lookup", "gsm8k"] as const,
    ALGOS = ["maporl", "magrpo", "collm-cc", "collm-dc"] as const,
    SCHEDULES = ["joint", "independent", "alternating", "turn-based"] as const,
    DEVICES = ["cpu", "cuda", "auto"] as const;

type Rule = { int?: [number, number]; num?: [number, number]; choices?: readonly string[] };
const RULES: Record<string, Rule> = {
    task: { choices: TASKS },
    algo: { choices: ALGOS },
    schedule: { choices: SCHEDULES },
    device: { choices: DEVICES },
    matmulPrecision: { choices: ["highest", "high"] },
    "model.dtype": { choices: ["float32", "bfloat16", "int8"] },
    "taskOptions.steps": { int: [1, 8] },
    "taskOptions.maxOperand": { int: [2, 99] },
    "taskOptions.digits": { int: [1, 2] },
    "taskOptions.peerUse": { num: [0, 1] },
    "taskOptions.keyUse": { num: [0, 1] },
    "taskOptions.padUse": { num: [0, 1] },
    "taskOptions.hops": { int: [1, 6] },
    agents: { int: [2, 8] },
    turns: { int: [1, 8] },
    seed: { int: [0, 2 ** 31 - 1] },
    iterations: { int: [0, 1e7] },
    episodesPerIteration: { int: [1, 4096] },
    evalEpisodes: { int: [1, 100000] },
    evalEvery: { int: [1, 1e7] },
    "sampling.temperature": { num: [0, 10] },
    "sampling.maxTokens": { int: [1, 4096] },
    "model.layers": { int: [1, 64] },
    "model.heads": { int: [1, 64] },
    "model.dModel": { int: [8, 4096] },
    "model.contextLength": { int: [16, 8192] },
    "lora.rank": { int: [1, 4096] },
    "lora.alpha": { num: [1e-6, 1e6] },
    "lora.dropout": { num: [0, 0.99] },
    "critic.layers": { int: [1, 64] },
    "critic.heads": { int: [1, 64] },
    "critic.dModel": { int: [8, 4096] },
    "sft.steps": { int: [0, 1e7] },
    "sft.batchSize": { int: [1, 4096] },
    "sft.lr": { num: [0, 1] },
    lr: { num: [0, 1] },
    criticLr: { num: [0, 1] },
    "maporl.klCoef": { num: [0, 100] },
    "maporl.discount": { num: [0, 1] },
    "maporl.gamma": { num: [0, 1] },
    "maporl.lambda": { num: [0, 1] },
    "maporl.ppoEpochs": { int: [1, 100] },
    "maporl.clip": { num: [0, 10] },
    "maporl.valueClip": { num: [0, 100] },
    "maporl.bonus.correctedAlone": { num: [0, 100] },
    "maporl.bonus.persuadedCorrectly": { num: [0, 100] },
    "maporl.bonus.wrongButUseful": { num: [0, 100] },
    "maporl.bonus.persuasive": { num: [0, 100] },
    "maporl.bonus.signs": { choices: ["paper", "reference-code"] },
    "magrpo.generations": { int: [2, 64] },
    "magrpo.baseline": { choices: ["mean", "max", "rloo", "none"] },
    "magrpo.joint": { choices: ["aligned", "cross"] },
    "magrpo.grouping": { choices: ["state", "agent-turn", "agent"] },
    "magrpo.discount": { num: [0, 1] },
    "magrpo.klCoef": { num: [0, 100] },
    "collm.gamma": { num: [0, 1] },
    alternatingPeriod: { int: [1, 1e7] },
    "turnBased.initialIterations": { int: [0, 1e7] },
    "turnBased.period": { int: [1, 1e7] },
    "replay.capacity": { int: [1, 1e6] },
    "replay.every": { int: [1, 1e7] },
    "replay.steps": { int: [1, 1e4] },
    "replay.batchSize": { int: [1, 4096] },
    "replay.lr": { num: [0, 1] },
    "rolloutCorrection.rolloutIs": { choices: ["none", "token", "sequence", "geometric"] },
    "rolloutCorrection.rolloutIsMode": { choices: ["truncate", "mask"] },
    "rolloutCorrection.rolloutIsThreshold": { num: [1e-6, 1e12] },
    "rolloutCorrection.rolloutIsThresholdLower": { num: [0, 1e12] },
    "filterGroups.maxNumGenBatches": { int: [1, 100] },
    "overlong.buffer": { int: [0, 4096] },
    "overlong.penaltyFactor": { num: [0, 100] },
    "asyncRollout.maxStaleness": { int: [0, 8] },
    "rolloutFleet.serve": { int: [0, 16] },
    "rolloutFleet.threads": { int: [1, 256] },
    "rolloutFleet.dtype": { choices: ["float32", "bfloat16", "int8"] },
    "rolloutFleet.concurrency": { int: [1, 1024] },
};

// A list of base URLs (rolloutFleet.endpoints): http(s) only, at most 64.
function urlList(where: string, path: string, x: unknown): string[] {
    const ok = (u: unknown) => typeof u === "string" && u.length <= 2048 && /^https?:\/\/[^\s]+$/.test(u);
    if (!Array.isArray(x) || x.length > 64 || !x.every(ok))
        throw new TypeError(
            `${where}: ${path}: expected an array of at most 64 http(s) base URLs ("http://10.0.0.5:8000/v1"), got ${JSON.stringify(x)?.slice(0, 200)}`,
        );
    return x as string[];
}

// Checks `x` against the shape of `dflt` and returns the merged value.
export function merge(where: string, dflt: unknown, x: unknown, path: string): unknown {
    if (x === undefined) return dflt;
    if (Array.isArray(dflt)) return urlList(where, path, x);
    if (dflt !== null && typeof dflt === "object") {
        if (x === null || typeof x !== "object" || Array.isArray(x))
            throw new TypeError(
                `${where}: ${path ? path + ": " : ""}expected an object, got ${Array.isArray(x) ? "an array" : x === null ? "null" : typeof x}`,
            );
        const out: Record<string, unknown> = {};
        const known = Object.keys(dflt);
        for (const k of Object.keys(x)) {
            if (!known.includes(k)) {
                const best = known.map((c) => [c, editDistance(k, c)] as const).sort((p, q) => p[1] - q[1])[0];
                throw new RangeError(
                    `${where}: ${path ? path + "." : ""}${k}: unknown key${best && best[1] <= 3 ? ` (did you mean ${best[0]}?)` : ""}; known: ${known.join(", ")}`,
                );
            }
        }
        for (const k of known)
            out[k] = merge(
                where,
                (dflt as Record<string, unknown>)[k],
                (x as Record<string, unknown>)[k],
                path ? `${path}.${k}` : k,
            );
        return out;
    }
    const rule = RULES[path];
    const got = typeof x === "number" ? (Number.isNaN(x) ? "NaN" : String(x)) : JSON.stringify(x);
    if (typeof dflt === "boolean") {
        if (typeof x !== "boolean") throw new TypeError(`${where}: ${path}: expected true or false, got ${got}`);
    } else if (rule?.choices) {
        if (typeof x !== "string" || !rule.choices.includes(x))
            throw new RangeError(
                `${where}: ${path}: expected one of ${rule.choices.map((c) => `'${c}'`).join(", ")}, got ${got}`,
            );
    } else if (rule?.int) {
        if (typeof x !== "number" || !Number.isInteger(x) || x < rule.int[0] || x > rule.int[1])
            throw new RangeError(
                `${where}: ${path}: expected an integer in [${rule.int[0]}, ${rule.int[1]}], got ${got}`,
            );
    } else if (rule?.num) {
        if (typeof x !== "number" || !(x >= rule.num[0] && x <= rule.num[1]))
            throw new RangeError(
                `${where}: ${path}: expected a number in [${rule.num[0]}, ${rule.num[1]}], got ${got}`,
            );
    } else if (typeof x !== typeof dflt)
        throw new TypeError(`${where}: ${path}: expected a ${typeof dflt}, got ${got}`);
    return x;
}
