//! A plain reference model of JSON values, with a renderer that spells one
//! value in many equivalent ways (member order, whitespace, escapes, number
//! spelling), for the property tests.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test helpers"
)]

use std::collections::BTreeMap;

use proptest::prelude::*;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum V {
    Null,
    Bool(bool),
    /// Compared with f64 `==`: two finite doubles are equal iff their exact
    /// decimal values are (and -0 == 0, which JCS also merges).
    Num(f64),
    Str(String),
    Arr(Vec<V>),
    Obj(BTreeMap<String, V>),
}

fn any_char() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => proptest::char::range('a', 'e'),
        1 => proptest::char::range('\u{0}', '\u{7f}'),
        1 => proptest::char::range('\u{e000}', '\u{f8ff}'), // BMP private use
        1 => proptest::char::range('\u{10000}', '\u{10ffff}'), // astral
        1 => any::<char>(),
        1 => Just('"'),
        1 => Just('\\'),
        1 => Just('/'),
    ]
}

pub(crate) fn any_string() -> impl Strategy<Value = String> {
    proptest::collection::vec(any_char(), 0..6).prop_map(|c| c.into_iter().collect())
}

pub(crate) fn any_number() -> impl Strategy<Value = f64> {
    prop_oneof![
        (-1000i64..1000).prop_map(|i| i as f64),
        any::<f64>().prop_filter("finite", |f| f.is_finite()),
        Just(0.0),
        Just(-0.0),
        Just(9007199254740992.0),
        Just(1e21),
        Just(1e-7),
        Just(5e-324),
    ]
}

pub(crate) fn any_value() -> impl Strategy<Value = V> {
    let leaf = prop_oneof![
        Just(V::Null),
        any::<bool>().prop_map(V::Bool),
        any_number().prop_map(V::Num),
        any_string().prop_map(V::Str),
    ];
    leaf.prop_recursive(6, 48, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(V::Arr),
            proptest::collection::btree_map(any_string(), inner, 0..5).prop_map(V::Obj),
        ]
    })
}

/// A tiny deterministic RNG so one seed gives one spelling.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

fn ws(out: &mut String, rng: &mut Rng) {
    for _ in 0..rng.below(3) {
        out.push([' ', '\t', '\n', '\r'][rng.below(4) as usize]);
    }
}

/// Spells `v` as JSON text. `Rng(0)`-style seeds give arbitrary spellings; every
/// spelling is the same JSON value.
pub(crate) fn render(v: &V, rng: &mut Rng) -> String {
    let mut out = String::new();
    ws(&mut out, rng);
    render_into(v, rng, &mut out);
    ws(&mut out, rng);
    out
}

fn render_into(v: &V, rng: &mut Rng, out: &mut String) {
    match v {
        V::Null => out.push_str("null"),
        V::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        V::Num(f) => out.push_str(&spell_number(*f, rng)),
        V::Str(s) => spell_string(s, rng, out),
        V::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(out, rng);
                render_into(item, rng, out);
                ws(out, rng);
            }
            if items.is_empty() {
                ws(out, rng);
            }
            out.push(']');
        }
        V::Obj(members) => {
            let mut order: Vec<(&String, &V)> = members.iter().collect();
            // Fisher-Yates with the seeded RNG.
            for i in (1..order.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                order.swap(i, j);
            }
            out.push('{');
            for (i, (k, val)) in order.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ws(out, rng);
                spell_string(k, rng, out);
                ws(out, rng);
                out.push(':');
                ws(out, rng);
                render_into(val, rng, out);
                ws(out, rng);
            }
            if order.is_empty() {
                ws(out, rng);
            }
            out.push('}');
        }
    }
}

fn hex4(out: &mut String, unit: u16, upper: bool) {
    if upper {
        out.push_str(&format!("\\u{unit:04X}"));
    } else {
        out.push_str(&format!("\\u{unit:04x}"));
    }
}

