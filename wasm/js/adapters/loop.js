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
 * Each step runs as soon as what it waits on is there: when the adapter answers
 * synchronously and `decide` returns no promise, the whole loop is one
 * synchronous call and returns the result itself, not a promise (a caller
 * awaiting it takes no microtask hop); from the first promise on, it returns a
 * promise. A refusal is thrown, or rejects that promise. Callers that hand the
 * result to their own callers go through {@link promised}.
 *
 * @template A
 * @param {{ adapter: any, id: string, decide: (current: Row | null) => Decided | Promise<Decided>, held?: Row, call: <T>(fn: () => T | Promise<T>) => T | Promise<T>, what: string, local?: unknown }} args
 * @returns {{ answer: A, current: Row | null, local: { result: unknown } | null } | Promise<{ answer: A, current: Row | null, local: { result: unknown } | null }>}
 */
export function readDecideWrite({ adapter, id, decide, held, call, what, local }) {
  if (local !== undefined && typeof adapter.updateWith !== "function") {
    throw new IdemkitError(
      "local-unsupported",
      `${adapter.name ?? "the adapter"} has no updateWith: it cannot commit local writes in one transaction with ${what}, so nothing was written`,
    );
  }
  // One object for the loop's state, and steps that are plain functions of it:
  // nothing is allocated per call for the steps themselves.
  return attempt({ adapter, id, decide, call, what, local, race: 0 }, held);
}

/** The loop from `current` (the row to decide on; undefined: read it first). */
function attempt(loop, current) {
  for (; loop.race < maxRaces(); loop.race++) {
    const outcome = current === undefined ? readThenDecide(loop) : decideThenWrite(loop, current, true);
    if (outcome !== RETRY) return outcome;
    current = undefined;
  }
  throw new IdemkitError("store-contention", `gave up after ${maxRaces()} lost write races on ${loop.what}`);
}

/** A step's outcome that arrived later: a retry goes round the loop again. */
function settle(loop, outcome) {
  if (outcome !== RETRY) return outcome;
  loop.race++;
  return attempt(loop, undefined);
}

/** `step(value)` at once when `value` is there, else once the promise resolves (then a retry goes round the loop again). */
function whenThere(loop, value, step) {
  return isPromise(value) ? value.then((resolved) => settle(loop, step(resolved))) : step(value);
}

function readThenDecide(loop) {
  // The row is only read (decided on, kept as the expected bytes).
  const { adapter, id } = loop;
  const read = readingOnly(() => loop.call(() => adapter.get(id)));
  return whenThere(loop, read, (row) => decideThenWrite(loop, row, false));
}

/**
 * Decides on `current` and writes the decision. `fromHeld`: `current` is the
 * row this caller wrote last, not one read; a refusal on it, or an answer that
 * writes nothing, is decided again on a read.
 */
function decideThenWrite(loop, current, fromHeld) {
  let decided;
  try {
    decided = loop.decide(current);
  } catch (err) {
    if (!fromHeld) throw err;
    return RETRY;
  }
  if (!isPromise(decided)) return write(loop, current, fromHeld, decided);
  return decided.then(
    (resolved) => settle(loop, write(loop, current, fromHeld, resolved)),
    (err) => {
      if (!fromHeld) throw err;
      return settle(loop, RETRY);
    },
  );
}

function write(loop, current, fromHeld, { write, answer, meta }) {
  const { adapter, id, local } = loop;
  const writesNothing = write === null || write === undefined;
  if (writesNothing && fromHeld) return RETRY;
  if (local !== undefined && (writesNothing || write === "delete" || current === null)) {
    throw new IdemkitError("invalid-argument", `local writes go only with an update of ${loop.what}, and this decision does not update it: nothing was written`);
  }
  if (writesNothing) return { answer, current, local: null };
  if (write === "delete") {
    // Nothing to delete: another writer came first.
    if (current === null) return RETRY;
    const deleting = loop.call(() => adapter.delete(id, current.version));
    return whenThere(loop, deleting, (deleted) => (deleted ? { answer, current: null, local: null } : RETRY));
  }
  // The write is fresh bytes no one else holds: an adapter that keeps them
  // (memory) need not copy them.
  const writing = handingOver(write, () =>
    loop.call(() =>
      current === null
        ? adapter.insert(id, write, meta)
        : local === undefined
          ? adapter.update(id, write, current.version, meta)
          : adapter.updateWith(id, write, current.version, meta, local),
    ),
  );
  // A refused write (null): another writer came first.
  return whenThere(loop, writing, (written) =>
    written ? { answer, current: { record: write, version: written.version }, local: local === undefined ? null : { result: written.result } } : RETRY,
  );
}

/** A step's answer that goes round the loop again (a lost race, or a refusal on the held row). */
const RETRY = Symbol("retry");

/**
 * `fn()`'s result as a promise: a promise as it is, a value resolved, a throw
 * rejected. For the package's own methods, which always answer with a promise.
 * @template T
 * @param {() => T | PromiseLike<T>} fn
 * @returns {Promise<T>}
 */
export function promised(fn) {
  try {
    const result = fn();
    return isPromise(result) ? result : Promise.resolve(result);
  } catch (err) {
    return Promise.reject(err);
  }
}

/**
 * `then(value)`: at once when `value` is there, else when the promise resolves.
 * @template T, U
 * @param {T | Promise<T>} value
 * @param {(value: T) => U} then
 * @returns {U | Promise<U>}
 */
export function andThen(value, then) {
  return isPromise(value) ? value.then(then) : then(value);
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
