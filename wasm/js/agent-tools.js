// Agent SDK tools: the client side of docs/architecture.md ("The client side") where agent
// developers write tools, for the Vercel AI SDK (`tool({ execute })`, and the tools
// of its MCP client `@ai-sdk/mcp`) and OpenAI Agents JS (`tool()`).
//
// An SDK runs a tool's `execute` again on a retry or a re-plan, and the model's
// tool-call id changes between turns, so neither is a key. The action id comes from
// the application (its run id and step, through `actionId`); the journal makes the
// key durable before the first attempt and gives it to every later attempt, restart
// and second worker; `callWithRetry` sends it as `Idempotency-Key` (HTTP), and
// `callMcpToolWithRetry` in the call's `_meta` (MCP), both behind a circuit breaker
// and with core's retry rules. An unknown outcome is returned to the model as a
// structured result that says not to call again; only a pending action (nothing
// definitive yet, resuming is safe) is thrown, which invites the retry it needs.
import { callWithRetry, createBreaker, decideRetry, isConnectError, sleep } from "./client.js";
import { argument, IdemkitError } from "./errors.js";
import { MCP_KEY_META } from "./mcp-names.js";
import { DEFAULT_CHECK, unknownResult } from "./mcp-server.js";

/** `idemkit call --timeout-ms` default, as callWithRetry's. */
const DEFAULT_TIMEOUT_MS = 10_000;
/** Codes the SDK v1 client raises itself: the connection closed, the request timed out (it may have arrived). */
const V1_LOCAL_CODES = new Set([-32000, -32001]);

// ---- One MCP tool call as a logical action --------------------------------------------

/** The default breaker of each MCP client object, shared by every action through it. */
const clientBreakers = new WeakMap();

function clientBreaker(client) {
  let breaker = clientBreakers.get(client);
  if (breaker === undefined) {
    breaker = createBreaker();
    clientBreakers.set(client, breaker);
  }
  return breaker;
}

/** `@ai-sdk/mcp`'s client: its `callTool` takes no `_meta`, so the key goes in through its transport. */
const isAiSdkMcpClient = (client) => typeof client?.toolsFromDefinitions === "function";

/** Keys of calls through `@ai-sdk/mcp`, by the arguments object of the call (its identity reaches the transport). */
const aiSdkKeys = new WeakMap();
const hookedAiSdkClients = new WeakSet();

/** Wraps the transport of an `@ai-sdk/mcp` client once: a `tools/call` whose arguments carry a key gets it in `_meta`. */
function hookAiSdkMcpClient(client) {
  if (hookedAiSdkClients.has(client)) return;
  const transport = client.transport;
  if (typeof transport?.send !== "function") {
    throw argument("this @ai-sdk/mcp client has no transport to send the idempotency key through");
  }
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    const args = message?.method === "tools/call" ? message.params?.arguments : undefined;
    const entry = args !== null && typeof args === "object" ? aiSdkKeys.get(args) : undefined;
    if (entry !== undefined) {
      entry.sent = true;
      message = { ...message, params: { ...message.params, _meta: { ...(message.params._meta ?? {}), [MCP_KEY_META]: entry.key } } };
    }
    return send(message, options);
  };
  hookedAiSdkClients.add(client);
}

/** One `tools/call` with `key` in `_meta` through the client's SDK; resolves to its CallToolResult. */
async function callTool(client, name, args, key, signal, timeoutMs) {
  const options = { signal, timeout: timeoutMs };
  if (isAiSdkMcpClient(client)) {
    hookAiSdkMcpClient(client);
    // A fresh object per attempt: its identity carries the key to the transport.
    const carrier = { ...args };
    const entry = { key, sent: false };
    aiSdkKeys.set(carrier, entry);
    const result = await client.callTool({ name, arguments: carrier, options });
    if (!entry.sent) throw new IdemkitError("mcp-key-not-sent", `the @ai-sdk/mcp client sent tool ${JSON.stringify(name)} without the idempotency key`);
    return result;
  }
  const params = { name, arguments: args, _meta: { [MCP_KEY_META]: key } };
  // The SDK v2 client (`@modelcontextprotocol/client`): callTool(params, options); v1: callTool(params, resultSchema, options).
  return typeof client.getProtocolEra === "function" ? client.callTool(params, options) : client.callTool(params, undefined, options);
}

/** A JSON-RPC error a server answered with, as `{ code, message, data }`, or null for a local failure. */
function rpcErrorOf(err) {
  if (err instanceof IdemkitError) return null;
  if (!Number.isSafeInteger(err?.code) || V1_LOCAL_CODES.has(err.code)) return null;
  return { code: err.code, message: String(err.message ?? ""), data: err.data ?? null };
}

