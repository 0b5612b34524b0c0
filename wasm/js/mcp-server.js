// createMcpIdempotency: the contract of `idemkit mcp` (the gateway) inside a
// JavaScript MCP server on the official TypeScript SDK, v1
// (`@modelcontextprotocol/sdk`, 2025-11-25) or v2 (`@modelcontextprotocol/server`,
// 2026-07-28 and 2025 clients), over any adapter: a Worker keeps its records in D1
// or a Durable Object.
//
// It works where the gateway works, on the JSON-RPC messages: `protect(server)`
// hooks every transport the server connects to (the SDK sets `onmessage`, then
// this file wraps it and `send`). A `tools/call` of a protected tool is claimed
// before the server sees it; the server's response is recorded before the client
// gets it; a retry is answered from the record and never reaches the server.
// Every other message passes unchanged, both ways, except that `tools/list`
// results get `idempotentHint` on the protected tools and the `initialize` /
// `server/discover` results advertise the capability. The decisions are core's
// (through createIdempotency); the names, codes and wording are the gateway's
// (store/src/bin/idemkit/mcp/jsonrpc.rs).
//
// A retry of a running call that asks to wait (`_meta["io.idemkit/wait"]`, seconds;
// or a tool's `waitMs`) is held until the first call's result is recorded, as at the
// gateway, within the same caps (`maxWaitMs`, `maxWaiters`, `maxWaitersPerKey`).
//
// One difference from the gateway: an `input_required` answer (2026-07-28)
// releases the claim instead of holding it in memory. It is interim and never
// stored, and the continuation (the same call with `inputResponses`) claims the
// key again, so it may reach another instance of a stateless server (a Worker) and
// still run under a claim; only the complete result or an error records the call.
import * as wasm from "./idemkit_wasm.js";
import { createIdempotency, defaults, renewWhileRunning, withRetries } from "./idempotency.js";
import { argument, IdemkitError, wasmCall } from "./errors.js";
import { MCP_CAPABILITY, MCP_KEY_META, MCP_KEY_PARAM, MCP_PROBLEM_CODES, MCP_REPLAYED_META, MCP_WAIT_META } from "./mcp-names.js";
import { holdWhileRunning, waitOption, waitingOptions } from "./waiting.js";

/** The per-request protocol version of 2026-07-28 and later. */
const PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion";
/** The first revision without `initialize` and sessions; revisions are dates, so they compare as text. */
const FIRST_MODERN = "2026-07-28";

/** What the model is told to check when a tool's outcome is unknown, unless the tool's `check` says more. */
export const DEFAULT_CHECK =
  "Do not call this tool again for this action. Look up whether the action took effect (for " +
  "example with a read-only tool that lists what exists) and tell the user; an operator settles the outcome.";

const fromUtf8 = new TextDecoder();

// ---- The gateway's answers -----------------------------------------------------------

/** Whole seconds, at least 1 (a retry-after of 0 reads as "now"). */
const seconds = (s) => Math.max(1, Math.ceil(s));

