//! Scheme 2: the request line (method, concrete path, query) counts.
//!
//! Under scheme 1 a fingerprint framed the operation, the schema version, the
//! content kind and the body. One key sent with one body to `POST
//! /accounts/A/withdraw` and then to `POST /accounts/B/withdraw` had one
//! fingerprint, so the second request replayed A's answer and B's withdrawal
//! never happened. Scheme 2 frames the request line too.
//!
//! Scheme 2 is defined *on top of* scheme 1: the keyed hash
//! ([`CONTEXT_V2`]) of the method, the path, the query's pairs and the request's
//! scheme-1 fingerprint. So one pass over the body gives both fingerprints, and a
//! retry of a record written before the upgrade (which stores scheme 1) is still
//! compared under scheme 1 ([`RequestFingerprint::matches`]): an upgrade never
//! turns an in-flight retry into a 422.

use crate::prelude::*;

use core::fmt;

use super::Fingerprint;
use super::form::decode_form;

/// The blake3 `derive_key` context of scheme 2. Like [`super::CONTEXT`], it
/// never changes: a new encoding is a new scheme with a new context.
pub const CONTEXT_V2: &str = "idemkit 2026-12 request fingerprint v2 (request line)";

/// The scheme of a fingerprint that frames the operation, schema version,
/// content kind and body only ([`FingerprintSpec::fingerprint`](super::FingerprintSpec::fingerprint);
/// `idemkit exec` and callers without a request line use it).
pub const SCHEME_BODY: u8 = 1;

/// The scheme of a fingerprint that also frames the request line
/// ([`FingerprintSpec::fingerprint_request`](super::FingerprintSpec::fingerprint_request);
/// the middleware and the npm handler use it).
pub const SCHEME_REQUEST_LINE: u8 = 2;

/// The request line of an HTTP request, as the fingerprint sees it.
///
/// - `method` as sent (methods are case-sensitive, RFC 9110 §9.1);
/// - `path`: the concrete path as the server received it, percent-encoding
///   included (so path parameters count: `/accounts/A` ≠ `/accounts/B`);
/// - `query`: the text after `?`, without it (`None` and `""` are the same: no
///   pairs). It is decoded as `application/x-www-form-urlencoded` pairs (`+` →
///   space, `%XX`, UTF-8), sorted by name with the order of repeated names kept,
///   so `?b=2&a=1` and `?a=1&b=2` are one query and `?a=1&a=2` ≠ `?a=2&a=1`.
///   A query that does not decode (a bad `%` escape, not UTF-8) is framed as its
///   raw bytes under another tag: it is never refused, and never equal to a
///   query that does decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestLine<'a> {
    method: &'a str,
    path: &'a str,
    query: &'a str,
}

impl<'a> RequestLine<'a> {
    /// A request line; `query` is the text after `?` (without it), if any.
    ///
    /// ```
    /// use idemkit_core::fingerprint::RequestLine;
    /// let line = RequestLine::new("POST", "/accounts/A/withdraw", Some("currency=EUR"));
    /// assert_eq!(line.path(), "/accounts/A/withdraw");
    /// ```
    #[must_use]
    pub fn new(method: &'a str, path: &'a str, query: Option<&'a str>) -> Self {
        RequestLine {
            method,
            path,
            query: query.unwrap_or_default(),
        }
    }

    /// Splits an origin-form request target (`/path?query`) at its first `?`.
    ///
    /// ```
    /// use idemkit_core::fingerprint::RequestLine;
    /// let line = RequestLine::from_target("POST", "/search?q=a%20b&page=2");
    /// assert_eq!((line.path(), line.query()), ("/search", "q=a%20b&page=2"));
    /// ```
    #[must_use]
    pub fn from_target(method: &'a str, target: &'a str) -> Self {
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (target, None),
        };
        RequestLine::new(method, path, query)
    }

    /// The method.
    #[must_use]
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The path.
    #[must_use]
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The query (without `?`; empty when there is none).
    #[must_use]
    pub fn query(&self) -> &'a str {
        self.query
    }
}

