// The one read → decide → write loop over an adapter, as the Rust engine runs it
// (store/src/store/mod.rs): read the row, decide on it, write the decision with
// the adapter's conditional writes, and on a lost race read again and decide
// again. createIdempotency (every decision from core's `apply`) and the client
// journal (its own JSON entries) both go through it.
import { maxRaces } from "../api.js";
import { IdemkitError } from "../errors.js";
import { handingOver, readingOnly } from "./handover.js";

/**
 * @typedef {{ record: Uint8Array, version: unknown }} Row  what `adapter.get` returns
 * @typedef {{ write: Uint8Array | "delete" | null, answer?: unknown, meta?: object }} Decided
 */

/**
 * Runs `decide` on the row of `id` until its write lands.
 *
 * - `decide(current)` gets the row as read (`null` when there is none) and
 *   returns (or resolves to) `{ write, answer, meta }`: `write` is `null`
 *   (nothing to write: answered from the read), the bytes to put, which the
 *   loop hands over to the adapter (the caller never changes them after; insert if
 *   nothing was read, else compare-and-set on the version read, with `meta`
 *   for the adapter's index), or `"delete"` (delete if the version read is
 *   current). It may throw: a refusal ends the loop.
 * - `held` is the row this caller wrote last (a lease's): the first decision
 *   is taken on it, without a read, so a transition costs one write. Only a
 *   write is checked against the stored version, so a refusal or an answer
 *   that writes nothing taken on `held` is decided again on a read (after a
 *   takeover, a fenced worker must be refused, not told to dispatch again).
 * - `call` wraps every adapter call (turns adapter failures into coded errors).
 *   An adapter may answer synchronously (memory, SQLite): a result that is not
 *   a promise is used as it is, with no await (each costs a microtask hop),
 *   and so is a decision that is not a promise.
 * - `local`: the caller's local writes, committed with the write in one
 *   transaction: the compare-and-set goes through `adapter.updateWith`, which
 *   applies nothing of them when it is refused (the loop then reads and decides
 *   again). Only an update can carry them: an adapter without `updateWith`
 *   throws local-unsupported before anything is written, and a decision to
 *   insert, delete or write nothing throws invalid-argument, never dropping them.
 *
 * Returns `{ answer, current, local }`, `current` being the row as it now stands
 * (`null` when deleted or absent), `local` null without local writes, else
 * `{ result }`: they were committed, and this is what `updateWith` said of them.
 * After `maxRaces()` lost races in a row it throws `store-contention` naming `what`.
 *
 * @template A
 * @param {{ adapter: any, id: string, decide: (current: Row | null) => Decided | Promise<Decided>, held?: Row, call: <T>(fn: () => T | Promise<T>) => T | Promise<T>, what: string, local?: unknown }} args
 * @returns {Promise<{ answer: A, current: Row | null, local: { result: unknown } | null }>}
 */
export async function readDecideWrite({ adapter, id, decide, held, call, what, local }) {
  if (local !== undefined && typeof adapter.updateWith !== "function") {
    throw new IdemkitError(
      "local-unsupported",
      `${adapter.name ?? "the adapter"} has no updateWith: it cannot commit local writes in one transaction with ${what}, so nothing was written`,
    );
  }
  let current = held;
  for (let race = 0; race < maxRaces(); race++) {
    const fromHeld = current !== undefined;
    if (current === undefined) {
      // The row is only read (decided on, kept as the expected bytes).
      const read = readingOnly(() => call(() => adapter.get(id)));
      current = isPromise(read) ? await read : read;
    }
    let decided;
    try {
      decided = decide(current);
      if (isPromise(decided)) decided = await decided;
    } catch (err) {
      if (!fromHeld) throw err;
      current = undefined;
      continue;
    }
    const { write, answer, meta } = decided;
    const writesNothing = write === null || write === undefined;
    if (writesNothing && fromHeld) {
      current = undefined;
      continue;
    }
    if (local !== undefined && (writesNothing || write === "delete" || current === null)) {
      throw new IdemkitError("invalid-argument", `local writes go only with an update of ${what}, and this decision does not update it: nothing was written`);
    }
    if (writesNothing) return { answer, current, local: null };
    if (write === "delete") {
      if (current !== null) {
        const deleting = call(() => adapter.delete(id, current.version));
        if (isPromise(deleting) ? await deleting : deleting) return { answer, current: null, local: null };
      }
    } else {
      // The write is fresh bytes no one else holds: an adapter that keeps them
      // (memory) need not copy them.
      let written = handingOver(write, () =>
        call(() =>
          current === null
            ? adapter.insert(id, write, meta)
            : local === undefined
              ? adapter.update(id, write, current.version, meta)
              : adapter.updateWith(id, write, current.version, meta, local),
        ),
      );
      if (isPromise(written)) written = await written;
      if (written) {
        return { answer, current: { record: write, version: written.version }, local: local === undefined ? null : { result: written.result } };
      }
    }
    // Another writer came first: read the newer row and decide again.
    current = undefined;
  }
  throw new IdemkitError("store-contention", `gave up after ${maxRaces()} lost write races on ${what}`);
}

/** Whether `value` is a promise (or another thenable) to await, not a result already there. */
export function isPromise(value) {
  return typeof value?.then === "function";
}

/**
 * Runs one adapter call, a failure made `failed(err)` (a coded error). A
 * synchronous answer is returned as it is, with no await hop; a promise comes
 * back as a promise. A synchronous throw is a failure too (thrown, so an async
 * caller rejects).
 * @template T
 * @param {() => T | PromiseLike<T>} fn
 * @param {(err: unknown) => Error} failed
 * @returns {T | Promise<T>}
 */
export function adapterCall(fn, failed) {
  let result;
  try {
    result = fn();
  } catch (err) {
    throw failed(err);
  }
  return isPromise(result)
    ? Promise.resolve(result).then(undefined, (err) => {
        throw failed(err);
      })
    : result;
}
