//! Deterministic request bodies of three shapes, for the throughput benchmarks.
//!
//! The generator is a seeded 32-bit PRNG (mulberry32) and only concatenates text
//! built from integers and fixed tables, so `wasm/bench/fingerprint.mjs` ports it
//! line by line and produces byte-identical bodies (compare the `sha256` both print).
//! Every body is accepted by the strict RFC 8785 profile: numbers are spelled
//! with a value an IEEE double holds exactly, keys are unique, strings are valid.

/// The body sizes measured: 1 KB, 64 KB, 4 MB (a body is the first whole value
/// at or above the target; the exact length is what throughput is computed on).
pub const SIZES: [(&str, usize); 3] = [("1KB", 1 << 10), ("64KB", 64 << 10), ("4MB", 4 << 20)];

/// What a body looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Order-create style API payloads: nested objects, short strings, a few numbers,
    /// members in a non-sorted order.
    Api,
    /// Arrays of numbers: integers, decimals, and non-canonical spellings
    /// (`1.50`, `25e-1`, `3E2`) that canonicalization rewrites.
    Numbers,
    /// Long strings of non-ASCII text (Latin, Greek, CJK, emoji) with escapes.
    Unicode,
}

impl Shape {
    /// All shapes, in report order.
    pub const ALL: [Shape; 3] = [Shape::Api, Shape::Numbers, Shape::Unicode];

    /// The short name used in benchmark ids and JSON.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Shape::Api => "api",
            Shape::Numbers => "numbers",
            Shape::Unicode => "unicode",
        }
    }

    fn seed(self) -> u32 {
        match self {
            Shape::Api => 0x1de3_0001,
            Shape::Numbers => 0x1de3_0002,
            Shape::Unicode => 0x1de3_0003,
        }
    }
}

/// mulberry32: tiny, seeded, identical in JavaScript (`Math.imul`, `>>> 0`).
#[derive(Clone, Debug)]
pub struct Rng(u32);

impl Rng {
    /// A generator from `seed`.
    #[must_use]
    pub fn new(seed: u32) -> Self {
        Rng(seed)
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_add(0x6d2b_79f5);
        let mut t = self.0;
        t = (t ^ (t >> 15)).wrapping_mul(t | 1);
        t ^= t.wrapping_add((t ^ (t >> 7)).wrapping_mul(t | 61));
        t ^ (t >> 14)
    }

    /// A number in `0..n` (`n` > 0; modulo bias is irrelevant here).
    pub fn below(&mut self, n: u32) -> u32 {
        self.next_u32() % n.max(1)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        let i = self.below(items.len() as u32) as usize;
        items.get(i).copied().unwrap_or("")
    }
}

const WORDS: &[&str] = &[
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa",
];
const CURRENCIES: &[&str] = &["EUR", "USD", "GBP", "JPY", "CHF"];
const STATUSES: &[&str] = &["pending", "confirmed", "shipped", "cancelled"];
/// Code points for the unicode shape: Latin-1, Greek, Cyrillic, CJK, emoji
/// (astral, so UTF-16 surrogate pairs in JavaScript).
const CODE_POINTS: &[u32] = &[
    0xe9, 0xfc, 0xf1, 0xdf, 0x3b1, 0x3b2, 0x3c9, 0x436, 0x44f, 0x4e2d, 0x6587, 0x65e5, 0x672c,
    0x8a9e, 0xac00, 0x1f600, 0x1f680, 0x1f30d, 0x20ac, 0x2603,
];
/// Escapes written as JSON text (canonicalization turns most back into raw UTF-8).
const ESCAPES: &[&str] = &[
    "\\u00e9",
    "\\n",
    "\\t",
    "\\\"",
    "\\\\",
    "\\u4e2d",
    "\\ud83d\\ude00",
    "\\/",
    "\\u0001",
];

/// The body of `shape`, at least `target` bytes long.
#[must_use]
pub fn generate(shape: Shape, target: usize) -> Vec<u8> {
    let mut rng = Rng::new(shape.seed());
    let mut out = String::with_capacity(target + 1024);
    match shape {
        Shape::Api => api(&mut rng, target, &mut out),
        Shape::Numbers => numbers(&mut rng, target, &mut out),
        Shape::Unicode => unicode(&mut rng, target, &mut out),
    }
    out.into_bytes()
}

