// The timing loop of the npm package's benchmarks (overhead.mjs, mcp-wrapper.mjs).
import { performance } from "node:perf_hooks";

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
  const round = (x) => Math.round(x * 100) / 100;
  return {
    mean_us: round(meanUs),
    p50_us: round(times[times.length >> 1] * 1000),
    p99_us: round(times[Math.min(times.length - 1, Math.floor(times.length * 0.99))] * 1000),
    ops_per_s: Math.round(1e6 / meanUs),
    // The process's CPU time per op (every thread, GC helpers too): unlike the wall
    // clock it does not grow when other processes take the cores.
    cpu_us: round((user + system) / times.length),
    iterations: times.length,
  };
}
