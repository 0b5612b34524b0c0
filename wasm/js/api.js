// Pure functions of the `idemkit` package. Every answer is computed by the Rust
// core compiled to WebAssembly (./idemkit_wasm.js); this file only converts
// arguments and turns the core's coded errors into IdemkitError.
import * as wasm from "./idemkit_wasm.js";
import { IdemkitError, wasmCall } from "./errors.js";

const utf8 = new TextEncoder();

/**
 * A string becomes its UTF-8 bytes; a string with a lone surrogate cannot be
 * encoded faithfully (TextEncoder would substitute U+FFFD), so it is refused.
 * @param {string | Uint8Array} input
 * @param {string} what
 * @returns {Uint8Array}
 */
export function toBytes(input, what) {
  if (input instanceof Uint8Array) return input;
  if (typeof input === "string") {
    if (!input.isWellFormed()) {
      throw new IdemkitError(
        "lone-surrogate-in-string",
        `${what} is a string with a lone UTF-16 surrogate, which has no UTF-8 encoding`,
      );
    }
    return utf8.encode(input);
  }
  throw new IdemkitError("invalid-argument", `${what} must be a string or a Uint8Array`);
}

function profileOf(options) {
  const profile = options?.profile ?? "strict";
  if (profile !== "strict" && profile !== "rfc8785") {
    throw new IdemkitError("invalid-argument", `profile must be "strict" or "rfc8785", not ${JSON.stringify(profile)}`);
  }
  return profile;
}

/**
 * RFC 8785 canonical JSON (strict profile by default).
 * @param {string | Uint8Array} input
 * @param {{ profile?: "strict" | "rfc8785" }} [options]
 * @returns {string}
 */
export function canonicalize(input, options) {
  const bytes = toBytes(input, "input");
  const profile = profileOf(options);
  return wasmCall(() => wasm.canonicalize(bytes, profile));
}

/**
 * The fingerprint of a request body: 64 lowercase hex characters, equal to
 * `idemkit fingerprint` with the same options.
 * @param {string | Uint8Array} body
 * @param {{ operation?: string, schemaVersion?: number, include?: string[], exclude?: string[], contentType?: string, profile?: "strict" | "rfc8785" }} [options]
 * @returns {string}
 */
export function fingerprint(body, options = {}) {
  const bytes = toBytes(body, "body");
  const operation = options.operation ?? "";
  const schemaVersion = options.schemaVersion ?? 1;
  const contentType = options.contentType ?? "application/json";
  const include = options.include ?? [];
  const exclude = options.exclude ?? [];
  if (typeof operation !== "string") throw new IdemkitError("invalid-argument", "operation must be a string");
  if (!Number.isInteger(schemaVersion) || schemaVersion < 0 || schemaVersion > 0xffffffff) {
    throw new IdemkitError("invalid-argument", "schemaVersion must be an integer from 0 to 4294967295");
  }
  if (typeof contentType !== "string") throw new IdemkitError("invalid-argument", "contentType must be a string");
  for (const [name, list] of [["include", include], ["exclude", exclude]]) {
    if (!Array.isArray(list) || !list.every((p) => typeof p === "string")) {
      throw new IdemkitError("invalid-argument", `${name} must be an array of JSON Pointer strings`);
    }
  }
  const profile = profileOf(options);
  return wasmCall(() => wasm.fingerprint(bytes, operation, schemaVersion, contentType, include, exclude, profile));
}

/**
 * Parses an `Idempotency-Key` header value, quoted (`"abc"`) or bare (`abc`).
 * @param {string} headerValue
 * @returns {string}
 */
export function parseKey(headerValue) {
  if (typeof headerValue !== "string") {
    throw new IdemkitError("invalid-argument", "parseKey expects the header value as a string");
  }
  return wasmCall(() => wasm.parseKey(headerValue));
}

/**
 * The storage id (hex) of `(tenant, operation, key)`: injective, so no two triples share one.
 * @param {string} tenant
 * @param {string} operation
 * @param {string} key
 * @returns {string}
 */
export function recordId(tenant, operation, key) {
  return wasmCall(() => wasm.recordId(tenant, operation, key));
}

/**
 * A short digest of `(tenant, operation, key)` that is safe to log (never log the key).
 * @param {string} tenant
 * @param {string} operation
 * @param {string} key
 * @returns {string}
 */
export function logRef(tenant, operation, key) {
  return wasmCall(() => wasm.logRef(tenant, operation, key));
}

/**
 * A read-only view of stored record bytes (for operators and tests).
 * @param {Uint8Array} bytes
 */
export function decodeRecord(bytes) {
  if (!(bytes instanceof Uint8Array)) throw new IdemkitError("invalid-argument", "decodeRecord expects a Uint8Array");
  return wasmCall(() => wasm.decodeRecord(bytes));
}
