// package.test.ts: what `npm pack` puts in the tarball users install: the built JavaScript and types, the native
// sources for the fallback build, the prebuilt addon when there is one, the GSM8K data `--task gsm8k` reads by default;
// no tests, build folders or results; every file under 5 MB; and the package.json fields a registry and bundlers read.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..", "..");

describe("the npm package", () => {
    it("holds what users need and nothing else", () => {
        const r = spawnSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], {
            cwd: root,
            encoding: "utf8",
            timeout: 120_000,
        });
        expect(r.status, r.stderr).toBe(0);
        const [pack] = JSON.parse(r.stdout) as { files: { path: string; size: number }[] }[];
        const paths = pack.files.map((f) => f.path);
        const allowed =
            /^(dist|lib|native|cuda|bindings|bench\/python|prebuilds\/[a-z0-9-]+)\/|^(package\.json|README\.md|LICENSE|binding\.gyp|CMakeLists\.txt|scripts\/install\.mjs|scripts\/test-native\.mjs|test\/fixtures\/gsm8k\/(train|test)\.jsonl|test\/fixtures\/gsm8k\/LICENSE)$/;
        expect(paths.filter((p) => !allowed.test(p))).toEqual([]);
        for (const p of [
            "dist/index.js",
            "dist/index.d.ts",
            "dist/cli.js",
            "native/include/maporl.h",
            "binding.gyp",
            "scripts/install.mjs",
            "test/fixtures/gsm8k/test.jsonl",
        ])
            expect(paths).toContain(p);
        expect(paths.some((p) => /^(build|build-[^/]*|runs|bench\/results)\//.test(p) || /\.test\.ts$/.test(p))).toBe(
            false,
        );
        expect(pack.files.filter((f) => f.size > 5 << 20).map((f) => f.path)).toEqual([]);
    }, 120_000);

    it("declares its entry points, types, engines, files and licence", () => {
        const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as Record<string, unknown>;
        expect(pkg.exports).toMatchObject({ ".": { types: "./dist/index.d.ts", default: "./dist/index.js" } });
        expect(pkg.types).toBe("./dist/index.d.ts");
        expect(pkg.engines).toEqual({ node: ">=20" });
        expect(pkg.license).toBe("MIT");
        expect(pkg.files).toContain("prebuilds/");
        expect((pkg.scripts as Record<string, string>).prepack).toMatch(/prebuilds/); // a packed tarball carries a fresh prebuilt addon
    });
});
