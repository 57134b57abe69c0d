// registry.ts: named registries (advantage estimators now; policy losses later), built by a factory so each
// stays testable. An unknown name is a RangeError that lists what is registered.
export interface Registry<T extends { readonly name: string }> {
    register(entry: T): T;
    get(name: string): T;
    has(name: string): boolean;
    names(): string[];
}

export function createRegistry<T extends { readonly name: string }>(kind: string): Registry<T> {
    const entries = new Map<string, T>();
    return {
        register(entry: T): T {
            if (entry === null || typeof entry !== "object" || typeof entry.name !== "string" || entry.name === "")
                throw new TypeError(`register: expected a ${kind} with a non-empty name, got ${typeof entry}`);
            const existing = entries.get(entry.name);
            if (existing !== undefined && existing !== entry)
                throw new RangeError(`${kind} "${entry.name}" is already registered`);
            entries.set(entry.name, entry);
            return entry;
        },
        get(name: string): T {
            const entry = entries.get(name);
            if (entry === undefined)
                throw new RangeError(
                    `Unknown ${kind} ${JSON.stringify(name)}. Registered: ${[...entries.keys()].join(", ")}`,
                );
            return entry;
        },
        has: (name: string) => entries.has(name),
        names: () => [...entries.keys()],
    };
}
