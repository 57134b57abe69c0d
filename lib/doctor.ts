// doctor.ts: `maporl doctor`: checks an installation and says what to do. The backend (version, threads, SIMD, the
// CUDA build and its devices); every kernel at every SIMD level this CPU has against a float64 reference written
// here (GAE, REINFORCE++ returns, GRPO advantages, the PPO loss and its gradient, log-probs and entropies, the fused
// loss's gradient) and the sampler's tokens across levels (the same by contract); one thread against many, bit for
// bit; the embedded model generating the same twice. Where a GPU is visible: every kernel on CUDA against the CPU
// (the tokens equal, the rest within the documented tolerances) and the model's log-probs, a training step and
// decoding on CUDA against the CPU. The report is plain text to paste into a bug report (or JSON).
import { arch, cpus, platform } from "node:os";

import { backend, setSimd, setThreads, type SimdLevel } from "./backend.js";
import { NativePolicy } from "./model/nativePolicy.js";
import { mulberry32 } from "./random.js";
import { gae } from "./rl/gae.js";
import { groupAdvantages } from "./rl/groupAdvantages.js";
import { fusedPolicyLoss, logprobs } from "./rl/logits.js";
import { policyLoss } from "./rl/policyLoss.js";
import { reinforceReturns } from "./rl/reinforceReturns.js";
import { sample } from "./rl/sampling.js";

export interface DoctorCheck {
    name: string;
    status: "pass" | "fail" | "skip";
    detail: string;
}
export interface DoctorReport {
    version: string;
    node: string;
    platform: string;
    cpu: string;
    threads: number;
    simd: SimdLevel[];
    cuda: { compiled: boolean; devices: string[] };
    checks: DoctorCheck[];
    passed: number;
    failed: number;
}

type Dev = "cpu" | "cuda";
const B = 6,
    T = 37,
    N = 24,
    V = 1000,
    G = 4;

function data(seed: number) {
    const r = mulberry32(seed),
        f = (n: number, s = 1, o = 0) => Float32Array.from({ length: n }, () => o + s * (2 * r() - 1));
    const lens = Array.from({ length: B }, (_, b) => (b === 0 ? 0 : 1 + Math.floor(r() * T)));
    const mask = Uint8Array.from({ length: B * T }, (_, i) => (i % T < lens[Math.floor(i / T)]! ? 1 : 0));
    const logp = f(B * T, 1, -1.5),
        oldLogp = Float32Array.from(logp, (x) => x + 0.3 * (2 * r() - 1));
    return {
        rewards: f(B * T),
        values: f(B * T),
        mask,
        logp,
        oldLogp,
        adv: f(B * T),
        scores: f(B * G),
        groups: Int32Array.from({ length: B * G }, (_, i) => i % B),
        logits: f(N * V, 4),
        targets: Int32Array.from({ length: N }, () => Math.floor(r() * V)),
        rowMask: Uint8Array.from({ length: N }, () => (r() < 0.9 ? 1 : 0)),
        rowAdv: f(N),
        rowOld: f(N, 1, -7),
    };
}
type Data = ReturnType<typeof data>;

