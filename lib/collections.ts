// collections.ts: small helpers over the standard collections.

/** Appends `values` to the list `map` holds under `key`, creating it on first use; returns that list. */
export function pushTo<K, V>(map: Map<K, V[]>, key: K, ...values: V[]): V[] {
    let list = map.get(key);
    if (!list) map.set(key, (list = []));
    for (const v of values) list.push(v); // (a spread of many values overflows the call stack)
    return list;
}
