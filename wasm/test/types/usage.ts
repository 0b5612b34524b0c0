// Compiled with `tsc -p test/types` (strict): the hand-written index.d.ts must accept
// every documented use and refuse the misuses marked @ts-expect-error.
import {
  canonicalize,
  createIdempotency,
  d1Schema,
  decodeRecord,
  fingerprint,
  IdemkitError,
  memoryAdapter,
  parseKey,
  type Adapter,
  type Claim,
  type RecordView,
} from "idemkit";

const text: string = canonicalize(new Uint8Array([91, 93]), { profile: "rfc8785" });
const fp: string = fingerprint("{}", { operation: "x", schemaVersion: 2, include: ["/a"], contentType: "application/json" });
const key: string = parseKey('"k"');
// @ts-expect-error profiles are "strict" or "rfc8785"
canonicalize("[]", { profile: "loose" });

const custom: Adapter<number> = {
  get: async () => null,
  insert: async () => ({ version: 1 }),
  update: async (_id, _record, version) => ({ version: version + 1 }),
};

const idem = createIdempotency({
  adapter: memoryAdapter(),
  operation: "payments.capture",
  effect: "external",
  tenant: (request) => request.headers.get("x-tenant"),
  policy: { leaseMs: 10_000, mismatchStatus: 409, store: "everything" },
  fingerprint: { exclude: ["/request_id"] },
});
// @ts-expect-error effect is "local" or "external"
createIdempotency({ adapter: custom, operation: "x", effect: "maybe", tenant: () => null });

async function flow(): Promise<void> {
  const response: Response = await idem.handle(new Request("https://x.test"), async () => new Response("ok"));
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

void text;
void fp;
void d1Schema("t");
void flow;
