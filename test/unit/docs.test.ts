// docs.test.ts: `npm run docs` (TypeDoc over lib/index.ts, warnings are errors) builds the API reference from the
// TSDoc comments: it exits 0 and documents the main entry points. And the README's and docs/'s links resolve: every
// relative link to a file that exists (and, into a Markdown file, to one of its headings), every repository path
// quoted in backticks (`lib/...`, `native/...`) to a file that exists.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");
const out = mkdtempSync(join(tmpdir(), "maporl-docs-"));
afterAll(() => rmSync(out, { recursive: true, force: true }));

describe("npm run docs", () => {
    it("builds the API reference without a warning", () => {
        const r = spawnSync(process.execPath, [join(root, "node_modules", "typedoc", "bin", "typedoc"), "--out", out], {
            cwd: root,
            encoding: "utf8",
            timeout: 240_000,
        });
        expect(r.status, r.stdout + r.stderr).toBe(0);
        expect(existsSync(join(out, "index.html"))).toBe(true);
        const pages = readdirSync(join(out, "functions")).concat(readdirSync(join(out, "classes")));
        for (const name of [
            "gae.html",
            "policyLoss.html",
            "trainJob.html",
            "NativePolicy.html",
            "Debate.html",
            "FleetPolicy.html",
        ])
            expect(pages).toContain(name);
    }, 240_000);
});

// GitHub's heading anchors: lower case, punctuation dropped, spaces as '-', repeats numbered.
function anchors(file: string): Set<string> {
    const text = readFileSync(file, "utf8").replace(/```[\s\S]*?```/g, "");
    const out = new Set<string>(),
        seen = new Map<string, number>();
    for (const m of text.matchAll(/^#{1,6}\s+(.+)$/gm)) {
        const s = m[1]
            .replace(/`/g, "")
            .trim()
            .toLowerCase()
            .replace(/[^\w\- ]/g, "")
            .replace(/ /g, "-");
        const n = seen.get(s) ?? 0;
        seen.set(s, n + 1);
        out.add(n ? `${s}-${n}` : s);
    }
    return out;
}

describe("the README and docs/", () => {
    it("link to files and headings that exist, and quote repository paths that exist", () => {
        const pages = [
            "README.md",
            ...readdirSync(join(root, "docs"))
                .filter((f) => f.endsWith(".md"))
                .map((f) => `docs/${f}`),
        ];
        const bad: string[] = [];
        for (const page of pages) {
            const text = readFileSync(join(root, page), "utf8").replace(/```[\s\S]*?```/g, "");
            for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
                const target = m[1];
                if (/^(https?:|mailto:)/.test(target)) continue;
                const [path, anchor] = target.split("#");
                const file = path ? resolve(dirname(join(root, page)), path) : join(root, page);
                if (!existsSync(file)) bad.push(`${page}: (${target}): no such file`);
                else if (anchor && file.endsWith(".md") && !anchors(file).has(anchor))
                    bad.push(`${page}: (${target}): no heading #${anchor} there`);
            }
            for (const m of text.matchAll(
                /`((?:lib|native|cuda|bindings|test|scripts|bench|docs)\/[\w./-]+\.(?:ts|cpp|h|cu|cuh|inc|md|py|mjs|sh|json))`/g,
            ))
                if (!existsSync(join(root, m[1]))) bad.push(`${page}: \`${m[1]}\`: no such file`);
        }
        expect(pages.length).toBeGreaterThan(8);
        expect(bad).toEqual([]);
    });
});
