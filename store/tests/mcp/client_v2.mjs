// The scenarios through the SDK v2 client (`@modelcontextprotocol/client`)
// with version negotiation `auto`: server/discover, 2026-07-28 when the
// server offers it.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { KEY_META, args, droppingFetch, run } from './scenarios.mjs';

const { url, scenario, marker } = args();
let elicitations = 0;
const client = new Client(
  { name: 'idemkit-test-v2', version: '2.0.0' },
  { versionNegotiation: { mode: 'auto' }, capabilities: { elicitation: { form: {} } } },
);
client.setRequestHandler('elicitation/create', async () => {
  elicitations += 1;
  return { action: 'accept', content: { confirm: true } };
});
await client.connect(new StreamableHTTPClientTransport(url, { fetch: droppingFetch(scenario === "lost_response" ? `${marker}-key` : null) }));
const report = await run(scenario, marker, {
  call: (name, args, key) =>
    client.callTool({ name, arguments: args, ...(key ? { _meta: { [KEY_META]: key } } : {}) }),
  elicitations: () => elicitations,
});
report.era = client.getProtocolEra();
report.protocolVersion = client.getNegotiatedProtocolVersion();
report.discover = client.getDiscoverResult() ?? null;
report.capabilities = client.getServerCapabilities();
// A server that crashed on purpose lists nothing.
report.tools = await client.listTools().then((r) => r.tools, () => null);
console.log(JSON.stringify(report));
await client.close().catch(() => {});
