// createIdempotency: docs/architecture.md's HTTP contract for fetch-style handlers.
//
// Every decision comes from the Rust state machine (./idemkit_wasm.js): core's one
// entry point, `apply(existing, op, policy, now)`, takes the stored record bytes
// and an operation and returns what to write and what to answer. A `Route` holds
// the policy and fingerprint rules in WebAssembly, so a request does not send
// them again: its claim is one fingerprint call and one decision. This file only
// moves bytes between the machine and an adapter through the one loop
// (./adapters/loop.js): insert-if-absent for a new record, compare-and-set on the
// version read for an existing one, delete-if-version for GC. A lost race is never
// overwritten: the loser reads again and asks the machine again. Every write
// passes the record's GC due time (`meta`, from core) so the adapter can index it.
// `completeWith` completes a record through the adapter's `updateWith`, so the
// caller's local writes commit in the same transaction as the completion. A retry
// of a running key may wait for its answer (`Prefer: wait`, ./waiting.js).
import * as wasm from "./idemkit_wasm.js";
import { keepsSharedBlocks } from "./adapters/handover.js";
import { adapterCall, andThen, isPromise, promised, readDecideWrite } from "./adapters/loop.js";
import { bodyOptions, decodeRecord, parseKey, recordView, requestLineOf, toBytes } from "./api.js";
import { IdemkitError, objectArgument, requireString, typeName, wasmCall } from "./errors.js";
import { FlatReader } from "./flat.js";
import { holdWhileRunning, waitOf, waitingOptions } from "./waiting.js";


let sharedDefaults = null;

/**
 * Core's numbers, shared with the Rust middleware (`http::defaults`): recording
 * attempts and the pause before the first retry, the default limits, the GC
 * batch, and the default policy's windows. Read on first use, after the entry
 * point instantiated the wasm.
 */
export function defaults() {
  sharedDefaults ??= Object.freeze(wasm.httpDefaults());
  return sharedDefaults;
}

/**
 * The adapter row that keeps the store's token floor (the highest fencing token
 * of any record GC deleted, as decimal text). Record ids are hex digests, so it
 * cannot collide with one; it is written never due, so GC never scans it.
 */
const TOKEN_FLOOR_ID = "idemkit:token-floor";

/**
 * Where an execute claim keeps the record bytes and version its lease last wrote
 * (the next transition's compare-and-set expects them): a symbol, so the claim's
 * named fields stay the documented ones.
 */
const LEASE = Symbol("idemkit lease");

/** Whether a store failure may pass (the adapter threw), as opposed to a refusal. */
function transientStoreError(err) {
  return err instanceof IdemkitError && err.code === "store-unavailable";
}

/**
 * Runs `write` up to core's `recordAttempts` times while the store fails (the
 * pause before the first retry is `recordBackoffMs`, doubled before each later
 * one); a refusal is final at once.
 */
export async function withRetries(write) {
  const { recordAttempts, recordBackoffMs } = defaults();
  let pause = recordBackoffMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (err) {
      if (!transientStoreError(err) || attempt >= recordAttempts) throw err;
      await new Promise((resolve) => setTimeout(resolve, pause));
      pause *= 2;
    }
  }
}

/**
 * Renews a lease at core's cadence (every third of its length) while its execution runs, so a slow
 * one is not taken for a dead one (a Local record would be executed again, an
 * External one become unknown). A store failure is retried (sooner) until a
 * renewal succeeds or is refused (stale token, record no longer running: the
 * lease really ended). After `maxExecutionMs` no renewal starts, so a hung
 * execution's lease expires: an External record is then unresolved and retries
 * get 409 outcome-uncertain. Returns `stop()`, which stops renewing and gives
 * the renewal in progress to wait for (undefined when none is), so the final
 * transition never races one, and
 * `resume()`, which renews again after a transition that did not happen.
 */
export function renewWhileRunning({ leaseMs, maxExecutionMs, clock, renew }) {
  const { everyMs: every, afterErrorMs: afterError } = renewalCadence(leaseMs);
  const deadline = clock() + maxExecutionMs;
  let stopped = false;
  let timer = null;
  // The renewal in progress, or undefined: most executions end before the first one.
  let pending;
  const settled = () => {
    pending = undefined;
  };
  const schedule = (wait) => {
    if (stopped || clock() + wait > deadline) return;
    timer = setTimeout(() => {
      if (stopped || clock() > deadline) return;
      pending = renew()
        .then(
          () => schedule(every),
          (err) => {
            if (transientStoreError(err)) schedule(afterError);
          },
        )
        .finally(settled);
    }, wait);
  };
  schedule(every);
  return {
    /** Stops renewing; a promise of the renewal in progress, if one is (undefined otherwise: nothing to wait for). */
    stop() {
      stopped = true;
      clearTimeout(timer);
      return pending;
    },
    resume() {
      if (!stopped) return;
      stopped = false;
      schedule(every);
    },
  };
}

/** Core's renewal cadence for leases of `leaseMs`, asked once per lease length (a route has one). */
const cadences = new Map();
function renewalCadence(leaseMs) {
  let cadence = cadences.get(leaseMs);
  if (cadence === undefined) {
    cadence = wasmCall(() => wasm.renewalCadence(leaseMs));
    // Lease lengths come from configuration: a handful per process. Bounded all the same.
    if (cadences.size >= 64) cadences.clear();
    cadences.set(leaseMs, cadence);
  }
  return cadence;
}

/** Core's default policy and store-unavailable Retry-After. */
function defaultPolicy() {
  const { leaseMs, replayWindowMs, recordWindowMs, mismatchStatus, storeRetryAfterSeconds } = defaults();
  return { leaseMs, replayWindowMs, recordWindowMs, mismatchStatus, store: "definitive", storeRetryAfterSeconds };
}

// Every row of docs/architecture.md's HTTP contract is rendered by core's `http::reply`
// (the httpAnswer export), so statuses, problem bodies and headers, replays
// included, are the Rust middleware's, byte for byte.

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

/** A `{ status, headers, body }` answer from core → a Response. */
function fromAnswer(answer) {
  return new Response(nullBodyStatus(answer.status) ? null : answer.body, { status: answer.status, headers: answer.headers });
}