/** The gateway's refusals and answers, each a JSON-RPC error whose `data.type` names it. */
const MESSAGES = {
  idempotency_key_missing: ({ tool }) =>
    `Tool ${JSON.stringify(tool)} needs an idempotency key: send the same unique string on every attempt of this ` +
    `action in params._meta["${MCP_KEY_META}"] (or params.${MCP_KEY_PARAM}). Nothing was executed.`,
  idempotency_key_invalid: ({ why }) =>
    `The idempotency key is not valid (${why}): 1 to 255 visible ASCII characters, as a string. Nothing was executed.`,
  idempotency_key_in_progress: ({ retryAfter }) =>
    `A call with this idempotency key is in progress. Retry with the same key after ${retryAfter} seconds.`,
  idempotency_too_many_waiters: ({ retryAfter }) =>
    "A call with this idempotency key is in progress, and too many calls already wait for its result. Nothing was " +
    `executed. Retry with the same key after ${retryAfter} seconds.`,
  idempotency_key_conflict: () =>
    "This idempotency key was already used with different arguments. Nothing was executed. Use a new key for a new action.",
  idempotency_store_unavailable: ({ retryAfter }) =>
    `The idempotency store is unavailable; nothing was executed. Retry with the same key after ${retryAfter} seconds.`,
  idempotency_result_expired: () =>
    "The call with this idempotency key completed, but its result is no longer kept. It was not executed again.",
  idempotency_outcome_not_recorded: ({ logRef }) =>
    "The tool answered, but its outcome could not be recorded, so it is not given out: whether it took effect is " +
    `unknown. Do not call it again; an operator settles log reference ${logRef}.`,
  idempotency_task_only: () =>
    "The first call with this idempotency key ran as a task. Retry with task augmentation, or read the task's result (tasks/result).",
  idempotency_arguments_invalid: ({ why }) => `The arguments have no canonical form (${why}). Nothing was executed.`,
  idempotency_tenant_missing: () => "The request does not name a tenant the server accepts. Nothing was executed.",
};

/** The problem `type` as the JSON-RPC error answering request `id`. */
function problem(id, type, fields = {}) {
  const data = { type };
  if (fields.retryAfter !== undefined) data.retryAfter = fields.retryAfter;
  if (fields.resourceRef != null) data.resourceRef = fields.resourceRef;
  if (fields.logRef !== undefined) data.logRef = fields.logRef;
  return { jsonrpc: "2.0", id, error: { code: MCP_PROBLEM_CODES[type], message: MESSAGES[type](fields), data } };
}

const resultResponse = (id, result) => ({ jsonrpc: "2.0", id, result });

/** The stored result of a call, shaped for `era` and marked replayed. */
function replayed(result, era) {
  if (result === null || typeof result !== "object" || Array.isArray(result)) return result;
  const out = { ...result, _meta: { ...(result._meta ?? {}), [MCP_REPLAYED_META]: true } };
  // A task handle keeps its own result type; a complete result says so on 2026-07-28 and not before.
  if (era === "modern") out.resultType ??= "complete";
  else if (out.resultType === "complete") delete out.resultType;
  return out;
}

/** What the model sees when a call's outcome is unknown: a tool error that says not to call again and what to check. */
export function unknownResult(key, sinceMs, check, era) {
  const since = new Date(sinceMs).toISOString();
  const text =
    `The outcome of the call with idempotency key ${JSON.stringify(key)} is unknown since ${since}: it may or may not ` +
    `have taken effect, and it will not be executed again. ${check}`;
  const result = {
    content: [{ type: "text", text }],
    structuredContent: { state: "unknown", key, since, check },
    isError: true,
  };
  if (era === "modern") result.resultType = "complete";
  return result;
}

/**
 * How a JSON-RPC error the server answered a call with is recorded, as the HTTP
 * status whose rules apply, or null when the server refused the call before running
 * the tool (then nothing ran and a retry with the same key runs it).
 */
function errorStatus(error) {
  const code = error?.code;
  // Header mismatch, missing client capability, unsupported protocol version, URL elicitation required.
  if (code === -32020 || code === -32021 || code === -32022 || code === -32042) return null;
  // Parse error, invalid request: the same message fails the same way.
  if (code === -32700 || code === -32600) return 400;
  if (code === -32601) return 404;
  if (code === -32602) return 422;
  // Internal errors, implementation-defined server errors and codes nobody knows: the tool may have run.
  return 500;
}

/**
 * What is stored of a result: the result without `resultType: "complete"` (each
 * era's replay adds what it needs), and whether it is a task handle, replayed only
 * to a request that takes tasks.
 */
