//! Which configured route a request is, decided the way the routers behind a
//! proxy decide it: a variant of a protected path (`/accounts/A/withdraw/`,
//! `//accounts/A/withdraw`, `/Accounts/A/withdraw`, `/accounts/A/withdraw;x=1`,
//! `/accounts/A/./withdraw`, `/accounts/%41/withdraw`) reaches the same
//! handler in Express, Spring or most routers, so it is the same route here:
//! claimed, fingerprinted and forwarded under one normalized path. A path
//! whose meaning depends on the router (an encoded `/` or `\`, a NUL, a
//! malformed escape) is refused when one of its readings is a route, never
//! passed through.

use std::borrow::Cow;

use super::config::{PathVariants, Route};

/// One segment of a template (config.rs checked the syntax).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// `{name}`: any one segment.
    Parameter,
    /// `{*name}`, last: the rest of the path.
    Rest,
}

impl Segment {
    /// Routers prefer a literal to a parameter, a parameter to the rest.
    fn rank(&self) -> u8 {
        match self {
            Segment::Literal(_) => 0,
            Segment::Parameter => 1,
            Segment::Rest => 2,
        }
    }
}

/// One configured route's template.
#[derive(Debug)]
struct Template {
    method: http::Method,
    segments: Vec<Segment>,
    case_sensitive: bool,
    variants: PathVariants,
}

/// The configured routes' templates, in configuration order.
#[derive(Debug, Default)]
pub(crate) struct RouteTable {
    templates: Vec<Template>,
}

/// What a request is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// No configured route: forwarded as it came.
    PassThrough,
    /// Configured route `index`, under `path` (the template's own spelling of
    /// its literal segments, the request's of its parameters).
    Route { index: usize, path: String },
    /// Refused (400), never forwarded.
    Refused(Refusal),
}

/// Why a path was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Routers read it differently, and one reading is a configured route.
    Ambiguous,
    /// A variant of a route configured with `path_variants = "refuse"`; the
    /// route's own spelling of it.
    Variant { canonical: String },
}

fn parse_template(path: &str) -> Vec<Segment> {
    path.split('/')
        .filter(|segment| !segment.is_empty())
        .map(|segment| {
            if segment.starts_with("{*") {
                Segment::Rest
            } else if segment.starts_with('{') {
                Segment::Parameter
            } else {
                Segment::Literal(segment.to_owned())
            }
        })
        .collect()
}

