// The client side (docs/architecture.md, "The client side"): an action journal over any
// adapter, `callWithRetry`, the JavaScript twin of `idemkit call`, and the circuit
// breakers it shares across actions (one per origin by default).
//
// One logical action gets one idempotency key, created and stored with the
// approved payload before anything is sent; every attempt, every restart and
// every second worker sends that same key. What to do after an attempt (retry
// after how long, or stop with which status) and what an action's status is are
// decided by core's `client` module in wasm, the code `idemkit call` runs, so the
// rules have one implementation. This file only moves bytes and sends requests.
import * as wasm from "./idemkit_wasm.js";
import { adapterCall, readDecideWrite } from "./adapters/loop.js";
import { canonicalize, fingerprint } from "./api.js";
import { argument, IdemkitError, requireString, wasmCall } from "./errors.js";

/** The journal entry format; a reader refuses any other. */
const FORMAT = 1;
/** Adapter ids of journal entries: never hex, so they cannot meet an idempotency record's id. */
const ID_PREFIX = "action:";
/** As the Rust journal (`MAX_ACTION_ID_LEN`). */
const MAX_ACTION_ID_BYTES = 1024;
/** The fingerprint operation of action payloads. */
const PAYLOAD_OPERATION = "idemkit.action";
/** `idemkit call --timeout-ms` default. */
const DEFAULT_TIMEOUT_MS = 10_000;
/** The problem type (its last path segment, as core compares it) of a key still running. */
const PROBLEM_REQUEST_IN_PROGRESS = "request-in-progress";
const lastSegment = (problemType) => (typeof problemType === "string" ? problemType.split("/").pop() : null);
/** Connection errors that mean the request was never sent (Node/undici, Bun, Deno). */
const CONNECT_ERROR_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
  "ConnectionRefused",
]);

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder("utf-8", { fatal: true });

function checkString(value, what) {
  requireString(value, what);
  if (!value.isWellFormed()) {
    throw new IdemkitError("lone-surrogate-in-string", `${what} is a string with a lone UTF-16 surrogate, which has no UTF-8 encoding`);
  }
  return value;
}

function checkActionId(actionId) {
  checkString(actionId, "actionId");
  const len = utf8.encode(actionId).length;
  if (len === 0 || len > MAX_ACTION_ID_BYTES) {
    throw new IdemkitError("action-id-invalid", `action id must be 1 to ${MAX_ACTION_ID_BYTES} bytes long (got ${len})`);
  }
  return actionId;
}

/**
 * A random idempotency key, UUID version 4 (`8e03978e-40d5-4e83-bc93-6894a57f9324`),
 * from `crypto.getRandomValues`; core writes it.
 * @returns {string}
 */
export function randomKey() {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return wasmCall(() => wasm.keyFromRandom(bytes));
}

/**
 * The deterministic key of `(namespace, runId, stepId)`, byte for byte Rust's
 * `IdempotencyKey::derive` (`ik1-` + 32 hex). For runtimes that already hold a
 * durable run id and step id; never derive a key from a call's arguments.
 * @param {string} namespace
 * @param {string} runId
 * @param {string} stepId
 * @returns {string}
 */
export function deriveKey(namespace, runId, stepId) {
  checkString(namespace, "namespace");
  checkString(runId, "runId");
  checkString(stepId, "stepId");
  return wasm.deriveKey(namespace, runId, stepId);
}

/**
 * How core classifies one attempt: "success", "retryable", "rejected" or "uncertain".
 * @param {import("./index.d.ts").AttemptResult} result
 */
export function classifyAttempt(result) {
  return wasmCall(() => wasm.attemptClass(result));
}

/**
 * What core's `RetryPolicy::decide` says after attempt `attempt` (1-based):
 * `{ retry: true, delayMs }` or `{ retry: false, status }`. `random` (a bigint)
 * picks the jitter; by default it is drawn from `crypto.getRandomValues`.
 * @param {number} attempt
 * @param {import("./index.d.ts").AttemptResult} result
 * @param {import("./index.d.ts").RetryOptions} [policy]
 * @param {bigint} [random]
 */
