// An MCP server for the gateway's end-to-end tests, on the official
// TypeScript SDK: v1 (`@modelcontextprotocol/sdk`, revision 2025-11-25,
// sessions) or v2 (`@modelcontextprotocol/server`, 2026-07-28, and 2025 clients
// statelessly), over Streamable HTTP or stdio. Every execution of a tool that
// changes something appends a line `tool customer slot` to $COUNT_FILE, so a
// test counts executions even across a crash and a restart.
//
//   node server.mjs v1|v2 http   → prints "listening on http://127.0.0.1:PORT/mcp" ($PORT, else any)
//   node server.mjs v2 stdio
//
// Tools: book {customer, slot, delay_ms?, crash?} (crash: exit right after
// executing, before answering), list_bookings (readOnlyHint), note {customer,
// text} (for derived keys), confirm_book {customer, slot} (asks the user to
// confirm first: an elicitation pushed on the stream in v1, an
// input_required result in v2).
import { appendFileSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import * as z from 'zod/v4';

const [sdk, transport] = process.argv.slice(2);
const countFile = process.env.COUNT_FILE;

function executed(tool, customer, slot) {
  appendFileSync(countFile, `${tool} ${customer} ${slot ?? '-'}\n`);
  return readFileSync(countFile, 'utf8').split('\n').filter(Boolean).length;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function book({ customer, slot, delay_ms, crash }) {
  if (delay_ms) await sleep(delay_ms);
  const n = executed('book', customer, slot);
  if (crash) {
    // The effect happened; the answer never leaves.
    process.exit(3);
  }
  return {
    content: [{ type: 'text', text: `booked ${slot} for ${customer} (#${n})` }],
    structuredContent: { booking: `bk_${n}`, customer, slot },
  };
}

const bookShape = {
  customer: z.string(),
  slot: z.string(),
  delay_ms: z.number().optional(),
  crash: z.boolean().optional(),
};
const confirmSchema = {
  type: 'object',
  properties: { confirm: { type: 'boolean' } },
  required: ['confirm'],
};

function listBookings() {
  let lines = [];
  try {
    lines = readFileSync(countFile, 'utf8').split('\n').filter(Boolean);
  } catch {}
  return { content: [{ type: 'text', text: `${lines.length} executions` }] };
}

function note({ customer, text }) {
  const n = executed('note', customer, text);
  return { content: [{ type: 'text', text: `note #${n}` }] };
}

async function v1Server() {
  const { McpServer } = await import('@modelcontextprotocol/sdk/server/mcp.js');
  const server = new McpServer({ name: 'idemkit-test-v1', version: '1.0.0' });
  server.registerTool('book', { description: 'Book a slot', inputSchema: bookShape }, book);
  server.registerTool(
    'list_bookings',
    { description: 'Count executions', inputSchema: {}, annotations: { readOnlyHint: true } },
    listBookings,
  );
  server.registerTool(
    'note',
    { description: 'Write a note', inputSchema: { customer: z.string(), text: z.string() } },
    note,
  );
  server.registerTool(
    'confirm_book',
    { description: 'Book after the user confirms', inputSchema: { customer: z.string(), slot: z.string() } },
    async ({ customer, slot }, extra) => {
      // On the call's own stream: a 2025 client may not have opened its GET stream yet.
      const answer = await server.server.elicitInput(
        { message: `Book ${slot} for ${customer}?`, requestedSchema: confirmSchema },
        { relatedRequestId: extra.requestId },
      );
      if (answer.action !== 'accept' || answer.content?.confirm !== true) {
        return { content: [{ type: 'text', text: 'not booked' }], isError: true };
      }
      return book({ customer, slot });
    },
  );
  return server;
}

async function v2Factory() {
  const { McpServer, inputRequired, acceptedContent } = await import('@modelcontextprotocol/server');
  return () => {
    const server = new McpServer({ name: 'idemkit-test-v2', version: '2.0.0' });
    server.registerTool('book', { description: 'Book a slot', inputSchema: z.object(bookShape) }, book);
    server.registerTool(
      'list_bookings',
      { description: 'Count executions', inputSchema: z.object({}), annotations: { readOnlyHint: true } },
      listBookings,
    );
    server.registerTool(
      'note',
      { description: 'Write a note', inputSchema: z.object({ customer: z.string(), text: z.string() }) },
      note,
    );
    server.registerTool(
      'confirm_book',
      {
        description: 'Book after the user confirms',
        inputSchema: z.object({ customer: z.string(), slot: z.string() }),
      },
      async ({ customer, slot }, ctx) => {
        const confirmed = acceptedContent(
          ctx.mcpReq.inputResponses,
          'confirm',
          z.object({ confirm: z.boolean() }),
        );
        if (confirmed?.confirm !== true) {
          return inputRequired({
            inputRequests: {
              confirm: inputRequired.elicit({
                message: `Book ${slot} for ${customer}?`,
                requestedSchema: confirmSchema,
              }),
            },
          });
        }
        return book({ customer, slot });
      },
    );
    return server;
  };
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks);
}

function listen(handler) {
  const server = http.createServer((req, res) => {
    handler(req, res).catch((e) => {
      console.error(e);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
  });
  server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
    console.log(`listening on http://127.0.0.1:${server.address().port}/mcp`);
  });
}

if (sdk === 'v1' && transport === 'http') {
  const { StreamableHTTPServerTransport } = await import('@modelcontextprotocol/sdk/server/streamableHttp.js');
  const { isInitializeRequest } = await import('@modelcontextprotocol/sdk/types.js');
  const sessions = new Map();
  listen(async (req, res) => {
    const sessionId = req.headers['mcp-session-id'];
    const body = req.method === 'POST' ? JSON.parse((await readBody(req)).toString() || 'null') : undefined;
    let t = sessionId ? sessions.get(sessionId) : undefined;
    if (!t && req.method === 'POST' && isInitializeRequest(body)) {
      t = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => sessions.set(id, t),
      });
      t.onclose = () => t.sessionId && sessions.delete(t.sessionId);
      await (await v1Server()).connect(t);
    }
    if (!t) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null }));
      return;
    }
    await t.handleRequest(req, res, body);
  });
} else if (sdk === 'v2' && transport === 'http') {
  const { createMcpHandler } = await import('@modelcontextprotocol/server');
  const handler = createMcpHandler(await v2Factory());
  listen(async (req, res) => {
    const body = ['GET', 'HEAD'].includes(req.method) ? undefined : await readBody(req);
    const response = await handler.fetch(
      new Request(`http://${req.headers.host}${req.url}`, { method: req.method, headers: req.headers, body }),
    );
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (response.body) {
      for await (const chunk of response.body) res.write(chunk);
    }
    res.end();
  });
} else if (sdk === 'v2' && transport === 'stdio') {
  const { serveStdio } = await import('@modelcontextprotocol/server/stdio');
  serveStdio(await v2Factory());
} else {
  console.error('usage: node server.mjs v1|v2 http | v2 stdio');
  process.exit(64);
}
