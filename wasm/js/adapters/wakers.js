// In-process wakers for the adapters whose every write goes through this isolate
// (memory, a Durable Object's storage): a waiter registers for a record id, and the
// adapter wakes every waiter of that id right after a write of it committed. A
// handler holding a retry of a running key (`Prefer: wait`) then re-reads the record
// at once instead of polling it. Any write wakes (a renewal too): the waiter reads
// again and core decides, so a spurious wake costs one read, never a wrong answer.

/**
 * @returns {{ changed(id: string, signal?: AbortSignal): Promise<void>, wake(id: string): void, size(): number }}
 */
export function writeWakers() {
  /** @type {Map<string, Set<() => void>>} */
  const waiting = new Map();
  function remove(id, resolve) {
    const set = waiting.get(id);
    if (set === undefined) return;
    set.delete(resolve);
    if (set.size === 0) waiting.delete(id);
  }
  return {
    /**
     * Resolves at the next committed write of `id` through this store, or as soon
     * as `signal` aborts; either way its registration is gone when it resolves.
     */
    changed(id, signal) {
      return new Promise((resolve) => {
        if (signal?.aborted) return resolve();
        const done = () => {
          remove(id, done);
          signal?.removeEventListener("abort", done);
          resolve();
        };
        let set = waiting.get(id);
        if (set === undefined) waiting.set(id, (set = new Set()));
        set.add(done);
        signal?.addEventListener("abort", done, { once: true });
      });
    },
    /** Wakes every waiter of `id` (called after a write of it committed). */
    wake(id) {
      const set = waiting.get(id);
      if (set === undefined) return;
      for (const done of [...set]) done();
    },
    /** How many registrations are open (for tests). */
    size() {
      let n = 0;
      for (const set of waiting.values()) n += set.size;
      return n;
    },
  };
}
