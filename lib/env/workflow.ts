// workflow.ts: teams with roles, tools and a shared artifact: a Dec-POMDP written as a role graph.
//   agents I        the roles (each with its Policy, standing instructions and the tools it is offered);
//   observations    what a role sees: its own conversation (instructions, the messages the workflow addresses to it
//                   via observe(), its own answers and tool exchanges), never another role's context;
//   actions         a whole response, possibly after tool calls (up to maxToolRounds rounds per turn);
//   transition      the tools run and may update the shared artifact; next() picks who acts next (a hand-off, a
//                   reviewer loop back to a coder) or ends the episode (null: a final answer, an approval);
//   reward          reward() of the final state, the team's joint reward, plus milestones() per turn and loop
//                   penalties as shaped per-role rewards;
//   horizon H       at most `horizon` agent turns.
// Loops are detected (loops.ts) and, by default, end the episode. A failed model request, a tool that throws or hangs
// are an error of that episode (a tool error goes back to the agent as its tool message), never of the process; the
// other episodes of runBatch go on. Every turn is a span for the tracer: role, tools called and their errors, the
// delegation chain that led to it, the artifact version it saw and left.
import type { Span, Tracer } from "../debate/trace.js";
import { generateSettled, policyMessage } from "../policy/settle.js";
import { type ChatMessage, type Policy, type SamplingOptions, samplingOptions } from "../policy/types.js";
import type { ArtifactVersion, SharedArtifact } from "./artifact.js";
import { type LoopEvent, LoopDetector, loopOptions, type LoopOptions } from "./loops.js";
import { checkTools, runToolCall, type Tool, type ToolResult, toolSpec } from "./tools.js";

export interface WorkflowRole {
    name: string;
    policy: Policy;
    /** Standing instructions (the role's system message). */
    instructions: string;
    /** The tools offered to this role, by name (default: every tool whose `roles` allows it). */
    tools?: string[];
    sampling?: SamplingOptions;
}

/** One agent turn of an episode. */
export interface WorkflowTurn {
    turn: number;
    role: string;
    /** The roles whose hand-offs led here, oldest first (consecutive turns of one role counted once); its length is
     * the delegation depth. */
    delegation: string[];
    /** What the workflow told the role at the start of its turn (observe()). */
    observation: string;
    text: string;
    toolResults: ToolResult[];
    /** The artifact version the turn started from, and the one it left (equal when it wrote nothing). */
    artifactSeen: number | null;
    artifactAfter: number | null;
    /** Shaped reward of this turn: milestones plus loop penalties. */
    shaped: number;
    usage: { promptTokens: number; completionTokens: number };
    latencyMs: number;
    finishReason: string;
    /** Each generation of the turn (one per tool round) as the model read and sampled it, when the policy gives token
     * ids (native models, servers returning ids): what trainWorkflow trains on. */
    samples?: { promptTokenIds: number[]; tokenIds: number[] }[];
    /** The credit trainWorkflow assigned to this turn (the role's group-relative advantage), once trained. */
    credit?: number;
}

export interface WorkflowState<I> {
    item: I;
    turns: WorkflowTurn[];
    artifact: SharedArtifact | null;
}

export interface WorkflowSpec<I> {
    roles: WorkflowRole[];
    tools?: Tool<never>[];
    /** A fresh shared artifact for each episode (its read / write tools are added for the roles). */
    artifact?: (item: I) => SharedArtifact;
    /** The roles that may write the artifact (default: all). */
    artifactWriters?: string[];
    /** The first role to act. */
    start: string | ((item: I) => string);
    /** The user message a role receives when its turn starts: its observation of what happened since its last turn. */
    observe(role: string, state: WorkflowState<I>): string;
    /** Who acts after the last turn; null ends the episode. */
    next(state: WorkflowState<I>): string | null;
    /** The team's joint reward at the end (it may run checks). */
    reward(state: WorkflowState<I>): number | Promise<number>;
    /** Shaped milestone reward of a turn (e.g. a valid tool call, a passing sub-check). */
    milestones?(turn: WorkflowTurn, state: WorkflowState<I>): number;
    /** H: agent turns at most. */
    horizon: number;
    /** Tool-call rounds within one turn at most (then the turn ends with what the model said). Defaults to 4. */
    maxToolRounds?: number;
    loops?: LoopOptions;
}

export interface WorkflowEpisode<I> {
    item: I;
    turns: WorkflowTurn[];
    /** Every version of the shared artifact, oldest first. */
    artifact: ArtifactVersion[];
    /** The joint reward (NaN when the episode failed before it could be computed). */
    reward: number;
    /** Shaped rewards summed per role. */
    shaped: Record<string, number>;
    loops: LoopEvent[];
    stoppedBy: "done" | "horizon" | "loop" | "error";
    error?: { turn: number; role: string; message: string };
}