export function decideRetry(attempt, result, policy = {}, random = randomU64()) {
  if (!Number.isInteger(attempt) || attempt < 1 || attempt > 0xffffffff) {
    throw argument("attempt must be an integer from 1 to 4294967295");
  }
  if (typeof random !== "bigint" || random < 0n || random > 0xffffffffffffffffn) {
    throw argument("random must be a bigint from 0 to 2^64 - 1");
  }
  return wasmCall(() => wasm.decideRetry(attempt, result, retryPolicyOf(policy), random));
}

function randomU64() {
  return crypto.getRandomValues(new BigUint64Array(1))[0];
}

/** The four policy fields (others ignored), filled with core's defaults and checked by core. */
function retryPolicyOf(options) {
  const { maxAttempts, baseDelayMs, maxDelayMs, maxRetryAfterMs } = options ?? {};
  return wasmCall(() => wasm.retryPolicy({ maxAttempts, baseDelayMs, maxDelayMs, maxRetryAfterMs }));
}

/** An attempt result in its one stored form (core checks it). */
function normalizeResult(result) {
  wasmCall(() => wasm.attemptClass(result));
  if (result.kind !== "response") return { kind: result.kind };
  return {
    kind: "response",
    status: result.status,
    problemType: result.problemType ?? null,
    retryAfterMs: result.retryAfterMs ?? null,
    originalStatus: result.originalStatus ?? null,
  };
}

/** The attempt's outcome as `idemkit call` prints it: `timeout`, `201`, `409 outcome-uncertain`. */
function describe(result) {
  if (result === null) return null;
  if (result.kind !== "response") return result.kind;
  if (result.problemType == null) return String(result.status);
  return `${result.status} ${result.problemType.split("/").pop()}`;
}

function storeError(err) {
  if (err instanceof IdemkitError) return err;
  return new IdemkitError("store-unavailable", `the journal store failed: ${err?.message ?? err}`, { cause: err });
}

/** One adapter call (see adapterCall: a synchronous answer takes no await hop). */
const storeCall = (fn) => adapterCall(fn, storeError);

function isAdapter(value) {
  return ["get", "insert", "update"].every((m) => typeof value?.[m] === "function");
}

/** A JSON value → canonical JSON text (RFC 8785, strict), or a typed refusal. */
function canonicalPayload(payload) {
  if (payload instanceof Uint8Array || payload instanceof ArrayBuffer || ArrayBuffer.isView(payload)) {
    throw argument("an action payload is a JSON value (object, array, string, number, boolean or null), not bytes");
  }
  let text;
  try {
    text = JSON.stringify(payload);
  } catch (err) {
    throw new IdemkitError("invalid-argument", `the action payload cannot be written as JSON: ${err?.message ?? err}`, { cause: err });
  }
  if (text === undefined) throw argument("the action payload must be a JSON value, not undefined or a function");
  return canonicalize(text);
}

/**
 * A durable journal of client actions over any idemkit adapter (memory, SQLite,
 * D1, Durable Object, Deno KV): one entry per action id, written with
 * insert-if-absent and compare-and-set like idempotency records. Give it its own
 * table or prefix (e.g. `sqliteAdapter(db, { table: "idemkit_journal" })`); its ids
 * start with `action:` and never meet a record id anyway.
 * @param {import("./index.d.ts").JournalOptions | import("./index.d.ts").Adapter} options
 * @returns {import("./index.d.ts").Journal}
 */
