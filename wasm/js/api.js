// Pure functions of the `idemkit` package. Every answer is computed by the Rust
// core compiled to WebAssembly (./idemkit_wasm.js); this file only converts
// arguments and turns the core's coded errors into IdemkitError.
import * as wasm from "./idemkit_wasm.js";
import { IdemkitError, requireString, wasmCall } from "./errors.js";
import { FlatReader } from "./flat.js";

let maxRacesRead = 0;

/**
 * How often one call re-reads after losing a write race before it gives up
 * (store-contention): core's bound (`machine::MAX_ATTEMPTS`), the one the Rust
 * stores use. Read on first use, after the entry point instantiated the wasm.
 * @returns {number}
 */
export function maxRaces() {
  if (maxRacesRead === 0) maxRacesRead = wasm.maxAttempts();
  return maxRacesRead;
}

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
 * The fingerprint of a request: 64 lowercase hex characters, equal to
 * `idemkit fingerprint` with the same options. With `method` and `path` the
 * request line counts too (scheme 2, what `createIdempotency` computes): the
 * method, the concrete path and the query's decoded pairs sorted by name
 * (`ignoreQuery`, `ignoreQueryParams` leave it or named parameters out).
 * Without them only the operation and the body count (scheme 1).
 * @param {string | Uint8Array} body
 * @param {{ operation?: string, schemaVersion?: number, include?: string[], exclude?: string[], contentType?: string, profile?: "strict" | "rfc8785", method?: string, path?: string, query?: string, ignoreQuery?: boolean, ignoreQueryParams?: string[] }} [options]
 * @returns {string}
 */
export function fingerprint(body, options) {
  options ??= {};
  const line = requestLineOf(options);
  if (line !== null) return requestFingerprint(body, options).value;
  const { bytes, operation, schemaVersion, contentType, include, exclude, profile } = bodyOptions(body, options);
  return wasmCall(() => wasm.fingerprint(bytes, operation, schemaVersion, contentType, include, exclude, profile));
}

/**
 * The scheme-2 fingerprint of a request with the same request's scheme-1
 * fingerprint, which a claim compares with records written before the request
 * line counted: `{ scheme: 2, value, bodyOnly }`. Needs `method` and `path`.
 * @param {string | Uint8Array} body
 * @param {Parameters<typeof fingerprint>[1]} options
 * @returns {{ scheme: number, value: string, bodyOnly: string }}
 */
export function requestFingerprint(body, options) {
  const line = requestLineOf(options);
  if (line === null) throw new IdemkitError("invalid-argument", "a request fingerprint needs method and path");
  const { bytes, operation, schemaVersion, contentType, include, exclude, profile } = bodyOptions(body, options);
  return wasmCall(() =>
    wasm.fingerprintRequest(
      bytes, operation, schemaVersion, contentType, include, exclude, profile,
      line.method, line.path, line.query, line.ignoreQuery, line.ignoreQueryParams,
    ),
  );
}

/** The body's fingerprint options, checked, with their defaults filled in. */
export function bodyOptions(body, options) {
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
  return { bytes, operation, schemaVersion, contentType, include, exclude, profile: profileOf(options) };
}

/** The request-line options, checked; `null` when neither method nor path is given. */
export function requestLineOf(options) {
  const { method, path, query, ignoreQuery, ignoreQueryParams } = options;
  const given = [query, ignoreQuery, ignoreQueryParams].some((v) => v !== undefined);
  if (method === undefined && path === undefined) {
    if (given) throw new IdemkitError("invalid-argument", "query options need method and path");
    return null;
  }
  if (typeof method !== "string" || typeof path !== "string") {
    throw new IdemkitError("invalid-argument", "method and path must both be strings");
  }
  if (query !== undefined && typeof query !== "string") {
    throw new IdemkitError("invalid-argument", "query must be a string (the text after `?`)");
  }
  if (ignoreQuery !== undefined && typeof ignoreQuery !== "boolean") {
    throw new IdemkitError("invalid-argument", "ignoreQuery must be a boolean");
  }
  const names = ignoreQueryParams ?? [];
  if (!Array.isArray(names) || !names.every((n) => typeof n === "string")) {
    throw new IdemkitError("invalid-argument", "ignoreQueryParams must be an array of strings");
  }
  if (ignoreQuery && names.length > 0) {
    throw new IdemkitError("invalid-argument", "ignoreQuery and ignoreQueryParams exclude each other");
  }
  const text = query ?? "";
  return {
    method,
    path,
    // As `idemkit fingerprint --query`: one leading `?` is dropped (`URL.search` keeps it).
    query: text.startsWith("?") ? text.slice(1) : text,
    ignoreQuery: ignoreQuery ?? false,
    ignoreQueryParams: names,
  };
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
  requireScope(tenant, operation, key);
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
  requireScope(tenant, operation, key);
  return wasmCall(() => wasm.logRef(tenant, operation, key));
}

function requireScope(tenant, operation, key) {
  requireString(tenant, "tenant");
  requireString(operation, "operation");
  requireString(key, "key");
}

/**
 * A read-only view of stored record bytes (for operators and tests).
 * @param {Uint8Array} bytes
 */
export function decodeRecord(bytes) {
  if (!(bytes instanceof Uint8Array)) throw new IdemkitError("invalid-argument", "decodeRecord expects a Uint8Array");
  return recordView(new FlatReader(wasmCall(() => wasm.decodeRecord(bytes))));
}

/**
 * The view of a record read from core's flat form (`decodeRecord`'s, or the
 * view a completion's decision carries of the record it wrote), read in
 * wasm/src/view.rs's order from where `read` stands.
 * @param {FlatReader} read
 */
export function recordView(read) {
  const fingerprint = read.string();
  const fingerprintScheme = read.number();
  const effect = read.string();
  const state = read.string();
  const view = {
    fingerprint,
    fingerprintScheme,
    effect,
    state,
    attempt: read.number(),
    lastToken: read.token(),
    steps: read.steps(),
    createdAt: read.number(),
    updatedAt: read.number(),
    replayUntil: read.time(),
    keepUntil: read.time(),
  };
  if (state === "running") {
    view.owner = read.string();
    view.leaseExpiresAt = read.number();
  } else if (state === "completed") {
    view.response = read.response();
    view.completedAt = read.number();
  } else if (state === "unknown") {
    view.reason = read.string();
    view.since = read.number();
  } else {
    view.releasedAt = read.number();
  }
  return view;
}