export class Workflow<I> {
    private readonly spec: WorkflowSpec<I>;
    private readonly byName: Map<string, WorkflowRole>;
    private readonly loopOpts: Required<LoopOptions>;

    constructor(
        spec: WorkflowSpec<I>,
        private readonly o: { tracer?: Tracer; runId?: string; seed?: number } = {},
    ) {
        const where = "Workflow";
        if (!spec || typeof spec !== "object") throw new TypeError(`${where}: spec: expected an object`);
        if (!Array.isArray(spec.roles) || spec.roles.length === 0)
            throw new TypeError(`${where}: roles: expected a non-empty array`);
        this.byName = new Map();
        spec.roles.forEach((r, k) => {
            if (!r || typeof r.name !== "string" || r.name === "")
                throw new TypeError(`${where}: roles[${k}].name: expected a non-empty string`);
            if (this.byName.has(r.name)) throw new TypeError(`${where}: roles[${k}].name: '${r.name}' twice`);
            if (!r.policy || typeof r.policy.generate !== "function")
                throw new TypeError(`${where}: roles[${k}].policy: expected a Policy (with generate())`);
            if (typeof r.instructions !== "string")
                throw new TypeError(`${where}: roles[${k}].instructions: expected a string`);
            if (r.sampling !== undefined) samplingOptions(where, `roles[${k}].sampling`, r.sampling);
            this.byName.set(r.name, r);
        });
        checkTools(where, spec.tools ?? []);
        for (const f of ["observe", "next", "reward"] as const)
            if (typeof spec[f] !== "function") throw new TypeError(`${where}: ${f}: expected a function`);
        if (!Number.isInteger(spec.horizon) || spec.horizon < 1)
            throw new RangeError(`${where}: horizon: expected an integer >= 1, got ${String(spec.horizon)}`);
        const rounds = spec.maxToolRounds ?? 4;
        if (!Number.isInteger(rounds) || rounds < 0)
            throw new RangeError(`${where}: maxToolRounds: expected an integer >= 0, got ${String(rounds)}`);
        if (typeof spec.start === "string" && !this.byName.has(spec.start))
            throw new RangeError(`${where}: start: no role named '${spec.start}'`);
        this.loopOpts = loopOptions(where, spec.loops);
        this.spec = spec;
    }

    /** Runs every item as its own episode, concurrently; one failed episode never fails the others. */
    async runBatch(items: I[], options: { signal?: AbortSignal } = {}): Promise<WorkflowEpisode<I>[]> {
        if (!Array.isArray(items)) throw new TypeError("Workflow.runBatch: items: expected an array");
        return Promise.all(
            items.map((item, k) => this.episode(item, `${this.o.runId ?? "run"}-${k}`, k, options.signal)),
        );
    }

    /** The roles, in the spec's order. */
    get roles(): readonly WorkflowRole[] {
        return this.spec.roles;
    }

    async run(item: I, options: { signal?: AbortSignal } = {}): Promise<WorkflowEpisode<I>> {
        return (await this.runBatch([item], options))[0]!;
    }

    private toolsFor(role: string, artifactTools: Tool<never>[]): Tool<never>[] {
        const all = [...(this.spec.tools ?? []), ...artifactTools];
        const named = this.byName.get(role)!.tools;
        return all.filter((t) => (named ? named.includes(t.name) : true) && (!t.roles || t.roles.includes(role)));
    }