/// Which parts of the query count (a route's choice; the method and the path
/// always count).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) enum QuerySelection {
    /// Every pair counts (the default).
    #[default]
    All,
    /// Pairs with these names are left out (tracking parameters, cache busters).
    Without(Vec<String>),
    /// The query does not count at all.
    Ignored,
}

impl QuerySelection {
    pub(super) fn ignore(&mut self, name: &str) {
        match self {
            QuerySelection::All => *self = QuerySelection::Without(vec![name.to_owned()]),
            QuerySelection::Without(names) => {
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_owned());
                }
            }
            QuerySelection::Ignored => {}
        }
    }
}

/// A request's fingerprint under the scheme it was computed with, and, for
/// scheme 2, the same request's scheme-1 fingerprint: what a claim compares with
/// the record's stored fingerprint.
///
/// A plain [`Fingerprint`] converts into a scheme-1 `RequestFingerprint`, so a
/// caller without a request line (a job runner, `idemkit exec`) passes what
/// [`FingerprintSpec::fingerprint`](super::FingerprintSpec::fingerprint) gives.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestFingerprint {
    scheme: u8,
    value: Fingerprint,
    body_only: Option<Fingerprint>,
}

impl RequestFingerprint {
    /// A fingerprint computed under scheme 1 (operation, schema version,
    /// content kind and body).
    #[must_use]
    pub const fn body_only(value: Fingerprint) -> Self {
        RequestFingerprint {
            scheme: SCHEME_BODY,
            value,
            body_only: None,
        }
    }

    /// A scheme-2 fingerprint (`value`) with the same request's scheme-1
    /// fingerprint (`body_only`), which records written before scheme 2 are
    /// compared with.
    #[must_use]
    pub const fn with_request_line(value: Fingerprint, body_only: Fingerprint) -> Self {
        RequestFingerprint {
            scheme: SCHEME_REQUEST_LINE,
            value,
            body_only: Some(body_only),
        }
    }

    /// The scheme of [`value`](Self::value); a fresh record stores it.
    #[must_use]
    pub const fn scheme(&self) -> u8 {
        self.scheme
    }

    /// The fingerprint under [`scheme`](Self::scheme); a fresh record stores it.
    #[must_use]
    pub const fn value(&self) -> Fingerprint {
        self.value
    }

    /// The scheme-1 fingerprint of the same request.
    #[must_use]
    pub const fn body_only_fingerprint(&self) -> Fingerprint {
        match self.body_only {
            Some(fp) => fp,
            None => self.value,
        }
    }

    /// Whether a record that stores `stored`, computed under `scheme`, was
    /// written for this request: compared under the record's own scheme.
    ///
    /// A scheme-1 record is compared with the scheme-1 fingerprint (records
    /// written before the request line counted keep replaying); a record of a
    /// scheme this request was not computed under (a newer one) never matches,
    /// which refuses (422) rather than replays.
    ///
    /// ```
    /// use idemkit_core::fingerprint::{ContentKind, FingerprintSpec, RequestLine, SCHEME_BODY};
    /// let spec = FingerprintSpec::new(ContentKind::Json);
    /// let a = spec.fingerprint_request("withdraw", &RequestLine::new("POST", "/accounts/A/withdraw", None), b"{}")?;
    /// let b = spec.fingerprint_request("withdraw", &RequestLine::new("POST", "/accounts/B/withdraw", None), b"{}")?;
    /// assert!(!b.matches(a.scheme(), &a.value())); // another path: another request
    /// // A record written by scheme 1 (before the upgrade) for the same body still matches.
    /// let before = spec.fingerprint("withdraw", b"{}")?;
    /// assert!(b.matches(SCHEME_BODY, &before));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn matches(&self, scheme: u8, stored: &Fingerprint) -> bool {
        if scheme == self.scheme {
            return self.value == *stored;
        }
        scheme == SCHEME_BODY && self.body_only.is_some_and(|fp| fp == *stored)
    }
}

