// The one read → decide → write loop over an adapter, as the Rust engine runs it
// (store/src/store/mod.rs): read the row, decide on it, write the decision with
// the adapter's conditional writes, and on a lost race read again and decide
// again. createIdempotency (every decision from core's `apply`) and the client
// journal (its own JSON entries) both go through it.
import { maxRaces } from "../api.js";
import { IdemkitError } from "../errors.js";

/**
 * @typedef {{ record: Uint8Array, version: unknown }} Row  what `adapter.get` returns
 * @typedef {{ write: Uint8Array | "delete" | null, answer?: unknown, meta?: object }} Decided
 */

/**
 * Runs `decide` on the row of `id` until its write lands.
 *
 * - `decide(current)` gets the row as read (`null` when there is none) and
 *   returns (or resolves to) `{ write, answer, meta }`: `write` is `null`
 *   (nothing to write: answered from the read), the bytes to put (insert if
 *   nothing was read, else compare-and-set on the version read, with `meta`
 *   for the adapter's index), or `"delete"` (delete if the version read is
 *   current). It may throw: a refusal ends the loop.
 * - `held` is the row this caller wrote last (a lease's): the first decision
 *   is taken on it, without a read, so a transition costs one write. Only a
 *   write is checked against the stored version, so a refusal or an answer
 *   that writes nothing taken on `held` is decided again on a read (after a
 *   takeover, a fenced worker must be refused, not told to dispatch again).
 * - `call` wraps every adapter call (turns adapter failures into coded errors).
 *
 * Returns `{ answer, current }`, `current` being the row as it now stands
 * (`null` when deleted or absent). After `maxRaces()` lost races in a row it
 * throws `store-contention` naming `what`.
 *
 * @template A
 * @param {{ adapter: any, id: string, decide: (current: Row | null) => Decided | Promise<Decided>, held?: Row, call: <T>(fn: () => T | Promise<T>) => Promise<T>, what: string }} args
 * @returns {Promise<{ answer: A, current: Row | null }>}
 */
export async function readDecideWrite({ adapter, id, decide, held, call, what }) {
  let current = held;
  for (let race = 0; race < maxRaces(); race++) {
    const fromHeld = current !== undefined;
    if (current === undefined) current = await call(() => adapter.get(id));
    let decided;
    try {
      decided = await decide(current);
    } catch (err) {
      if (!fromHeld) throw err;
      current = undefined;
      continue;
    }
    const { write, answer, meta } = decided;
    if (write === null || write === undefined) {
      if (!fromHeld) return { answer, current };
      current = undefined;
      continue;
    }
    if (write === "delete") {
      if (current !== null && (await call(() => adapter.delete(id, current.version)))) return { answer, current: null };
    } else {
      const written = await call(() =>
        current === null ? adapter.insert(id, write, meta) : adapter.update(id, write, current.version, meta),
      );
      if (written) return { answer, current: { record: write, version: written.version } };
    }
    // Another writer came first: read the newer row and decide again.
    current = undefined;
  }
  throw new IdemkitError("store-contention", `gave up after ${maxRaces()} lost write races on ${what}`);
}