export function createJournal(options) {
  const adapter = isAdapter(options) ? options : options?.adapter;
  if (!isAdapter(adapter)) {
    throw argument("createJournal expects { adapter } (an object with get, insert and update) or an adapter");
  }
  const clock = (isAdapter(options) ? undefined : options?.clock) ?? Date.now;
  if (typeof clock !== "function") throw argument("clock must be a function returning milliseconds");

  function decode(actionId, bytes) {
    let entry;
    try {
      entry = JSON.parse(fromUtf8.decode(bytes));
    } catch (err) {
      throw new IdemkitError("journal-corrupt", `journal entry for action ${JSON.stringify(actionId)} is corrupt: ${err?.message ?? err}`);
    }
    if (entry?.format !== FORMAT) {
      throw new IdemkitError("journal-corrupt", `journal entry for action ${JSON.stringify(actionId)} has unknown format ${JSON.stringify(entry?.format)}`);
    }
    if (entry.actionId !== actionId || typeof entry.key !== "string" || typeof entry.payload !== "string" || !Array.isArray(entry.attempts)) {
      throw new IdemkitError("journal-corrupt", `journal entry for action ${JSON.stringify(actionId)} is not a complete action`);
    }
    return entry;
  }

  const encode = (entry) => utf8.encode(JSON.stringify(entry));

  function actionView(entry, resumed) {
    return { actionId: entry.actionId, key: entry.key, payload: JSON.parse(entry.payload), createdAt: entry.createdAt, resumed };
  }

  function attemptView(a) {
    return { number: a.number, attemptId: a.attemptId, startedAt: a.startedAt, endedAt: a.endedAt, result: a.result, outcome: describe(a.result) };
  }

  async function read(actionId) {
    const current = await storeCall(() => adapter.get(ID_PREFIX + actionId));
    return current === null ? null : { entry: decode(actionId, current.record), version: current.version };
  }

  /** The one loop (./adapters/loop.js) on the entry of `actionId`; its answer. */
  async function onEntry(actionId, decide) {
    const { answer } = await readDecideWrite({
      adapter,
      id: ID_PREFIX + actionId,
      call: storeCall,
      what: `action ${JSON.stringify(actionId)}`,
      decide,
    });
    return answer;
  }

  /** Read, change, compare-and-set. */
  function modify(actionId, change) {
    return onEntry(actionId, (row) => {
      if (row === null) {
        throw new IdemkitError("action-unknown", `no action ${JSON.stringify(actionId)} in the journal`);
      }
      const entry = decode(actionId, row.record);
      const answer = change(entry);
      return { write: encode(entry), answer };
    });
  }

  async function begin(actionId, payload, options = {}) {
    checkActionId(actionId);
    const canonical = canonicalPayload(payload);
    const fp = fingerprint(canonical, { operation: PAYLOAD_OPERATION });
    const chosen = options?.key === undefined ? undefined : wasmCall(() => wasm.checkKey(checkString(options.key, "key")));
    return onEntry(actionId, (row) => {
      if (row !== null) {
        const current = decode(actionId, row.record);
        if (current.fingerprint !== fp) {
          const err = new IdemkitError(
            "action-payload-changed",
            `action ${JSON.stringify(actionId)} was begun with a different payload; a new action needs a new action id`,
          );
          err.actionId = actionId;
          throw err;
        }
        // A resumed action keeps the key it was created with.
        return { write: null, answer: actionView(current, true) };
      }
      const entry = {
        format: FORMAT,
        actionId,
        key: chosen ?? randomKey(),
        payload: canonical,
        fingerprint: fp,
        createdAt: clock(),
        attempts: [],
      };
      // Durable before anything is sent: the caller gets the key only once it
      // is stored. Another worker that began it first makes this insert lose:
      // its entry is read and the payloads compared.
      return { write: encode(entry), answer: actionView(entry, false) };
    });
  }

  async function get(actionId) {
    checkActionId(actionId);
    const current = await read(actionId);
    return current === null ? null : actionView(current.entry, true);
  }

  function startAttempt(actionId) {
    checkActionId(actionId);
    const attemptId = randomKey();
    return modify(actionId, (entry) => {
      const number = (entry.attempts.at(-1)?.number ?? 0) + 1;
      const startedAt = clock();
      entry.attempts.push({ number, attemptId, startedAt, endedAt: null, result: null });
      return { number, attemptId, startedAt };
    });
  }

  function finishAttempt(actionId, number, result) {
    checkActionId(actionId);
    const stored = normalizeResult(result);
    return modify(actionId, (entry) => {
      const attempt = entry.attempts.find((a) => a.number === number);
      if (attempt === undefined) {
        throw new IdemkitError("attempt-unknown", `action ${JSON.stringify(actionId)} has no attempt ${number}`);
      }
      attempt.endedAt = clock();
      attempt.result = stored;
      return attemptView(attempt);
    });
  }

  async function attempts(actionId) {
    checkActionId(actionId);
    const current = await read(actionId);
    return current === null ? [] : current.entry.attempts.map(attemptView);
  }

  async function status(actionId) {
    checkActionId(actionId);
    const current = await read(actionId);
    if (current === null) return null;
    // An attempt that started and never finished (the process died) counts for
    // nothing: resuming with the same key is safe, the server says what became of it.
    const finished = current.entry.attempts.filter((a) => a.result !== null).map((a) => a.result);
    return wasmCall(() => wasm.actionStatus(finished));
  }

  return { begin, get, startAttempt, finishAttempt, attempts, status };
}

