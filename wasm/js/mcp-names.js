// The names the MCP side of idemkit shares with `idemkit mcp` (the gateway): where
// a call's key goes, how a replay is marked, the capability, and the problem codes.

/** Where a client puts the key: `params._meta[MCP_KEY_META]`. */
export const MCP_KEY_META = "io.idemkit/idempotency-key";
/** The SEP-3182 shape of the key: `params.idempotencyKey`. */
export const MCP_KEY_PARAM = "idempotencyKey";
/** Set to `true` in a replayed result's `_meta`. */
export const MCP_REPLAYED_META = "io.idemkit/replayed";
/** Where a retry asks to wait for a running call's result: `params._meta[MCP_WAIT_META]`, whole seconds. */
export const MCP_WAIT_META = "io.idemkit/wait";
/** The capability (2025: `experimental`) or extension (2026: `extensions`) a protected server advertises. */
export const MCP_CAPABILITY = "io.idemkit/idempotency";

/**
 * The JSON-RPC error codes of the gateway's own answers, by `data.type`. They lie
 * outside the range JSON-RPC reserves (-32768 to -32000).
 */
export const MCP_PROBLEM_CODES = Object.freeze({
  idempotency_key_missing: -31000,
  idempotency_key_invalid: -31001,
  idempotency_key_in_progress: -31002,
  idempotency_key_conflict: -31003,
  idempotency_store_unavailable: -31004,
  idempotency_result_expired: -31005,
  idempotency_outcome_not_recorded: -31006,
  idempotency_task_only: -31007,
  idempotency_arguments_invalid: -31008,
  idempotency_tenant_missing: -31009,
  idempotency_too_many_waiters: -31010,
});
