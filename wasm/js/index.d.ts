// Hand-written types of the `idemkit` package (the wasm glue's generated types are
// not shipped: they describe internal functions, not this API).

/** Every error idemkit throws; `code` is stable (see the README, "Errors"). */
export class IdemkitError extends Error {
  readonly name: "IdemkitError";
  /** e.g. `key-too-long`, `json-duplicate-member-name`, `stale-token`, `store-unavailable`. */
  readonly code: string;
  /** `action-payload-changed`, `action-pending`: the action id. */
  actionId?: string;
  /** `action-pending`: the action's key, which calling again sends again. */
  idempotencyKey?: string;
  /** `action-pending`: when an open circuit breaker lets an attempt through again (ms since the epoch), else null. */
  retryAt?: number | null;
  constructor(code: string, message: string, options?: { cause?: unknown });
}

export type Profile = "strict" | "rfc8785";

/** RFC 8785 canonical JSON; the strict profile (default) refuses inputs that are not I-JSON. */
export function canonicalize(input: string | Uint8Array, options?: { profile?: Profile }): string;

export interface FingerprintOptions {
  /** The operation name (default `""`, as `idemkit fingerprint`). */
  operation?: string;
  /** The payload schema version (default 1). */
  schemaVersion?: number;
  /** RFC 6901 pointers: only these fields count. */
  include?: string[];
  /** RFC 6901 pointers: these fields never count (request ids, timestamps). */
  exclude?: string[];
  /** Picks JSON / form / raw bytes (default `application/json`). */
  contentType?: string;
  /** JSON rules (default `"strict"`). */
  profile?: Profile;
  /**
   * With `path`: the request line counts (scheme 2, what `createIdempotency`
   * computes). The method as sent; methods are case-sensitive.
   */
  method?: string;
  /** The concrete path as the server received it, e.g. `/accounts/A/withdraw`. */
  path?: string;
  /** The text after `?` (a leading `?` is dropped, so `URL.search` fits). Decoded pairs, sorted by name. */
  query?: string;
  /** Leave the whole query out (the method and path still count). */
  ignoreQuery?: boolean;
  /** Leave these query parameters out (tracking parameters, cache busters). */
  ignoreQueryParams?: string[];
}

/**
 * 64 lowercase hex characters, equal to `idemkit fingerprint` with the same
 * options (`--method`, `--path`, `--query`, `--ignore-query`, `--ignore-query-param`).
 */
export function fingerprint(body: string | Uint8Array, options?: FingerprintOptions): string;

/**
 * The key of an `Idempotency-Key` header value, quoted (`"abc"`) or bare (`abc`).
 * A bare value holding `,` is refused (`key-bare-comma`): HTTP joins two field lines
 * with `,`. A quoted key may hold it (`"a,b"`).
 */
export function parseKey(headerValue: string): string;

/** The storage id (hex) of `(tenant, operation, key)`. */
export function recordId(tenant: string, operation: string, key: string): string;

/** A short digest of `(tenant, operation, key)`, safe to log. */
export function logRef(tenant: string, operation: string, key: string): string;

export interface StoredResponseView {
  status: number;
  headers: [name: string, value: Uint8Array][];
  /** `null` once the replay window is over. */
  body: Uint8Array | null;
  resourceRef: string | null;
}

export interface StepView {
  name: string;
  state: "started" | "done";
  providerKey: string;
  providerRef: string | null;
  startedAt: number;
  doneAt: number | null;
}

/** A read-only view of a stored record. */
export interface RecordView {
  fingerprint: string;
  /** 1: operation and body only (records written before the request line counted); 2: the request line too. */
  fingerprintScheme: number;
  effect: "local" | "external";
  state: "running" | "completed" | "unknown" | "released";
  attempt: number;
  lastToken: bigint;
  steps: StepView[];
  createdAt: number;
  updatedAt: number;
  replayUntil: number | null;
  keepUntil: number | null;
  /** Running. */
  owner?: string;
  leaseExpiresAt?: number;
  /** Completed. */
  response?: StoredResponseView;
  completedAt?: number;
  /** Unknown. */
  reason?: string;
  since?: number;
  /** Released. */
  releasedAt?: number;
}

export function decodeRecord(bytes: Uint8Array): RecordView;

/**
 * What idemkit tells an adapter about a record it writes: when GC next has
 * something to do with it (core's `Record::gc_due_at`), in milliseconds since the
 * epoch, or `null` for a Running or Unknown record, which GC never touches. A
 * write without `meta` (the journal's entries, which are not records) is never due.
 */
export interface WriteMeta {
  gcDueAt: number | null;
}

/** One record whose GC is due, as `scan` lists it. */
export interface ScanEntry<V = unknown> {
  id: string;
  record: Uint8Array;
  version: V;
  /** The due time the adapter indexed for it (0 for a row from before due times were kept). */
  gcDueAt: number;
}

/**
 * One page of `scan`: at most `limit` entries in (gcDueAt, id) order, and the
 * cursor to pass as `after` for the next page, or `null` when no due entry follows.
 * The cursor is opaque: only the adapter that made it reads it.
 */
export interface ScanPage<V = unknown> {
  entries: ScanEntry<V>[];
  next: unknown | null;
}

export interface ScanOptions {
  /** List records with `gcDueAt <= gcDueBefore` (inclusive), milliseconds. */
  gcDueBefore: number;
  /** At most this many entries (a positive integer). */
  limit: number;
  /** The `next` of the previous page; omitted for the first. */
  after?: unknown;
}

/**
 * What local writes come to once committed: a function's (awaited) return value, or
 * for D1 (an array of statements) the batch results of those statements.
 */
export type LocalResult<L> = L extends (...args: any[]) => infer R ? Awaited<R> : L extends readonly unknown[] ? unknown[] : unknown;

/** A result, or a promise of it (see {@link Adapter}). */
export type Awaitable<T> = T | PromiseLike<T>;

/**
 * Where records live: the five-method seam every backend implements (docs/architecture.md).
 * Each method must be atomic for what it claims; idemkit never reads and then
 * writes without a check. `delete` and `scan` are needed only by `gc`: an adapter
 * without them serves requests, and `gc` refuses it (invalid-argument).
 *
 * The adapter keeps an index of `meta.gcDueAt` written with the record in the same
 * atomic step (an indexed column in SQLite and D1, a second key in Durable Objects
 * and Deno KV; NULL / no key when never due), so `scan` reads only due records. A
 * wrapping adapter must pass `meta` on.
 *
 * `L` is the kind of local writes `updateWith` commits with a record (`never`: the
 * adapter has none, and `completeWith` is refused with `local-unsupported`).
 *
 * A method answers with a promise, or with its result itself when it has it at
 * once: `memoryAdapter` and `sqliteAdapter` do (their stores are synchronous), and
 * the engine then takes no await hop, which is most of what a call costs in
 * memory. A synchronous throw counts as a rejection. Callers of an adapter's
 * methods should `await` what they return.
 */