function storedResult(result) {
  const kept = { ...result };
  let task;
  if (kept.resultType === "complete") {
    delete kept.resultType;
    task = false;
  } else if (typeof kept.resultType === "string") {
    // 2026-07-28: a result type of an extension (the tasks extension's).
    task = true;
  } else {
    // 2025-11-25: CreateTaskResult.
    task = typeof kept.task?.taskId === "string";
  }
  return JSON.stringify(task ? { result: kept, task: true } : { result: kept });
}

/**
 * The wait a `tools/call` asks for, in seconds: `_meta["io.idemkit/wait"]` when it
 * is a non-negative integer (anything else asks nothing, as at the gateway).
 */
function waitAsked(message) {
  const asked = message.params?._meta?.[MCP_WAIT_META];
  return Number.isSafeInteger(asked) && asked >= 0 ? asked : undefined;
}

/** Whether a `tools/call` asks for a task: `params.task` (2025-11-25), or a 2026-07-28 client that declares the tasks extension. */
function wantsTask(message) {
  const params = message.params;
  return (
    params?.task !== undefined ||
    params?._meta?.["io.modelcontextprotocol/clientCapabilities"]?.extensions?.["io.modelcontextprotocol/tasks"] !== undefined
  );
}

/** The answer to a retry of a completed call (`stored`: the claim's stored response). */
function replay(id, era, wantsTaskResult, stored) {
  if (stored.body === null) return problem(id, "idempotency_result_expired", { resourceRef: stored.resourceRef });
  const text = fromUtf8.decode(stored.body);
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  if (body === null || typeof body !== "object" || (!("result" in body) && !("error" in body))) {
    // Settled by an operator with a body of their own: the model gets that text as the tool's result.
    return resultResponse(id, replayed({ content: [{ type: "text", text }], isError: false }, era));
  }
  if ("error" in body) return { jsonrpc: "2.0", id, error: body.error };
  if (body.task === true && !wantsTaskResult) return problem(id, "idempotency_task_only");
  return resultResponse(id, replayed(body.result ?? null, era));
}

/** The era of a request: its `_meta` protocol version, else the `MCP-Protocol-Version` header, else 2025. */
function eraOf(message, headers) {
  const version = message.params?._meta?.[PROTOCOL_VERSION_META] ?? headers?.get("mcp-protocol-version") ?? null;
  return typeof version === "string" && version >= FIRST_MODERN ? "modern" : "legacy";
}

/** The request headers a transport hands the server with a message (v2: a Request; v1: a plain record), or null. */
function headersOf(extra) {
  const fromRequest = extra?.request?.headers;
  if (typeof Headers !== "undefined" && fromRequest instanceof Headers) return fromRequest;
  const plain = extra?.requestInfo?.headers;
  if (plain === undefined || plain === null) return null;
  if (typeof Headers !== "undefined" && plain instanceof Headers) return plain;
  const headers = new Headers();
  for (const [name, value] of Object.entries(plain)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) headers.append(name, String(v));
  }
  return headers;
}

/** Adds the capability with its settings to `result.capabilities[section]`, keeping everything else. */
function advertise(result, section) {
  if (result === null || typeof result !== "object") return;
  const capabilities = (result.capabilities ??= {});
  const entries = (capabilities[section] ??= {});
  entries[MCP_CAPABILITY] = { keyMeta: MCP_KEY_META, keyParam: MCP_KEY_PARAM, replayedMeta: MCP_REPLAYED_META };
}

/** Sets `annotations.idempotentHint = true` on the listed tools `enforced` names. */
function markEnforced(result, enforced) {
  if (!Array.isArray(result?.tools)) return;
  for (const tool of result.tools) {
    if (typeof tool?.name !== "string" || !enforced(tool.name)) continue;
    tool.annotations = { ...(tool.annotations ?? {}), idempotentHint: true };
  }
}

const isRequest = (m) => typeof m?.method === "string" && (typeof m.id === "string" || typeof m.id === "number");
const isResponse = (m) => m?.method === undefined && (typeof m?.id === "string" || typeof m?.id === "number") && ("result" in m || "error" in m);
/** A map key for a JSON-RPC id (a string and a number never share one). */
const idKey = (id) => `${typeof id}:${id}`;