/**
 * Begins the action `actionId` with `payload`, or resumes it: the same key and
 * payload forever after; a different payload throws `action-payload-changed`.
 * @param {import("./index.d.ts").Journal} journal
 * @param {string} actionId
 * @param {unknown} payload
 * @param {{ key?: string }} [options]
 */
export function beginAction(journal, actionId, payload, options) {
  if (typeof journal?.begin !== "function") throw argument("beginAction expects a journal from createJournal");
  return journal.begin(actionId, payload, options);
}

// ---- Circuit breakers --------------------------------------------------------------

/** The default breaker of each origin (`scheme://host:port`), shared by every action in this runtime. */
const originBreakers = new Map();

/** `scheme://host:port` of an absolute URL, the scheme's default port filled in (as `idemkit call`). */
function originOf(url) {
  const u = new URL(url);
  const port = u.port || (u.protocol === "https:" ? "443" : u.protocol === "http:" ? "80" : "");
  return `${u.protocol}//${u.hostname}:${port}`;
}

function isBreaker(value) {
  return typeof value?.allow === "function" && typeof value?.record === "function";
}

/**
 * A circuit breaker to share across actions (`callWithRetry({ breaker })`). Every
 * transition is core's `CircuitBreaker` in wasm; this object only keeps its state.
 * After `failureThreshold` consecutive failed attempts (connect error, timeout, 408,
 * 429, 5xx) it opens and refuses for `coolDownMs`; then one probe goes through, and
 * its success closes it (its failure reopens it).
 * @param {import("./index.d.ts").BreakerOptions} [options]
 * @returns {import("./index.d.ts").Breaker}
 */
export function createBreaker(options = {}) {
  const { failureThreshold, coolDownMs, clock = Date.now } = options ?? {};
  if (typeof clock !== "function") throw argument("clock must be a function returning milliseconds");
  const config = Object.freeze(wasmCall(() => wasm.breakerConfig({ failureThreshold, coolDownMs })));
  let state = { state: "closed", failures: 0 };
  return Object.freeze({
    config,
    get state() {
      return { ...state };
    },
    allow(probeLeaseMs = config.coolDownMs) {
      if (!Number.isSafeInteger(probeLeaseMs) || probeLeaseMs < 0) throw argument("probeLeaseMs must be a non-negative integer");
      const now = clock();
      const verdict = wasmCall(() => wasm.breakerAllow(state, config, now, probeLeaseMs));
      state = verdict.state;
      return verdict.allowed ? { allowed: true, retryAt: null } : { allowed: false, retryAt: now + verdict.retryAfterMs };
    },
    record(result) {
      state = wasmCall(() => wasm.breakerRecord(state, config, result, clock()));
      return { ...state };
    },
  });
}

/**
 * The default breaker of `url`'s origin (`scheme://host:port`) in this runtime, with
 * core's default thresholds (5 failures, 30 s): the one `callWithRetry` uses unless
 * given `breaker`.
 * @param {string} url
 * @returns {import("./index.d.ts").Breaker}
 */