/** How core classifies what a tools/call came to, in its terms (the gateway's answers map to its HTTP ones). */
function attemptOfResult(result) {
  if (result?.isError === true && result.structuredContent?.state === "unknown") return { kind: "response", status: 409, problemType: "outcome-uncertain" };
  // A tool error is the call's recorded outcome: retrying gets it again.
  if (result?.isError === true) return { kind: "response", status: 422 };
  return { kind: "response", status: 200 };
}

function attemptOfError({ code, data }) {
  const retryAfterMs = Number.isFinite(data?.retryAfter) ? data.retryAfter * 1000 : null;
  switch (data?.type) {
    case "idempotency_key_in_progress":
      return { kind: "response", status: 409, problemType: "request-in-progress", retryAfterMs };
    case "idempotency_store_unavailable":
      return { kind: "response", status: 503, retryAfterMs };
    case "idempotency_key_conflict":
      return { kind: "response", status: 422, problemType: "idempotency-key-reused" };
    case "idempotency_result_expired":
      return { kind: "response", status: 410, problemType: "response-expired" };
    case "idempotency_outcome_not_recorded":
      return { kind: "response", status: 409, problemType: "outcome-uncertain" };
    case "idempotency_tenant_missing":
      return { kind: "response", status: 401 };
    default:
  }
  if (code === -32602 || (code <= -31000 && code > -31100)) return { kind: "response", status: code === -32602 ? 422 : 400 };
  if (code === -32601) return { kind: "response", status: 404 };
  if (code === -32600 || code === -32700) return { kind: "response", status: 400 };
  // Internal and unknown errors: the tool may have run; the key makes a retry safe.
  return { kind: "response", status: 500 };
}

/**
 * Sends one attempt and says what the client could tell: `{ attempt, result?, error? }`.
 * Never rejects for network or protocol reasons: those are results. Rejects when the
 * caller's `signal` aborted (after `attempt` is known, so it can be journalled).
 */
async function sendAttempt(client, name, args, key, timeoutMs, signal) {
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new IdemkitError("attempt-timeout", `no answer within ${timeoutMs} ms`));
  }, timeoutMs);
  const onAbort = () => controller.abort(signal.reason);
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const result = await callTool(client, name, args, key, controller.signal, timeoutMs);
    return { attempt: attemptOfResult(result), result };
  } catch (err) {
    if (err instanceof IdemkitError && err.code === "mcp-key-not-sent") throw err;
    const error = timedOut || signal?.aborted ? null : rpcErrorOf(err);
    if (error !== null) return { attempt: attemptOfError(error), error };
    // Refused before sending: nothing can have happened. Anything else may have reached the server.
    return { attempt: !timedOut && !signal?.aborted && isConnectError(err) ? { kind: "connect-error" } : { kind: "timeout" }, aborted: signal?.aborted === true };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", onAbort);
  }
}

/** The attempt's outcome as `idemkit call` prints it. */
function describe(attempt) {
  if (attempt.kind !== "response") return attempt.kind;
  return attempt.problemType == null ? String(attempt.status) : `${attempt.status} ${attempt.problemType}`;
}

/**
 * Calls an MCP tool as one logical action, like `callWithRetry` for HTTP: begins (or
 * resumes) the action in `journal` with the tool's name and arguments, sends the
 * action's key in `_meta["io.idemkit/idempotency-key"]` on every attempt, journals
 * each attempt, and retries by core's rules behind a breaker (one per client object
 * unless `breaker` is given).
 * @param {import("./index.d.ts").McpCallOptions} options
 * @returns {Promise<import("./index.d.ts").McpCallReport>}
 */