/**
 * `Route.claim`'s packed decision (wasm/src/interop.rs, `claim_decision`), at
 * address `at`, as `readDecideWrite` takes it: the write, its index meta, and the answer a claim
 * resolves to, with the HTTP `reply` when core made one.
 */
function claimDecided(at, sharedWrite) {
  const read = new FlatReader(at, sharedWrite);
  const write = read.write;
  const gcDueAt = read.time();
  const outcome = read.string();
  let answer;
  switch (outcome) {
    case "execute":
      answer = { outcome, token: read.token(), attempt: read.number(), leaseExpiresAt: read.number(), steps: read.steps() };
      break;
    case "replay":
      answer = read.flag() ? { outcome, response: read.response() } : { outcome };
      break;
    case "responseExpired":
      answer = { outcome, status: read.number(), resourceRef: read.optionalString() };
      break;
    case "inFlight":
      answer = { outcome, retryAfterSeconds: read.number() };
      break;
    case "mismatch":
      answer = { outcome, status: read.number() };
      break;
    case "uncertain":
      answer = { outcome, since: read.number() };
      break;
    default:
      throw new IdemkitError("invalid-argument", `internal error: a claim outcome this package does not know: ${outcome}`);
  }
  if (read.flag()) {
    const status = read.number();
    const headers = [];
    for (let i = 0, count = read.number(); i < count; i++) headers.push([read.string(), read.string()]);
    answer.reply = { status, headers, body: read.range() };
  }
  return { write, answer, meta: write instanceof Uint8Array ? { gcDueAt } : undefined };
}

/**
 * `Route.complete`'s packed decision (wasm/src/interop.rs, `completion_decision`),
 * at address `at`, as `readDecideWrite` takes it; `answer.view` is the written
 * record's view when one came with it (asked for only by a caller that returns it).
 */
function completionDecided(at, sharedWrite) {
  const read = new FlatReader(at, sharedWrite);
  const { write } = read;
  const gcDueAt = read.time();
  // Read now: the reader's memory is reused by the next call into WebAssembly.
  const view = read.flag() ? recordView(read) : undefined;
  return { write, answer: { view }, meta: write instanceof Uint8Array ? { gcDueAt } : undefined };
}

/** Core's answer to `situation` (see the httpAnswer export) as a Response. */
function answer(situation) {
  return fromAnswer(wasmCall(() => wasm.httpAnswer(situation)));
}

function checkAdapter(adapter) {
  for (const method of ["get", "insert", "update"]) {
    if (typeof adapter?.[method] !== "function") {
      throw new IdemkitError("invalid-argument", `adapter.${method} must be a function (see the Adapter type)`);
    }
  }
}

/** Wraps an adapter failure: the store could not be reached or refused the write. */
function storeError(err) {
  if (err instanceof IdemkitError) return err;
  return new IdemkitError("store-unavailable", `the idempotency store failed: ${err?.message ?? err}`, { cause: err });
}

/** One adapter call (see adapterCall: a synchronous answer takes no await hop). */
const storeCall = (fn) => adapterCall(fn, storeError);

/**
 * @param {import("./index.d.ts").IdempotencyOptions} options
 * @returns {import("./index.d.ts").Idempotency}
 */