export function originBreaker(url) {
  checkString(url, "url");
  let origin;
  try {
    origin = originOf(url);
  } catch {
    throw argument(`url ${JSON.stringify(url)} is not an absolute URL`);
  }
  let breaker = originBreakers.get(origin);
  if (breaker === undefined) {
    breaker = createBreaker();
    originBreakers.set(origin, breaker);
  }
  return breaker;
}

/** The report's view of a breaker: its state name and, when open, from when to try again. */
function breakerView(breaker) {
  if (breaker === null) return { breaker: null, retryAt: null };
  const state = breaker.state;
  return { breaker: state.state, retryAt: state.state === "open" ? state.until : null };
}

// ---- callWithRetry ----------------------------------------------------------------

/** Header pairs from a Headers, an array of pairs or a record; names lowercased. */
/** Headers that carry a credential: never part of a journalled payload. */
const CREDENTIAL_HEADERS = new Set(["authorization", "cookie", "proxy-authorization"]);

function headerPairs(headers, what) {
  if (headers == null) return [];
  let entries;
  if (typeof Headers !== "undefined" && headers instanceof Headers) entries = [...headers];
  else if (Array.isArray(headers)) entries = headers;
  else if (typeof headers === "object") entries = Object.entries(headers);
  else throw argument(`${what} must be a Headers, an array of [name, value] or a record`);
  const pairs = entries.map((pair) => {
    if (!Array.isArray(pair) || pair.length !== 2) throw argument(`each of ${what} must be [name, value]`);
    return [checkString(pair[0], `a ${what} name`).toLowerCase(), checkString(pair[1], `the ${what} value of ${pair[0]}`)];
  });
  for (const [name] of pairs) {
    if (name === "idempotency-key") throw argument("the Idempotency-Key header comes from the journal; do not set it");
  }
  try {
    new Headers(pairs);
  } catch (err) {
    throw new IdemkitError("invalid-argument", `${what}: ${err?.message ?? err}`, { cause: err });
  }
  // Stable by name: the order of distinct headers carries no meaning, that of repeated ones does.
  return pairs.map((p, i) => [p, i]).sort((a, b) => (a[0][0] < b[0][0] ? -1 : a[0][0] > b[0][0] ? 1 : a[1] - b[1])).map(([p]) => p);
}

/** `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3), as milliseconds. */
function parseRetryAfter(value) {
  if (value === null) return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Math.min(Number(text) * 1000, Number.MAX_SAFE_INTEGER);
  if (!/\d{2}:\d{2}:\d{2}/.test(text)) return null;
  const at = Date.parse(text);
  return Number.isFinite(at) ? Math.max(0, at - Date.now()) : null;
}

/** The `type` and `original_status` members of a JSON object body, as `idemkit call` reads them. */
function problemFields(body) {
  let value;
  try {
    value = JSON.parse(body);
  } catch {
    return { problemType: null, originalStatus: null };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) return { problemType: null, originalStatus: null };
  const problemType = typeof value.type === "string" ? value.type : null;
  const original = value.original_status;
  const originalStatus = Number.isInteger(original) && original >= 0 && original <= 0xffff ? original : null;
  return { problemType, originalStatus };
}

/** Whether `err` (or a cause) says the connection was refused: the request was never sent. */
export function isConnectError(err) {
  for (let e = err, depth = 0; e != null && depth < 4; e = e.cause, depth++) {
    if (CONNECT_ERROR_CODES.has(e.code) || CONNECT_ERROR_CODES.has(e.errno)) return true;
  }
  return false;
}

/** Waits `ms`; rejects with the signal's reason when it aborts. */
export function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Sends one attempt; resolves to what the client could tell and the body, if any.
 * Never rejects for network reasons: those are results. Rejects only when the
 * caller's `signal` aborted (with its reason, after `result` was filled in).
 */