fn api(rng: &mut Rng, target: usize, out: &mut String) {
    out.push_str("{\"request_id\":\"req-");
    push_u32(out, rng.next_u32());
    out.push_str("\",\"customer\":{\"name\":\"");
    out.push_str(rng.pick(WORDS));
    out.push_str("\",\"id\":\"cus_");
    push_u32(out, rng.next_u32());
    out.push_str("\",\"email\":\"");
    out.push_str(rng.pick(WORDS));
    out.push_str("@example.com\"},\"currency\":\"");
    out.push_str(rng.pick(CURRENCIES));
    out.push_str("\",\"items\":[");
    let mut i: u32 = 0;
    // Close with `]}` (2 bytes) once the target is reached.
    while out.len() + 2 < target || i == 0 {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"sku\":\"");
        out.push_str(rng.pick(WORDS));
        out.push('-');
        push_u32(out, rng.below(100_000));
        out.push_str("\",\"quantity\":");
        push_u32(out, 1 + rng.below(20));
        out.push_str(",\"unit_price\":");
        push_u32(out, rng.below(100_000));
        out.push('.');
        push_u32(out, 10 + rng.below(90));
        out.push_str(",\"status\":\"");
        out.push_str(rng.pick(STATUSES));
        out.push_str("\",\"gift\":");
        out.push_str(if rng.below(2) == 0 { "false" } else { "true" });
        out.push_str(",\"note\":null,\"line\":");
        push_u32(out, i);
        out.push_str(",\"attributes\":{\"color\":\"");
        out.push_str(rng.pick(WORDS));
        out.push_str("\",\"size\":\"");
        out.push_str(rng.pick(&["S", "M", "L", "XL"]));
        out.push_str("\"}}");
        i += 1;
    }
    out.push_str("]}");
}

fn numbers(rng: &mut Rng, target: usize, out: &mut String) {
    out.push('[');
    let mut i: u32 = 0;
    while out.len() + 1 < target || i == 0 {
        if i > 0 {
            out.push(',');
        }
        let a = rng.below(1_000_000);
        let b = rng.below(1000);
        match rng.below(8) {
            0 => push_u32(out, a),
            1 => {
                out.push('-');
                push_u32(out, a + 1);
            }
            2 => {
                // A decimal with a non-zero last digit: `123.457`.
                push_u32(out, a);
                out.push('.');
                push_u32(out, 100 + b / 10 * 10 + 1 + b % 9);
            }
            3 => {
                // A trailing zero, rewritten by canonicalization: `12.50`.
                push_u32(out, a);
                out.push_str(".50");
            }
            4 => {
                // An exponent, rewritten: `25e-1`, `3E2`.
                push_u32(out, a);
                out.push_str(if b.is_multiple_of(2) { "e-2" } else { "E2" });
            }
            5 => {
                out.push_str("0.");
                push_u32(out, 1 + b % 9);
                push_u32(out, a % 1000 * 10 + 7);
            }
            6 => {
                // A large integer below 2^53.
                push_u32(out, 1 + a);
                push_u32(out, 100_000_000 + rng.below(900_000_000));
            }
            _ => push_u32(out, b),
        }
        i += 1;
    }
    out.push(']');
}

fn unicode(rng: &mut Rng, target: usize, out: &mut String) {
    out.push('{');
    let mut i: u32 = 0;
    while out.len() + 1 < target || i == 0 {
        if i > 0 {
            out.push(',');
        }
        // Unique keys, some non-ASCII, in a non-sorted order.
        out.push('"');
        let cp = CODE_POINTS
            .get(rng.below(CODE_POINTS.len() as u32) as usize)
            .copied()
            .unwrap_or(0xe9);
        out.push(char::from_u32(cp).unwrap_or('?'));
        push_u32(out, 999_999 - i);
        out.push_str("\":\"");
        let len = 8 + rng.below(56);
        for _ in 0..len {
            match rng.below(10) {
                0 => out.push_str(rng.pick(ESCAPES)),
                1 | 2 => out.push(' '),
                3 => out.push_str(rng.pick(WORDS)),
                _ => {
                    let cp = CODE_POINTS
                        .get(rng.below(CODE_POINTS.len() as u32) as usize)
                        .copied()
                        .unwrap_or(0xe9);
                    out.push(char::from_u32(cp).unwrap_or('?'));
                }
            }
        }
        out.push('"');
        i += 1;
    }
    out.push('}');
}

fn push_u32(out: &mut String, n: u32) {
    use core::fmt::Write as _;
    let _ = write!(out, "{n}");
}

/// Every body measured: `(shape, size name, bytes)`.
#[must_use]
pub fn all() -> Vec<(Shape, &'static str, Vec<u8>)> {
    let mut v = Vec::new();
    for shape in Shape::ALL {
        for (name, target) in SIZES {
            v.push((shape, name, generate(shape, target)));
        }
    }
    v
}
