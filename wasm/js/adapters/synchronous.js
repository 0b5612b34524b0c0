// What the adapters over a synchronous store (memory, SQLite) share: they answer
// with the result itself, not a promise, so the engine takes no await hop on them
// (each costs a microtask turn, most of what a call costs in memory), and they
// fail as an asynchronous adapter does, with a rejected promise.

/**
 * `methods` (an adapter's seam methods) made to fail by returning a rejected
 * promise instead of throwing: a caller's `adapter.insert(...).catch(...)` or
 * `assert.rejects(adapter.insert(...))` sees a failure where it looks for one.
 * A result is returned as it is.
 * @template {Record<string, (...args: any[]) => unknown>} M
 * @param {M} methods
 * @returns {M}
 */
export function answeringSynchronously(methods) {
  const wrapped = {};
  for (const [name, method] of Object.entries(methods)) {
    wrapped[name] = (...args) => {
      try {
        return method(...args);
      } catch (err) {
        return Promise.reject(err);
      }
    };
  }
  return /** @type {M} */ (wrapped);
}
