// template.ts: a chat template rendered with bounds. A template is code from a model directory (tokenizer_config.json,
// chat_template.jinja), so its rendering is bounded as any other outside input: at most `maxSteps` evaluations of
// @huggingface/jinja's interpreter, at most `maxChars` characters in any value it builds (the output included), at most
// `timeoutMs` of wall time, and `range()` at most `maxSteps` long (the library's own builds its whole array first, and
// `range(1000000000)` ended the process). A template over a bound, or one that calls raise_exception, throws a
// TemplateError (`maporl serve` answers it 400, as vLLM does), never a crash.
import { Environment, Interpreter, type Template } from "@huggingface/jinja";

/** Bounds of one rendering. */
export interface TemplateLimits {
    /** Interpreter evaluations. Defaults to 1,000,000 (a 200-message chat takes ~20,000). */
    maxSteps: number;
    /** Characters in any value built, the output included. Defaults to 16 Mi. */
    maxChars: number;
    /** Wall time. Defaults to 2,000 ms. */
    timeoutMs: number;
}

export const DEFAULT_TEMPLATE_LIMITS: Readonly<TemplateLimits> = {
    maxSteps: 1_000_000,
    maxChars: 16 << 20,
    timeoutMs: 2000,
};

/** A chat template that raised an exception, went past a bound, or failed to render. */
export class TemplateError extends Error {
    readonly code = "TEMPLATE";
}

interface Budget {
    steps: number;
    limits: TemplateLimits;
    deadline: number;
    globals: Record<string, unknown>;
}

// The budget of the rendering under way (rendering is synchronous: one at a time per thread), or null.
let budget: Budget | null = null;

type Evaluate = (this: Interpreter, statement: unknown, environment: unknown) => { value: unknown };
const proto = Interpreter.prototype as unknown as { evaluate: Evaluate };
const original = proto.evaluate;
proto.evaluate = function (this: Interpreter, statement: unknown, environment: unknown) {
    const b = budget;
    if (b !== null) {
        if (++b.steps > b.limits.maxSteps)
            throw new TemplateError(`chat template: more than ${b.limits.maxSteps} steps (maxSteps)`);
        if ((b.steps & 1023) === 0 && performance.now() > b.deadline)
            throw new TemplateError(`chat template: rendering took more than ${b.limits.timeoutMs} ms (timeoutMs)`);
    }
    const v = original.call(this, statement, environment);
    if (b !== null && typeof v?.value === "string" && v.value.length > b.limits.maxChars)
        throw new TemplateError(`chat template: a value of more than ${b.limits.maxChars} characters (maxChars)`);
    return v;
};

// The library declares its globals (range, raise_exception) with Environment.set when a rendering starts, and refuses
// to declare a name twice: during a bounded rendering, our versions are declared in their place.
const envProto = Environment.prototype as unknown as {
    set: (this: Environment, name: string, value: unknown) => unknown;
};
const originalSet = envProto.set;
envProto.set = function (this: Environment, name: string, value: unknown) {
    const b = budget;
    return originalSet.call(this, name, b !== null && Object.hasOwn(b.globals, name) ? b.globals[name] : value);
};

/** Renders `template` with `items` under `limits`; throws a TemplateError on raise_exception, a bound, or any other
 * rendering failure (the message says which). */
export function renderTemplate(
    template: Template,
    items: Record<string, unknown>,
    limits: Partial<TemplateLimits> = {},
): string {
    const l: TemplateLimits = { ...DEFAULT_TEMPLATE_LIMITS, ...limits };
    const range = (start: number, stop?: number, step = 1): number[] => {
        if (stop === undefined) {
            stop = start;
            start = 0;
        }
        if (![start, stop, step].every((x) => typeof x === "number" && Number.isFinite(x)))
            throw new TemplateError("chat template: range() takes finite numbers");
        if (step === 0) throw new TemplateError("chat template: range() step must not be zero");
        const n = Math.max(0, Math.ceil((stop - start) / step));
        if (n > l.maxSteps)
            throw new TemplateError(`chat template: range() of ${n} numbers, more than ${l.maxSteps} (maxSteps)`);
        return Array.from({ length: n }, (_, i) => start + i * step);
    };
    const raise = (message: unknown) => {
        throw new TemplateError(`chat template raised: ${String(message)}`);
    };
    if (budget !== null)
        throw new TemplateError("chat template: renderTemplate called while another rendering is under way");
    budget = {
        steps: 0,
        limits: l,
        deadline: performance.now() + l.timeoutMs,
        globals: { range, raise_exception: raise },
    };
    try {
        const out = template.render(items);
        if (out.length > l.maxChars)
            throw new TemplateError(
                `chat template: output of ${out.length} characters, more than ${l.maxChars} (maxChars)`,
            );
        return out;
    } catch (e) {
        if (e instanceof TemplateError) throw e;
        throw new TemplateError(`chat template: ${e instanceof Error ? e.message : String(e)}`);
    } finally {
        budget = null;
    }
}
