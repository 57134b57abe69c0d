#!/usr/bin/env node
// install.mjs: the package's install step.
//   default:        node-gyp-build: keep a loadable build/Release binary, else use prebuilds/, else build the
//                   CPU addon from binding.gyp with npm's node-gyp (offline, a few seconds).
//   MAPORL_CUDA=1:  cmake-js rebuild with -DMAPORL_CUDA=ON: CPU + CUDA kernels in the same binary slot
//                   (build/Release/maporl.node); it loads without a GPU or driver and reports 0 devices.
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(import.meta.url);
const truthy = (v) => ["1", "true", "on", "yes"].includes(String(v ?? "").toLowerCase());

function run(script, args) {
    const r = spawnSync(process.execPath, [script, ...args], { cwd: root, stdio: "inherit", env: process.env });
    if (r.error) throw r.error;
    process.exit(r.status ?? 1);
}

if (truthy(process.env.MAPORL_CUDA)) {
    let cmakeJs;
    try {
        cmakeJs = require.resolve("cmake-js/bin/cmake-js");
    } catch {
        console.error("maporl: MAPORL_CUDA=1 needs cmake-js (a dependency of maporl); reinstall without --omit flags.");
        process.exit(1);
    }
    run(cmakeJs, ["rebuild", "--CDMAPORL_CUDA=ON", "--CDMAPORL_TESTS=OFF"]);
} else {
    run(require.resolve("node-gyp-build/bin.js"), []);
}