// ---- float64 references ----
function gaeRef(d: Data, gamma: number, lambda: number) {
    const A = new Float64Array(B * T),
        R = new Float64Array(B * T);
    for (let b = 0; b < B; b++) {
        let next = 0,
            carry = 0;
        for (let t = T - 1; t >= 0; t--) {
            const i = b * T + t;
            if (!d.mask[i]) continue;
            const delta = d.rewards[i]! + gamma * next - d.values[i]!;
            carry = delta + gamma * lambda * carry;
            next = d.values[i]!;
            A[i] = carry;
            R[i] = carry + d.values[i]!;
        }
    }
    return { A, R };
}
function returnsRef(d: Data, gamma: number) {
    const R = new Float64Array(B * T);
    for (let b = 0; b < B; b++)
        for (let t = T - 1, run = 0; t >= 0; t--) {
            const i = b * T + t;
            run = d.mask[i] ? d.rewards[i]! + gamma * run : 0;
            R[i] = run;
        }
    return R;
}
function grpoRef(d: Data) {
    const out = new Float64Array(B * G);
    for (let g = 0; g < B; g++) {
        const idx = [...d.groups.keys()].filter((i) => d.groups[i] === g),
            xs = idx.map((i) => d.scores[i]!);
        const m = xs.reduce((a, b) => a + b, 0) / xs.length,
            sd = Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1));
        idx.forEach((i) => {
            out[i] = (d.scores[i]! - m) / (sd + 1e-6);
        });
    }
    return out;
}
function ppoRef(d: Data) {
    // token-mean, clip 0.2: loss and d loss / d logp
    let n = 0;
    for (const m of d.mask) n += m;
    const grad = new Float64Array(B * T);
    let loss = 0;
    for (let i = 0; i < B * T; i++) {
        if (!d.mask[i]) continue;
        const r = Math.exp(d.logp[i]! - d.oldLogp[i]!),
            a = d.adv[i]!,
            l1 = -a * r,
            l2 = -a * Math.min(Math.max(r, 0.8), 1.2);
        loss += Math.max(l1, l2) / n;
        grad[i] = l1 >= l2 ? (-a * r) / n : 0;
    }
    return { loss, grad };
}
function logprobsRef(d: Data) {
    const lp = new Float64Array(N),
        H = new Float64Array(N);
    for (let i = 0; i < N; i++) {
        const row = d.logits.subarray(i * V, i * V + V);
        let mx = -Infinity;
        for (const x of row) mx = Math.max(mx, x);
        let s = 0;
        for (const x of row) s += Math.exp(x - mx);
        const lse = mx + Math.log(s);
        lp[i] = row[d.targets[i]!]! - lse;
        let h = 0;
        for (const x of row) {
            const p = Math.exp(x - lse);
            h -= p * (x - lse);
        }
        H[i] = h;
    }
    return { lp, H };
}

const gaeWhitened = (d: Data, dev: Dev) =>
    gae(
        { rewards: d.rewards, values: d.values, mask: d.mask, shape: [B, T] },
        { gamma: 0.99, lambda: 0.95, whiten: true, device: dev },
    ).advantages;

// Every kernel once on `dev`.
function runKernels(d: Data, dev: Dev) {
    return {
        gae: gae(
            { rewards: d.rewards, values: d.values, mask: d.mask, shape: [B, T] },
            { gamma: 0.99, lambda: 0.95, device: dev },
        ),
        gaeW: gaeWhitened(d, dev),
        ret: reinforceReturns({ rewards: d.rewards, mask: d.mask, shape: [B, T] }, { gamma: 0.9, device: dev }).returns,
        grpo: groupAdvantages({ scores: d.scores, groups: d.groups }, { device: dev }),
        ppo: policyLoss(
            { logp: d.logp, oldLogp: d.oldLogp, advantages: d.adv, mask: d.mask, shape: [B, T] },
            { device: dev },
        ),
        lp: logprobs({ logits: d.logits, targets: d.targets, shape: [N, V] }, { entropy: true, device: dev }),
        fused: fusedPolicyLoss(
            {
                logits: d.logits,
                targets: d.targets,
                oldLogp: d.rowOld,
                advantages: d.rowAdv,
                mask: d.rowMask,
                shape: [N, V],
            },
            { device: dev },
        ),
        tokens: sample(
            { logits: d.logits, shape: [N, V] },
            { temperature: 0.8, topK: 50, topP: 0.9, seed: 7n, position: 3, device: dev },
        ),
    };
}
type Run = ReturnType<typeof runKernels>;

const maxDiff = (a: ArrayLike<number>, b: ArrayLike<number>, mask?: ArrayLike<number>) => {
    let w = 0;
    for (let i = 0; i < a.length; i++) if (!mask || mask[i]) w = Math.max(w, Math.abs(a[i]! - b[i]!));
    return w;
};