export interface Adapter<V = unknown, L = never> {
  /** The record and its version, or null. */
  get(id: string): Awaitable<{ record: Uint8Array; version: V } | null>;
  /** Insert if absent: the new version, or null when a record already exists. */
  insert(id: string, record: Uint8Array, meta?: WriteMeta): Awaitable<{ version: V } | null>;
  /** Compare-and-set: write only if the version is still `version`; null otherwise. */
  update(id: string, record: Uint8Array, version: V, meta?: WriteMeta): Awaitable<{ version: V } | null>;
  /**
   * Compare-and-set with the caller's local writes, in one transaction: both or
   * neither. Refused (the version is no longer `version`): null, and nothing of
   * `local` was applied. `local` failed: rejects with `IdemkitError`
   * `local-writes-failed` (the caller's error as `cause`), and nothing was written.
   * Otherwise the new version and what `local` came to. Used by `completeWith`.
   */
  updateWith?(id: string, record: Uint8Array, version: V, meta: WriteMeta | undefined, local: L): Awaitable<{ version: V; result: unknown } | null>;
  /** The adapter's name, for errors (`sqliteAdapter`, `d1Adapter`, …). */
  readonly name?: string;
  /**
   * Delete-if-version: delete only if the version is still `version`. `true` when
   * deleted, `false` when the record changed since it was read or is gone.
   */
  delete?(id: string, version: V): Awaitable<boolean>;
  /** The records whose GC is due by `gcDueBefore`, a bounded page at a time. */
  scan?(options: ScanOptions): Awaitable<ScanPage<V>>;
  /**
   * The largest record (in bytes) the store can hold, when its platform caps a value
   * (Deno KV, Durable Objects, D1 set it). A response body that would make a record
   * larger is not kept: the response is answered once and a retry gets 410
   * `response-expired`.
   */
  readonly maxRecordBytes?: number;
  /**
   * Resolves at the next committed write of `id` made through this store in this
   * isolate, or as soon as `signal` aborts (its registration is then gone). Only an
   * adapter through which every write of its records passes offers it (memory, a
   * Durable Object's storage): a retry waiting for a running key (`Prefer: wait`) is
   * then woken by the completion itself; without it the waiter reads the record on
   * core's fallback schedule (50 ms, doubling, at most 1 s apart).
   */
  changed?(id: string, signal?: AbortSignal): Promise<void>;
}

/** An adapter with the whole seam, as every adapter of this package is. */
export type GcAdapter<V = unknown, L = never> = Adapter<V, L> & Required<Pick<Adapter<V, L>, "delete" | "scan">>;

/** An adapter with the whole seam whose `updateWith` commits local writes of kind `L`. */
export type LocalAdapter<V, L> = GcAdapter<V, L> & Required<Pick<Adapter<V, L>, "updateWith">>;

/**
 * In-process records (tests, single-process servers). `scan` sorts on each call.
 * Local writes: a synchronous `() => result`, run only when the compare-and-set
 * holds; the record is written only if it returns (a memory store has no
 * rollback for what `local` changed before it threw).
 * The small records the engine writes share 8 KiB blocks, as Node's Buffer pool
 * does (one allocation for dozens); the first page of each `scan` gives the
 * records of a block that is mostly deleted bytes of their own, so the block is freed.
 */
export function memoryAdapter(): LocalAdapter<number, () => unknown> & { size(): number; changed(id: string, signal?: AbortSignal): Promise<void> };

/**
 * The part of a better-sqlite3 or bun:sqlite Database the adapter uses; local
 * writes also need its `transaction(fn)` (without it `completeWith` is
 * `local-unsupported`).
 */
export interface SqliteDatabase {
  prepare(sql: string): unknown;
  exec(sql: string): unknown;
}

/**
 * A SQLite database: better-sqlite3 (Node) or bun:sqlite (Bun). Sets
 * `synchronous=FULL` when it is lower (WAL with NORMAL can lose acknowledged
 * records on power loss), refuses a file database with `journal_mode` OFF or MEMORY
 * (TypeError), and sets a busy timeout (`busyTimeoutMs`, default 5000) when the
 * connection has none (bun:sqlite's default) or when one is given.
 *
 * The table has an indexed `gc_due_at INTEGER` column (NULL: never due). A table
 * created by an earlier release has none: the adapter adds it (`ALTER TABLE … ADD
 * COLUMN gc_due_at INTEGER DEFAULT 0`), so every row written before is due at once
 * and the first `gc` pass decodes each and deletes, prunes or indexes it as core says.
 *
 * Local writes: a synchronous `(db) => result` on this connection, run in one
 * `db.transaction(...)` with the compare-and-set, after it changed the row.
 */
export function sqliteAdapter<DB extends SqliteDatabase>(
  db: DB,
  options?: { table?: string; busyTimeoutMs?: number },
): LocalAdapter<number, (db: DB) => unknown>;

/**
 * Cloudflare D1 (`env.DB`); creates its table and GC index on first use, and adds
 * `gc_due_at` to a table from an earlier release (as `sqliteAdapter`), unless
 * `createTable: false` (then run `d1Schema`, or `d1Upgrade` for an old table, in a migration).
 *
 * Local writes: an array of bound statements (`env.DB.prepare(sql).bind(...)`),
 * sent in one `batch` with the compare-and-set and a guard statement that fails
 * the batch when the compare-and-set changed no row; the result is the batch
 * results of these statements. Any other failure of the batch is reported as
 * `local-writes-failed` with D1's error as `cause`.
 */
export function d1Adapter(d1: unknown, options?: { table?: string; createTable?: boolean }): LocalAdapter<number, readonly unknown[]>;
/** The D1 adapter's `CREATE TABLE` and `CREATE INDEX` statements, for a migration file. */
export function d1Schema(table?: string): string;
/**
 * The statements that upgrade a table made by an earlier `d1Schema` (no
 * `gc_due_at`), for a migration file: old rows get due time 0, so the first `gc`
 * pass decodes them and indexes their real due time.
 */