export function createIdempotency(options) {
  const { adapter, operation, effect, tenant } = options ?? {};
  checkAdapter(adapter);
  if (typeof operation !== "string") throw new IdemkitError("invalid-argument", "operation must be a string");
  if (effect !== "local" && effect !== "external") {
    throw new IdemkitError("invalid-argument", 'effect must be "local" or "external"');
  }
  if (typeof tenant !== "function") {
    throw new IdemkitError("invalid-argument", "tenant must be a function (request) => string | null");
  }
  const settings = { ...defaultPolicy(), ...(options.policy ?? {}) };
  const policy = {
    leaseMs: settings.leaseMs,
    replayWindowMs: settings.replayWindowMs,
    recordWindowMs: settings.recordWindowMs,
    effect,
    mismatchStatus: settings.mismatchStatus,
    store: settings.store,
  };
  const fingerprintOptions = options.fingerprint ?? {};
  for (const field of ["operation", "method", "path", "query"]) {
    if (fingerprintOptions[field] !== undefined) {
      throw new IdemkitError(
        "invalid-argument",
        `fingerprint.${field} comes from each request, not the options (leave query parameters out with ignoreQuery or ignoreQueryParams)`,
      );
    }
  }
  // The policy and the fingerprint rules are checked now, not on the first
  // request, and held in WebAssembly by the route: a claim then crosses with
  // flat arguments and raw fingerprint bytes, nothing parsed again per call.
  const rules = bodyOptions(new Uint8Array(), { ...fingerprintOptions, operation });
  const queryRules = requestLineOf({
    method: "",
    path: "",
    ignoreQuery: fingerprintOptions.ignoreQuery,
    ignoreQueryParams: fingerprintOptions.ignoreQueryParams,
  });
  const route = wasmCall(
    () =>
      new wasm.Route(
        operation, policy, rules.schemaVersion, rules.include, rules.exclude, rules.profile,
        queryRules.ignoreQuery, queryRules.ignoreQueryParams,
      ),
  );
  // How a status is recorded. With `stepsRecord` (the record, when its steps are
  // the evidence) core reads it; without, the answer is a pure function of the
  // route's policy, so asked of core once per status and flag.
  const dispositions = new Map();
  const classify = (status, nothingDispatched, stepsRecord) => {
    if (stepsRecord !== undefined) return wasmCall(() => route.classify(status, nothingDispatched, true, stepsRecord));
    const asked = status * 2 + (nothingDispatched ? 1 : 0);
    let disposition = dispositions.get(asked);
    if (disposition === undefined) {
      disposition = wasmCall(() => route.classify(status, nothingDispatched, false, undefined));
      dispositions.set(asked, disposition);
    }
    return disposition;
  };
  // Whether a write may be copied out of WebAssembly into a shared block (adapters/handover.js).
  const sharedWrites = adapter[keepsSharedBlocks] === true;
  const clock = options.clock ?? Date.now;
  const resourceRefOf = options.resourceRef ?? ((response) => response.headers.get("location"));
  const keyRequired = options.required ?? true;
  const autoRenew = options.autoRenew ?? true;
  const maxExecutionMs = options.maxExecutionMs ?? defaults().maxExecutionMs;
  if (!Number.isSafeInteger(maxExecutionMs) || maxExecutionMs < 0) {
    throw new IdemkitError("invalid-argument", "maxExecutionMs must be a non-negative integer");
  }
  const dispatchesOnlyThroughSteps = options.dispatchesOnlyThroughSteps ?? false;
  // Whether the handler's request follows the client's abort signal (see `forHandler`).
  const onDisconnect = options.onDisconnect ?? "finish";
  if (onDisconnect !== "finish" && onDisconnect !== "cancel") {
    throw new IdemkitError("invalid-argument", 'onDisconnect must be "finish" or "cancel"');
  }
  // The body is read whole to fingerprint it, so its size is bounded (core's
  // canonicalizer also refuses JSON above 8 MiB). It is read through a counting
  // reader that stops at the limit: nothing past it is buffered.
  const maxBodyBytes = options.maxBodyBytes ?? defaults().bodyLimitBytes;
  if (!Number.isSafeInteger(maxBodyBytes) || maxBodyBytes < 0) {
    throw new IdemkitError("invalid-argument", "maxBodyBytes must be a non-negative integer");
  }
  // Response bodies kept for replay are bounded too. An adapter whose platform
  // caps a stored value (Deno KV, Durable Objects) says so in `maxRecordBytes`,
  // and a body that would make the record larger is not kept either.
  const maxStoredResponseBytes = options.maxStoredResponseBytes ?? defaults().maxStoredResponseBytes;
  if (!Number.isSafeInteger(maxStoredResponseBytes) || maxStoredResponseBytes < 0) {
    throw new IdemkitError("invalid-argument", "maxStoredResponseBytes must be a non-negative integer");
  }
  // Response headers stored and replayed: an allow list (core's defaults unless
  // given); a credential or cookie header is refused by core, never stored.
  if (options.replayedHeaders !== undefined && !(Array.isArray(options.replayedHeaders) && options.replayedHeaders.every((n) => typeof n === "string"))) {
    throw new IdemkitError("invalid-argument", "replayedHeaders must be an array of header names");
  }
  const replayed = new Set(wasmCall(() => wasm.replayedHeaders(options.replayedHeaders)));
  const maxRecordBytes = adapter.maxRecordBytes ?? Infinity;
  if (maxRecordBytes !== Infinity && (!Number.isSafeInteger(maxRecordBytes) || maxRecordBytes <= 0)) {
    throw new IdemkitError("invalid-argument", "adapter.maxRecordBytes must be a positive integer");
  }
  // Holding retries of a running key (`Prefer: wait=N`): the route's default wait
  // (0: none unless asked), the cap on any wait (core's default 10 s), and how many
  // requests may wait on one key and on this handler in all (past them: 503).
  const { rule: waitRule, slots } = waitingOptions(options, defaults());
  // A claim's default owner: this instance's id and the claim's number, unique
  // without drawing a random value per claim (a replay never records its owner).
  const instanceId = crypto.randomUUID();
  let claimsMade = 0;

  /**
   * The request's fingerprint as the route's raw bytes: with a request line
   * (`{ method, path, query }`) scheme 2, which frames it; without one scheme 1
   * (operation and body only).
   */
  function fingerprintOf(body, contentType, line) {
    const bytes = toBytes(body ?? new Uint8Array(), "body");
    const type = contentType ?? rules.contentType;
    if (typeof type !== "string") throw new IdemkitError("invalid-argument", "contentType must be a string");
    if (line === undefined) return wasmCall(() => route.fingerprint(bytes, type));
    const { method, path, query } = requestLineOf(line);
    return wasmCall(() => route.fingerprint(bytes, type, method, path, query));
  }

  /** `apply`'s answer as `readDecideWrite` takes it: the write, its index meta, the answer. */
  function decided({ write, writeGcDueAt, ...answer }) {
    // `writeGcDueAt` comes with a written record: no second decode for its meta.
    return { write, answer, meta: write instanceof Uint8Array ? { gcDueAt: writeGcDueAt ?? null } : undefined };
  }

  /** Core's decision of `op` on `current` (the row read, or null). */
  function decideOn(current, op) {
    return decided(wasmCall(() => route.apply(current?.record, op, clock())));
  }

  /** The record's storage id and log reference, from one call. */
  function locate(tenantId, key) {
    requireString(tenantId, "tenant");
    requireString(key, "key");
    const located = wasmCall(() => route.locate(tenantId, key));
    return { ref: located.slice(0, 16), id: located.slice(16) };
  }

  /**
   * Claims: read, let core decide, insert-if-absent / CAS; loops on a lost race.
   * For `handle` (`forHttp`), an outcome other than execute comes with `reply`:
   * core's HTTP answer to it, made in the same call. The claim itself when the
   * adapter answers synchronously, else a promise of it (see readDecideWrite).
   */
  function claimPrepared(tenantId, key, fp, owner, forHttp = false) {
    const { id, ref } = locate(tenantId, key);
    const claimOwner = owner ?? `${instanceId}-${++claimsMade}`;
    if (typeof claimOwner !== "string") throw new IdemkitError("invalid-argument", "claim.owner must be a string");
    // With the log reference, core makes the HTTP reply in the same call.
    const replyRef = forHttp ? ref : undefined;
    const decideClaim = (row, floor) => claimDecided(wasmCall(() => route.claim(row?.record, fp, claimOwner, floor, clock(), replyRef)), sharedWrites);
    const decided = readDecideWrite({
      adapter,
      id,
      call: storeCall,
      what: `record ${ref}`,
      // A fresh record's tokens start above every token of a record GC deleted
      // (read after the record: GC raises the floor before it deletes).
      decide: (row) => {
        if (row !== null) return decideClaim(row, 0n);
        const floor = readTokenFloor();
        return andThen(floor, (read) => decideClaim(row, read));
      },
    });
    return andThen(decided, ({ answer, current }) => {
      // `answer` is this call's own object: extended in place (a spread followed by
      // more properties takes V8's slow path, about 0.6 µs per property).
      answer.id = id;
      answer.logRef = ref;
      answer.owner = claimOwner;
      // The bytes and version this claim wrote: the next transition's CAS expects them.
      if (answer.outcome === "execute") answer[LEASE] = { record: current.record, version: current.version };
      return answer;
    });
  }

  // Not async (that would cost the claim an await hop): a refusal is a rejected
  // promise, whether it is made before the claim starts or by the store.
  function claim(input) {
    return promised(() => {
      const { tenant: tenantId, key, body, contentType, owner, method, path, query } = objectArgument(input, "claim");
      const line = method === undefined && path === undefined ? undefined : { method, path, query };
      return claimPrepared(tenantId, key, fingerprintOf(body, contentType, line), owner);
    });
  }

  /**
   * Applies a worker transition (`op`, with the lease's token) to the record
   * this claim wrote, without reading first; on a lost race the current bytes
   * are read and core decides again (it refuses a stale token). `op` is an
   * operation for `apply` (the token is added), or a function `(row, token)`
   * that decides itself. `local` writes commit with the transition's write or
   * not at all (see readDecideWrite). Its result when the adapter answers
   * synchronously, else a promise of it; a refusal may be thrown.
   */
  function transition(held, op, local) {
    const lease = held?.outcome === "execute" ? held[LEASE] : undefined;
    if (lease === undefined) {
      throw new IdemkitError("invalid-argument", "expected a claim whose outcome is \"execute\"");
    }
    if (typeof held.token !== "bigint") {
      throw new IdemkitError("invalid-argument", `the claim's token must be the bigint its claim gave, not ${typeName(held.token)}`);
    }
    let decideOnRow;
    if (typeof op === "function") {
      decideOnRow = (row) => op(row, held.token);
    } else {
      const full = Object.assign({}, op);
      full.token = held.token;
      decideOnRow = (row) => decideOn(row, full);
    }
    const done = readDecideWrite({
      adapter,
      id: held.id,
      held: lease,
      call: storeCall,
      what: `record ${held.logRef}`,
      decide: (row) => {
        if (row === null) throw new IdemkitError("record-missing", `record ${held.logRef} disappeared while leased`);
        return decideOnRow(row);
      },
      local,
    });
    return andThen(done, ({ answer, current, local: applied }) => {
      // A new object, not the old one changed: a copy of the claim made before
      // (`{ ...held }`) keeps the version it saw.
      held[LEASE] = { record: current.record, version: current.version };
      // `current`, not a decoded view: building the view is left to the callers that
      // return one (handle's own completion, release and renewal discard it).
      return { answer, current, local: applied };
    });
  }

  /**
   * The JS view of the record a transition wrote: the one its decision came with
   * (a completion asked for it), else decoded from the bytes.
   */
  const viewOf = ({ answer, current }) => answer.view ?? decodeRecord(current.record);

  /**
   * A body over `maxStoredResponseBytes`, or one that would make the record larger
   * than the adapter's `maxRecordBytes`, is not kept: the record is completed
   * without it (status, headers and resource reference stay), so a retry gets 410
   * response-expired with the reference, never a second execution.
   */
  function completeHeld(held, response, local, withView = false) {
    const { status, headers, body, resourceRef } = storedParts(response, replayed);
    if (!Number.isInteger(status) || status < 100 || status > 999) {
      throw new IdemkitError("invalid-argument", "response.status must be an integer from 100 to 999");
    }
    if (resourceRef !== null && typeof resourceRef !== "string") {
      throw new IdemkitError("invalid-argument", "response.resourceRef must be a string or null");
    }
    // The headers as the route takes them (one crossing, not one per header),
    // made for each decision: their buffer is reused by the next completion.
    const completeWith = (row, token, kept) => {
      const { names, values, lengths } = headerColumns(headers);
      return completionDecided(wasmCall(() => route.complete(row.record, token, status, names, values, lengths, kept, resourceRef ?? undefined, clock(), withView)), sharedWrites);
    };
    const kept = body !== null && body.length > maxStoredResponseBytes ? null : body;
    return transition(
      held,
      (row, token) => {
        const done = completeWith(row, token, kept ?? undefined);
        return kept !== null && done.write instanceof Uint8Array && done.write.length > maxRecordBytes ? completeWith(row, token, undefined) : done;
      },
      local,
    );
  }
  // The view comes with the decision: the written bytes are not decoded again.
  const complete = (held, response) => promised(() => andThen(completeHeld(held, response, undefined, true), viewOf));

  /**
   * `complete`, with the caller's local writes committed in the same transaction
   * as the completion (the adapter's `updateWith`): both or neither. A lease that
   * was taken over is refused by core (stale-token) and the writes are not
   * applied; writes that fail leave the record as it was (local-writes-failed).
   */
  async function completeWith(held, response, local) {
    if (local === undefined || local === null) {
      throw new IdemkitError("invalid-argument", "completeWith needs the local writes (without any, use complete)");
    }
    const done = await completeHeld(held, response, local, true);
    return { record: viewOf(done), result: done.local.result };
  }
  // handle's own transitions (the *Held forms) discard the record: no view is built.
  const releaseHeld = (held) => transition(held, { op: "release" });
  const markUnknownHeld = (held, reason) => transition(held, { op: "markUnknown", reason: String(reason ?? "marked by worker") });
  // A promise always: the renewal timer chains on it.
  const renewHeld = (held) => promised(() => transition(held, { op: "renew" }));
  const release = async (held) => viewOf(await releaseHeld(held));
  const markUnknown = async (held, reason) => viewOf(await markUnknownHeld(held, reason));
  const renew = async (held) => viewOf(await renewHeld(held));

  /**
   * Persists step `name` before it is dispatched. The provider key is the one an
   * earlier attempt persisted (so a replacement worker reuses it, never invents a
   * new one), else `proposedProviderKey`. A step an earlier attempt finished is not
   * dispatched again.
   */
  async function beginStep(held, name, proposedProviderKey = crypto.randomUUID()) {
    const { answer } = await transition(held, {
      op: "beginStep",
      name: String(name),
      proposedProviderKey: String(proposedProviderKey),
    });
    return answer.start === "dispatch"
      ? { dispatch: true, providerKey: answer.providerKey }
      : { dispatch: false, providerRef: answer.providerRef };
  }

  const completeStep = async (held, name, providerRef) =>
    viewOf(await transition(held, { op: "completeStep", name: String(name), providerRef: providerRef ?? undefined }));

  /** Operator: settle an Unknown record. `applied` is the real response, or null if nothing happened. */
  async function resolve(which, applied) {
    const { tenant: tenantId, key } = objectArgument(which, "resolve");
    const { id, ref } = locate(tenantId, key);
    const op = { op: "resolve", applied: applied == null ? null : toStored(applied, replayed) };
    const { current } = await readDecideWrite({
      adapter,
      id,
      call: storeCall,
      what: `record ${ref}`,
      decide: (row) => {
        if (row === null) throw new IdemkitError("record-missing", `no record for this key`);
        return decideOn(row, op);
      },
    });
    return decodeRecord(current.record);
  }

  /** The decoded record of a key, or null. */
  async function inspect(which) {
    const { tenant: tenantId, key } = objectArgument(which, "inspect");
    const { id } = locate(tenantId, key);
    const current = await storeCall(() => adapter.get(id));
    return current === null ? null : decodeRecord(current.record);
  }

  /**
   * One bounded GC pass at `clock()`: reads up to `maxBatch` records whose GC is
   * due (the adapter's `scan`, after the cursor `after`) and asks core about each.
   * A record past its record window (Completed or Released) is deleted, a Completed
   * one past its replay window loses its response body; Running and Unknown records
   * are never touched. Every write is conditional on the version scanned: a record
   * that changed since is skipped (the next pass sees its new state), never
   * overwritten. A record indexed as due at 0 (written before the adapter kept
   * due times) that needs nothing yet gets its real due time indexed. Bytes that do
   * not decode are counted and left alone, never a reason to stop.
   */
  /**
   * The token floor in the floor row as read (0n when there is none). A row that
   * is not a decimal number is damaged storage: a typed error (handle answers 503),
   * never a new record whose tokens might repeat.
   */
  function floorOf(row) {
    if (row === null) return 0n;
    const text = row.record instanceof Uint8Array ? fromUtf8.decode(row.record) : null;
    if (text === null || !/^[0-9]{1,20}$/.test(text) || BigInt(text) > 0xffffffffffffffffn) {
      throw new IdemkitError("token-floor-corrupt", `the token floor row (${TOKEN_FLOOR_ID}) does not hold a decimal number; restore it (the highest fencing token of any record GC deleted, as decimal text)`);
    }
    return BigInt(text);
  }

  /**
   * The store's token floor: the highest token of any record GC deleted (a
   * promise of it when the adapter answers with one).
   */
  function readTokenFloor() {
    const read = storeCall(() => adapter.get(TOKEN_FLOOR_ID));
    return andThen(read, floorOf);
  }

  /** Raises the token floor to at least `token` (compare-and-set; a lost race reads again). */
  async function raiseTokenFloor(token) {
    await readDecideWrite({
      adapter,
      id: TOKEN_FLOOR_ID,
      call: storeCall,
      what: "the token floor",
      // Never due: the floor row is not a record, GC must not see it.
      decide: (row) =>
        floorOf(row) >= token ? { write: null } : { write: utf8.encode(String(token)), meta: { gcDueAt: null } },
    });
  }

  async function gc(options) {
    const { maxBatch = defaults().gcBatch, after } = options ?? {};
    for (const method of ["delete", "scan"]) {
      if (typeof adapter[method] !== "function") {
        throw new IdemkitError("invalid-argument", `gc needs adapter.${method} (see the Adapter type)`);
      }
    }
    if (!Number.isSafeInteger(maxBatch) || maxBatch <= 0) {
      throw new IdemkitError("invalid-argument", "maxBatch must be a positive integer");
    }
    const now = clock();
    const page = await storeCall(() => adapter.scan({ gcDueBefore: now, limit: maxBatch, after }));
    const report = { pruned: 0, deleted: 0, reindexed: 0, skipped: 0, undecodable: 0, more: page.next !== null, next: page.next };
    for (const { id, record, version, gcDueAt } of page.entries.slice(0, maxBatch)) {
      let step;
      try {
        step = wasmCall(() => route.apply(record, { op: "gc" }, now));
      } catch (err) {
        if (!(err instanceof IdemkitError) || !err.code.startsWith("record-")) throw err;
        report.undecodable++;
        // Due at 0 means "not indexed yet": not a record GC can read (a journal
        // entry in a shared table, or corrupt bytes), so it leaves the index.
        if (gcDueAt === 0) await storeCall(() => adapter.update(id, record, version, { gcDueAt: null }));
        continue;
      }
      let done;
      if (step.action === "delete") {
        // Before the record goes: a claim that then finds no record reads a
        // floor at least this record's last token (docs/architecture.md: tokens never
        // repeat for a key, even after its record was deleted).
        await raiseTokenFloor(step.lastToken);
        done = await storeCall(() => adapter.delete(id, version));
        if (done) report.deleted++;
      } else if (step.action === "pruneBody") {
        done = await storeCall(() => adapter.update(id, step.write, version, { gcDueAt: step.gcDueAt }));
        if (done) report.pruned++;
      } else {
        // Nothing due yet: only a stale index entry brings a record here.
        done = await storeCall(() => adapter.update(id, record, version, { gcDueAt: step.gcDueAt }));
        if (done) report.reindexed++;
      }
      if (!done) report.skipped++;
    }
    return report;
  }

  /**
   * With a Workers execution context (`ctx`, the third argument of `fetch`): the
   * whole handling, the handler's run and its recording, is registered with
   * `ctx.waitUntil`, so a client that disconnects (which cancels the request's
   * own promise) cannot stop the outcome from being recorded and leave an
   * External record Unknown.
   */
  function handle(request, handler, ctx) {
    if (typeof request?.headers?.get !== "function" || typeof request.url !== "string") {
      return Promise.reject(new IdemkitError("invalid-argument", "handle's first argument must be the Request"));
    }
    if (typeof handler !== "function") {
      return Promise.reject(new IdemkitError("invalid-argument", "handle's second argument must be the handler, (request, execution) => Response"));
    }
    if (ctx !== undefined && ctx !== null && typeof ctx.waitUntil !== "function") {
      return Promise.reject(new IdemkitError("invalid-argument", "handle's third argument must be an execution context with waitUntil (the Workers ctx), or absent"));
    }
    const handled = handleRequest(request, handler);
    // waitUntil only keeps the work alive; the caller still gets the promise's
    // outcome (and its rejection) itself.
    ctx?.waitUntil(handled.catch(() => {}));
    return handled;
  }

  async function handleRequest(request, handler) {
    // A tenant function that answers at once takes no await hop.
    let tenantId = tenant(request);
    if (isPromise(tenantId)) tenantId = await tenantId;
    if (tenantId === null || tenantId === undefined) {
      return answer({ outcome: "unauthenticated" });
    }
    if (typeof tenantId !== "string") {
      throw new IdemkitError("invalid-argument", `the tenant function must return a string, or null for no tenant, not ${typeName(tenantId)}`);
    }
    const headers = request.headers;
    const header = headers.get("idempotency-key");
    if (header === null) {
      if (!keyRequired) return handler(request);
      return answer({ outcome: "missingKey" });
    }
    let key;
    try {
      key = parseKey(header);
    } catch (err) {
      if (!(err instanceof IdemkitError)) throw err;
      return answer({ outcome: "invalidKey", header });
    }
    const declared = Number(headers.get("content-length") ?? 0);
    if (declared > maxBodyBytes) return answer({ outcome: "bodyTooLarge", limit: maxBodyBytes });
    const hasBody = request.body !== null;
    const body = await readBounded(request, maxBodyBytes);
    if (body === null) return answer({ outcome: "bodyTooLarge", limit: maxBodyBytes });
    let fp;
    try {
      // A request without a Content-Type is fingerprinted as the configured kind.
      // What the key means includes the request line: the same key and body sent
      // to another path or query is another operation (422, nothing executed).
      const url = new URL(request.url);
      const line = { method: request.method, path: url.pathname, query: url.search };
      fp = fingerprintOf(body, headers.get("content-type") ?? fingerprintOptions.contentType ?? "", line);
    } catch (err) {
      if (!(err instanceof IdemkitError)) throw err;
      return answer({ outcome: "invalidBody", code: err.code, message: err.message });
    }
    let held;
    try {
      held = await claimPrepared(tenantId, key, fp, undefined, true);
    } catch (err) {
      // A tenant or operation name core refuses is the server's bug, not the client's.
      if (!(err instanceof IdemkitError) || err.code.startsWith("scope-")) throw err;
      // Unreachable, unusable (corrupt bytes) or contended store: fail closed.
      return unavailable();
    }
    // A retry of a running key that asked to wait (or whose route waits) is held
    // until the first attempt's answer exists; a mismatch was refused above, at once.
    let applied = null;
    if (held.outcome === "inFlight") {
      const wait = waitOf(request, waitRule);
      if (wait.durationMs > 0) {
        const give = slots.take(held.id);
        if (give === null) return answer({ outcome: "tooManyWaiters", retryAfterSeconds: held.retryAfterSeconds });
        applied = wait.preferenceApplied;
        try {
          held = await holdWhileRunning({
            adapter,
            first: held,
            durationMs: wait.durationMs,
            signal: request.signal,
            reclaim: () => claimPrepared(tenantId, key, fp, undefined, true),
          });
        } catch (err) {
          if (!(err instanceof IdemkitError) || err.code.startsWith("scope-")) throw err;
          return preferenceApplied(unavailable(), applied);
        } finally {
          give();
        }
      }
    }
    if (held.outcome === "execute") {
      const response = await execute(held, forHandler(request, hasBody ? body : null), handler, tenantId, key);
      return preferenceApplied(response, applied);
    }
    // A replay, or a refusal quoting the record's log reference where it has one:
    // core's answer came with the claim.
    return preferenceApplied(fromAnswer(held.reply), applied);
  }

  /**
   * The request the handler runs with, made only when it runs (a Request copy is
   * not cheap). Its body is `body`, the bytes read above (the client's stream is
   * spent). With `onDisconnect: "finish"` its signal is its own: a client that
   * hangs up does not abort it, so a handler that passes `request.signal` on to
   * its provider call still finishes, and its outcome is recorded instead of
   * becoming unknown. `"cancel"` hands the handler the client's signal.
   */
  function forHandler(request, body) {
    if (onDisconnect === "cancel") return body === null ? request : new Request(request, { body });
    return body === null ? new Request(request, { signal: null }) : new Request(request, { body, signal: null });
  }

  function unavailable() {
    return answer({ outcome: "storeUnavailable", retryAfterSeconds: settings.storeRetryAfterSeconds });
  }

  /** Renews `held`'s lease while the handler runs: see {@link renewWhileRunning}. */
  function keepLeased(held) {
    if (!autoRenew) return { stop: () => undefined, resume: () => {} };
    return renewWhileRunning({ leaseMs: policy.leaseMs, maxExecutionMs, clock, renew: () => renewHeld(held) });
  }

  /**
   * The handler completes its record with its local writes. The response is a
   * Response (recorded as `handle` records one: replayable headers, resource
   * reference, body read here) or a ResponseInput. Renewal pauses so that it
   * never races the completion's compare-and-set, and goes on if nothing was
   * committed. Resolves to `{ record, result, answer }`, `answer` being the
   * stored response with the body as given (a body too large to keep is answered
   * once, as `handle` answers one).
   */
  async function completeInHandler(held, lease, response, local) {
    let stored;
    let answerBody;
    if (response instanceof Response) {
      const read = await readCapped(response, maxStoredResponseBytes);
      stored = storedParts(recordedOf(response, read.body), replayed);
      answerBody = read.body ?? read.stream;
    } else {
      stored = storedParts(response, replayed);
      answerBody = stored.body;
    }
    await lease.stop();
    try {
      const { record, result } = await withRetries(() => completeWith(held, stored, local));
      return { record, result, answer: { ...record.response, body: record.response.body ?? answerBody } };
    } catch (err) {
      lease.resume();
      throw err;
    }
  }

  /** What `handle` records of a handler's Response whose body was read (null: over the cap). */
  function recordedOf(response, body) {
    return { status: response.status, headers: replayableHeaders(response.headers, replayed), body, resourceRef: resourceRefOf(response) ?? null };
  }

  /** The handler's view of its execution (the second argument of its call). */
  function executionOf(held, lease) {
    // `completion`: the promise of the one completeWith call, once it was made.
    const seen = { nothingDispatched: false, beganStep: false, completion: null };
    const execution = Object.freeze({
      logRef: held.logRef,
      attempt: held.attempt,
      steps: held.steps ?? [],
      /**
       * Declares that this attempt dispatched nothing downstream: on an External
       * route a 408/409/425/429 or a 5xx then releases the record (a retry runs
       * again) instead of making it Unknown.
       */
      nothingDispatched() {
        seen.nothingDispatched = true;
      },
      beginStep(name, proposedProviderKey) {
        seen.beganStep = true;
        return beginStep(held, name, proposedProviderKey);
      },
      completeStep: (name, providerRef) => completeStep(held, name, providerRef),
      /**
       * Completes the record with `response` and the handler's local writes in one
       * transaction (see `completeWith`); `handle` then answers the stored
       * response, whatever the handler returns. Once per execution.
       */
      async completeWith(response, local) {
        if (seen.completion !== null) throw new IdemkitError("invalid-argument", "completeWith was already called in this execution");
        seen.completion = completeInHandler(held, lease, response, local);
        const { record, result } = await seen.completion;
        return { record, result };
      },
    });
    return { execution, seen };
  }

  /** The stored response if the handler completed its record itself, else null (never throws). */
  function completedByHandler(seen) {
    return seen.completion.then(({ answer }) => answer, () => null);
  }

  async function execute(held, request, handler, tenantId, key) {
    const lease = keepLeased(held);
    const { execution, seen } = executionOf(held, lease);
    let response;
    // The body read through the stored-body cap: `body` (all of it, within the
    // cap) or `stream` (what was read and the rest, never held whole).
    let read;
    let completed = null;
    try {
      response = await handler(request, execution);
      // No await when the handler did not complete its record (the common case).
      if (seen.completion !== null) completed = await completedByHandler(seen);
      if (completed === null && response instanceof Response) read = await readCapped(response, maxStoredResponseBytes);
    } catch (err) {
      // A completeWith still running settles first: when it fails it resumes renewal.
      if (completed === null && seen.completion !== null) completed = await completedByHandler(seen);
      await lease.stop();
      // The handler completed its record, then threw: that outcome is durable
      // (its local writes committed with it), so it is the answer.
      if (completed !== null) return fromStored(completed, { replayed: false });
      // No response: nothing to replay. Local effects rolled back with the throw;
      // an external effect may have happened, so the outcome is unknown.
      await settleQuietly(() => (effect === "local" ? releaseHeld(held) : markUnknownHeld(held, `handler threw: ${err?.message ?? err}`)));
      throw err;
    }
    const renewing = lease.stop();
    if (renewing !== undefined) await renewing;
    if (completed !== null) {
      // Recorded once, by completeWith: the client gets what a replay will get.
      if (response instanceof Response && !response.bodyUsed) response.body?.cancel().catch(() => {});
      return fromStored(completed, { replayed: false });
    }
    if (!(response instanceof Response)) {
      await settleQuietly(() => (effect === "local" ? releaseHeld(held) : markUnknownHeld(held, "handler returned no Response")));
      throw new IdemkitError("invalid-argument", "the handler must return a Response");
    }
    // The evidence that nothing was dispatched: the handler's word, or (on a route
    // that dispatches only through steps) a record without steps, when this attempt
    // began none (a begun step whose write answer was lost still counts).
    const onlySteps = dispatchesOnlyThroughSteps && !seen.beganStep;
    // The record crosses only when its steps are the evidence.
    const disposition = classify(response.status, seen.nothingDispatched, onlySteps ? held[LEASE].record : undefined);
    if (disposition === "release") {
      // Asked for: the attempt had no effect. If the store fails, the lease expires
      // and the machine treats the record by its effect kind.
      await settleQuietly(() => releaseHeld(held));
    } else {
      try {
        if (disposition === "store") {
          const stored = recordedOf(response, read.body);
          try {
            await withRetries(() => completeHeld(held, stored));
          } catch (err) {
            // The store failed, not refused: leave an honest Unknown behind if it can.
            if (transientStoreError(err)) await settleQuietly(() => withRetries(() => markUnknownHeld(held, `status ${response.status} not recorded`)));
            throw err;
          }
        } else {
          await withRetries(() => markUnknownHeld(held, `status ${response.status}`));
        }
      } catch (err) {
        if (!(err instanceof IdemkitError)) throw err;
        // Completion is durable before the caller is told (invariant 2), so this
        // response is not sent; and no failure after the handler answered releases
        // its record. One core answer for every binding.
        return answer({ outcome: "outcomeNotRecorded", tenant: tenantId, operation, key, originalStatus: response.status });
      }
    }
    return new Response(nullBodyStatus(response.status) ? null : (read.body ?? read.stream), {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
    });
  }

  return {
    handle,
    /** How many requests this handler holds now, waiting for a running key's answer. */
    waiting: slots.count,
    claim,
    complete,
    completeWith,
    release,
    markUnknown,
    renew,
    beginStep,
    completeStep,
    resolve,
    inspect,
    gc,
    policy: Object.freeze({ ...policy }),
  };
}

