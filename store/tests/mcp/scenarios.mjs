// The client side of the gateway's end-to-end scenarios, shared by the SDK v1
// and SDK v2 clients (client_v1.mjs, client_v2.mjs). Each scenario prints one
// JSON report on stdout; the Rust test asserts on it and on the server's
// execution count.

export const KEY_META = 'io.idemkit/idempotency-key';

/** A fetch that swallows the answer to the first `tools/call` carrying `key`
 * (none when `key` is null): the request reaches the server and runs, the
 * response is read to its end and thrown away, and the client sees a network
 * failure. */
export function droppingFetch(key) {
  let dropped = key === null;
  return async (url, init) => {
    const response = await fetch(url, init);
    const body = typeof init?.body === 'string' ? init.body : '';
    if (!dropped && body.includes('"tools/call"') && body.includes(key)) {
      dropped = true;
      await response.arrayBuffer();
      throw new TypeError('fetch failed: the response was lost');
    }
    return response;
  };
}

/** A tool call's outcome as plain data: the result, or the error's code and data. */
async function outcome(promise) {
  try {
    return { result: await promise };
  } catch (e) {
    return { error: { code: e.code ?? null, message: String(e.message ?? e), data: e.data ?? null } };
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Runs `scenario` through `client` (its `call(name, args, key?)`). */
export async function run(scenario, marker, client) {
  const key = `${marker}-key`;
  const book = { customer: marker, slot: 's-1' };
  switch (scenario) {
    case 'lost_response': {
      const first = await outcome(client.call('book', book, key));
      const retry = await outcome(client.call('book', book, key));
      return { first, retry };
    }
    case 'concurrent': {
      const args = { ...book, delay_ms: 400 };
      const all = await Promise.all(Array.from({ length: 50 }, () => outcome(client.call('book', args, key))));
      return { all };
    }
    case 'reuse': {
      const first = await outcome(client.call('book', book, key));
      const other = await outcome(client.call('book', { ...book, slot: 's-2' }, key));
      return { first, other };
    }
    case 'read_only': {
      const listed = await outcome(client.call('list_bookings', {}));
      return { listed };
    }
    case 'keyless': {
      const keyless = await outcome(client.call('book', book));
      const first = await outcome(client.call('note', { customer: marker, text: 'hello' }));
      const repeat = await outcome(client.call('note', { customer: marker, text: 'hello' }));
      // Past the derive window (2 s): a new call.
      await sleep(4500);
      const later = await outcome(client.call('note', { customer: marker, text: 'hello' }));
      return { keyless, first, repeat, later };
    }
    case 'input_required': {
      const first = await outcome(client.call('confirm_book', book, key));
      const retry = await outcome(client.call('confirm_book', book, key));
      return { first, retry, elicitations: client.elicitations() };
    }
    case 'crash_first': {
      const first = await outcome(client.call('book', { ...book, crash: true }, key));
      return { first };
    }
    case 'crash_retry': {
      const retry = await outcome(client.call('book', { ...book, crash: true }, key));
      return { retry };
    }
    case 'capability':
      return {};
    default:
      throw new Error(`unknown scenario ${scenario}`);
  }
}

/** `node client_*.mjs URL SCENARIO MARKER` → the scenario's arguments. */
export function args() {
  const [url, scenario, marker] = process.argv.slice(2);
  return { url: new URL(url), scenario, marker };
}
