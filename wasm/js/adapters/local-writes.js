// What the adapters with `updateWith` share: the caller's local writes run in the
// same transaction as a record's compare-and-set, after it succeeded, and their
// failure is told apart from the store's (docs/architecture.md: a Local effect "commits in the
// same transaction as the outcome").
import { IdemkitError } from "../errors.js";

/**
 * The caller's local writes failed, so nothing was committed: neither they nor the
 * record's write. A coded error (not `store-unavailable`, which would be retried as
 * a store failure); `cause` is the caller's own error, as it was thrown.
 * @param {unknown} cause
 */
export function localWritesFailed(cause) {
  return new IdemkitError(
    "local-writes-failed",
    `the local writes failed, so neither they nor the record's write were committed: ${cause?.message ?? cause}`,
    { cause },
  );
}

/**
 * Refuses local writes that are not of the adapter's kind (`ok` false), before
 * anything is written. An IdemkitError, so that it is not taken for a store failure.
 */
export function requireLocal(ok, adapter, expected) {
  if (!ok) throw new IdemkitError("invalid-argument", `${adapter}: the local writes must be ${expected}`);
}

/**
 * `local(...args)` inside the adapter's open transaction: its result. When it
 * throws, local-writes-failed, which rolls the transaction back. A promise is
 * refused the same way: the transaction cannot wait for it, so whatever it writes
 * after its first `await` would land outside the transaction.
 */
export function runLocalSync(local, ...args) {
  let result;
  try {
    result = local(...args);
  } catch (err) {
    throw localWritesFailed(err);
  }
  if (typeof result?.then === "function") {
    throw localWritesFailed(new TypeError("local returned a promise: it must be synchronous, its writes run inside the transaction"));
  }
  return result;
}
