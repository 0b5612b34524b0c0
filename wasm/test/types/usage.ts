// Compiled with `tsc -p test/types` (strict): the hand-written index.d.ts must accept
// every documented use and refuse the misuses marked @ts-expect-error.
import {
  beginAction,
  callWithRetry,
  canonicalize,
  classifyAttempt,
  createJournal,
  createBreaker,
  decideRetry,
  deriveKey,
  randomKey,
  sqliteAdapter,
  createIdempotency,
  d1Adapter,
  d1Schema,
  denoKvAdapter,
  durableObjectAdapter,
  d1Upgrade,
  decodeRecord,
  fingerprint,
  IdemkitError,
  memoryAdapter,
  parseKey,
  type Action,
  type ActionStatus,
  type Adapter,
  type AttemptResult,
  type CallReport,
  type Claim,
  type GcReport,
  type Journal,
  type LocalCompletion,
  type RecordView,
} from "idemkit";

const text: string = canonicalize(new Uint8Array([91, 93]), { profile: "rfc8785" });
const fp: string = fingerprint("{}", { operation: "x", schemaVersion: 2, include: ["/a"], contentType: "application/json" });
const withLine: string = fingerprint("{}", { operation: "x", method: "POST", path: "/a/1", query: "?b=2", ignoreQueryParams: ["utm_source"] });
const key: string = parseKey('"k"');
// @ts-expect-error profiles are "strict" or "rfc8785"
canonicalize("[]", { profile: "loose" });

const custom: Adapter<number> = {
  get: async () => null,
  insert: async () => ({ version: 1 }),
  update: async (_id, _record, version) => ({ version: version + 1 }),
};

const whole: Adapter<number> = {
  ...custom,
  insert: async (_id, _record, meta) => (meta?.gcDueAt === null ? { version: 1 } : { version: 1 }),
  delete: async (_id, version) => version > 0,
  scan: async ({ gcDueBefore, limit, after }) => ({ entries: [{ id: "0a", record: new Uint8Array(), version: 1, gcDueAt: gcDueBefore }].slice(0, limit), next: after ?? null }),
};
void whole;

const idem = createIdempotency({
  adapter: memoryAdapter(),
  operation: "payments.capture",
  effect: "external",
  tenant: (request) => request.headers.get("x-tenant"),
  policy: { leaseMs: 10_000, mismatchStatus: 409, store: "everything" },
  fingerprint: { exclude: ["/request_id"], ignoreQueryParams: ["utm_source"] },
  maxExecutionMs: 60_000,
  dispatchesOnlyThroughSteps: true,
  onDisconnect: "finish",
  replayedHeaders: ["content-type", "location", "x-request-cost"],
  waitMs: 0,
  maxWaitMs: 10_000,
  maxWaitersPerKey: 100,
  maxWaiters: 1000,
});
const held: number = idem.waiting();
void held;
// @ts-expect-error waitMs is milliseconds, a number
createIdempotency({ adapter: memoryAdapter(), operation: "x", effect: "local", tenant: () => null, waitMs: "1s" });
// @ts-expect-error onDisconnect is "finish" or "cancel"
createIdempotency({ adapter: memoryAdapter(), operation: "o", effect: "local", tenant: () => "t", onDisconnect: "abort" });
// @ts-expect-error effect is "local" or "external"
createIdempotency({ adapter: custom, operation: "x", effect: "maybe", tenant: () => null });

async function flow(): Promise<void> {
  const report: GcReport = await idem.gc({ maxBatch: 10 });
  const again = await idem.gc({ after: report.next });
  const counts: number = again.pruned + again.deleted + again.skipped + again.undecodable + again.reindexed;
  const more: boolean = again.more;
  void counts;
  void more;
  // @ts-expect-error maxBatch is a number
  await idem.gc({ maxBatch: "10" });
  const response: Response = await idem.handle(new Request("https://x.test"), async () => new Response("ok"));
  const ctx = { waitUntil: (promise: Promise<unknown>) => void promise };
  await idem.handle(new Request("https://x.test"), () => new Response("ok"), ctx);
  // @ts-expect-error the context needs waitUntil
  await idem.handle(new Request("https://x.test"), () => new Response("ok"), {});
  await idem.handle(new Request("https://x.test"), async (_request, execution) => {
    const logRef: string = execution.logRef;
    void logRef;
    execution.nothingDispatched();
    return new Response(null, { status: 429 });
  });
  const claim: Claim = await idem.claim({ tenant: "acme", key, body: "{}" });
  if (claim.outcome === "execute") {
    const token: bigint = claim.token;
    const done: RecordView = await idem.complete(claim, { status: 201, headers: { "content-type": "text/plain" }, body: "ok" });
    void token;
    const step = await idem.beginStep(claim, "charge");
    if (step.dispatch) {
      const providerKey: string = step.providerKey;
      await idem.completeStep(claim, "charge", `ref-for-${providerKey}`);
    }
    void done.state;
  } else if (claim.outcome === "inFlight") {
    const seconds: number = claim.retryAfterSeconds;
    void seconds;
    // @ts-expect-error only an executing claim can complete
    await idem.complete(claim, { status: 200 });
  }
  await idem.resolve({ tenant: "acme", key }, null);
  const record = await idem.inspect({ tenant: "acme", key });
  if (record !== null) void decodeRecord(new Uint8Array()).state;
  void response;
}

