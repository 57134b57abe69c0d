import { defineConfig } from "vitest/config";

export default defineConfig({
    test: {
        include: ["test/**/*.test.ts"],
        // Native suites share one thread pool per process; run files in forks, one at a time.
        pool: "forks",
        maxWorkers: 1,
        fileParallelism: false,
        testTimeout: 60_000,
    },
});
