// Everything the package exports; each entry-*.js loads the .wasm for its runtime
// first, then re-exports this module.
export { IdemkitError } from "./errors.js";
export { canonicalize, decodeRecord, fingerprint, logRef, parseKey, recordId } from "./api.js";
export { createIdempotency } from "./idempotency.js";
export { memoryAdapter } from "./adapters/memory.js";
export { sqliteAdapter } from "./adapters/sqlite.js";
export { d1Adapter, d1Schema, d1Upgrade } from "./adapters/d1.js";
export { durableObjectAdapter } from "./adapters/durable-object.js";
export { denoKvAdapter } from "./adapters/deno-kv.js";
export {
  beginAction,
  callWithRetry,
  classifyAttempt,
  createBreaker,
  createJournal,
  decideRetry,
  deriveKey,
  originBreaker,
  randomKey,
} from "./client.js";
export { createMcpIdempotency } from "./mcp-server.js";
export { aiSdkExecute, callMcpToolWithRetry, idempotentMcpTools, openaiAgentsExecute } from "./agent-tools.js";
export { MCP_CAPABILITY, MCP_KEY_META, MCP_KEY_PARAM, MCP_PROBLEM_CODES, MCP_REPLAYED_META, MCP_WAIT_META } from "./mcp-names.js";