// ---- The protection ----------------------------------------------------------------------

/** The checked settings of one protected tool, with its engine. */
function toolOf(name, given, shared) {
  const settings = given === true || given === undefined ? {} : given;
  if (settings === null || typeof settings !== "object") throw argument(`tools.${name} must be true or an object of settings`);
  const effect = settings.effect ?? "external";
  // The gateway's defaults, from core: the longest execution whose lease is
  // renewed, and the largest result kept for replay.
  const maxExecutionMs = settings.maxExecutionMs ?? defaults().maxExecutionMs;
  if (!Number.isSafeInteger(maxExecutionMs) || maxExecutionMs < 0) throw argument(`tools.${name}.maxExecutionMs must be a non-negative integer`);
  const check = settings.check ?? DEFAULT_CHECK;
  if (typeof check !== "string") throw argument(`tools.${name}.check must be a string`);
  // How long a retry of a running call is held for its result: the tool's own
  // rule, else the one given for every tool (as the gateway's `wait_ms` and
  // `max_wait_ms` per tool).
  const wait = {
    waitMs: waitOption(settings.waitMs ?? shared.wait.waitMs, `tools.${name}.waitMs`),
    maxWaitMs: waitOption(settings.maxWaitMs ?? shared.wait.maxWaitMs, `tools.${name}.maxWaitMs`),
  };
  const idempotency = createIdempotency({
    adapter: shared.adapter,
    operation: name,
    effect,
    // The tenant is asked for per message below; the engine never sees a Request.
    tenant: () => null,
    policy: settings.policy,
    clock: shared.clock,
    // What a call means: the tool's name (the operation) and the canonical arguments,
    // selected from the call as the gateway selects them.
    fingerprint: { include: ["/params/arguments"] },
    maxStoredResponseBytes: settings.maxStoredResultBytes ?? defaults().maxStoredResponseBytes,
    autoRenew: false,
  });
  return { name, effect, maxExecutionMs, check, wait, idempotency, policy: idempotency.policy };
}


/**
 * @param {import("./index.d.ts").McpIdempotencyOptions} options
 * @returns {import("./index.d.ts").McpIdempotency}
 */