/**
 * `response` with `Preference-Applied: <value>` (the wait it was held for), or as
 * it is when `value` is null. A Response whose headers are immutable is copied.
 */
function preferenceApplied(response, value) {
  if (value === null) return response;
  try {
    response.headers.set("preference-applied", value);
    return response;
  } catch {
    const headers = new Headers(response.headers);
    headers.set("preference-applied", value);
    return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
  }
}

/**
 * The request body, read through a counting reader that stops as soon as more
 * than `limit` bytes arrived (the stream is cancelled, nothing past the limit is
 * buffered): the bytes, or null when the body is larger than `limit`.
 * @param {Request} request
 * @param {number} limit
 * @returns {Promise<Uint8Array | null>}
 */
async function readBounded(request, limit) {
  if (request.body === null) return new Uint8Array();
  const reader = request.body.getReader();
  const chunks = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > limit) {
      await reader.cancel("request body over maxBodyBytes").catch(() => {});
      return null;
    }
    chunks.push(value);
  }
  return concat(chunks, total);
}

/**
 * A response body read through the stored-body cap: `{ body }`, all of it, when it
 * is at most `cap` bytes; else `{ body: null, stream }`, a stream of the chunks read
 * so far and then the rest of the body, read as the client reads it. Nothing
 * past the cap (and the chunk that crossed it) is buffered.
 * @param {Response} response
 * @param {number} cap
 * @returns {Promise<{ body: Uint8Array, stream?: undefined } | { body: null, stream: ReadableStream<Uint8Array> }>}
 */
