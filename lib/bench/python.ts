// python.ts: runs a PyTorch baseline of bench/python/ in a child process, in the same benchmark run.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// dist/bench or lib/bench -> package root
const pythonDir = join(here, "..", "..", "bench", "python");
const runner = join(pythonDir, "run.py");

export interface PythonResult {
    ok: boolean;
    error?: string;
    torch?: string;
    threads?: number;
    median_ms?: number;
    samples_ms?: number[];
    peak_extra_bytes?: number | null;
    /** The BLAS library the baseline loaded (bench/python/common.py's blas_library). */
    blas?: string | null;
}

/** A baseline's BLAS as a short label for a benchmark note, flagging the netlib reference BLAS (~65x slower). */
export function blasName(r: PythonResult): string {
    const b = r.blas ?? "";
    if (b.includes("openblas")) return "OpenBLAS";
    if (b.includes("mkl")) return "MKL";
    if (b.includes("blis")) return "BLIS";
    if (b.includes("/blas/")) return "reference BLAS (slow: apt-get install libopenblas0-pthread)";
    return b ? b.split("/").pop()! : "BLAS unknown";
}

let cachedPython: string | null | undefined;

/** The first Python that imports torch: $MAPORL_PYTHON, python3, /usr/bin/python3 (Debian's python3-torch). */
export function findPython(): string | null {
    if (cachedPython !== undefined) return cachedPython;
    const candidates = [process.env.MAPORL_PYTHON, "python3", "/usr/bin/python3"].filter((c): c is string => !!c);
    cachedPython = null;
    for (const c of candidates) {
        const r = spawnSync(c, ["-c", "import torch"], { stdio: "ignore" });
        if (r.status === 0) {
            cachedPython = c;
            break;
        }
    }
    return cachedPython;
}

export const INSTALL_HINT =
    "PyTorch baselines skipped: no Python with torch found. On Debian/Ubuntu: `sudo apt-get install python3-torch " +
    "python3-numpy` (or set MAPORL_PYTHON to a python that has torch).";

export function runPython(spec: Record<string, unknown>): PythonResult {
    const py = findPython();
    if (py === null) return { ok: false, error: INSTALL_HINT };
    if (!existsSync(runner)) return { ok: false, error: `baseline runner not found at ${runner}` };
    const r = spawnSync(py, [runner], { input: JSON.stringify(spec), encoding: "utf8", maxBuffer: 16 << 20 });
    const line = (r.stdout ?? "").trim().split("\n").pop() ?? "";
    try {
        return JSON.parse(line) as PythonResult;
    } catch {
        return { ok: false, error: `baseline failed (exit ${r.status}): ${(r.stderr ?? "").trim().slice(-500)}` };
    }
}

/** Runs bench/python/<script> with a JSON input; returns the parsed JSON output, or an error string. */
export function runPythonScript(
    script: string,
    input: unknown,
): { ok: true; value: unknown } | { ok: false; error: string } {
    const py = findPython();
    if (py === null) return { ok: false, error: INSTALL_HINT };
    const r = spawnSync(py, [join(pythonDir, script)], {
        input: JSON.stringify(input),
        encoding: "utf8",
        maxBuffer: 64 << 20,
    });
    try {
        return { ok: true, value: JSON.parse((r.stdout ?? "").trim().split("\n").pop() ?? "") };
    } catch {
        return { ok: false, error: `${script} failed (exit ${r.status}): ${(r.stderr ?? "").trim().slice(-500)}` };
    }
}