async function sendAttempt(fetchFn, request, timeoutMs, signal, outcome) {
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new IdemkitError("attempt-timeout", `no response within ${timeoutMs} ms`));
  }, timeoutMs);
  const onAbort = () => controller.abort(signal.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    let response;
    try {
      response = await fetchFn(request.url, {
        method: request.method,
        headers: request.headers,
        body: request.body,
        // A state-changing request is never re-sent elsewhere: a 3xx is the answer.
        redirect: "manual",
        signal: controller.signal,
      });
    } catch (err) {
      // Refused before sending: nothing can have happened. Anything else (a timeout,
      // a connection that broke while waiting) may have reached the server.
      outcome.result = !timedOut && !signal?.aborted && isConnectError(err) ? { kind: "connect-error" } : { kind: "timeout" };
      if (signal?.aborted) throw signal.reason;
      return;
    }
    if (typeof response?.status !== "number" || typeof response.headers?.get !== "function" || typeof response.text !== "function") {
      throw argument("fetch must resolve to a Response");
    }
    // If the body breaks off after the status arrived, the outcome is still what the
    // status says; only the body is lost.
    let body = "";
    try {
      body = await response.text();
    } catch {
      body = "";
    }
    outcome.body = body;
    outcome.result = {
      kind: "response",
      status: response.status,
      retryAfterMs: parseRetryAfter(response.headers.get("retry-after")),
      ...problemFields(body),
    };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
  }
}

/**
 * Sends a state-changing HTTP request as one logical action, like `idemkit call`:
 * begins (or resumes) the action in `journal`, sends `Idempotency-Key: <its key>` on
 * every attempt, journals each attempt, and retries by core's rules.
 * @param {import("./index.d.ts").CallOptions} options
 * @returns {Promise<import("./index.d.ts").CallReport>}
 */