export function d1Upgrade(table?: string): string;

/**
 * A Durable Object's `ctx.storage`. `maxRecordBytes` defaults to the key-value
 * backend's 128 KiB value cap (less serialization headroom); a SQLite-backed class
 * may pass up to its 2 MB. Each due record has a second key
 * `<prefix>gc:<due>:<id>`, written in the record's transaction. Records written by
 * an earlier release have none: `scan` first walks the rows (at most `limit` per
 * call, progress under `<prefix>gc-backfill`) and indexes each as due at once.
 *
 * Local writes: a function `(txn) => result` (it may be async) given the
 * `storage.transaction()` transaction the compare-and-set runs in; it writes
 * through `txn`, and its throw rolls everything back.
 */
export function durableObjectAdapter(
  storage: unknown,
  options?: { prefix?: string; maxRecordBytes?: number },
): LocalAdapter<number, (txn: any) => unknown> & { changed(id: string, signal?: AbortSignal): Promise<void> };

/**
 * Deno KV (`await Deno.openKv()`); records must fit in a 64 KiB KV value, so its
 * `maxRecordBytes` keeps larger response bodies out of the record. Each due record
 * has a second key `[...prefix, "gc", due, id]`, set in the record's atomic
 * operation. Values written by an earlier release have none: `scan` first walks the
 * records (at most `limit` per call, progress under `[...prefix, "gc-backfill"]`)
 * and indexes each as due at once. It has no local writes: `completeWith` is
 * refused with `local-unsupported`.
 */
export function denoKvAdapter(kv: unknown, options?: { prefix?: unknown[] }): GcAdapter<string>;

export interface PolicyOptions {
  /** How long a claim may execute before another attempt may take over (default 30 000). */
  leaseMs?: number;
  /** How long the full response is replayed (default 24 h). */
  replayWindowMs?: number;
  /** How long the compact record is kept (default 7 days). */
  recordWindowMs?: number;
  /** The status for a reused key with another payload (default 422). */
  mismatchStatus?: 422 | 409;
  /**
   * `definitive` (default): 1xx, 2xx, 3xx and 4xx other than 408/409/425/429 are
   * stored; those four and 5xx release a local record and make an external one
   * unknown (unless the execution shows nothing was dispatched). `everything`: any response.
   */
  store?: "definitive" | "everything";
  /** `Retry-After` seconds when the store fails (default 1). */
  storeRetryAfterSeconds?: number;
}

export interface IdempotencyOptions<L = never> {
  /** `L`: the adapter's kind of local writes (`completeWith`); `never` when it has none. */
  adapter: Adapter<any, L>;
  /** The endpoint or action, e.g. `payments.capture`; part of every record's identity. */
  operation: string;
  /** `local`: the effect commits with the outcome; `external`: a downstream system was (maybe) written. */
  effect: "local" | "external";
  /** The authenticated caller; never taken from the body or the key. `null` answers 401. */
  tenant: (request: Request) => string | null | Promise<string | null>;
  policy?: PolicyOptions;
  /**
   * Which parts of the request count. The operation, content type, method, path
   * and query come from the request; `contentType` applies to a request that
   * sends no Content-Type; `ignoreQuery` / `ignoreQueryParams` leave the query or
   * named parameters out. Records written before the request line counted
   * (scheme 1) are compared under their own scheme, so they keep replaying.
   */
  fingerprint?: Omit<FingerprintOptions, "operation" | "method" | "path" | "query">;
  /** Whether requests without a key are refused (default true) or passed through unprotected. */
  required?: boolean;
  /** What a completed response created (default: its `Location` header). */
  resourceRef?: (response: Response) => string | null;
  /**
   * Larger request bodies get 413 body-too-large, unexecuted (default 1 MiB). The
   * body is read through a counting reader that stops at the limit, so a chunked
   * upload is not buffered past it.
   */
  maxBodyBytes?: number;
  /**
   * Response bodies up to this many bytes are kept for replay (default 1 MiB; the
   * adapter's `maxRecordBytes` may lower it). The handler's body is read through
   * this cap: a larger response is never held whole, it streams to the client
   * once and is recorded as completed without its body: a retry gets 410
   * `response-expired` with the resource reference, and nothing runs twice.
   */
  maxStoredResponseBytes?: number;
  /**
   * The response headers stored with an outcome and replayed, an allow list that
   * replaces the default one (`content-type`, `content-encoding`,
   * `content-language`, `content-disposition`, `content-location`, `location`,
   * `link`, `cache-control`, `expires`, `etag`, `last-modified`, `vary`, `allow`,
   * `retry-after`); name those too to keep them. Any other header reaches the
   * client that asked and is never stored. `set-cookie`, `cookie`,
   * `authorization` and `proxy-authorization` are never stored: naming one throws
   * `replayed-header-never-stored` (`replayed-header-per-transmission` for
   * `content-length`, `connection`, … and `replayed-header-invalid-name`).
   */
  replayedHeaders?: string[];
  /** Renew the lease every third of `leaseMs` while the handler runs (default true). */
  autoRenew?: boolean;
  /**
   * The longest time the lease is renewed while the handler runs (default 15
   * minutes). After it the lease expires: an external record becomes unresolved
   * and retries get 409 outcome-uncertain.
   */
  maxExecutionMs?: number;
  /**
   * Declares that the handler dispatches every downstream call through
   * `execution.beginStep` (which persists the step first): then an attempt whose
   * record holds no step dispatched nothing, and a 408/409/425/429 or 5xx on an
   * external route releases it (default false: an empty step list proves nothing).
   */
  dispatchesOnlyThroughSteps?: boolean;
  /**
   * What the handler's request does when the client hangs up. `"finish"` (the
   * default): its `signal` is its own and is never aborted by the client, so a
   * handler that passes `request.signal` to its provider call still finishes and
   * its outcome is recorded; a retry gets 409 request-in-progress meanwhile, then
   * the replay. `"cancel"`: the handler's request carries the client's signal, for
   * handlers that must stop when nobody waits; an external attempt that then
   * throws becomes unknown (409 outcome-uncertain), a local one is released.
   */
  onDisconnect?: "finish" | "cancel";
  /** Milliseconds since the epoch (default `Date.now`); tests pass a virtual clock. */
  clock?: () => number;
  /**
   * How long a retry of a running key is held for its answer when it does not ask
   * (`Prefer: wait=N` asks for N seconds): default 0, answered 409
   * request-in-progress at once. See {@link Idempotency.handle}.
   */
  waitMs?: number;
  /** The longest any request is held, whatever it asks (default 10 000 ms, core's `DEFAULT_MAX_WAIT`). */
  maxWaitMs?: number;
  /** How many requests may wait on one key at once (default 1024, core's `DEFAULT_MAX_WAITERS_PER_KEY`); past it: 503 too-many-waiters with Retry-After. */
  maxWaitersPerKey?: number;
  /** How many requests may wait on this handler at once, all keys together (default 10 000, core's `DEFAULT_MAX_WAITERS`); past it: 503 too-many-waiters. */
  maxWaiters?: number;
}