export async function callMcpToolWithRetry(options) {
  const { journal, actionId, client, name, signal } = options ?? {};
  if (typeof journal?.begin !== "function" || typeof journal?.startAttempt !== "function") {
    throw argument("callMcpToolWithRetry needs journal: a journal from createJournal");
  }
  if (typeof client?.callTool !== "function") throw argument("client must be an MCP client (the SDK's Client, or an @ai-sdk/mcp client)");
  if (typeof name !== "string" || name === "") throw argument("name must be the tool's name");
  const args = options.arguments ?? {};
  if (args === null || typeof args !== "object" || Array.isArray(args)) throw argument("arguments must be an object");
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) throw argument("timeoutMs must be a positive integer");
  if (options.breaker !== undefined && options.breaker !== false && typeof options.breaker?.allow !== "function") {
    throw argument("breaker must be a breaker from createBreaker, or false for none");
  }
  const retry = { maxAttempts: options.maxAttempts, baseDelayMs: options.baseDelayMs, maxDelayMs: options.maxDelayMs, maxRetryAfterMs: options.maxRetryAfterMs };
  // Checks the retry settings before anything is journalled.
  decideRetry(1, { kind: "response", status: 200 }, retry);
  signal?.throwIfAborted();

  const action = await journal.begin(actionId, { mcpTool: name, arguments: args }, options.key === undefined ? {} : { key: options.key });
  // From here on the journalled call is the one sent.
  const journalled = action.payload;
  const breaker = options.breaker === false ? null : (options.breaker ?? clientBreaker(client));
  const probeLeaseMs = breaker === null ? 0 : Math.max(timeoutMs, breaker.config.coolDownMs);
  const attempts = [];
  let result = null;
  let error = null;
  let refused = false;
  for (;;) {
    signal?.throwIfAborted();
    if (breaker !== null && !breaker.allow(probeLeaseMs).allowed) {
      refused = true;
      break;
    }
    const start = await journal.startAttempt(actionId);
    const sent = await sendAttempt(client, journalled.mcpTool, journalled.arguments, action.key, timeoutMs, signal);
    breaker?.record(sent.attempt);
    const finished = await journal.finishAttempt(actionId, start.number, sent.attempt);
    if (sent.result !== undefined) [result, error] = [sent.result, null];
    else if (sent.error !== undefined) [result, error] = [null, sent.error];
    attempts.push({ number: start.number, attemptId: start.attemptId, startedAt: start.startedAt, endedAt: finished.endedAt, outcome: describe(sent.attempt) });
    if (sent.aborted) throw signal.reason;
    const decision = decideRetry(attempts.length, sent.attempt, retry);
    if (!decision.retry) break;
    await sleep(decision.delayMs, signal);
  }
  const status = (await journal.status(actionId)) ?? "pending";
  const state = breaker?.state;
  return {
    actionId,
    idempotencyKey: action.key,
    resumed: action.resumed,
    status,
    result,
    error,
    attempts,
    breaker: state?.state ?? null,
    retryAt: state?.state === "open" ? state.until : null,
    stoppedByBreaker: refused && status === "pending",
  };
}

// ---- Tools of the agent SDKs ----------------------------------------------------------

/** A pending action, thrown so that the SDK or the model calls again: resuming it sends the same key. */
function pending(report) {
  const err = new IdemkitError(
    "action-pending",
    report.stoppedByBreaker
      ? `Action ${JSON.stringify(report.actionId)} was not sent: the service's circuit breaker is open until ${new Date(report.retryAt).toISOString()}. Calling again later resumes it with the same idempotency key.`
      : `Action ${JSON.stringify(report.actionId)} has no definitive answer yet. Calling again resumes it with the same idempotency key, so it runs at most once.`,
  );
  err.actionId = report.actionId;
  err.idempotencyKey = report.idempotencyKey;
  err.retryAt = report.retryAt;
  return err;
}

function parseBody(body) {
  if (body === null) return null;
  try {
    return JSON.parse(body);
  } catch {
    return body;
  }
}

/** What the model gets for an HTTP action: the confirmed body, or a structured state. */
function httpOutcome(report, options) {
  switch (report.status) {
    case "confirmed":
      return options.output ? options.output({ ...report, value: parseBody(report.body) }) : parseBody(report.body);
    case "unknown":
      return { state: "unknown", actionId: report.actionId, key: report.idempotencyKey, check: options.check ?? DEFAULT_CHECK };
    case "rejected":
      return { state: "rejected", actionId: report.actionId, key: report.idempotencyKey, httpStatus: report.httpStatus, body: parseBody(report.body) };
    default:
      throw pending(report);
  }
}

/** What the model gets for an MCP action: a CallToolResult, the server's when there is one. */
function mcpOutcome(report, options) {
  switch (report.status) {
    case "confirmed":
      return options.output ? options.output({ ...report, value: report.result }) : report.result;
    case "unknown":
      if (report.result?.structuredContent?.state === "unknown") return report.result;
      return unknownResult(report.idempotencyKey, Date.now(), options.check ?? DEFAULT_CHECK, "legacy");
    case "rejected":
      if (report.result !== null) return report.result;
      return {
        content: [{ type: "text", text: report.error?.message ?? "The call was refused." }],
        structuredContent: { state: "rejected", actionId: report.actionId, key: report.idempotencyKey, error: report.error },
        isError: true,
      };
    default:
      throw pending(report);
  }
}

/** A model that changed the arguments of an action already begun asked for another action: it is not sent. */
function payloadChanged(actionId) {
  return {
    state: "rejected",
    actionId,
    reason: "action-payload-changed",
    message: `Action ${JSON.stringify(actionId)} was already begun with other arguments and was not sent again. A different action needs its own step.`,
  };
}