export async function callWithRetry(options) {
  const { journal, actionId, url, signal } = options ?? {};
  if (typeof journal?.begin !== "function" || typeof journal?.startAttempt !== "function") {
    throw argument("callWithRetry needs journal: a journal from createJournal");
  }
  checkActionId(actionId);
  checkString(url, "url");
  try {
    new URL(url);
  } catch {
    throw argument(`url ${JSON.stringify(url)} is not an absolute URL`);
  }
  const method = checkString(options.method ?? "POST", "method").toUpperCase();
  const fetchFn = options.fetch ?? globalThis.fetch;
  if (typeof fetchFn !== "function") throw argument("fetch must be a function (default: globalThis.fetch)");
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) throw argument("timeoutMs must be a positive integer");
  const policy = retryPolicyOf(options);
  // After a 409 request-in-progress the retry asks the server to hold it until the
  // first attempt's answer exists (`Prefer: wait=N`), instead of polling again; its
  // timeout grows by the wait.
  // By default as long as a server allows unless configured otherwise (core's DEFAULT_MAX_WAIT, 10 s).
  const waitSeconds = options.waitSeconds ?? wasmCall(() => wasm.httpDefaults()).maxWaitMs / 1000;
  if (!Number.isSafeInteger(waitSeconds) || waitSeconds < 0) throw argument("waitSeconds must be a non-negative integer (0: never ask to wait)");
  if (options.breaker !== undefined && options.breaker !== false && !isBreaker(options.breaker)) {
    throw argument("breaker must be a breaker from createBreaker, or false for none");
  }
  // Credentials are sent on every attempt but never journalled, wherever they
  // were given: a journal file must not hold a token, and a rotated one
  // continues the same action (as `idemkit call` and the Python client do).
  const given = headerPairs(options.headers, "headers");
  const headers = given.filter(([name]) => !CREDENTIAL_HEADERS.has(name));
  const volatileHeaders = [...headerPairs(options.volatileHeaders, "volatileHeaders"), ...given.filter(([name]) => CREDENTIAL_HEADERS.has(name))];

  // The request as journalled: a JSON object or array body is journalled (and sent)
  // as canonical JSON, so key order does not make it another payload.
  let body = options.body ?? null;
  if (body !== null && typeof body === "object") {
    if (ArrayBuffer.isView(body) || body instanceof ArrayBuffer || (typeof Blob !== "undefined" && body instanceof Blob)) {
      throw argument("body must be a string, or a JSON object or array (sent as canonical JSON)");
    }
    if (!headers.some(([name]) => name === "content-type")) {
      headers.push(["content-type", "application/json"]);
      headers.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    }
  } else if (body !== null && typeof body !== "string") {
    throw argument("body must be a string, or a JSON object or array (sent as canonical JSON)");
  }
  signal?.throwIfAborted();

  const action = await journal.begin(actionId, { method, url, headers, body }, options.key === undefined ? {} : { key: options.key });
  // From here on the journalled request is the one sent, byte for byte.
  const journalled = action.payload;
  const sentBody = journalled.body === null ? undefined : typeof journalled.body === "string" ? journalled.body : canonicalize(JSON.stringify(journalled.body));

  // One breaker per origin unless the caller shares its own (or turns it off).
  const breaker = options.breaker === false ? null : (options.breaker ?? originBreaker(journalled.url));
  // A probe keeps other actions out for as long as it may take, and no longer.
  const probeLeaseMs = breaker === null ? 0 : Math.max(timeoutMs, breaker.config.coolDownMs);

  const attempts = [];
  let httpStatus = null;
  let lastBody = null;
  let refused = false;
  let askToWait = false;
  for (;;) {
    signal?.throwIfAborted();
    if (breaker !== null && !breaker.allow(probeLeaseMs).allowed) {
      // Open: nothing is sent and the action stays as it is (pending), to resume later.
      refused = true;
      break;
    }
    const start = await journal.startAttempt(actionId);
    const outcome = { result: null, body: null };
    const request = {
      url: journalled.url,
      method: journalled.method,
      headers: [
        ...journalled.headers,
        ...volatileHeaders,
        ["idempotency-key", wasmCall(() => wasm.keyHeaderValue(action.key))],
        ["idemkit-attempt-id", start.attemptId],
        ...(askToWait ? [["prefer", `wait=${waitSeconds}`]] : []),
      ],
      body: sentBody,
    };
    let aborted;
    try {
      await sendAttempt(fetchFn, request, askToWait ? timeoutMs + waitSeconds * 1000 : timeoutMs, signal, outcome);
    } catch (reason) {
      // No result: the custom fetch broke its contract (it did not resolve to a
      // Response). The attempt stays unfinished, which the status reads as pending.
      if (outcome.result === null) throw reason;
      aborted = { reason };
    }
    breaker?.record(outcome.result);
    const finished = await journal.finishAttempt(actionId, start.number, outcome.result);
    const status = outcome.result.kind === "response" ? outcome.result.status : null;
    if (status !== null) {
      httpStatus = status;
      lastBody = outcome.body;
    }
    askToWait = waitSeconds > 0 && status === 409 && lastSegment(outcome.result.problemType) === PROBLEM_REQUEST_IN_PROGRESS;
    attempts.push({
      number: start.number,
      attemptId: start.attemptId,
      startedAt: start.startedAt,
      endedAt: finished.endedAt,
      outcome: finished.outcome,
      httpStatus: status,
    });
    if (aborted) throw aborted.reason;
    // Attempts are counted per run, as `idemkit call` counts them: a resumed action
    // gets a fresh budget.
    // A retry that will ask to wait goes after the backoff alone: the server
    // holds it until the answer exists, so the 409's Retry-After (the running
    // lease's remainder) would only leave the client idle.
    const decide = askToWait ? wasm.decideRetryAskingToWait : wasm.decideRetry;
    const decision = wasmCall(() => decide(attempts.length, outcome.result, policy, randomU64()));
    if (!decision.retry) break;
    await sleep(decision.delayMs, signal);
  }
  const status = (await journal.status(actionId)) ?? "pending";
  return {
    actionId,
    idempotencyKey: action.key,
    resumed: action.resumed,
    status,
    httpStatus,
    attempts,
    body: lastBody,
    ...breakerView(breaker),
    stoppedByBreaker: refused && status === "pending",
  };
}
