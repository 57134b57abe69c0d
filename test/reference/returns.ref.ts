// returns.ref.ts: float64 REINFORCE++ returns from verl's reinforce_plus_plus: running = r_t + gamma * running;
// G_t = running; running *= m_t (a masked position resets it), then advantages = masked_whiten(G) * m.
// Outputs at masked positions are 0 (our convention). scale: the same recursion on |r| (error bound).
export function returnsReference(
    rewards: ArrayLike<number>,
    mask: ArrayLike<number>,
    B: number,
    T: number,
    gamma: number,
    whiten: boolean,
) {
    const G = new Float64Array(B * T),
        scale = new Float64Array(B * T);
    for (let b = 0; b < B; b++) {
        let running = 0,
            abs = 0;
        for (let t = T - 1; t >= 0; t--) {
            const i = b * T + t;
            if (mask[i] !== 1) {
                running = 0;
                abs = 0;
                continue;
            }
            running = rewards[i] + gamma * running;
            abs = Math.abs(rewards[i]) + gamma * abs;
            G[i] = running;
            scale[i] = abs;
        }
    }
    const A = Float64Array.from(G),
        scaleA = Float64Array.from(scale);
    if (whiten) {
        let n = 0,
            s = 0;
        for (let i = 0; i < B * T; i++)
            if (mask[i] === 1) {
                n++;
                s += G[i];
            }
        if (n > 0) {
            const mean = n >= 2 ? s / (n + 1e-8) : s / n;
            let dev = 0;
            for (let i = 0; i < B * T; i++) if (mask[i] === 1) dev += (G[i] - mean) ** 2;
            const variance = n >= 2 ? ((dev / (n + 1e-8)) * n) / (n - 1) : 0;
            const rstd = 1 / Math.sqrt(variance + 1e-8);
            for (let i = 0; i < B * T; i++)
                if (mask[i] === 1) {
                    A[i] = (G[i] - mean) * rstd;
                    scaleA[i] = (scale[i] + Math.abs(mean)) * rstd;
                }
        }
    }
    return { returns: G, advantages: A, scale, scaleA };
}
