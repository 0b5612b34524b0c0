// The scenarios through the SDK v1 client (`@modelcontextprotocol/sdk`,
// revision 2025-11-25: initialize, Mcp-Session-Id).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { KEY_META, args, droppingFetch, run } from './scenarios.mjs';

const { url, scenario, marker } = args();
let elicitations = 0;
const client = new Client({ name: 'idemkit-test-v1', version: '1.0.0' }, { capabilities: { elicitation: {} } });
client.setRequestHandler(ElicitRequestSchema, async () => {
  elicitations += 1;
  return { action: 'accept', content: { confirm: true } };
});
await client.connect(new StreamableHTTPClientTransport(url, { fetch: droppingFetch(scenario === "lost_response" ? `${marker}-key` : null) }));
const report = await run(scenario, marker, {
  call: (name, args, key) =>
    client.callTool({ name, arguments: args, ...(key ? { _meta: { [KEY_META]: key } } : {}) }),
  elicitations: () => elicitations,
});
report.protocolVersion = client.transport?.protocolVersion ?? null;
report.capabilities = client.getServerCapabilities();
// A server that crashed on purpose lists nothing.
report.tools = await client.listTools().then((r) => r.tools, () => null);
console.log(JSON.stringify(report));
await client.close().catch(() => {});
