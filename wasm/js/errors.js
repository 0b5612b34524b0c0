/**
 * Every error idemkit throws: `code` is stable and documented (README, "Errors"),
 * `message` says what was wrong and where.
 */
export class IdemkitError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {{ cause?: unknown }} [options]
   */
  constructor(code, message, options) {
    super(message, options);
    this.name = "IdemkitError";
    this.code = code;
  }
}

/**
 * Calls into wasm and re-throws its coded errors as IdemkitError (same code and
 * message); anything else is a bug and is re-thrown as is.
 * @template T
 * @param {() => T} fn
 * @returns {T}
 */
export function wasmCall(fn) {
  try {
    return fn();
  } catch (err) {
    if (err instanceof Error && err.name === "IdemkitError" && typeof err.code === "string") {
      throw new IdemkitError(err.code, err.message);
    }
    throw err;
  }
}

/** What `value` is, for a message: `null`, `an array`, or its `typeof`. */
export function typeName(value) {
  if (value === null) return "null";
  return Array.isArray(value) ? "an array" : typeof value;
}

/** An invalid-argument error: what the caller passed was wrong, `message` says how. */
export function argument(message) {
  return new IdemkitError("invalid-argument", message);
}

/** `value` when it is a string; else invalid-argument naming `what` (anything else would reach WebAssembly as garbage). */
export function requireString(value, what) {
  if (typeof value !== "string") throw argument(`${what} must be a string, not ${typeName(value)}`);
  return value;
}

/** `value` when it is an object (an API's single argument); else invalid-argument naming the `call`. */
export function objectArgument(value, call) {
  if (value === null || typeof value !== "object") throw argument(`${call} takes an object, not ${typeName(value)}`);
  return value;
}