/** Runs every check; `log` gets each line as it is decided. */
export async function doctor(options: { log?: (line: string) => void } = {}): Promise<DoctorReport> {
    const log = options.log ?? (() => {}),
        checks: DoctorCheck[] = [];
    const check = (name: string, ok: boolean, detail: string) => {
        checks.push({ name, status: ok ? "pass" : "fail", detail });
        log(`${ok ? "PASS" : "FAIL"}  ${name}: ${detail}`);
    };
    const skip = (name: string, detail: string) => {
        checks.push({ name, status: "skip", detail });
        log(`skip  ${name}: ${detail}`);
    };
    const within = (name: string, diff: number, tol: number, what = "max |diff|") =>
        check(name, diff <= tol, `${what} ${diff.toExponential(2)} (tolerance ${tol.toExponential(0)})`);

    const b = backend(),
        best = setSimd("best");
    const simd = (["scalar", "avx2", "avx512"] as SimdLevel[]).slice(0, ["scalar", "avx2", "avx512"].indexOf(best) + 1);
    const report: DoctorReport = {
        version: b.version,
        node: process.version,
        platform: `${platform()} ${arch()}`,
        cpu: cpus()[0]?.model ?? "?",
        threads: b.threads,
        simd,
        cuda: {
            compiled: b.cuda.compiled,
            devices: b.cuda.devices.map((x) => `${x.name} (compute ${x.computeCapability})`),
        },
        checks,
        passed: 0,
        failed: 0,
    };
    log(`maporl ${report.version}, node ${report.node}, ${report.platform}, ${report.cpu}`);
    log(
        `threads ${b.threads}, SIMD levels ${simd.join(" / ")}, CUDA ${b.cuda.compiled ? `compiled, ${b.cuda.devices.length} device(s)${report.cuda.devices.length ? ": " + report.cuda.devices.join(", ") : ""}` : "not compiled"}`,
    );

    const d = data(1);
    const run = (dev: Dev) => runKernels(d, dev);
    const g = gaeRef(d, 0.99, 0.95),
        ret = returnsRef(d, 0.9),
        grpo = grpoRef(d),
        ppo = ppoRef(d),
        lpr = logprobsRef(d);
    let scalarTokens: Int32Array | null = null;
    try {
        for (const level of simd) {
            setSimd(level);
            const x = run("cpu");
            within(
                `gae (${level})`,
                Math.max(maxDiff(x.gae.advantages, g.A, d.mask), maxDiff(x.gae.returns, g.R, d.mask)),
                1e-4,
            );
            within(`reinforceReturns (${level})`, maxDiff(x.ret, ret, d.mask), 1e-5);
            within(`groupAdvantages grpo (${level})`, maxDiff(x.grpo, grpo), 1e-5);
            within(
                `policyLoss ppo (${level})`,
                Math.max(Math.abs(x.ppo.loss - ppo.loss), maxDiff(x.ppo.gradLogp, ppo.grad, d.mask)),
                1e-5,
            );
            within(
                `logprobs + entropy (${level})`,
                Math.max(maxDiff(x.lp.logp, lpr.lp), maxDiff(x.lp.entropy!, lpr.H)),
                1e-4,
            );
            within(`fusedPolicyLoss log-probs (${level})`, maxDiff(x.fused.logp, lpr.lp, d.rowMask), 1e-4);
            const valid = x.tokens.valid.every((v) => v === 1);
            if (level === "scalar") {
                scalarTokens = x.tokens.tokens;
                check(
                    "sample (scalar)",
                    valid,
                    valid ? `${N} rows, every row valid` : "a row of finite logits came back invalid",
                );
                continue;
            }
            const same = valid && x.tokens.tokens.every((t, i) => t === scalarTokens![i]);
            check(
                `sample tokens (${level} = scalar)`,
                same,
                same ? `${N} rows, the same tokens` : "tokens differ from the scalar level's (they must not)",
            );
        }
    } finally {
        setSimd("best");
    }
    const many = gaeWhitened(d, "cpu"),
        threads = b.threads;
    setThreads(1);
    const one = gaeWhitened(d, "cpu");
    setThreads(threads);
    check(
        "thread count (1 against " + threads + ")",
        maxDiff(one, many) === 0,
        maxDiff(one, many) === 0 ? "bit-identical" : `differs by ${maxDiff(one, many)}`,
    );

    const policy = await NativePolicy.create({ contextLength: 64, layers: 1, heads: 2, dModel: 16, seed: 3 });
    try {
        const req = [{ prompt: "12+7=", sampling: { temperature: 1, maxTokens: 12 }, seed: 5 }];
        const [a] = await policy.generate(req),
            [c] = await policy.generate(req);
        check(
            "embedded model generates the same twice",
            a!.text === c!.text && a!.logprobs!.every((x, i) => x === c!.logprobs![i]),
            JSON.stringify(a!.text),
        );
    } finally {
        await policy.dispose();
    }

    if (!b.cuda.compiled) skip("CUDA", "not compiled (rebuild with MAPORL_CUDA=1 and nvcc for the GPU path)");
    else if (b.cuda.devices.length === 0)
        skip("CUDA", "compiled, but no GPU or driver is visible (nvidia-smi should list one)");
    else await cudaChecks(run, d, within, check);

    report.passed = checks.filter((c) => c.status === "pass").length;
    report.failed = checks.filter((c) => c.status === "fail").length;
    log(
        `\ndoctor: ${report.passed} passed, ${report.failed} failed${report.failed ? " (paste this report into an issue)" : ""}`,
    );
    return report;
}