impl From<Fingerprint> for RequestFingerprint {
    fn from(value: Fingerprint) -> Self {
        RequestFingerprint::body_only(value)
    }
}

impl fmt::Debug for RequestFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("RequestFingerprint");
        s.field("scheme", &self.scheme).field("value", &self.value);
        if let Some(fp) = &self.body_only {
            s.field("body_only", fp);
        }
        s.finish()
    }
}

/// Scheme 2 over the scheme-1 fingerprint `body_only` (length-framed fields:
/// method, path, the query's tag and content, then `body_only`).
pub(super) fn request_line_fingerprint(
    line: &RequestLine<'_>,
    query: &QuerySelection,
    body_only: &Fingerprint,
) -> Fingerprint {
    let mut h = crate::digest::FINGERPRINT_V2.hasher();
    frame(&mut h, line.method.as_bytes());
    frame(&mut h, line.path.as_bytes());
    let raw = line.query.as_bytes();
    match query {
        QuerySelection::Ignored => pairs(&mut h, &[]),
        selection => match decode_form(raw) {
            Ok(mut decoded) => {
                if let QuerySelection::Without(names) = selection {
                    decoded.retain(|(name, _)| !names.iter().any(|n| n == name));
                }
                // Stable: repeated names keep their order.
                decoded.sort_by(|a, b| a.0.cmp(&b.0));
                pairs(&mut h, &decoded);
            }
            // Never refused, never equal to a decoded query (another tag). Left-out
            // names cannot be found in it, so everything counts: at worst a 422,
            // never a wrong replay.
            Err(_) => {
                frame(&mut h, b"raw-query");
                frame(&mut h, raw);
            }
        },
    }
    frame(&mut h, body_only.as_bytes());
    Fingerprint::from_bytes(*h.finalize().as_bytes())
}

fn pairs(h: &mut blake3::Hasher, pairs: &[(String, String)]) {
    frame(h, b"query-pairs");
    frame(h, &(pairs.len() as u64).to_le_bytes());
    for (name, value) in pairs {
        frame(h, name.as_bytes());
        frame(h, value.as_bytes());
    }
}

