// parse.ts: argument parsers the commands share.
import { InvalidArgumentError } from "commander";

/** A commander parser for an integer in [min, max]; anything else is an error naming the range and the value. */
export function integer(min: number, max: number) {
    return (v: string): number => {
        const n = Number(v);
        if (v.trim() === "" || !Number.isInteger(n) || n < min || n > max)
            throw new InvalidArgumentError(`expected an integer in [${min}, ${max}], got ${JSON.stringify(v)}.`);
        return n;
    };
}

/** A repeatable option's values, in order. */
export const collect = (v: string, prev: string[]) => [...prev, v];
