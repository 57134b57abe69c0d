// ESLint: typescript-eslint's type-aware checks that matter in code that is async everywhere (a promise nobody
// awaits or handles, a promise where a callback's boolean or void is expected, awaiting what is not a promise),
// plus the recommended rules that catch mistakes rather than style (prettier owns the style).
import tseslint from "typescript-eslint";

export default tseslint.config(
    { ignores: ["dist/", "build/", "build-*/", "node_modules/", "prebuilds/", "docs/", "bench/results/"] },
    {
        files: ["lib/**/*.ts", "test/**/*.ts"],
        extends: [tseslint.configs.base],
        languageOptions: {
            parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
        },
        rules: {
            "@typescript-eslint/no-floating-promises": "error",
            "@typescript-eslint/no-misused-promises": "error",
            "@typescript-eslint/await-thenable": "error",
            "@typescript-eslint/require-await": "off",
            "@typescript-eslint/no-unused-vars": [
                "error",
                { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none" },
            ],
            "@typescript-eslint/no-duplicate-enum-values": "error",
            "@typescript-eslint/no-unnecessary-type-assertion": "error",
            "no-debugger": "error",
            "no-dupe-keys": "error",
            "no-self-assign": "error",
            "no-unreachable": "error",
            "no-constant-binary-expression": "error",
            "no-fallthrough": "error",
            "prefer-const": "error",
        },
    },
);