const RETRY_FIELDS = ["maxAttempts", "baseDelayMs", "maxDelayMs", "maxRetryAfterMs", "timeoutMs", "breaker"];

function checkToolOptions(options, factory) {
  if (typeof options?.journal?.begin !== "function") throw argument(`${factory} needs journal: a journal from createJournal`);
  if (typeof options.actionId !== "function") {
    throw argument(`${factory} needs actionId: a function (input, context) => string, from the run and the step (never from the model)`);
  }
  if ((typeof options.http === "function") === (typeof options.mcp === "function")) {
    throw argument(`${factory} needs exactly one of http: (input, context) => request, or mcp: (input, context) => ({ client, name, arguments })`);
  }
  if (options.output !== undefined && typeof options.output !== "function") throw argument("output must be a function");
}

/** Runs one execution of a tool: the action `options.actionId` names, over HTTP or MCP. */
async function runAction(options, input, context) {
  const actionId = options.actionId(input, context);
  if (typeof actionId !== "string") throw argument("actionId must return a string");
  const retry = Object.fromEntries(RETRY_FIELDS.filter((f) => options[f] !== undefined).map((f) => [f, options[f]]));
  try {
    if (typeof options.http === "function") {
      const request = options.http(input, context);
      const report = await callWithRetry({ fetch: options.fetch, ...retry, ...request, journal: options.journal, actionId, signal: context.signal });
      return httpOutcome(report, options);
    }
    const call = options.mcp(input, context);
    const report = await callMcpToolWithRetry({ ...retry, ...call, journal: options.journal, actionId, signal: context.signal });
    return mcpOutcome(report, options);
  } catch (err) {
    if (err instanceof IdemkitError && err.code === "action-payload-changed") return payloadChanged(actionId);
    throw err;
  }
}

/**
 * An AI SDK `execute` (`tool({ inputSchema, execute })`): `(input, { toolCallId,
 * context, abortSignal, messages })`. `actionId(input, { toolCallId, context,
 * messages })` names the action.
 * @param {import("./index.d.ts").AgentToolOptions} options
 */
export function aiSdkExecute(options) {
  checkToolOptions(options, "aiSdkExecute");
  return (input, sdk) =>
    runAction(options, input, { toolCallId: sdk?.toolCallId, context: sdk?.context, messages: sdk?.messages, signal: sdk?.abortSignal });
}

/**
 * An OpenAI Agents JS `execute` (`tool({ parameters, execute })`): `(input,
 * runContext, details)`. `actionId(input, { toolCallId, context, runContext })` names
 * the action (`context` is the run's context object).
 * @param {import("./index.d.ts").AgentToolOptions} options
 */
export function openaiAgentsExecute(options) {
  checkToolOptions(options, "openaiAgentsExecute");
  return (input, runContext, details) =>
    runAction(options, input, { toolCallId: details?.toolCall?.callId, context: runContext?.context, runContext, signal: details?.signal });
}

/**
 * The tools of an `@ai-sdk/mcp` client (`await client.tools()`) with each protected
 * tool's calls made as logical actions: the key in `_meta`, journalled, retried. A
 * tool is protected when `tools` names it, or (without `tools`) when its annotations
 * do not say `readOnlyHint`. `actionId(input, { toolName, toolCallId, context })`.
 * @param {unknown} client
 * @param {Record<string, any>} toolSet
 * @param {Omit<import("./index.d.ts").AgentToolOptions, "http" | "mcp"> & { tools?: string[] }} options
 */
export function idempotentMcpTools(client, toolSet, options) {
  if (!isAiSdkMcpClient(client)) throw argument("idempotentMcpTools expects an @ai-sdk/mcp client (createMCPClient)");
  if (toolSet === null || typeof toolSet !== "object") throw argument("idempotentMcpTools expects the client's tools (await client.tools())");
  const named = options?.tools === undefined ? null : new Set(options.tools);
  const readOnly = (tool) => tool?.metadata?.annotations?.readOnlyHint === true;
  const out = {};
  for (const [name, tool] of Object.entries(toolSet)) {
    const protect = named === null ? !readOnly(tool) : named.has(name);
    if (!protect) {
      out[name] = tool;
      continue;
    }
    const execute = aiSdkExecute({
      ...options,
      actionId: (input, context) => options.actionId(input, { ...context, toolName: name }),
      mcp: (input) => ({ client, name, arguments: input }),
    });
    out[name] = { ...tool, execute };
  }
  if (named !== null) {
    for (const name of named) if (!(name in toolSet)) throw argument(`idempotentMcpTools: the client has no tool ${JSON.stringify(name)}`);
  }
  return out;
}