try {
  parseKey("bad key");
} catch (err) {
  if (err instanceof IdemkitError) {
    const code: string = err.code;
    void code;
  }
}

// The client side.
async function agent(db: { prepare(sql: string): unknown; exec(sql: string): unknown }): Promise<void> {
  const journal: Journal = createJournal({ adapter: sqliteAdapter(db, { table: "idemkit_journal" }), clock: Date.now });
  const sameJournal: Journal = createJournal(memoryAdapter());
  const action: Action<{ slot: string }> = await beginAction(journal, "run-7/book", { slot: "s-9" });
  const slot: string = action.payload.slot;
  const derived: Action = await journal.begin("run-7/pay", { amount: 1 }, { key: deriveKey("agent", "run-7", "pay") });
  const attempt = await journal.startAttempt(action.actionId);
  const result: AttemptResult = { kind: "response", status: 409, problemType: "https://idemkit.dev/problems/outcome-uncertain" };
  const done = await journal.finishAttempt(action.actionId, attempt.number, result);
  const status: ActionStatus | null = await journal.status(action.actionId);
  // @ts-expect-error an attempt result needs a kind
  await journal.finishAttempt(action.actionId, 2, { status: 201 });
  const report: CallReport = await callWithRetry({
    journal,
    actionId: "run-7/book",
    url: "https://api.example/appointments",
    headers: { authorization: "Bearer acme" },
    volatileHeaders: new Headers(),
    body: { customer_id: "c1", slot_id: "s-9" },
    timeoutMs: 400,
    maxAttempts: 8,
    baseDelayMs: 100,
    signal: AbortSignal.timeout(30_000),
    breaker: createBreaker({ failureThreshold: 3, coolDownMs: 300 }),
    waitSeconds: 10,
  });
  if (report.status === "confirmed") void report.httpStatus;
  if (report.breaker === "open" && report.stoppedByBreaker) void (report.retryAt ?? 0);
  // @ts-expect-error a breaker is a Breaker or false
  void callWithRetry({ journal, actionId: "a", url: "https://api.example/", breaker: true });
  // @ts-expect-error "maybe" is not an action status
  const wrong: CallReport["status"] = "maybe";
  const decision = decideRetry(1, { kind: "timeout" }, { maxAttempts: 3 }, 7n);
  if (decision.retry) void decision.delayMs;
  else void decision.status;
  void [slot, derived, done.outcome, status, wrong, sameJournal, classifyAttempt(result), randomKey()];
}

// Exactly once for local effects: each adapter's kind of local writes.
interface BetterSqlite {
  prepare(sql: string): { run(...params: unknown[]): { changes: number } };
  exec(sql: string): unknown;
}
async function localEffects(db: BetterSqlite, d1: unknown, storage: unknown, kv: unknown): Promise<void> {
  const orders = createIdempotency({ adapter: sqliteAdapter(db), operation: "orders.create", effect: "local", tenant: () => "acme" });
  const claim = await orders.claim({ tenant: "acme", key: "k", body: "{}" });
  if (claim.outcome === "execute") {
    // The connection is the Database the adapter was given; the result is what local returned.
    const done: LocalCompletion<(conn: BetterSqlite) => number> = await orders.completeWith(claim, { status: 201 }, (conn) =>
      conn.prepare("INSERT INTO orders (id) VALUES (?)").run("o-1").changes,
    );
    const changes: number = done.result;
    void changes;
    void done.record.state;
    // @ts-expect-error SQLite's local writes are a function of the connection, not statements
    await orders.completeWith(claim, { status: 201 }, ["INSERT INTO orders (id) VALUES ('o-1')"]);
  }
  await orders.handle(new Request("https://x.test"), async (_request, execution) => {
    const { record } = await execution.completeWith(new Response("{}", { status: 201 }), (conn) => conn.prepare("INSERT INTO orders (id) VALUES ('o-2')").run());
    void record.response;
    await execution.completeWith({ status: 201, body: "{}" }, () => 1);
    return new Response(null);
  });

  const onD1 = createIdempotency({ adapter: d1Adapter(d1), operation: "orders.create", effect: "local", tenant: () => "acme" });
  await onD1.handle(new Request("https://x.test"), async (_request, execution) => {
    const { result } = await execution.completeWith({ status: 201 }, [{ bound: "statement" }]);
    const batchResults: unknown[] = result;
    void batchResults;
    // @ts-expect-error D1's local writes are bound statements, not a function
    await execution.completeWith({ status: 201 }, () => 1);
    return new Response(null);
  });

  const onDurableObject = createIdempotency({ adapter: durableObjectAdapter(storage), operation: "o", effect: "local", tenant: () => "acme" });
  await onDurableObject.handle(new Request("https://x.test"), async (_request, execution) => {
    const { result } = await execution.completeWith({ status: 201 }, async (txn) => {
      await txn.put("order:1", { sku: "kettle" });
      return "order:1";
    });
    const key: string = result;
    void key;
    return new Response(null);
  });

  const onKv = createIdempotency({ adapter: denoKvAdapter(kv), operation: "o", effect: "local", tenant: () => "acme" });
  const kvClaim = await onKv.claim({ tenant: "acme", key: "k" });
  if (kvClaim.outcome === "execute") {
    // @ts-expect-error Deno KV has no local writes: completeWith is local-unsupported
    await onKv.completeWith(kvClaim, { status: 201 }, () => 1);
  }
}