pub(crate) fn spell_string(s: &str, rng: &mut Rng, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        let must = c == '"' || c == '\\' || (c as u32) < 0x20;
        if !must && !rng.chance(4) {
            out.push(c);
            continue;
        }
        let short = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '/' => Some("\\/"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            _ => None,
        };
        match short {
            Some(e) if rng.chance(2) => out.push_str(e),
            _ => {
                let upper = rng.chance(2);
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    hex4(out, *unit, upper);
                }
            }
        }
    }
    out.push('"');
}

/// Exact decimal digits and exponent of the shortest ECMAScript form of `f`:
/// `f == digits × 10^exp` exactly for the decimal the JCS output denotes.
pub(crate) fn shortest(f: f64) -> (bool, String, i64) {
    decimal_parts(&idemkit_core::json::format_number(f).unwrap())
}

/// `(negative, significant digits without leading/trailing zeros, exponent)`
/// of a JSON number literal; zero gives `(false, "", 0)`.
pub(crate) fn decimal_parts(s: &str) -> (bool, String, i64) {
    let neg = s.starts_with('-');
    let s = s.trim_start_matches('-');
    let (mant, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i64>().unwrap()),
        None => (s, 0),
    };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let mut digits: String = format!("{int}{frac}");
    let mut exp = exp - frac.len() as i64;
    let lead = digits.len() - digits.trim_start_matches('0').len();
    digits.drain(..lead);
    while digits.ends_with('0') {
        digits.pop();
        exp += 1;
    }
    if digits.is_empty() {
        return (false, String::new(), 0);
    }
    (neg, digits, exp)
}

/// One of many literals with exactly the value of `f`'s shortest form.
pub(crate) fn spell_number(f: f64, rng: &mut Rng) -> String {
    let (neg, digits, exp) = shortest(f);
    let mut out = String::new();
    if digits.is_empty() {
        if rng.chance(2) {
            out.push('-');
        }
        out.push('0');
        if rng.chance(2) {
            out.push_str(&".000"[..2 + rng.below(3) as usize]);
        }
        if rng.chance(2) {
            out.push_str(&format!("e{}", rng.below(20) as i64 - 10));
        }
        return out;
    }
    if neg {
        out.push('-');
    }
    let zeros = rng.below(4) as usize;
    let all = format!("{digits}{}", "0".repeat(zeros));
    let point = rng.below(all.len() as u64 + 1) as usize;
    let (int, frac) = all.split_at(point);
    // value = all × 10^(exp - zeros), and the point moves frac.len() places.
    let e = exp - zeros as i64 + frac.len() as i64;
    if int.is_empty() {
        out.push('0');
    } else {
        out.push_str(int);
    }
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    if e != 0 || rng.chance(3) {
        out.push(if rng.chance(2) { 'e' } else { 'E' });
        if e >= 0 && rng.chance(2) {
            out.push('+');
        }
        out.push_str(&e.to_string());
    }
    out
}

/// A different value: one leaf changed (a number to its neighbouring double, a
/// string extended, a boolean flipped, a member or element added).
pub(crate) fn mutate(v: &V, rng: &mut Rng) -> V {
    match v {
        V::Null => V::Bool(false),
        V::Bool(b) => V::Bool(!b),
        V::Num(f) => {
            let g = if *f == 0.0 {
                5e-324
            } else {
                f64::from_bits(f.to_bits() ^ 1)
            };
            if g.is_finite() {
                V::Num(g)
            } else {
                V::Num(0.5)
            }
        }
        V::Str(s) => V::Str(format!("{s}\u{0}")),
        V::Arr(items) => {
            let mut items = items.clone();
            if items.is_empty() {
                items.push(V::Null);
            } else {
                let i = rng.below(items.len() as u64) as usize;
                items[i] = mutate(&items[i], rng);
            }
            V::Arr(items)
        }
        V::Obj(members) => {
            let mut members = members.clone();
            if members.is_empty() || rng.chance(4) {
                let mut k = String::from("\u{10000}");
                while members.contains_key(&k) {
                    k.push('x');
                }
                members.insert(k, V::Null);
            } else {
                let i = rng.below(members.len() as u64) as usize;
                let k = members.keys().nth(i).unwrap().clone();
                let new = mutate(&members[&k], rng);
                members.insert(k, new);
            }
            V::Obj(members)
        }
    }
}
