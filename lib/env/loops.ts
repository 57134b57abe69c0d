// loops.ts: the two loops multi-agent episodes fall into, detected (not only penalised): an agent repeating the same
// tool call (same tool, same arguments up to key order and whitespace) `toolRepeats` times in an episode, and an
// agent giving the same message (up to whitespace and case) `messageRepeats` times while the shared state stayed the
// same (the artifact's version), which is what a reviewer and a coder bouncing one exchange back and forth look like;
// the same short message after real progress ("done" after each new version) is not a loop.
import { callKey } from "./tools.js";

export interface LoopEvent {
    kind: "tool" | "message";
    role: string;
    turn: number;
    /** The repeated call (tool loops) or the start of the repeated message. */
    what: string;
    count: number;
}

export interface LoopOptions {
    /** Identical tool calls of one role in an episode that make a loop. Defaults to 3. */
    toolRepeats?: number;
    /** Identical final messages of one role in an episode that make a loop. Defaults to 2. */
    messageRepeats?: number;
    /** End the episode at the first loop (stoppedBy 'loop'). Defaults to true. */
    stop?: boolean;
    /** Shaped reward added to the looping role's turn per detection. Defaults to -0.5. */
    penalty?: number;
}

export function loopOptions(where: string, o: LoopOptions | undefined): Required<LoopOptions> {
    const x = o ?? {};
    const int = (k: "toolRepeats" | "messageRepeats", d: number) => {
        const v = x[k] ?? d;
        if (!Number.isInteger(v) || v < 2)
            throw new RangeError(`${where}: loops.${k}: expected an integer >= 2, got ${String(v)}`);
        return v;
    };
    const penalty = x.penalty ?? -0.5;
    if (!Number.isFinite(penalty))
        throw new RangeError(`${where}: loops.penalty: expected a finite number, got ${String(penalty)}`);
    if (x.stop !== undefined && typeof x.stop !== "boolean")
        throw new TypeError(`${where}: loops.stop: expected a boolean`);
    return {
        toolRepeats: int("toolRepeats", 3),
        messageRepeats: int("messageRepeats", 2),
        stop: x.stop ?? true,
        penalty,
    };
}

export class LoopDetector {
    private readonly calls = new Map<string, number>();
    private readonly messages = new Map<string, number>();
    constructor(private readonly o: Required<LoopOptions>) {}

    /** Records a tool call; returns the loop it completes, if any. */
    toolCall(role: string, turn: number, call: { name: string; arguments: string }): LoopEvent | null {
        const key = `${role}\u0000${callKey(call)}`;
        const n = (this.calls.get(key) ?? 0) + 1;
        this.calls.set(key, n);
        return n === this.o.toolRepeats ? { kind: "tool", role, turn, what: callKey(call), count: n } : null;
    }

    /** Records a role's final message in a shared state (e.g. the artifact's version); returns the loop it completes. */
    message(role: string, turn: number, text: string, state = ""): LoopEvent | null {
        const norm = text.trim().replace(/\s+/g, " ").toLowerCase();
        if (norm === "") return null;
        const key = `${role}\u0000${state}\u0000${norm}`;
        const n = (this.messages.get(key) ?? 0) + 1;
        this.messages.set(key, n);
        return n === this.o.messageRepeats ? { kind: "message", role, turn, what: norm.slice(0, 80), count: n } : null;
    }
}
