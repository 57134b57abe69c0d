// collections.ts: small helpers over the standard collections.

/** Appends `values` to the list `map` holds under `key`, creating it on first use; returns that list. */
export function pushTo<K, V>(map: Map<K, V[]>, key: K, ...values: V[]): V[] {
    let list = map.get(key);
    if (!list) map.set(key, (list = []));
    list.push(...values);
    return list;
}
