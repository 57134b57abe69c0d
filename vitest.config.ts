import { defineConfig } from "vitest/config";

export default defineConfig({
    test: {
        include: ["test/**/*.test.ts"],
        // Native suites share one thread pool per process; run files in forks, one at a time.
        pool: "forks",
        maxWorkers: 1,
        fileParallelism: false,
        testTimeout: 60_000,
        // .ci/run sets MAPORL_VITEST_JSON to collect counts for its closing "N passed, N failed" line.
        reporters: process.env.MAPORL_VITEST_JSON
            ? ["default", ["json", { outputFile: process.env.MAPORL_VITEST_JSON }]]
            : ["default"],
    },
});
