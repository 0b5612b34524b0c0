// A tiny runtime-neutral test harness: the same suites run in Node, Deno, Bun and
// workerd, which share no test runner. Each case is an async function that throws on
// failure; `run` reports every case and returns the counts.

export class AssertionError extends Error {
  constructor(message) {
    super(message);
    this.name = "AssertionError";
  }
}

function show(value) {
  if (value instanceof Uint8Array) return `Uint8Array[${[...value].join(",")}]`;
  try {
    return JSON.stringify(value, (_, v) => (typeof v === "bigint" ? `${v}n` : v));
  } catch {
    return String(value);
  }
}

export const assert = {
  ok(value, message = "expected a truthy value") {
    if (!value) throw new AssertionError(message);
  },
  equal(actual, expected, message = "") {
    if (!Object.is(actual, expected)) {
      throw new AssertionError(`${message ? message + ": " : ""}expected ${show(expected)}, got ${show(actual)}`);
    }
  },
  notEqual(actual, unexpected, message = "") {
    if (Object.is(actual, unexpected)) {
      throw new AssertionError(`${message ? message + ": " : ""}expected anything but ${show(unexpected)}`);
    }
  },
  bytesEqual(actual, expected, message = "") {
    const same = actual instanceof Uint8Array && expected instanceof Uint8Array &&
      actual.length === expected.length && actual.every((b, i) => b === expected[i]);
    if (!same) throw new AssertionError(`${message ? message + ": " : ""}expected ${show(expected)}, got ${show(actual)}`);
  },
  async rejects(promiseOrFn, code, message = "") {
    try {
      await (typeof promiseOrFn === "function" ? promiseOrFn() : promiseOrFn);
    } catch (err) {
      if (code !== undefined && err?.code !== code) {
        throw new AssertionError(`${message ? message + ": " : ""}expected error code ${code}, got ${err?.code} (${err?.message})`);
      }
      return err;
    }
    throw new AssertionError(`${message ? message + ": " : ""}expected an error with code ${code}`);
  },
  throws(fn, code, message = "") {
    try {
      fn();
    } catch (err) {
      if (code !== undefined && err?.code !== code) {
        throw new AssertionError(`${message ? message + ": " : ""}expected error code ${code}, got ${err?.code} (${err?.message})`);
      }
      return err;
    }
    throw new AssertionError(`${message ? message + ": " : ""}expected an error with code ${code}`);
  },
};

/**
 * Runs `cases` ([name, async fn][]) one after another.
 * @returns {Promise<{ passed: number, failed: number, lines: string[] }>}
 */
export async function run(cases, log = () => {}) {
  let passed = 0;
  let failed = 0;
  const lines = [];
  for (const [name, fn] of cases) {
    const started = Date.now();
    try {
      await fn();
      passed++;
      lines.push(`ok - ${name} (${Date.now() - started} ms)`);
    } catch (err) {
      failed++;
      lines.push(`not ok - ${name}: ${err?.stack ?? err}`);
    }
    log(lines[lines.length - 1]);
  }
  return { passed, failed, lines };
}