/** What `handle` needs of a Workers `ExecutionContext`. */
export interface ExecutionContextLike {
  waitUntil(promise: Promise<unknown>): void;
}

export interface ResponseInput {
  status: number;
  headers?: Headers | [string, string | Uint8Array][] | Record<string, string>;
  body?: string | Uint8Array | null;
  resourceRef?: string | null;
}

export type Claim =
  | { outcome: "execute"; id: string; logRef: string; owner: string; token: bigint; attempt: number; leaseExpiresAt: number; steps: StepView[] }
  | { outcome: "replay"; id: string; logRef: string; owner: string; response: StoredResponseView }
  | { outcome: "responseExpired"; id: string; logRef: string; owner: string; status: number; resourceRef: string | null }
  | { outcome: "inFlight"; id: string; logRef: string; owner: string; retryAfterSeconds: number }
  | { outcome: "mismatch"; id: string; logRef: string; owner: string; status: number }
  | { outcome: "uncertain"; id: string; logRef: string; owner: string; since: number };

export type ExecuteClaim = Extract<Claim, { outcome: "execute" }>;

/** What `completeWith` resolves to: the completed record and what the local writes came to. */
export interface LocalCompletion<T> {
  record: RecordView;
  result: LocalResult<T>;
}

/** The handler's view of its claimed execution (the second argument `handle` passes it). */
export interface Execution<L = never> {
  readonly logRef: string;
  readonly attempt: number;
  /** Steps persisted by earlier attempts, as they were when this lease began. */
  readonly steps: StepView[];
  /**
   * Declares that this attempt dispatched nothing downstream: on an external route a
   * 408/409/425/429 or 5xx answer then releases the record (a retry runs again)
   * instead of making it unknown. Call it only when that is certain.
   */
  nothingDispatched(): void;
  /** Persist a step before dispatching it (as `Idempotency.beginStep` on this claim). */
  beginStep(name: string, proposedProviderKey?: string): Promise<{ dispatch: true; providerKey: string } | { dispatch: false; providerRef: string | null }>;
  /** Record that a step finished (as `Idempotency.completeStep` on this claim). */
  completeStep(name: string, providerRef?: string | null): Promise<RecordView>;
  /**
   * Completes the record with `response` and `local` (the adapter's kind of local
   * writes) in one transaction, as `Idempotency.completeWith`. A Response is
   * recorded as `handle` records a returned one (the `replayedHeaders`,
   * `resourceRef`, its body read here through `maxStoredResponseBytes`). Once it resolved, `handle` answers the stored response
   * (without `Idempotent-Replayed`), whatever the handler then returns or throws,
   * and records nothing more. When it rejects nothing was committed, and the
   * response the handler returns is recorded as usual. Once per execution: a
   * second call rejects with `invalid-argument`.
   */
  completeWith<T extends L>(response: Response | ResponseInput, local: T): Promise<LocalCompletion<T>>;
}

export interface Idempotency<L = never> {
  /**
   * docs/architecture.md's HTTP contract around a fetch-style handler. In Cloudflare Workers
   * pass the execution context (`fetch(request, env, ctx)`): the handling, the
   * handler's run and the recording of its outcome, is registered with
   * `ctx.waitUntil`, so a client that disconnects cannot cancel it and leave an
   * external record unknown.
   *
   * A retry that arrives while its key runs and asks to wait (`Prefer: wait=N`, or
   * the route's `waitMs`) is held, at most `maxWaitMs`, until the first attempt
   * records (then the answer any retry gets: the replay, 410 or 409
   * outcome-uncertain), releases its claim (then it executes as a new attempt), or
   * the wait ends (409 request-in-progress with Retry-After). A changed body is
   * refused at once. Answers after a requested wait carry `Preference-Applied:
   * wait=N`; a client that aborts `request.signal` stops waiting.
   */
  handle(
    request: Request,
    handler: (request: Request, execution: Execution<L>) => Promise<Response> | Response,
    ctx?: ExecutionContextLike,
  ): Promise<Response>;
  /** How many requests this handler holds now, waiting for a running key's answer. */
  waiting(): number;
  /**
   * Ask the state machine for a claim and write its decision atomically. With
   * `method` and `path` the request line counts (scheme 2, as `handle`); without
   * them only the operation and body (scheme 1). `owner`, recorded with a lease
   * for operators, defaults to this instance's random id and the claim's number
   * (`<uuid>-<n>`): unique, without a random value drawn per claim.
   */
  claim(input: {
    tenant: string;
    key: string;
    body?: string | Uint8Array;
    contentType?: string;
    owner?: string;
    method?: string;
    path?: string;
    query?: string;
  }): Promise<Claim>;
  /** Record the outcome under the claim's fencing token. */
  complete(claim: ExecuteClaim, response: ResponseInput): Promise<RecordView>;
  /**
   * `complete`, with the caller's local writes committed in the same transaction
   * (the adapter's `updateWith`): both or neither, so a Local effect written this
   * way happens exactly once. A lease that was taken over is refused by core
   * (`stale-token`) and nothing of `local` is applied; `local` that fails rejects
   * with `local-writes-failed` (the caller's error as `cause`) and the record stays
   * as it was. An adapter without `updateWith` rejects with `local-unsupported`
   * before anything is written.
   */
  completeWith<T extends L>(claim: ExecuteClaim, response: ResponseInput, local: T): Promise<LocalCompletion<T>>;
  /** The attempt had no effect: a retry executes again. */
  release(claim: ExecuteClaim): Promise<RecordView>;
  /** The outcome is ambiguous: retries get 409 outcome-uncertain until `resolve`. */
  markUnknown(claim: ExecuteClaim, reason?: string): Promise<RecordView>;
  /** Extend the lease of a long-running attempt. */
  renew(claim: ExecuteClaim): Promise<RecordView>;
  /**
   * Persist a step (e.g. "charge") before dispatching it. `dispatch: true` gives the
   * provider idempotency key to send: the one an earlier attempt persisted, else the
   * proposed one (default: a random UUID). `dispatch: false`: an earlier attempt
   * finished it.
   */
  beginStep(
    claim: ExecuteClaim,
    name: string,
    proposedProviderKey?: string,
  ): Promise<{ dispatch: true; providerKey: string } | { dispatch: false; providerRef: string | null }>;
  /** Record that a step finished, with the provider's reference. */
  completeStep(claim: ExecuteClaim, name: string, providerRef?: string | null): Promise<RecordView>;
  /** Operator: settle an Unknown record with the real response, or `null` when nothing happened. */
  resolve(target: { tenant: string; key: string }, applied: ResponseInput | null): Promise<RecordView>;
  /** The decoded record of a key, or null. */
  inspect(target: { tenant: string; key: string }): Promise<RecordView | null>;
  /**
   * One bounded GC pass at the idempotency's `clock` (docs/architecture.md, retention): reads
   * up to `maxBatch` (default 1000) due records from the adapter's `scan`, after
   * the cursor `after` when given, and asks core about each. Completed and Released
   * records past their record window are deleted; a Completed record past its
   * replay window loses its response body (a retry then gets 410 response-expired
   * with the resource reference, never a new execution). Running and Unknown
   * records are never deleted, however old. Every write is conditional on the
   * version scanned: a record that changed meanwhile is skipped, never overwritten.
   *
   * ```js
   * // A Cron Trigger (Workers), a setInterval, a cron job: bounded work per run.
   * let after;
   * for (let pass = 0; pass < 10; pass++) {
   *   const { more, next } = await idempotency.gc({ maxBatch: 500, after });
   *   if (!more) break;
   *   after = next; // go on after this page, past any record that was skipped
   * }
   * ```
   */
  gc(options?: { maxBatch?: number; after?: unknown }): Promise<GcReport>;
  /** The effective policy. */
  readonly policy: Readonly<Required<Omit<PolicyOptions, "storeRetryAfterSeconds">> & { effect: "local" | "external" }>;
}

