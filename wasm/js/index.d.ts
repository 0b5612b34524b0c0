// Hand-written types of the `idemkit` package (the wasm glue's generated types are
// not shipped: they describe internal functions, not this API).

/** Every error idemkit throws; `code` is stable (see the README, "Errors"). */
export class IdemkitError extends Error {
  readonly name: "IdemkitError";
  /** e.g. `key-too-long`, `json-duplicate-member-name`, `stale-token`, `store-unavailable`. */
  readonly code: string;
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
}

/** 64 lowercase hex characters, equal to `idemkit fingerprint` with the same options. */
export function fingerprint(body: string | Uint8Array, options?: FingerprintOptions): string;

/** The key of an `Idempotency-Key` header value, quoted (`"abc"`) or bare (`abc`). */
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
 * Where records live. Each method must be atomic for what it claims; idemkit never
 * reads and then writes without a check.
 */
export interface Adapter<V = unknown> {
  /** The record and its version, or null. */
  get(id: string): Promise<{ record: Uint8Array; version: V } | null>;
  /** Insert if absent: the new version, or null when a record already exists. */
  insert(id: string, record: Uint8Array): Promise<{ version: V } | null>;
  /** Compare-and-set: write only if the version is still `version`; null otherwise. */
  update(id: string, record: Uint8Array, version: V): Promise<{ version: V } | null>;
}

/** In-process records (tests, single-process servers). */
export function memoryAdapter(): Adapter<number> & { size(): number };

/** A SQLite database: better-sqlite3 (Node) or bun:sqlite (Bun). */
export function sqliteAdapter(
  db: { prepare(sql: string): unknown; exec(sql: string): unknown },
  options?: { table?: string },
): Adapter<number>;

/** Cloudflare D1 (`env.DB`); creates its table on first use unless `createTable: false`. */
export function d1Adapter(d1: unknown, options?: { table?: string; createTable?: boolean }): Adapter<number>;
/** The `CREATE TABLE` statement of the D1 adapter, for a migration. */
export function d1Schema(table?: string): string;

/** A Durable Object's `ctx.storage`. */
export function durableObjectAdapter(storage: unknown, options?: { prefix?: string }): Adapter<number>;

/** Deno KV (`await Deno.openKv()`); records must fit in a 64 KiB KV value. */
export function denoKvAdapter(kv: unknown, options?: { prefix?: unknown[] }): Adapter<string>;

export interface PolicyOptions {
  /** How long a claim may execute before another attempt may take over (default 30 000). */
  leaseMs?: number;
  /** How long the full response is replayed (default 24 h). */
  replayWindowMs?: number;
  /** How long the compact record is kept (default 7 days). */
  recordWindowMs?: number;
  /** The status for a reused key with another payload (default 422). */
  mismatchStatus?: 422 | 409;
  /** `definitive` (default): 2xx and most 4xx are stored; `everything`: any response. */
  store?: "definitive" | "everything";
  /** `Retry-After` seconds when the store fails (default 1). */
  storeRetryAfterSeconds?: number;
}

export interface IdempotencyOptions {
  adapter: Adapter<any>;
  /** The endpoint or action, e.g. `payments.capture`; part of every record's identity. */
  operation: string;
  /** `local`: the effect commits with the outcome; `external`: a downstream system was (maybe) written. */
  effect: "local" | "external";
  /** The authenticated caller; never taken from the body or the key. `null` answers 401. */
  tenant: (request: Request) => string | null | Promise<string | null>;
  policy?: PolicyOptions;
  /** Which parts of the body count (the operation and content type come from the request). */
  fingerprint?: Omit<FingerprintOptions, "operation">;
  /** Whether requests without a key are refused (default true) or passed through unprotected. */
  required?: boolean;
  /** What a completed response created (default: its `Location` header). */
  resourceRef?: (response: Response) => string | null;
  /** Larger request bodies get 413 body-too-large, unexecuted (default 1 MiB). */
  maxBodyBytes?: number;
  /** Renew the lease every third of `leaseMs` while the handler runs (default true). */
  autoRenew?: boolean;
  /** Milliseconds since the epoch (default `Date.now`); tests pass a virtual clock. */
  clock?: () => number;
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

export interface Idempotency {
  /** DESIGN.md's HTTP contract around a fetch-style handler. */
  handle(request: Request, handler: (request: Request) => Promise<Response> | Response): Promise<Response>;
  /** Ask the state machine for a claim and write its decision atomically. */
  claim(input: { tenant: string; key: string; body?: string | Uint8Array; contentType?: string; owner?: string }): Promise<Claim>;
  /** Record the outcome under the claim's fencing token. */
  complete(claim: ExecuteClaim, response: ResponseInput): Promise<RecordView>;
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
  /** The effective policy. */
  readonly policy: Readonly<Required<Omit<PolicyOptions, "storeRetryAfterSeconds">> & { effect: "local" | "external" }>;
}

export function createIdempotency(options: IdempotencyOptions): Idempotency;