    private async episode(item: I, id: string, k: number, signal?: AbortSignal): Promise<WorkflowEpisode<I>> {
        const artifact = this.spec.artifact ? this.spec.artifact(item) : null;
        const artifactTools = artifact ? artifact.tools(this.spec.artifactWriters) : [];
        const state: WorkflowState<I> = { item, turns: [], artifact };
        const convo = new Map<string, ChatMessage[]>();
        const loops = new LoopDetector(this.loopOpts),
            events: LoopEvent[] = [];
        const shaped: Record<string, number> = {};
        const out = (
            stoppedBy: WorkflowEpisode<I>["stoppedBy"],
            reward: number,
            error?: WorkflowEpisode<I>["error"],
        ): WorkflowEpisode<I> => ({
            item,
            turns: state.turns,
            artifact: artifact ? artifact.versions : [],
            reward,
            shaped,
            loops: events,
            stoppedBy,
            ...(error ? { error } : {}),
        });
        let role: string | null = typeof this.spec.start === "string" ? this.spec.start : this.spec.start(item);
        const delegation: string[] = [];
        for (let turn = 0; turn < this.spec.horizon && role !== null; turn++) {
            signal?.throwIfAborted();
            const r = this.byName.get(role);
            if (!r) return out("error", NaN, { turn, role, message: `next() named no role: '${role}'` });
            const tools = this.toolsFor(role, artifactTools);
            const messages = convo.get(role) ?? [{ role: "system" as const, content: r.instructions }];
            convo.set(role, messages);
            const observation = this.spec.observe(role, state);
            messages.push({ role: "user", content: observation });
            const seen = artifact ? artifact.version : null;
            const t0 = performance.now(),
                start = Date.now();
            const results: ToolResult[] = [];
            const usage = { promptTokens: 0, completionTokens: 0 };
            const samples: { promptTokenIds: number[]; tokenIds: number[] }[] = [];
            let text = "",
                finish = "stop",
                loop: LoopEvent | null = null;
            for (let round = 0; ; round++) {
                const offer = round < (this.spec.maxToolRounds ?? 4) ? tools.map(toolSpec) : [];
                const [settled] = await generateSettled(
                    r.policy,
                    [
                        {
                            messages: [...messages],
                            ...(offer.length ? { tools: offer } : {}),
                            ...(r.sampling ? { sampling: r.sampling } : {}),
                            seed: (this.o.seed ?? 0) * 1_000_003 + k * 1009 + turn * 31 + round,
                            routingKey: `${id}/${role}`,
                        },
                    ],
                    signal ? { signal } : {},
                );
                if (!settled!.ok) {
                    const message = policyMessage(r.policy, settled!.error);
                    this.span(id, turn, role, delegation, start, t0, usage, "error", results, seen, artifact, message);
                    return out("error", NaN, { turn, role, message });
                }
                const g = settled!.generation;
                if (g.promptTokenIds && g.tokenIds)
                    samples.push({ promptTokenIds: g.promptTokenIds, tokenIds: g.tokenIds });
                usage.promptTokens += g.usage.promptTokens;
                usage.completionTokens += g.usage.completionTokens;
                text = g.text;
                finish = g.finishReason;
                if (!g.toolCalls?.length || offer.length === 0) break;
                messages.push({ role: "assistant", content: g.text, toolCalls: g.toolCalls });
                for (const call of g.toolCalls) {
                    const res = await runToolCall(tools, call, {
                        role,
                        turn,
                        episode: state,
                        ...(signal ? { signal } : {}),
                    });
                    results.push(res);
                    messages.push({ role: "tool", toolCallId: call.id, name: call.name, content: res.content });
                    loop ??= loops.toolCall(role, turn, call);
                }
                if (loop) break;
            }
            messages.push({ role: "assistant", content: text });
            loop ??= loops.message(role, turn, text, artifact ? String(artifact.version) : "");
            delegation.push(role);
            const entry: WorkflowTurn = {
                turn,
                role,
                delegation: collapse(delegation.slice(0, -1)),
                observation,
                text,
                toolResults: results,
                artifactSeen: seen,
                artifactAfter: artifact ? artifact.version : null,
                shaped: 0,
                usage,
                latencyMs: performance.now() - t0,
                finishReason: finish,
                ...(samples.length ? { samples } : {}),
            };
            entry.shaped =
                (this.spec.milestones ? this.spec.milestones(entry, state) : 0) + (loop ? this.loopOpts.penalty : 0);
            shaped[role] = (shaped[role] ?? 0) + entry.shaped;
            state.turns.push(entry);
            this.span(
                id,
                turn,
                role,
                entry.delegation,
                start,
                t0,
                usage,
                finish,
                results,
                seen,
                artifact,
                undefined,
                text,
            );
            if (loop) {
                events.push(loop);
                if (this.loopOpts.stop) return out("loop", await this.spec.reward(state));
            }
            role = this.spec.next(state);
        }
        return out(role === null ? "done" : "horizon", await this.spec.reward(state));
    }

    private span(
        id: string,
        turn: number,
        role: string,
        delegation: string[],
        start: number,
        t0: number,
        usage: { promptTokens: number; completionTokens: number },
        finish: string,
        results: ToolResult[],
        seen: number | null,
        artifact: SharedArtifact | null,
        error?: string,
        text?: string,
    ): void {
        if (!this.o.tracer) return;
        const s: Span = {
            name: "workflow.turn",
            runId: this.o.runId ?? "run",
            episode: id,
            agent: this.spec.roles.findIndex((r) => r.name === role),
            turn,
            parent: delegation.length,
            startMs: start,
            latencyMs: performance.now() - t0,
            promptTokens: usage.promptTokens,
            completionTokens: usage.completionTokens,
            finishReason: finish,
            ...(error ? { error } : {}),
            ...(text !== undefined ? { text } : {}),
            role,
            delegation,
            toolCalls: results.map((x) => ({
                name: x.name,
                ok: x.ok,
                ms: x.ms,
                ...(x.error ? { error: x.error } : {}),
            })),
            toolErrors: results.filter((x) => !x.ok).length,
            ...(artifact ? { artifactSeen: seen, artifactAfter: artifact.version } : {}),
        };
        this.o.tracer.span(s);
    }
}

// "coder, coder, reviewer" -> "coder, reviewer": a hand-off chain counts a role's consecutive turns once.
function collapse(roles: string[]): string[] {
    return roles.filter((r, i) => i === 0 || roles[i - 1] !== r);
}