async function cudaChecks(
    run: (dev: Dev) => Run,
    d: Data,
    within: (name: string, diff: number, tol: number) => void,
    check: (name: string, ok: boolean, detail: string) => void,
): Promise<void> {
    let cpu: Run, gpu: Run;
    try {
        cpu = run("cpu");
        gpu = run("cuda");
    } catch (e) {
        check("CUDA kernels run", false, (e as Error).message);
        return;
    }
    within(
        "CUDA gae",
        Math.max(
            maxDiff(gpu.gae.advantages, cpu.gae.advantages, d.mask),
            maxDiff(gpu.gae.returns, cpu.gae.returns, d.mask),
        ),
        1e-4,
    );
    within("CUDA gae whitened", maxDiff(gpu.gaeW, cpu.gaeW, d.mask), 1e-4);
    within("CUDA reinforceReturns", maxDiff(gpu.ret, cpu.ret, d.mask), 1e-5);
    within("CUDA groupAdvantages", maxDiff(gpu.grpo, cpu.grpo), 1e-5);
    within(
        "CUDA policyLoss",
        Math.max(Math.abs(gpu.ppo.loss - cpu.ppo.loss), maxDiff(gpu.ppo.gradLogp, cpu.ppo.gradLogp, d.mask)),
        1e-5,
    );
    within(
        "CUDA logprobs + entropy",
        Math.max(maxDiff(gpu.lp.logp, cpu.lp.logp), maxDiff(gpu.lp.entropy!, cpu.lp.entropy!)),
        1e-5,
    );
    within(
        "CUDA fusedPolicyLoss gradient",
        Math.max(Math.abs(gpu.fused.loss - cpu.fused.loss), maxDiff(gpu.fused.gradLogits, cpu.fused.gradLogits)),
        1e-6,
    );
    const same = gpu.tokens.tokens.every((t, i) => t === cpu.tokens.tokens[i]);
    check(
        "CUDA sample tokens = CPU",
        same,
        same
            ? `${N} rows, the same tokens; log-probs within ${maxDiff(gpu.tokens.logprobs, cpu.tokens.logprobs).toExponential(2)}`
            : "tokens differ (they must not)",
    );
    // The embedded model: log-probs, one training step, then decoding, on CUDA against the CPU.
    const mk = (device: Dev) =>
        NativePolicy.create({ contextLength: 64, layers: 2, heads: 2, dModel: 32, seed: 9, device });
    let c: NativePolicy | null = null,
        gp: NativePolicy | null = null;
    try {
        c = await mk("cpu");
        gp = await mk("cuda");
        const tokens = Int32Array.from({ length: 4 * 24 }, (_, i) => (i * 7 + 3) % 64),
            shape = [4, 24] as const;
        within(
            "CUDA model log-probs",
            maxDiff(await gp.logprobs({ tokens, shape }), await c.logprobs({ tokens, shape })),
            1e-4,
        );
        const targets = Int32Array.from(tokens, (_, i) => tokens[i % 24 === 23 ? i : i + 1]!),
            mask = new Uint8Array(tokens.length).fill(1);
        for (const p of [c, gp]) await p.trainStep({ tokens, targets, mask, shape }, { loss: "sft", lr: 1e-2 });
        within(
            "CUDA model after a training step",
            maxDiff(await gp.logprobs({ tokens, shape }), await c.logprobs({ tokens, shape })),
            1e-3,
        );
        const req = [{ prompt: "3+4=", sampling: { temperature: 0, maxTokens: 10 }, seed: 1 }];
        const [x] = await c.generate(req),
            [y] = await gp.generate(req);
        check(
            "CUDA model greedy decoding = CPU",
            x!.text === y!.text,
            `${JSON.stringify(y!.text)} vs ${JSON.stringify(x!.text)}`,
        );
    } catch (e) {
        check("CUDA model", false, (e as Error).message);
    } finally {
        await c?.dispose();
        await gp?.dispose();
    }
}
