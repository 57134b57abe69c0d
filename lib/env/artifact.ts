// artifact.ts: the shared state a team works on (a document, a code file, a scratchpad), versioned: every write makes
// a new version that records who wrote it and at which turn, so the transcript can say which version each turn saw,
// and the tools the workflow gives the agents read and write it.
import type { Tool } from "./tools.js";

export interface ArtifactVersion {
    version: number;
    content: string;
    /** The role that wrote it ('initial' for version 0). */
    author: string;
    turn: number;
}

export class SharedArtifact {
    readonly name: string;
    private readonly log: ArtifactVersion[];

    constructor(name: string, initial = "") {
        if (typeof name !== "string" || name === "")
            throw new TypeError("SharedArtifact: name: expected a non-empty string");
        if (typeof initial !== "string") throw new TypeError("SharedArtifact: initial: expected a string");
        this.name = name;
        this.log = [{ version: 0, content: initial, author: "initial", turn: -1 }];
    }

    get version(): number {
        return this.log.length - 1;
    }
    get content(): string {
        return this.log[this.log.length - 1]!.content;
    }
    /** Every version, oldest first (copies). */
    get versions(): ArtifactVersion[] {
        return this.log.map((v) => ({ ...v }));
    }

    /** Writes a new version; returns its number. Writing the same content again makes no version. */
    write(content: string, author: string, turn: number): number {
        if (typeof content !== "string")
            throw new TypeError(
                `SharedArtifact(${this.name}).write: content: expected a string, got ${typeof content}`,
            );
        if (content === this.content) return this.version;
        this.log.push({ version: this.log.length, content, author, turn });
        return this.version;
    }

    /** The tools that read and write it: `read_<name>` (any role) and `write_<name>` (the roles given, or any). */
    tools(writers?: string[]): Tool<never>[] {
        const id = this.name.replace(/[^a-zA-Z0-9_-]/g, "_");
        const read: Tool<Record<string, never>> = {
            name: `read_${id}`,
            description: `Returns the current content of ${this.name} (version number first).`,
            parameters: { type: "object", properties: {}, additionalProperties: false },
            run: () => `version ${this.version}\n${this.content}`,
        };
        const write: Tool<{ content: string }> = {
            name: `write_${id}`,
            description: `Replaces the whole content of ${this.name}; returns the new version number.`,
            parameters: {
                type: "object",
                properties: { content: { type: "string" } },
                required: ["content"],
                additionalProperties: false,
            },
            ...(writers ? { roles: writers } : {}),
            run: (args, ctx) => `version ${this.write(args.content, ctx.role, ctx.turn)}`,
        };
        return [read, write];
    }
}
