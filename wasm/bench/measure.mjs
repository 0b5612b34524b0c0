// The timing loop of the npm package's benchmarks (overhead.mjs, mcp-wrapper.mjs).
import { performance } from "node:perf_hooks";

const round2 = (x) => Math.round(x * 100) / 100;
const median = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

/** BENCH_SECONDS (per figure, default 1; a tiny value such as 0.01 is a smoke run). */
export function benchSeconds() {
  const seconds = Number(process.env.BENCH_SECONDS ?? "1");
  if (!(seconds > 0)) throw new Error("BENCH_SECONDS must be a positive number");
  return seconds;
}

/**
 * Runs `fn` one call after another for `seconds` after a warm-up, and says how long
 * a call took: wall-clock mean, p50 and p99 (µs), calls per second from the mean,
 * and the process's CPU µs per call.
 */
export async function measure(fn, seconds) {
  // Warm-up (JIT, caches): a tenth of the budget, at least 3 calls.
  const warm = performance.now() + seconds * 100;
  for (let i = 0; i < 3 || performance.now() < warm; i++) await fn();
  const budget = seconds * 1000;
  const times = [];
  const cpu = process.cpuUsage();
  const start = performance.now();
  let now = start;
  while (times.length < 3 || now - start < budget) {
    const t = now;
    await fn();
    now = performance.now();
    times.push(now - t);
  }
  const meanUs = ((now - start) * 1000) / times.length;
  const { user, system } = process.cpuUsage(cpu);
  times.sort((a, b) => a - b);
  return {
    mean_us: round2(meanUs),
    p50_us: round2(times[times.length >> 1] * 1000),
    p99_us: round2(times[Math.min(times.length - 1, Math.floor(times.length * 0.99))] * 1000),
    ops_per_s: Math.round(1e6 / meanUs),
    // The process's CPU time per op (every thread, GC helpers too): unlike the wall
    // clock it does not grow when other processes take the cores.
    cpu_us: round2((user + system) / times.length),
    iterations: times.length,
  };
}

/** BENCH_ROUNDS (default 5): how many turns `measureInTurns` gives every figure. */
export function benchRounds() {
  const rounds = Number(process.env.BENCH_ROUNDS ?? "5");
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error("BENCH_ROUNDS must be a positive integer");
  return rounds;
}

/**
 * Measures every figure of `figures` (`{ name: fn }`) in `rounds` turns of
 * `seconds / rounds` each, the figures taking turns within a round (each round
 * starts one figure later, so none always follows the same one). On a shared
 * machine a slow minute then falls on every figure of a round, not on one whole
 * figure. Each figure's mean, p50, p99 and CPU µs are the medians of its rounds;
 * `rounds` keeps every round's mean and p50.
 *
 * Returns `{ results, paired, inRounds }`: `paired(a, b, f)` is the median over
 * rounds of `f(round of a, round of b)`, a comparison made within each round (the
 * two figures measured minutes, not seconds, apart never enter one pair);
 * `inRounds([a, b, …], f)` is the same over any number of figures.
 */
export async function measureInTurns(figures, seconds, rounds) {
  const names = Object.keys(figures);
  const perRound = Object.fromEntries(names.map((name) => [name, []]));
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < names.length; i++) {
      const name = names[(r + i) % names.length];
      perRound[name].push(await measure(figures[name], seconds / rounds));
    }
  }
  const results = {};
  for (const name of names) {
    const runs = perRound[name];
    const meanUs = round2(median(runs.map((m) => m.mean_us)));
    results[name] = {
      mean_us: meanUs,
      p50_us: round2(median(runs.map((m) => m.p50_us))),
      p99_us: round2(median(runs.map((m) => m.p99_us))),
      ops_per_s: Math.round(1e6 / meanUs),
      cpu_us: round2(median(runs.map((m) => m.cpu_us))),
      iterations: runs.reduce((total, m) => total + m.iterations, 0),
      rounds: runs.map((m) => ({ mean_us: m.mean_us, p50_us: m.p50_us })),
    };
  }
  const inRounds = (which, f) => {
    if (!which.every((name) => name in perRound)) return null;
    return median(perRound[which[0]].map((_, r) => f(...which.map((name) => perRound[name][r]))));
  };
  const paired = (a, b, f) => inRounds([a, b], f);
  return { results, paired, inRounds };
}