export function createIdempotency<L = never>(options: IdempotencyOptions<L>): Idempotency<L>;

/** What one `gc` pass did. */
export interface GcReport {
  /** Completed records whose response body was dropped (replay window over). */
  pruned: number;
  /** Completed or Released records deleted (record window over). */
  deleted: number;
  /** Records that needed nothing yet but were indexed as due (rows from before due times were kept): their real due time is indexed now. */
  reindexed: number;
  /** Records that changed between the scan and the write (a lost race): left as they are; a later pass sees their new state. */
  skipped: number;
  /** Due entries whose bytes do not decode: left alone and counted, never a reason to stop. */
  undecodable: number;
  /** Whether another batch is waiting: call again (with `after: next` to go on after this page). */
  more: boolean;
  /** The cursor after this page, or null. */
  next: unknown | null;
}

// ---- The client side: an action journal and `callWithRetry` (the twin of `idemkit call`).

/** What one attempt produced, as far as the client could tell. */
export type AttemptResult =
  /** No connection was made: the request was never sent. */
  | { kind: "connect-error" }
  /** The request was (maybe) sent, but no response arrived in time, or the connection broke. */
  | { kind: "timeout" }
  | {
      kind: "response";
      status: number;
      /** The `type` member of a JSON object body (only its last path segment counts). */
      problemType?: string | null;
      /** The `Retry-After` header, in milliseconds. */
      retryAfterMs?: number | null;
      /** For a 410 `response-expired` problem: its `original_status` member. */
      originalStatus?: number | null;
    };

/** Core's classification of one attempt. */
export type AttemptClass = "success" | "retryable" | "rejected" | "uncertain";

/**
 * The outcome of one logical action: `pending` (nothing definitive yet; resuming with
 * the same key is safe), `confirmed` (2xx or its replay), `rejected` (a definitive
 * 4xx), `unknown` (nobody knows whether it happened: never treat it as confirmed).
 */
export type ActionStatus = "pending" | "confirmed" | "rejected" | "unknown";

/** Core's `RetryPolicy`; every field defaults to core's default. */
export interface RetryOptions {
  /** Attempts in all, the first included (default 5). */
  maxAttempts?: number;
  /** The backoff ceiling for the first retry (default 200 ms); doubled per attempt. */
  baseDelayMs?: number;
  /** The largest backoff ceiling (default 10 000 ms). */
  maxDelayMs?: number;
  /** A longer `Retry-After` stops the action as `pending` instead of waiting (default 60 000 ms). */
  maxRetryAfterMs?: number;
}

/** What `begin` returns: the action's key and its approved payload. */
export interface Action<P = unknown> {
  actionId: string;
  /** The idempotency key to send on every attempt. */
  key: string;
  /** The payload approved when the action began (as parsed from its canonical JSON). */
  payload: P;
  /** When the action began (ms since the epoch). */
  createdAt: number;
  /** True when the action already existed (a resume), false when this call created it. */
  resumed: boolean;
}

export interface AttemptRecord {
  /** 1 for the first attempt of the action. */
  number: number;
  /** A random id for this attempt (sent as `Idemkit-Attempt-Id`). */
  attemptId: string;
  startedAt: number;
  /** `null` while running, or when the process died mid-attempt. */
  endedAt: number | null;
  result: AttemptResult | null;
  /** As `idemkit call` prints it: `timeout`, `connect-error`, `201`, `409 outcome-uncertain`. */
  outcome: string | null;
}

export interface Journal {
  /**
   * Begins the action with `payload` (a JSON value), or resumes it. The key (random
   * UUID v4, or `options.key`) is stored before this resolves; the same action id
   * gives the same key and payload forever after. A payload whose canonical JSON
   * differs throws `IdemkitError` `action-payload-changed`.
   */
  begin<P = unknown>(actionId: string, payload: P, options?: { key?: string }): Promise<Action<P>>;
  /** The action, or null if it was never begun. */
  get(actionId: string): Promise<Action | null>;
  /** Journals the start of the next attempt, before it is sent. */
  startAttempt(actionId: string): Promise<{ number: number; attemptId: string; startedAt: number }>;
  /** Journals how attempt `number` ended. */
  finishAttempt(actionId: string, number: number, result: AttemptResult): Promise<AttemptRecord>;
  /** Every attempt of the action, oldest first ([] if it was never begun). */
  attempts(actionId: string): Promise<AttemptRecord[]>;
  /** The status derived from the finished attempts by core, or null if never begun. */
  status(actionId: string): Promise<ActionStatus | null>;
}