async function readCapped(response, cap) {
  if (response.body === null) return { body: new Uint8Array() };
  const reader = response.body.getReader();
  const chunks = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return { body: concat(chunks, total) };
    chunks.push(value);
    total += value.byteLength;
    if (total > cap) break;
  }
  const stream = new ReadableStream({
    start(controller) {
      for (const chunk of chunks.splice(0)) controller.enqueue(chunk);
    },
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
  return { body: null, stream };
}

/** `chunks` (of `total` bytes together) as one array. */
function concat(chunks, total) {
  if (chunks.length === 1) return chunks[0];
  const body = new Uint8Array(total);
  let at = 0;
  for (const chunk of chunks) {
    body.set(chunk, at);
    at += chunk.byteLength;
  }
  return body;
}

async function settleQuietly(fn) {
  try {
    await fn();
  } catch {
    // The store failed too: the lease expires, and the machine then treats the
    // record by its effect kind (Local: retried; External: Unknown).
  }
}

function nullBodyStatus(status) {
  return status === 101 || status === 204 || status === 205 || status === 304;
}

/** The headers of `headers` named in the allow list `replayed`, as stored. */
function replayableHeaders(headers, replayed) {
  const out = [];
  for (const [name, value] of headers) {
    if (replayed.has(name.toLowerCase())) out.push([name.toLowerCase(), value]);
  }
  return out;
}

/** A stored response as a client gets it; a replay is marked `Idempotent-Replayed: true`. */
function fromStored(stored, { replayed }) {
  const headers = new Headers();
  for (const [name, value] of stored.headers) headers.append(name, fromUtf8.decode(value));
  if (replayed) headers.set("idempotent-replayed", "true");
  return new Response(nullBodyStatus(stored.status) ? null : stored.body, { status: stored.status, headers });
}

/**
 * A user-supplied response description → the machine's stored response, with
 * only the headers of the allow list `replayed` (what a retry may be handed),
 * each value a string (encoded when it crosses) or the bytes given.
 */
function storedParts(response, replayed) {
  if (typeof response === "object" && response !== null && !isPlainObject(response) && response instanceof Response) {
    throw new IdemkitError("invalid-argument", "pass { status, headers, body, resourceRef }, not a Response (its body would need to be read first)");
  }
  const headers = [];
  const given = response?.headers ?? [];
  if (Array.isArray(given)) {
    for (const [name, value] of given) keepReplayed(headers, replayed, name, value);
  } else if (typeof given === "object" && isPlainObject(given)) {
    // The common `{ "content-type": … }`: read in place, without an array of entries.
    for (const name in given) if (Object.hasOwn(given, name)) keepReplayed(headers, replayed, name, given[name]);
  } else {
    for (const [name, value] of given instanceof Headers ? given : Object.entries(given)) keepReplayed(headers, replayed, name, value);
  }
  const body = response?.body == null ? null : toBytes(response.body, "response.body");
  return { status: response?.status, headers, body, resourceRef: response?.resourceRef ?? null };
}

/** Adds header `name` to `headers` when the allow list `replayed` has it: lower-cased, its value a string or the bytes given. */
function keepReplayed(headers, replayed, name, value) {
  const lower = String(name).toLowerCase();
  if (replayed.has(lower)) headers.push([lower, value instanceof Uint8Array ? value : String(value)]);
}

/**
 * Whether `value` (an object) is a plain one, `{ … }` or with a null prototype:
 * then it is no `Response` or `Headers`, which `instanceof` would find only by
 * walking its prototype chain (about 40 ns each in Node).
 */
function isPlainObject(value) {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** `storedParts` with every header value as bytes, as core's `apply` takes a stored response. */
function toStored(response, replayed) {
  const stored = storedParts(response, replayed);
  stored.headers = stored.headers.map(([name, value]) => [name, typeof value === "string" ? utf8.encode(value) : value]);
  return stored;
}

// Header values back to back, as `Route.complete` takes them, in a buffer kept
// for the next completion (it is copied into WebAssembly at once): an encoded
// array per value would be a backing store of its own. Up to 64 KiB is kept.
const KEPT_HEADER_BYTES = 64 * 1024;
let headerBytes = new Uint8Array(256);

/** `headers` ([name, string or bytes]) as `Route.complete` takes them: names joined by "\n", values back to back, their lengths. */
function headerColumns(headers) {
  // UTF-8 takes at most 3 bytes per UTF-16 unit.
  let most = 0;
  for (const [, value] of headers) most += typeof value === "string" ? 3 * value.length : value.length;
  let into = headerBytes;
  if (most > into.length) {
    into = new Uint8Array(most);
    if (most <= KEPT_HEADER_BYTES) headerBytes = into;
  }
  const lengths = new Uint32Array(headers.length);
  let names = "";
  let at = 0;
  for (let i = 0; i < headers.length; i++) {
    const [name, value] = headers[i];
    names = i === 0 ? name : `${names}\n${name}`;
    if (typeof value === "string") {
      lengths[i] = utf8.encodeInto(value, into.subarray(at)).written;
    } else {
      into.set(value, at);
      lengths[i] = value.length;
    }
    at += lengths[i];
  }
  return { names, values: into.subarray(0, at), lengths };
}