impl RouteTable {
    pub(crate) fn new<'a>(routes: impl IntoIterator<Item = &'a Route>) -> RouteTable {
        RouteTable {
            templates: routes
                .into_iter()
                .map(|route| Template {
                    method: route.method.clone(),
                    segments: parse_template(&route.path),
                    case_sensitive: route.case_sensitive,
                    variants: route.path_variants,
                })
                .collect(),
        }
    }

    /// Which route `method` and `raw_path` (as received, still
    /// percent-encoded) are.
    pub(crate) fn resolve(&self, method: &http::Method, raw_path: &str) -> Resolved {
        // Most pass-through requests stop here: no route has their method.
        if !self.templates.iter().any(|t| t.method == *method) {
            return Resolved::PassThrough;
        }
        let Some(readings) = read(raw_path) else {
            return Resolved::PassThrough;
        };
        match readings {
            Readings::One(segments) => match self.best(method, &segments) {
                None => Resolved::PassThrough,
                Some(index) => {
                    let path = self.spelled(index, &segments);
                    match self.templates.get(index).map(|t| t.variants) {
                        Some(PathVariants::Refuse) if path != raw_path => {
                            Resolved::Refused(Refusal::Variant { canonical: path })
                        }
                        _ => Resolved::Route { index, path },
                    }
                }
            },
            Readings::Two { split, kept } => {
                if self.best(method, &split).is_some() || self.best(method, &kept).is_some() {
                    Resolved::Refused(Refusal::Ambiguous)
                } else {
                    Resolved::PassThrough
                }
            }
        }
    }

    /// The most specific template of `method` that `segments` match.
    fn best(&self, method: &http::Method, segments: &[Cow<'_, str>]) -> Option<usize> {
        self.templates
            .iter()
            .enumerate()
            .filter(|(_, t)| t.method == *method && t.matches(segments))
            .min_by(|(_, a), (_, b)| {
                let ranks = |t: &Template| t.segments.iter().map(Segment::rank).collect::<Vec<_>>();
                ranks(a).cmp(&ranks(b))
            })
            .map(|(index, _)| index)
    }

    /// `segments` as route `index` spells its literal segments.
    fn spelled(&self, index: usize, segments: &[Cow<'_, str>]) -> String {
        let template = self
            .templates
            .get(index)
            .map_or(&[][..], |t| &t.segments[..]);
        let mut path = String::with_capacity(segments.iter().map(|s| s.len() + 1).sum());
        for (i, segment) in segments.iter().enumerate() {
            path.push('/');
            match template.get(i) {
                Some(Segment::Literal(literal)) => path.push_str(literal),
                _ => path.push_str(segment),
            }
        }
        if path.is_empty() {
            path.push('/');
        }
        path
    }
}

impl Template {
    fn matches(&self, segments: &[Cow<'_, str>]) -> bool {
        let mut given = segments.iter();
        for expected in &self.segments {
            match (expected, given.next()) {
                // The rest, even none of it: a router's catch-all at the end of
                // a path (`/files/`) is the route too.
                (Segment::Rest, _) => return true,
                (_, None) => return false,
                (Segment::Parameter, Some(_)) => {}
                (Segment::Literal(literal), Some(segment)) => {
                    let same = if self.case_sensitive {
                        literal == segment
                    } else {
                        literal.eq_ignore_ascii_case(segment)
                    };
                    if !same {
                        return false;
                    }
                }
            }
        }
        given.next().is_none()
    }
}

/// A path's segments after normalization, once or (for an ambiguous path) in
/// both readings.
enum Readings<'a> {
    One(Vec<Cow<'a, str>>),
    /// An encoded `/` or `\` (or a raw `\`) splits the segment in one reading
    /// and is data in the other; a NUL or a malformed escape is kept as data.
    Two {
        split: Vec<Cow<'a, str>>,
        kept: Vec<Cow<'a, str>>,
    },
}

/// Whether an escape's byte is an unreserved character (RFC 3986 §2.3), which
/// every router decodes: `%41` is `A`.
fn unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

fn hex(byte: u8) -> Option<u8> {
    char::from(byte)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// The normalized segments of `raw`: `;` parameters dropped from each segment
/// (Servlet containers do), unreserved escapes decoded and the others
/// upper-cased (RFC 3986 §6.2.2), empty segments (`//`, a trailing `/`) and
/// dot segments removed (§5.2.4). `None` for a target that is not a path
/// (`*`).
fn read(raw: &str) -> Option<Readings<'_>> {
    if !raw.starts_with('/') {
        return None;
    }
    let clean = !raw.bytes().any(|b| matches!(b, b'%' | b';' | b'\\'))
        && !raw.contains("//")
        && !raw.ends_with('/')
        || raw == "/";
    if clean && !raw.split('/').any(|s| s == "." || s == "..") {
        // Nothing to normalize: the segments as they are, borrowed.
        return Some(Readings::One(
            raw.split('/')
                .filter(|s| !s.is_empty())
                .map(Cow::Borrowed)
                .collect(),
        ));
    }
    let (split, ambiguous_split) = normalize(raw, true);
    if !ambiguous_split {
        return Some(Readings::One(split));
    }
    let (kept, _) = normalize(raw, false);
    Some(Readings::Two { split, kept })
}

/// One reading of `raw`; `split_encoded` says whether an encoded (or raw) `\`
/// or an encoded `/` separates segments. Also says whether anything in the
/// path was ambiguous.
fn normalize(raw: &str, split_encoded: bool) -> (Vec<Cow<'_, str>>, bool) {
    let mut ambiguous = false;
    let mut out: Vec<Cow<'_, str>> = Vec::new();
    let push = |segment: String, out: &mut Vec<Cow<'_, str>>| match segment.as_str() {
        "" | "." => {}
        ".." => {
            out.pop();
        }
        _ => out.push(Cow::Owned(segment)),
    };
    for raw_segment in raw.split('/') {
        let without_params = raw_segment.split(';').next().unwrap_or_default();
        let bytes = without_params.as_bytes();
        let mut segment = String::with_capacity(bytes.len());
        let mut i = 0;
        while let Some(&byte) = bytes.get(i) {
            if byte == b'\\' {
                ambiguous = true;
                if split_encoded {
                    push(std::mem::take(&mut segment), &mut out);
                } else {
                    segment.push_str("%5C");
                }
                i += 1;
                continue;
            }
            if byte != b'%' {
                if byte.is_ascii() {
                    segment.push(char::from(byte));
                } else {
                    // Not in a URI as received; spelled as the escape it means.
                    segment.push_str(&format!("%{byte:02X}"));
                }
                i += 1;
                continue;
            }
            let escape = bytes
                .get(i + 1)
                .and_then(|&h| hex(h))
                .zip(bytes.get(i + 2).and_then(|&l| hex(l)))
                .map(|(h, l)| h << 4 | l);
            match escape {
                None => {
                    // Malformed: a router refuses it or reads it its own way.
                    ambiguous = true;
                    segment.push('%');
                    i += 1;
                }
                Some(decoded) => {
                    i += 3;
                    if unreserved(decoded) {
                        segment.push(char::from(decoded));
                    } else if matches!(decoded, b'/' | b'\\') {
                        ambiguous = true;
                        if split_encoded {
                            push(std::mem::take(&mut segment), &mut out);
                        } else {
                            segment.push_str(&format!("%{decoded:02X}"));
                        }
                    } else {
                        ambiguous |= decoded == 0;
                        segment.push_str(&format!("%{decoded:02X}"));
                    }
                }
            }
        }
        push(segment, &mut out);
    }
    (out, ambiguous)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::config::Timeouts;
    use idemkit::core::fingerprint::{ContentKind, FingerprintSpec};
    use idemkit::core::machine::Policy;
    use idemkit::core::record::EffectKind;
    use idemkit::http::OnDisconnect;
    use std::time::Duration;

    fn route(method: &str, path: &str) -> Route {
        let every = Duration::from_secs(1);
        Route {
            method: method.parse().unwrap(),
            path: path.to_owned(),
            operation: "op".to_owned(),
            effect: EffectKind::External,
            required: true,
            spec: FingerprintSpec::new(ContentKind::Json),
            policy: Policy::default(),
            path_variants: PathVariants::Normalize,
            case_sensitive: false,
            forward_key: true,
            timeouts: Timeouts {
                connect: every,
                answer: every,
                body_idle: every,
            },
            max_execution: None,
            wait: None,
            max_wait: None,
            max_stored_response_bytes: None,
            body_limit: None,
            store_retry_after: None,
            on_disconnect: OnDisconnect::Finish,
            replayed_headers: None,
        }
    }

    fn table() -> RouteTable {
        RouteTable::new(&[
            route("POST", "/accounts/{account}/withdraw"),
            route("POST", "/files/{*rest}"),
            route("POST", "/accounts/me/withdraw"),
            route("POST", "/"),
        ])
    }

    fn at(index: usize, path: &str) -> Resolved {
        Resolved::Route {
            index,
            path: path.to_owned(),
        }
    }

    #[test]
    fn every_variant_of_a_route_is_the_route_under_one_path() {
        let t = table();
        let post = http::Method::POST;
        for variant in [
            "/accounts/A/withdraw",
            "/accounts/A/withdraw/",
            "//accounts/A/withdraw",
            "/Accounts/A/withdraw",
            "/ACCOUNTS/A/WITHDRAW",
            "/accounts/A/withdraw;x=1",
            "/accounts/A;jsessionid=1/withdraw",
            "/accounts/A/./withdraw",
            "/accounts/A/x/../withdraw",
            "/accounts/%41/withdraw",
            "/accounts/A/%2e/withdraw",
            "/../accounts/A/withdraw",
            "/accounts///A//withdraw//",
        ] {
            assert_eq!(
                t.resolve(&post, variant),
                at(0, "/accounts/A/withdraw"),
                "{variant}"
            );
        }
        // The parameter keeps its case and its other escapes (upper-cased).
        assert_eq!(
            t.resolve(&post, "/accounts/a/withdraw"),
            at(0, "/accounts/a/withdraw")
        );
        assert_eq!(
            t.resolve(&post, "/accounts/caf%c3%a9/withdraw"),
            at(0, "/accounts/caf%C3%A9/withdraw")
        );
        // A literal beats a parameter, whatever the order of the table.
        assert_eq!(
            t.resolve(&post, "/accounts/ME/withdraw/"),
            at(2, "/accounts/me/withdraw")
        );
        assert_eq!(t.resolve(&post, "/files/a/b"), at(1, "/files/a/b"));
        assert_eq!(t.resolve(&post, "/files/"), at(1, "/files"));
        assert_eq!(t.resolve(&post, "/"), at(3, "/"));
        assert_eq!(t.resolve(&post, "/./"), at(3, "/"));
    }

    #[test]
    fn other_paths_and_methods_pass_through() {
        let t = table();
        for path in [
            "/accounts/A",
            "/accounts/A/withdraw/more",
            "/accounts/A/deposit",
            "/ping",
            "*",
        ] {
            assert_eq!(
                t.resolve(&http::Method::POST, path),
                Resolved::PassThrough,
                "{path}"
            );
        }
        assert_eq!(
            t.resolve(&http::Method::GET, "/accounts/A/withdraw/"),
            Resolved::PassThrough
        );
    }

    #[test]
    fn a_path_routers_read_differently_is_refused_when_a_reading_is_a_route() {
        let t = table();
        let post = http::Method::POST;
        for ambiguous in [
            "/accounts/A%2Fwithdraw",
            "/accounts%2fA/withdraw",
            "/accounts/A%2FB/withdraw",
            "/accounts/A%5Cx/withdraw",
            "/accounts\\A\\withdraw",
            "/accounts/A%00/withdraw",
            "/accounts/A%zz/withdraw",
            "/accounts/%/withdraw",
        ] {
            assert_eq!(
                t.resolve(&post, ambiguous),
                Resolved::Refused(Refusal::Ambiguous),
                "{ambiguous}"
            );
        }
        // No reading is a route: nothing of ours to protect.
        assert_eq!(t.resolve(&post, "/elsewhere/a%2Fb"), Resolved::PassThrough);
    }

    #[test]
    fn case_sensitive_routes_and_refused_variants() {
        let mut strict = route("POST", "/accounts/{account}/withdraw");
        strict.case_sensitive = true;
        strict.path_variants = PathVariants::Refuse;
        let t = RouteTable::new(&[strict]);
        let post = http::Method::POST;
        assert_eq!(
            t.resolve(&post, "/accounts/A/withdraw"),
            at(0, "/accounts/A/withdraw")
        );
        assert_eq!(
            t.resolve(&post, "/Accounts/A/withdraw"),
            Resolved::PassThrough
        );
        assert_eq!(
            t.resolve(&post, "/accounts/A/withdraw/"),
            Resolved::Refused(Refusal::Variant {
                canonical: "/accounts/A/withdraw".to_owned()
            })
        );
    }

    #[test]
    fn no_routes_match_nothing() {
        assert_eq!(
            RouteTable::new(&[]).resolve(&http::Method::POST, "/anything"),
            Resolved::PassThrough
        );
    }
}