export interface JournalOptions {
  /** Where entries live; give the journal its own table or prefix. */
  adapter: Adapter<any>;
  /** Milliseconds since the epoch (default `Date.now`). */
  clock?: () => number;
}

/** A durable action journal over any adapter. */
export function createJournal(options: JournalOptions | Adapter<any>): Journal;

/** `journal.begin(actionId, payload, options)`. */
export function beginAction<P = unknown>(journal: Journal, actionId: string, payload: P, options?: { key?: string }): Promise<Action<P>>;

/** A random UUID v4 key from `crypto.getRandomValues`. */
export function randomKey(): string;

/** Rust's `IdempotencyKey::derive(namespace, runId, stepId)`: `ik1-` + 32 hex, byte for byte. */
export function deriveKey(namespace: string, runId: string, stepId: string): string;

/** Core's classification of an attempt. */
export function classifyAttempt(result: AttemptResult): AttemptClass;

/** Core's `RetryPolicy::decide` after attempt `attempt` (1-based); `random` picks the jitter. */
export function decideRetry(
  attempt: number,
  result: AttemptResult,
  policy?: RetryOptions,
  random?: bigint,
): { retry: true; delayMs: number } | { retry: false; status: ActionStatus };

/** A breaker's state, as core's `BreakerState`. */
export type BreakerState =
  | { state: "closed"; failures: number }
  | { state: "open"; until: number }
  | { state: "half-open"; probing: boolean };

export interface BreakerOptions {
  /** Consecutive failed attempts (connect error, timeout, 408, 429, 5xx) that open it (default 5, at least 1). */
  failureThreshold?: number;
  /** How long it refuses once open before letting one probe through (default 30 000 ms). */
  coolDownMs?: number;
  /** Milliseconds since the epoch (default `Date.now`). */
  clock?: () => number;
}

/** A circuit breaker shared across actions; every transition is core's `CircuitBreaker`. */
export interface Breaker {
  readonly config: { failureThreshold: number; coolDownMs: number };
  /** A copy of the current state. */
  readonly state: BreakerState;
  /**
   * May an attempt be sent now? A probe let through keeps the breaker open for
   * `probeLeaseMs` (default its cool-down) or until it is recorded. When refused,
   * `retryAt` (ms since the epoch) is when to try again.
   */
  allow(probeLeaseMs?: number): { allowed: true; retryAt: null } | { allowed: false; retryAt: number };
  /** Reports how an allowed attempt ended; returns the new state. */
  record(result: AttemptResult): BreakerState;
}

/** A breaker to share across actions (`callWithRetry({ breaker })`). */
export function createBreaker(options?: BreakerOptions): Breaker;

/** The default breaker of `url`'s origin (`scheme://host:port`) in this runtime (core's defaults). */
export function originBreaker(url: string): Breaker;

export type HeadersInput = Headers | [string, string][] | Record<string, string>;

export interface CallOptions extends RetryOptions {
  journal: Journal;
  /** The logical action's id, from the workflow (run and step), never from a model. */
  actionId: string;
  url: string;
  /** Default `POST`. */
  method?: string;
  /**
   * Journalled with the request (part of the payload); never `Idempotency-Key`.
   * `Authorization`, `Cookie` and `Proxy-Authorization` are the exception: sent on
   * every attempt like `volatileHeaders`, never journalled.
   */
  headers?: HeadersInput;
  /** Sent on every attempt but neither journalled nor compared: credentials that rotate. */
  volatileHeaders?: HeadersInput;
  /** A string, or a JSON object or array (journalled and sent as canonical JSON, `content-type: application/json` unless set). */
  body?: string | Record<string, unknown> | unknown[] | null;
  /** Per-attempt timeout, the response body included (default 10 000 ms; an attempt that asks to wait gets the wait on top). */
  timeoutMs?: number;
  /**
   * After a 409 request-in-progress, the retry asks the server to hold it for up to
   * this many seconds until the first attempt's answer exists (`Prefer: wait=N`)
   * instead of being refused again at once (default 10; 0: never ask).
   */
  waitSeconds?: number;
  /** The key of a new action (e.g. `deriveKey(...)`) instead of a random one; a resumed action keeps its own. */
  key?: string;
  /** Default `globalThis.fetch`. */
  fetch?: (input: string, init: RequestInit) => Promise<Response>;
  /** Aborts the current attempt (journalled as `timeout`) and the waits; the call then rejects with its reason. */
  signal?: AbortSignal;
  /**
   * The circuit breaker asked before every attempt and told every result; share one
   * across actions. Default: `originBreaker(url)`, one per origin in this runtime.
   * `false`: none. While it is open nothing is sent and the action stays pending.
   */
  breaker?: Breaker | false;
}

/** The same fields as `idemkit call`'s JSON output, in camelCase. */
export interface CallReport {
  actionId: string;
  idempotencyKey: string;
  resumed: boolean;
  /** Derived from every finished attempt of the action, earlier runs included. */
  status: ActionStatus;
  /** The status of the last response in this run, or null if none arrived. */
  httpStatus: number | null;
  /** This run's attempts. */
  attempts: { number: number; attemptId: string; startedAt: number; endedAt: number; outcome: string; httpStatus: number | null }[];
  /** The last response body of this run (UTF-8, lossy), or null. */
  body: string | null;
  /** The breaker's state after the run (null with `breaker: false`). */
  breaker: "closed" | "open" | "half-open" | null;
  /** When `breaker` is "open": from when (ms since the epoch) an attempt may be tried again. */
  retryAt: number | null;
  /** True when the open breaker refused an attempt and the action is pending: nothing (more) was sent. */
  stoppedByBreaker: boolean;
}

/** Sends a state-changing request as one logical action, retrying safely with one key. */
export function callWithRetry(options: CallOptions): Promise<CallReport>;

// ---- MCP: the contract of `idemkit mcp` inside an MCP server (createMcpIdempotency) ----