export function createMcpIdempotency(options) {
  const { adapter, tenant } = options ?? {};
  for (const method of ["get", "insert", "update"]) {
    if (typeof adapter?.[method] !== "function") throw argument(`adapter.${method} must be a function (see the Adapter type)`);
  }
  if (typeof tenant !== "string" && typeof tenant !== "function") {
    throw argument("tenant must be a string, or a function ({ headers, authInfo, message }) => string | null");
  }
  const clock = options.clock ?? Date.now;
  if (typeof clock !== "function") throw argument("clock must be a function returning milliseconds");
  // The wait for every tool unless its own says otherwise, and the places for held
  // retries, all tools together (the gateway's `max_waiters` and `max_waiters_per_key`).
  const { rule: wait, slots } = waitingOptions(options, defaults());
  const given = options.tools;
  const entries = Array.isArray(given) ? given.map((name) => [name, true]) : Object.entries(given ?? {});
  if (entries.length === 0) throw argument("tools must name at least one tool to protect (an array of names or an object of settings)");
  const tools = new Map();
  for (const [name, settings] of entries) {
    if (typeof name !== "string" || name === "") throw argument("tool names must be non-empty strings");
    tools.set(name, toolOf(name, settings, { adapter, clock, wait }));
  }
  const hooked = new WeakSet();

  async function tenantOf(message, extra, headers) {
    if (typeof tenant === "string") return tenant;
    const found = await tenant({ headers: headers ?? new Headers(), authInfo: extra?.authInfo, message });
    return typeof found === "string" && found !== "" ? found : null;
  }

  /** Renews the call's lease until `stop()` or its deadline; a refusal ends it. */
  function keepLeased(tool, claim) {
    const lease = renewWhileRunning({ leaseMs: tool.policy.leaseMs, maxExecutionMs: tool.maxExecutionMs, clock, renew: () => tool.idempotency.renew(claim) });
    return () => lease.stop();
  }

  /**
   * What to do with a `tools/call`: `{ pass: true }` (not protected), `{ answer }`
   * (nothing is forwarded), or `{ running }` (forward it; its response is recorded).
   * `gone` aborts when the call's answer can no longer be delivered (cancelled, or
   * the transport closed): a retry held for a running call stops waiting.
   */
  async function decide(message, extra, gone) {
    const tool = tools.get(message.params?.name);
    if (tool === undefined) return { pass: true };
    const id = message.id;
    const headers = headersOf(extra);
    const era = eraOf(message, headers);
    const tenantId = await tenantOf(message, extra, headers);
    if (tenantId === null) return { answer: problem(id, "idempotency_tenant_missing") };
    const params = message.params;
    const field = params?._meta?.[MCP_KEY_META] ?? params?.[MCP_KEY_PARAM];
    if (field === undefined) return { answer: problem(id, "idempotency_key_missing", { tool: tool.name }) };
    if (typeof field !== "string") return { answer: problem(id, "idempotency_key_invalid", { why: "not a string" }) };
    try {
      wasmCall(() => wasm.checkKey(field));
    } catch (err) {
      if (!(err instanceof IdemkitError)) throw err;
      return { answer: problem(id, "idempotency_key_invalid", { why: err.message }) };
    }
    // The arguments alone say what the call means: never the id, `_meta`,
    // `inputResponses` or `requestState`.
    const body = JSON.stringify(params.arguments === undefined ? { params: {} } : { params: { arguments: params.arguments } });
    const claimOnce = () => tool.idempotency.claim({ tenant: tenantId, key: field, body });
    const storeUnavailable = () => ({ answer: problem(id, "idempotency_store_unavailable", { retryAfter: defaults().storeRetryAfterSeconds }) });
    let claim;
    try {
      claim = await claimOnce();
    } catch (err) {
      if (!(err instanceof IdemkitError)) throw err;
      if (err.code.startsWith("scope-")) return { answer: problem(id, "idempotency_tenant_missing") };
      if (err.code.startsWith("json-") || err.code === "lone-surrogate-in-string") {
        return { answer: problem(id, "idempotency_arguments_invalid", { why: `${err.message} [${err.code}]` }) };
      }
      return storeUnavailable();
    }
    // A retry of a running call may wait for its result instead of getting "in
    // progress": held until the first call records (then what a retry gets at that
    // moment), releases (then it executes), or the wait ends (then -31002).
    if (claim.outcome === "inFlight") {
      const { durationMs } = wasmCall(() => wasm.waitFor(waitAsked(message), tool.wait.waitMs, tool.wait.maxWaitMs));
      if (durationMs > 0) {
        const give = slots.take(claim.id);
        if (give === null) return { answer: problem(id, "idempotency_too_many_waiters", { retryAfter: seconds(claim.retryAfterSeconds) }) };
        try {
          claim = await holdWhileRunning({ adapter, first: claim, durationMs, signal: gone, reclaim: claimOnce });
        } catch (err) {
          if (!(err instanceof IdemkitError)) throw err;
          return storeUnavailable();
        } finally {
          give();
        }
      }
    }
    switch (claim.outcome) {
      case "execute":
        return { running: { id, era, tool, key: field, claim, stopLease: keepLeased(tool, claim) } };
      case "replay":
        return { answer: replay(id, era, wantsTask(message), claim.response) };
      case "responseExpired":
        return { answer: problem(id, "idempotency_result_expired", { resourceRef: claim.resourceRef }) };
      case "inFlight":
        return { answer: problem(id, "idempotency_key_in_progress", { retryAfter: seconds(claim.retryAfterSeconds) }) };
      case "mismatch":
        return { answer: problem(id, "idempotency_key_conflict") };
      case "uncertain":
        return { answer: resultResponse(id, unknownResult(field, claim.since, tool.check, era)) };
      default:
        throw new IdemkitError("internal", `unknown claim outcome ${claim.outcome}`);
    }
  }

  /** How a response to a forwarded call is recorded: `{ write, complete?, reason? }`. */
  function writeFor(running, response) {
    const { tool } = running;
    if ("result" in response) {
      if (response.result?.resultType === "input_required") return { write: "release" };
      return { write: "complete", complete: { status: 200, body: storedResult(response.result) } };
    }
    const status = errorStatus(response.error);
    if (status === null) return { write: "release" };
    const disposition = wasmCall(() => wasm.classify(status, tool.policy));
    if (disposition === "store") return { write: "complete", complete: { status, body: JSON.stringify({ error: response.error }) } };
    if (disposition === "release") return { write: "release" };
    return { write: "unknown", reason: `JSON-RPC error, status ${status}` };
  }

  /**
   * Records what the server answered a forwarded call, then says what the client
   * gets: the server's answer once it is durable, else the gateway's "not recorded".
   */
  async function finish(running, response) {
    await running.stopLease();
    const { tool, claim } = running;
    const plan = writeFor(running, response);
    try {
      if (plan.write === "release") await withRetries(() => tool.idempotency.release(claim));
      else if (plan.write === "complete") await withRetries(() => tool.idempotency.complete(claim, plan.complete));
      else await withRetries(() => tool.idempotency.markUnknown(claim, plan.reason));
      return response;
    } catch (err) {
      if (!(err instanceof IdemkitError)) throw err;
      if (plan.write === "release") return response;
      // Once the server answered, no failure here releases the record: an honest
      // Unknown if the store allows, else the lease runs out.
      await withRetries(() => tool.idempotency.markUnknown(claim, "outcome not recorded")).catch(() => {});
      return problem(running.id, "idempotency_outcome_not_recorded", { logRef: claim.logRef });
    }
  }

  /**
   * A call whose answer will never come through this transport (it closed, or the
   * client cancelled the request, so the SDK drops the answer): settled by its
   * effect, as the gateway settles a dropped call (External: unknown; Local: released).
   */
  async function drop(running, reason) {
    await running.stopLease();
    const { tool, claim } = running;
    const settle = tool.effect === "local" ? () => tool.idempotency.release(claim) : () => tool.idempotency.markUnknown(claim, reason);
    await withRetries(settle).catch(() => {});
  }

  /** Wraps a transport the SDK connected: its `onmessage`, `send` and `onclose`. */
  function hook(transport) {
    if (transport === null || typeof transport !== "object" || hooked.has(transport)) return;
    if (typeof transport.send !== "function" || typeof transport.onmessage !== "function") {
      throw argument("protect: the server's transport has no send or onmessage (is the server connected?)");
    }
    hooked.add(transport);
    const deliver = transport.onmessage;
    const send = transport.send.bind(transport);
    const onclose = transport.onclose;
    /** Requests whose responses this hook changes or records, by id: "initialize", "server/discover", "tools/list", or a running call. */
    const awaiting = new Map();
    /** Protected calls not decided yet, by id: what aborts a held retry. */
    const deciding = new Map();
    let closed = false;

    const fail = (id, err) => {
      transport.onerror?.(err instanceof Error ? err : new Error(String(err)));
      return send({ jsonrpc: "2.0", id, error: { code: -32603, message: `Internal error: ${err?.message ?? err}` } });
    };

    transport.onmessage = (message, extra) => {
      if (isRequest(message) && message.method === "tools/call" && tools.has(message.params?.name)) {
        // Aborted by a cancellation of this call or the transport's close, while it
        // is decided (a retry may be held for a running call's result).
        const gone = new AbortController();
        const id = idKey(message.id);
        deciding.set(id, gone);
        decide(message, extra, gone.signal)
          .finally(() => {
            // A client may reuse an id once answered: only this call's entry goes.
            if (deciding.get(id) === gone) deciding.delete(id);
          })
          .then(
            async (decision) => {
              if (decision.answer !== undefined) return send(decision.answer);
              if (decision.running !== undefined) {
                if (closed || gone.signal.aborted) {
                  // Nobody is left to answer: nothing ran, so the key is free again.
                  await decision.running.stopLease();
                  await decision.running.tool.idempotency.release(decision.running.claim).catch(() => {});
                  return;
                }
                awaiting.set(id, decision.running);
              }
              deliver(message, extra);
            },
            (err) => fail(message.id, err),
          )
          .catch((err) => transport.onerror?.(err));
        return;
      }
      if (isRequest(message) && (message.method === "initialize" || message.method === "server/discover" || message.method === "tools/list")) {
        awaiting.set(idKey(message.id), message.method);
      } else if (message?.method === "notifications/cancelled") {
        const requestId = message.params?.requestId;
        if (requestId !== undefined) deciding.get(idKey(requestId))?.abort();
        const running = requestId === undefined ? undefined : awaiting.get(idKey(requestId));
        if (running !== undefined && typeof running === "object") {
          awaiting.delete(idKey(requestId));
          drop(running, "the client cancelled the call while it ran");
        }
      }
      deliver(message, extra);
    };

    transport.send = async (message, sendOptions) => {
      if (isResponse(message)) {
        const entry = awaiting.get(idKey(message.id));
        if (entry !== undefined) {
          awaiting.delete(idKey(message.id));
          if (typeof entry === "object") {
            message = await finish(entry, message);
          } else if ("result" in message) {
            if (entry === "initialize") advertise(message.result, "experimental");
            else if (entry === "server/discover") advertise(message.result, "extensions");
            else markEnforced(message.result, (name) => tools.has(name));
          }
        }
      }
      return send(message, sendOptions);
    };

    transport.onclose = () => {
      closed = true;
      for (const gone of deciding.values()) gone.abort();
      deciding.clear();
      for (const [id, entry] of awaiting) {
        if (typeof entry === "object") drop(entry, "the connection closed before the tool answered");
        awaiting.delete(id);
      }
      onclose?.();
    };
  }

  function protect(server) {
    if (typeof server?.connect !== "function") {
      throw argument("protect expects an MCP server (McpServer or Server of @modelcontextprotocol/sdk or @modelcontextprotocol/server)");
    }
    const connect = server.connect;
    server.connect = async function connectProtected(transport, ...rest) {
      const connected = await connect.call(this, transport, ...rest);
      hook(transport);
      return connected;
    };
    // Already connected: protect the current transport too.
    const current = server.transport ?? server.server?.transport;
    if (current !== undefined && current !== null) hook(current);
    return server;
  }

  /** The engine of a protected tool, for the operator calls. */
  function engineOf(tool) {
    const found = tools.get(tool);
    if (found === undefined) throw argument(`tool ${JSON.stringify(tool)} is not protected`);
    return found.idempotency;
  }

  return Object.freeze({
    protect,
    protects: (name) => tools.has(name),
    /** How many retries are held now, waiting for a running call's result. */
    waiting: slots.count,
    inspect: ({ tenant: tenantId, tool, key }) => engineOf(tool).inspect({ tenant: tenantId, key }),
    /**
     * Operator: settle an unknown call. `applied`: the CallToolResult every retry
     * then gets, or null when the tool did not take effect (a retry runs it).
     */
    resolve: ({ tenant: tenantId, tool, key }, applied) =>
      engineOf(tool).resolve(
        { tenant: tenantId, key },
        applied === null ? null : { status: 200, body: JSON.stringify({ result: applied }) },
      ),
    gc: (gcOptions) => tools.values().next().value.idempotency.gc(gcOptions),
  });
}