fn frame(h: &mut blake3::Hasher, bytes: &[u8]) {
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::{ContentKind, FingerprintSpec};

    fn fp(spec: &FingerprintSpec, method: &str, target: &str, body: &[u8]) -> Fingerprint {
        spec.fingerprint_request("op", &RequestLine::from_target(method, target), body)
            .map(|f| f.value())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn method_path_and_query_each_count() {
        let spec = FingerprintSpec::new(ContentKind::Json);
        let base = fp(&spec, "POST", "/accounts/A/withdraw", b"{}");
        assert_ne!(base, fp(&spec, "POST", "/accounts/B/withdraw", b"{}"));
        assert_ne!(base, fp(&spec, "PUT", "/accounts/A/withdraw", b"{}"));
        assert_ne!(base, fp(&spec, "post", "/accounts/A/withdraw", b"{}"));
        assert_ne!(base, fp(&spec, "POST", "/accounts/A/withdraw?x=1", b"{}"));
        assert_ne!(
            base,
            fp(&spec, "POST", "/accounts/A/withdraw", b"{\"a\":1}")
        );
        // No query, an empty one and a bare `?` are the same: no pairs.
        assert_eq!(base, fp(&spec, "POST", "/accounts/A/withdraw?", b"{}"));
    }

    #[test]
    fn query_pairs_are_decoded_and_sorted_by_name_keeping_repeats_in_order() {
        let spec = FingerprintSpec::new(ContentKind::Json);
        let f = |target: &str| fp(&spec, "GET", target, b"{}");
        assert_eq!(f("/s?b=2&a=1"), f("/s?a=1&b=2"));
        assert_eq!(f("/s?q=a+b"), f("/s?q=a%20b"));
        assert_eq!(f("/s?a=1&&b=2"), f("/s?a=1&b=2"));
        assert_ne!(f("/s?a=1&a=2"), f("/s?a=2&a=1"));
        assert_eq!(f("/s?a=1&b=0&a=2"), f("/s?b=0&a=1&a=2"));
        // Framing: a name/value boundary cannot move.
        assert_ne!(f("/s?ab=c"), f("/s?a=bc"));
        assert_eq!(
            f("/s?a"),
            f("/s?a="),
            "no `=` is an empty value, as the URL standard decodes it"
        );
    }

    #[test]
    fn an_undecodable_query_counts_as_raw_bytes_and_never_equals_a_decoded_one() {
        let spec = FingerprintSpec::new(ContentKind::Json);
        let f = |target: &str| fp(&spec, "GET", target, b"{}");
        assert_ne!(f("/s?q=%zz"), f("/s?q=%25zz"));
        assert_ne!(f("/s?q=%zz"), f("/s?q=%zy"));
        assert_eq!(f("/s?q=%zz"), f("/s?q=%zz"));
        assert_ne!(f("/s?q=%ff"), f("/s?q=%fe"));
    }

    #[test]
    fn a_route_leaves_named_parameters_or_the_whole_query_out() {
        let spec = FingerprintSpec::new(ContentKind::Json)
            .ignore_query_param("utm_source")
            .ignore_query_param("_");
        let f = |target: &str| fp(&spec, "GET", target, b"{}");
        assert_eq!(f("/s?a=1&utm_source=mail&_=17"), f("/s?a=1"));
        assert_ne!(f("/s?a=1&utm_source=mail"), f("/s?a=2&utm_source=mail"));
        let ignored = FingerprintSpec::new(ContentKind::Json).ignore_query();
        let g = |target: &str| fp(&ignored, "GET", target, b"{}");
        assert_eq!(g("/s?a=1"), g("/s?b=2"));
        assert_eq!(g("/s?q=%zz"), g("/s"));
        assert_ne!(g("/s?a=1"), g("/t?a=1"), "the path still counts");
        // Leaving out the query equals a request without one under the default.
        assert_eq!(g("/s?a=1"), f("/s"));
    }

    #[test]
    fn scheme_2_differs_from_scheme_1_and_carries_it() {
        let spec = FingerprintSpec::new(ContentKind::Json);
        let line = RequestLine::new("POST", "/a", None);
        let request = spec
            .fingerprint_request("op", &line, b"{\"x\":1}")
            .unwrap_or_else(|e| panic!("{e}"));
        let body_only = spec
            .fingerprint("op", b"{ \"x\": 1 }")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(request.scheme(), SCHEME_REQUEST_LINE);
        assert_eq!(request.body_only_fingerprint(), body_only);
        assert_ne!(request.value(), body_only);
        assert!(request.matches(SCHEME_REQUEST_LINE, &request.value()));
        assert!(request.matches(SCHEME_BODY, &body_only));
        assert!(!request.matches(SCHEME_BODY, &request.value()));
        assert!(
            !request.matches(3, &request.value()),
            "a newer scheme never matches"
        );
        let plain = RequestFingerprint::from(body_only);
        assert!(plain.matches(SCHEME_BODY, &body_only));
        assert!(!plain.matches(SCHEME_REQUEST_LINE, &request.value()));
    }

    /// Pins scheme 2's bytes: stored fingerprints must never change meaning.
    #[test]
    fn scheme_2_golden_value() {
        let spec = FingerprintSpec::new(ContentKind::Json);
        let line = RequestLine::from_target("POST", "/accounts/A/withdraw?b=2&a=1");
        let got = spec
            .fingerprint_request("accounts.withdraw", &line, br#"{"amount":10}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.value().to_string(), GOLDEN_V2);
    }

    // Computed independently (Python `blake3`, the framing written out by hand from
    // docs/architecture.md) before it was pinned here.
    const GOLDEN_V2: &str = "398f37b8cec382b83905ba4e2d772c7e93e699e7737cc0d1e0a87b4eeb0188ef";
}