/** Where a client puts a call's key: `params._meta["io.idemkit/idempotency-key"]`. */
export const MCP_KEY_META: "io.idemkit/idempotency-key";
/** The other place a key is read from: `params.idempotencyKey` (SEP-3182). */
export const MCP_KEY_PARAM: "idempotencyKey";
/** `true` in a replayed result's `_meta`. */
export const MCP_REPLAYED_META: "io.idemkit/replayed";
/** Where a retry asks the gateway to wait for a running call's result: `params._meta["io.idemkit/wait"]`, whole seconds. */
export const MCP_WAIT_META: "io.idemkit/wait";
/** The capability (2025: `capabilities.experimental`) or extension (2026-07-28: `capabilities.extensions`) a protected server advertises. */
export const MCP_CAPABILITY: "io.idemkit/idempotency";
/** The JSON-RPC error codes of the refusals, by their `data.type` (the gateway's codes). */
export const MCP_PROBLEM_CODES: Readonly<{
  idempotency_key_missing: -31000;
  idempotency_key_invalid: -31001;
  idempotency_key_in_progress: -31002;
  idempotency_key_conflict: -31003;
  idempotency_store_unavailable: -31004;
  idempotency_result_expired: -31005;
  idempotency_outcome_not_recorded: -31006;
  idempotency_task_only: -31007;
  idempotency_arguments_invalid: -31008;
  idempotency_tenant_missing: -31009;
  idempotency_too_many_waiters: -31010;
}>;
/** The `data.type` of a refusal. */
export type McpProblemType = keyof typeof MCP_PROBLEM_CODES;

/** A `CallToolResult` as far as idemkit reads and writes one. */
export interface CallToolResultLike {
  content?: unknown[];
  structuredContent?: unknown;
  isError?: boolean;
  _meta?: Record<string, unknown>;
  [field: string]: unknown;
}

/** The settings of one protected tool (as a `[[tools]]` entry of `idemkit mcp`). */
export interface McpToolSettings {
  /** `external` (default): a call that may have acted without answering becomes unknown. `local`: it is released. */
  effect?: "external" | "local";
  /** `leaseMs`, `replayWindowMs`, `recordWindowMs`, `store`, as for createIdempotency. */
  policy?: Omit<PolicyOptions, "mismatchStatus" | "storeRetryAfterSeconds">;
  /** The longest time a call's lease is renewed while the tool runs (default 15 minutes). */
  maxExecutionMs?: number;
  /** Results larger than this are not kept for replay: a retry gets -31005 (default 1 MiB). */
  maxStoredResultBytes?: number;
  /** What the model is told to check when the call's outcome is unknown. */
  check?: string;
  /** This tool's `waitMs` (default: the one of {@link McpIdempotencyOptions}). */
  waitMs?: number;
  /** This tool's `maxWaitMs` (default: the one of {@link McpIdempotencyOptions}). */
  maxWaitMs?: number;
}

/** What a `tenant` function is given for each protected call. */
export interface McpCallContext {
  /** The HTTP request's headers (empty over stdio). */
  headers: Headers;
  /** What the serving code verified and passed to the SDK (`authInfo`), if anything. */
  authInfo: unknown;
  /** The `tools/call` request. */
  message: { jsonrpc: "2.0"; id: string | number; method: "tools/call"; params: { name: string; arguments?: Record<string, unknown>; _meta?: Record<string, unknown>; [field: string]: unknown } };
}

export interface McpIdempotencyOptions {
  /** Where records live (D1, a Durable Object's storage, SQLite, memory, Deno KV). */
  adapter: Adapter<any, any>;
  /** The tenant of every call, or of each call from its credentials; null refuses the call (-31009). Never from the call's arguments or key. */
  tenant: string | ((call: McpCallContext) => string | null | undefined | Promise<string | null | undefined>);
  /** The tools whose calls are claimed (names, or names with settings); every other tool passes through. */
  tools: readonly string[] | Record<string, true | McpToolSettings>;
  /** Milliseconds since the epoch (default `Date.now`); tests pass a virtual clock. */
  clock?: () => number;
  /**
   * How long a retry of a running call is held for its result when it does not ask
   * (`_meta["io.idemkit/wait"]: N` asks for N seconds): default 0, answered -31002
   * `idempotency_key_in_progress` at once.
   */
  waitMs?: number;
  /** The longest any retry is held, whatever it asks (default 10 000 ms, core's `DEFAULT_MAX_WAIT`); then -31002. */
  maxWaitMs?: number;
  /** How many retries may wait on one key at once (default 1024, core's `DEFAULT_MAX_WAITERS_PER_KEY`); past it: -31010 `idempotency_too_many_waiters` with `retryAfter`. */
  maxWaitersPerKey?: number;
  /** How many retries may wait at once, all tools and keys together (default 10 000, core's `DEFAULT_MAX_WAITERS`); past it: -31010. */
  maxWaiters?: number;
}

/** An MCP server of the official TypeScript SDK, v1 or v2 (`McpServer` or `Server`): whatever connects to a transport. */
export interface McpServerLike {
  connect(transport: any, ...rest: any[]): Promise<unknown>;
}

export interface McpIdempotency {
  /**
   * Protects `server` (returned as is): every transport it connects to from now on
   * (and the one it is connected to) is hooked. Call it on every server a factory
   * makes (`createMcpHandler(() => idempotency.protect(build()))`).
   */
  protect<S extends McpServerLike>(server: S): S;
  /** Whether calls of `tool` are claimed. */
  protects(tool: string): boolean;
  /** How many retries are held now, waiting for a running call's result. */
  waiting(): number;
  /** The decoded record of a call, or null. */
  inspect(target: { tenant: string; tool: string; key: string }): Promise<RecordView | null>;
  /** Operator: settle an unknown call with the result every retry then gets, or null when it did not take effect (a retry runs it). */
  resolve(target: { tenant: string; tool: string; key: string }, applied: CallToolResultLike | null): Promise<RecordView>;
  /** One bounded GC pass over the adapter's records (as `Idempotency.gc`). */
  gc(options?: { maxBatch?: number; after?: unknown }): Promise<GcReport>;
}

/** The gateway's contract for chosen tools of an MCP server, records in `adapter`. */
export function createMcpIdempotency(options: McpIdempotencyOptions): McpIdempotency;

// ---- Agent SDK tools: one journalled key per action, over HTTP or MCP -------------------

/** An MCP client that can call tools: the official SDK's `Client` (v1 or v2), or an `@ai-sdk/mcp` client. */
export interface McpClientLike {
  callTool(...args: any[]): Promise<unknown>;
}

/** A JSON-RPC error a server answered a call with. */
export interface McpRpcError {
  code: number;
  message: string;
  data: unknown;
}