void localEffects;
void text;
void fp;
void agent;
void d1Schema("t");
const upgrade: string = d1Upgrade("t");
void upgrade;
void flow;

// MCP servers and agent tools.
import {
  MCP_KEY_META,
  MCP_PROBLEM_CODES,
  aiSdkExecute,
  callMcpToolWithRetry,
  createMcpIdempotency,
  idempotentMcpTools,
  openaiAgentsExecute,
  type McpCallReport,
  type McpProblemType,
} from "idemkit";

async function mcpAndAgents(server: { connect(transport: unknown): Promise<void>; registerTool(name: string): void }, client: { callTool(params: object): Promise<object> }): Promise<void> {
  const mcp = createMcpIdempotency({
    adapter: memoryAdapter(),
    tenant: ({ authInfo, headers }) => (authInfo as { clientId?: string } | undefined)?.clientId ?? headers.get("x-tenant"),
    tools: { book: { effect: "external", policy: { leaseMs: 10_000 }, check: "List the bookings first." }, note: true },
  });
  // protect returns the server it was given, with its own type.
  const same = mcp.protect(server);
  same.registerTool("list");
  createMcpIdempotency({ adapter: memoryAdapter(), tenant: "clinic-a", tools: ["book"] });
  // Retries of a running call may wait: for every tool, and per tool.
  const waits = createMcpIdempotency({
    adapter: memoryAdapter(),
    tenant: "clinic-a",
    tools: { book: { waitMs: 500, maxWaitMs: 30_000 } },
    maxWaitMs: 5_000,
    maxWaiters: 100,
    maxWaitersPerKey: 4,
  });
  const waitingNow: number = waits.waiting();
  void waitingNow;
  // @ts-expect-error a tenant is a string or a function of the call, never absent
  createMcpIdempotency({ adapter: memoryAdapter(), tools: ["book"] });
  // @ts-expect-error the effects are "external" and "local"
  createMcpIdempotency({ adapter: memoryAdapter(), tenant: "t", tools: { book: { effect: "remote" } } });
  await mcp.resolve({ tenant: "clinic-a", tool: "book", key: "k" }, { content: [{ type: "text", text: "booked by hand" }] });
  const code: -31002 = MCP_PROBLEM_CODES.idempotency_key_in_progress;
  const type: McpProblemType = "idempotency_key_conflict";
  const meta: "io.idemkit/idempotency-key" = MCP_KEY_META;
  void [code, type, meta];

  const journal = createJournal({ adapter: memoryAdapter() });
  const report: McpCallReport = await callMcpToolWithRetry({ journal, actionId: "run-1/book", client, name: "book", arguments: { slot: "s-1" }, maxAttempts: 3 });
  const booked: boolean = report.status === "confirmed" && report.result?.isError !== true;
  void booked;

  const execute = aiSdkExecute<{ slot: string }>({
    journal,
    actionId: (input, { context }) => `${(context as { runId: string }).runId}/book/${input.slot}`,
    http: (input) => ({ url: "https://api.example/appointments", body: { slot: input.slot } }),
    timeoutMs: 5_000,
    breaker: createBreaker(),
  });
  await execute({ slot: "s-1" }, { toolCallId: "call_1", context: { runId: "run-1" } });
  openaiAgentsExecute({ journal, actionId: (_input, { toolCallId }) => toolCallId ?? "no-call", mcp: (input) => ({ client, name: "book", arguments: input }) });
  // @ts-expect-error an action is sent over HTTP or to an MCP tool, not both
  aiSdkExecute({ journal, actionId: () => "a", http: () => ({ url: "https://x" }), mcp: () => ({ client, name: "book" }) });
  // @ts-expect-error the action id comes from a function of the app, not a constant the model could repeat
  aiSdkExecute({ journal, actionId: "run-1/book", http: () => ({ url: "https://x" }) });
  const tools = idempotentMcpTools({ ...client, toolsFromDefinitions: () => ({}) }, { book: { description: "Book" }, list: { description: "List" } }, {
    journal,
    actionId: (_input, { toolName }) => `run-1/${toolName}`,
    tools: ["book"],
  });
  void tools.list.description;
}
void mcpAndAgents;
