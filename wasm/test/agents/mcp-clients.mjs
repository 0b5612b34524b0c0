// The MCP clients of the tests: the official SDK v1 client (2025-11-25) and v2 client
// (version negotiation `auto`: 2026-07-28 when the server offers it), each answering
// elicitations with "confirm", and a fetch that loses one answer.
import { MCP_KEY_META } from "idemkit";

/**
 * A fetch that swallows the answer to the first `tools/call` whose body holds
 * `needle` (a key, a customer): the request reaches the server and runs, the response
 * is read to its end and thrown away, and the client sees a network failure. `base`
 * does the fetching.
 */
export function droppingFetch(needle, base = fetch) {
  let dropped = false;
  return async (url, init) => {
    const response = await base(url, init);
    const body = typeof init?.body === "string" ? init.body : "";
    if (!dropped && body.includes('"tools/call"') && body.includes(needle)) {
      dropped = true;
      await response.arrayBuffer();
      throw new TypeError("fetch failed: the response was lost");
    }
    return response;
  };
}

/** A tool call's outcome as plain data: `{ result }`, or `{ error: { code, message, data } }`. */
export async function outcome(promise) {
  try {
    return { result: await promise };
  } catch (err) {
    return { error: { code: err.code ?? null, message: String(err.message ?? err), data: err.data ?? null } };
  }
}

/**
 * Connects an SDK client (`sdk`: "v1" or "v2") to `url`; `fetch` carries its HTTP,
 * and a call that gets no answer fails after `timeoutMs`.
 * Resolves to `{ call(name, args, key?, meta?), listTools(), elicitations(), version, capabilities, close() }`.
 */
export async function connect(sdk, url, { fetch: fetchFn = fetch, timeoutMs = 10_000 } = {}) {
  let elicitations = 0;
  const confirm = async () => {
    elicitations++;
    return { action: "accept", content: { confirm: true } };
  };
  let client;
  if (sdk === "v2") {
    const { Client, StreamableHTTPClientTransport } = await import("@modelcontextprotocol/client");
    client = new Client(
      { name: "idemkit-test-v2", version: "2.0.0" },
      { versionNegotiation: { mode: "auto" }, capabilities: { elicitation: { form: {} } } },
    );
    client.setRequestHandler("elicitation/create", confirm);
    await client.connect(new StreamableHTTPClientTransport(url, { fetch: fetchFn }));
  } else {
    const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
    const { StreamableHTTPClientTransport } = await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
    const { ElicitRequestSchema } = await import("@modelcontextprotocol/sdk/types.js");
    client = new Client({ name: "idemkit-test-v1", version: "1.0.0" }, { capabilities: { elicitation: {} } });
    client.setRequestHandler(ElicitRequestSchema, confirm);
    await client.connect(new StreamableHTTPClientTransport(url, { fetch: fetchFn }));
  }
  return {
    client,
    call: (name, args, key, meta = {}) => {
      const _meta = { ...(key === undefined ? {} : { [MCP_KEY_META]: key }), ...meta };
      const params = { name, arguments: args, ...(Object.keys(_meta).length === 0 ? {} : { _meta }) };
      const options = { timeout: timeoutMs };
      // v1: callTool(params, resultSchema?, options); v2: callTool(params, options).
      return outcome(sdk === "v2" ? client.callTool(params, options) : client.callTool(params, undefined, options));
    },
    listTools: async () => (await client.listTools()).tools,
    elicitations: () => elicitations,
    version: sdk === "v2" ? client.getNegotiatedProtocolVersion() : client.transport?.protocolVersion ?? null,
    capabilities: client.getServerCapabilities(),
    close: () => client.close().catch(() => {}),
  };
}