export interface McpCallOptions extends RetryOptions {
  journal: Journal;
  /** The logical action's id, from the workflow (run and step), never from a model. */
  actionId: string;
  client: McpClientLike;
  /** The tool's name. */
  name: string;
  /** The tool's arguments (journalled with the name: the same action id with other arguments is refused). */
  arguments?: Record<string, unknown>;
  /** Per-attempt timeout (default 10 000 ms); the SDK client cancels the call after it. */
  timeoutMs?: number;
  /** The key of a new action instead of a random one; a resumed action keeps its own. */
  key?: string;
  /** Aborts the current attempt (journalled as `timeout`) and the waits; the call then rejects with its reason. */
  signal?: AbortSignal;
  /** The breaker asked before every attempt (default: one per client object; `false`: none). */
  breaker?: Breaker | false;
}

/** What `callMcpToolWithRetry` came to (the fields of `CallReport` that apply, and the call's answer). */
export interface McpCallReport {
  actionId: string;
  idempotencyKey: string;
  resumed: boolean;
  /** Derived from every finished attempt of the action, earlier runs included. */
  status: ActionStatus;
  /** The last CallToolResult of this run (a replay carries `_meta["io.idemkit/replayed"]`), or null. */
  result: CallToolResultLike | null;
  /** The last JSON-RPC error of this run, when the last answer was one. */
  error: McpRpcError | null;
  attempts: { number: number; attemptId: string; startedAt: number; endedAt: number; outcome: string }[];
  breaker: "closed" | "open" | "half-open" | null;
  retryAt: number | null;
  stoppedByBreaker: boolean;
}

/** Calls an MCP tool as one logical action: the journalled key in `_meta` on every attempt, core's retry rules, a breaker. */
export function callMcpToolWithRetry(options: McpCallOptions): Promise<McpCallReport>;

/** The request of an HTTP action (sent by callWithRetry with the action's `Idempotency-Key`). */
export type HttpActionRequest = Pick<CallOptions, "url" | "method" | "headers" | "volatileHeaders" | "body">;

/** The call of an MCP action (sent by callMcpToolWithRetry with the action's key in `_meta`). */
export interface McpActionCall {
  client: McpClientLike;
  name: string;
  arguments?: Record<string, unknown>;
}

/** What the model gets when nobody knows whether the action happened: it must not be called again. */
export interface UnknownActionOutcome {
  state: "unknown";
  actionId: string;
  key: string;
  /** What to check instead (the `check` option, or the default advice). */
  check: string;
}

/** What the model gets when the action was refused and will not happen by calling again. */
export type RejectedActionOutcome =
  | { state: "rejected"; actionId: string; key: string; httpStatus: number | null; body: unknown }
  | { state: "rejected"; actionId: string; reason: "action-payload-changed"; message: string };

/** What an AI SDK execution tells `actionId` and `http` / `mcp`. */
export interface AiSdkToolContext {
  /** The model's tool-call id: new on every turn, so no action id by itself. */
  toolCallId?: string;
  /** The tool context the app passed to the AI SDK (`toolsContext`). */
  context: unknown;
  messages: unknown[] | undefined;
  signal?: AbortSignal;
}

/** What an OpenAI Agents JS execution tells `actionId` and `http` / `mcp`. */
export interface AgentsToolContext {
  /** The model's tool-call id: new on every turn, so no action id by itself. */
  toolCallId?: string;
  /** The run's context object (`run(agent, input, { context })`). */
  context: unknown;
  runContext: unknown;
  signal?: AbortSignal;
}

export interface AgentToolSettings<I, C> extends RetryOptions {
  /** Where each action's key is kept before its first attempt. */
  journal: Journal;
  /** The action's id, from the application's run and step (a tool-call id only where the app decides so). */
  actionId: (input: I, context: C) => string;
  /** Per-attempt timeout (default 10 000 ms). */
  timeoutMs?: number;
  /** The breaker (default: one per origin for HTTP, one per client for MCP; `false`: none). */
  breaker?: Breaker | false;
  /** The fetch of HTTP attempts (default `globalThis.fetch`). */
  fetch?: CallOptions["fetch"];
  /** What the model is told to check when the outcome is unknown. */
  check?: string;
  /**
   * What the model gets for a confirmed action (default: the response body, JSON
   * parsed when it is JSON; for MCP the CallToolResult). `value` is that default.
   */
  output?: (confirmed: (CallReport | McpCallReport) & { value: unknown }) => unknown;
}

/** A tool's settings with how its action is sent: over HTTP or to an MCP tool. */
export type AgentToolOptions<I, C> = AgentToolSettings<I, C> &
  (
    | { http: (input: I, context: C) => HttpActionRequest; mcp?: never }
    | { mcp: (input: I, context: C) => McpActionCall; http?: never }
  );

/**
 * An AI SDK `execute` for `tool({ inputSchema, execute })`. Confirmed: the output;
 * unknown: an `UnknownActionOutcome` (MCP: the unknown CallToolResult); rejected: a
 * `RejectedActionOutcome` (MCP: the error as a CallToolResult); pending: throws
 * `IdemkitError` `action-pending` (calling again resumes the action with its key).
 */
export function aiSdkExecute<I = any>(
  options: AgentToolOptions<I, AiSdkToolContext>,
): (input: I, options: { toolCallId: string; context?: unknown; abortSignal?: AbortSignal; messages?: unknown[] }) => Promise<unknown>;

/** An OpenAI Agents JS `execute` for `tool({ parameters, execute })`, with `aiSdkExecute`'s outcomes. */
export function openaiAgentsExecute<I = any>(
  options: AgentToolOptions<I, AgentsToolContext>,
): (input: I, runContext?: { context?: unknown }, details?: { toolCall?: { callId?: string }; signal?: AbortSignal }) => Promise<unknown>;

/**
 * The tools of an `@ai-sdk/mcp` client (`await client.tools()`) with the protected
 * ones' calls made as actions: the journalled key in `_meta`, retried, behind a
 * breaker. Protected: the tools named in `tools`, else every tool whose annotations
 * do not say `readOnlyHint`. The others are returned as they were.
 */
export function idempotentMcpTools<T extends Record<string, any>>(
  client: McpClientLike & { toolsFromDefinitions(...args: any[]): unknown },
  tools: T,
  options: AgentToolSettings<Record<string, unknown>, AiSdkToolContext & { toolName: string }> & { tools?: (keyof T & string)[] },
): T;
