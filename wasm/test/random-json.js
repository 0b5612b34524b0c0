// A seeded generator of JSON texts for the byte-identity tests: nested values,
// every string escape form, astral characters, numbers in many spellings, and a
// share of inputs the strict profile must refuse (duplicates, lone surrogates,
// inexact numbers, bad syntax), so that refusals are compared too.

/** xorshift32: tiny, seedable, the same sequence in every runtime. */
export function rng(seed) {
  let x = seed >>> 0 || 1;
  const next = () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 0x1_0000_0000;
  };
  return {
    next,
    int: (n) => Math.floor(next() * n),
    pick: (items) => items[Math.floor(next() * items.length)],
    chance: (p) => next() < p,
  };
}

const WS = ["", "", "", " ", "\n", "\t", "  ", "\r\n "];
const CHARS = ["a", "b", "z", "A", "0", " ", "é", "€", "😀", "\u2028", "\u007f", "日本", "\\", "\"", "/", "\n", "\t", "\u0000", "\u001f", "ÿ", "\ud834\udd1e"];
const KEYS = ["a", "b", "A", "aa", "", "é", "€", "😀", "\u0080", "key", "1", "z", "\ufb33", "\r", "id", "request_id"];

function ws(r) {
  return r.pick(WS);
}

function escapeChar(r, c) {
  const code = c.codePointAt(0);
  if (c === '"') return '\\"';
  if (c === "\\") return r.chance(0.5) ? "\\\\" : "\\u005c";
  if (code < 0x20) {
    const short = { "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f" }[c];
    return short && r.chance(0.6) ? short : `\\u${code.toString(16).padStart(4, r.chance(0.5) ? "0" : "0").toUpperCase()}`;
  }
  if (c === "/" && r.chance(0.5)) return "\\/";
  if (r.chance(0.15)) {
    // \u escapes, including surrogate pairs for astral characters.
    return [...c].map((ch) => {
      const cp = ch.codePointAt(0);
      if (cp > 0xffff) {
        const hi = 0xd800 + ((cp - 0x10000) >> 10);
        const lo = 0xdc00 + ((cp - 0x10000) & 0x3ff);
        return `\\u${hi.toString(16)}\\u${lo.toString(16)}`;
      }
      return `\\u${cp.toString(16).padStart(4, "0")}`;
    }).join("");
  }
  return c;
}

function string(r, text) {
  let out = '"';
  for (const c of text) out += escapeChar(r, c);
  return out + '"';
}

function randomText(r) {
  let s = "";
  const n = r.int(6);
  for (let i = 0; i < n; i++) s += r.pick(CHARS);
  return s;
}

function number(r) {
  const kind = r.int(10);
  switch (kind) {
    case 0: return String(r.int(1000) - 500);
    case 1: return `${r.int(100)}.${r.pick(["0", "00", "5", "25", "125", "1"])}`;
    case 2: return `${r.int(10)}e${r.int(40) - 20}`;
    case 3: return `${r.int(10)}.${r.int(1000)}E+${r.int(25)}`;
    case 4: return r.pick(["0", "-0", "0.0", "-0.0", "1e0", "10e-1", "1.0", "100e-2", "0e10"]);
    case 5: return String(r.next() * 10 ** (r.int(30) - 10));
    case 6: return String(Number.MAX_SAFE_INTEGER - r.int(5));
    case 7: return r.pick(["1e21", "1e-7", "123456789012345680000", "0.000001", "5e-324", "1.7976931348623157e308"]);
    case 8: return (r.next() - 0.5).toPrecision(1 + r.int(17));
    default: return String(-r.int(1e9));
  }
}

function value(r, depth) {
  const roll = r.int(depth > 4 ? 6 : 10);
  switch (roll) {
    case 0: return "null";
    case 1: return r.chance(0.5) ? "true" : "false";
    case 2: case 3: return number(r);
    case 4: case 5: return string(r, randomText(r));
    case 6: case 7: {
      const n = r.int(5);
      const items = [];
      for (let i = 0; i < n; i++) items.push(ws(r) + value(r, depth + 1) + ws(r));
      return `[${items.join(",")}${n === 0 ? ws(r) : ""}]`;
    }
    default: {
      const n = r.int(5);
      const used = new Set();
      const members = [];
      for (let i = 0; i < n; i++) {
        const key = r.pick(KEYS);
        if (used.has(key)) continue;
        used.add(key);
        members.push(`${ws(r)}${string(r, key)}${ws(r)}:${ws(r)}${value(r, depth + 1)}${ws(r)}`);
      }
      return `{${members.join(",")}}`;
    }
  }
}

// Inputs the strict profile must refuse (and some both profiles refuse).
const BAD = [
  (r) => `{"a":${number(r)},"a":1}`,
  () => `["\\ud800"]`,
  () => `["\\udc00\\ud800"]`,
  () => "[9007199254740993]",
  () => "[1e-400]",
  () => "[0.10000000000000001]",
  () => "[1e400]",
  () => "[1,]",
  () => '{"a":1}x',
  () => "[NaN]",
  () => '["\u0001"]',
  () => "\ufeff[]",
  () => "[01]",
  () => '{"\\u0061":1,"a":2}',
];

/** `count` JSON texts from `seed`; about 1 in 12 is one the strict profile refuses. */
export function randomDocuments(seed, count) {
  const r = rng(seed);
  const docs = [];
  for (let i = 0; i < count; i++) {
    docs.push(r.chance(1 / 12) ? r.pick(BAD)(r) : ws(r) + value(r, 0) + ws(r));
  }
  return docs;
}
