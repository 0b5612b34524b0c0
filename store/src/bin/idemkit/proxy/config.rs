//! The proxy's TOML configuration: parsed with serde (unknown keys refused), then
//! checked (templates, pointers, methods, windows), every refusal naming the
//! file, the line and what is wrong.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idemkit::core::fingerprint::{ContentKind, FingerprintSpec};
use idemkit::core::http::ReplayedHeaders;
use idemkit::core::machine::{MismatchStatus, Policy, StorePolicy};
use idemkit::core::record::EffectKind;
use idemkit::http::OnDisconnect;
use serde::Deserialize;
use toml::Spanned;

/// A refused configuration: where, and what.
#[derive(Debug)]
pub(crate) struct ConfigError {
    file: PathBuf,
    /// 1-based line, when the refusal points at one.
    line: Option<usize>,
    message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.message),
            None => write!(f, "{}: {}", self.file.display(), self.message),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<Spanned<String>>,
    upstream: Option<Spanned<String>>,
    admin: Option<Spanned<String>>,
    admin_token: Option<String>,
    /// Pass-through requests (and routes without their own) wait this long.
    upstream_timeout_ms: Option<u64>,
    gc_interval_ms: Option<u64>,
    /// Worker threads (default: one per CPU).
    workers: Option<Spanned<usize>>,
    store: Spanned<StoreSection>,
    tenant: Spanned<TenantSection>,
    #[serde(default)]
    routes: Vec<Spanned<RouteSection>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreSection {
    path: Option<PathBuf>,
    postgres: Option<String>,
    /// PostgreSQL only: the schema holding idemkit's tables.
    schema: Option<String>,
    /// PostgreSQL only: connections in the pool.
    pool_size: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantSection {
    header: Option<String>,
    from: Option<String>,
    fixed: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteSection {
    method: Spanned<String>,
    path: Spanned<String>,
    operation: Spanned<String>,
    effect: Spanned<String>,
    required: Option<bool>,
    include: Option<Vec<Spanned<String>>>,
    exclude: Option<Vec<Spanned<String>>>,
    ignore_query: Option<bool>,
    ignore_query_params: Option<Vec<String>>,
    forward_key: Option<bool>,
    upstream_timeout_ms: Option<u64>,
    lease_ms: Option<u64>,
    replay_window_ms: Option<u64>,
    record_window_ms: Option<u64>,
    max_execution_ms: Option<u64>,
    max_stored_response_bytes: Option<usize>,
    /// The upstream response headers stored and replayed, instead of the defaults.
    replayed_headers: Option<Spanned<Vec<String>>>,
    body_limit_bytes: Option<usize>,
    mismatch_status: Option<Spanned<u16>>,
    store_policy: Option<Spanned<String>>,
    store_retry_after_ms: Option<u64>,
    on_disconnect: Option<Spanned<String>>,
}

/// Where records live.
#[derive(Clone, Debug)]
pub(crate) enum StoreChoice {
    Redb(PathBuf),
    #[cfg_attr(
        not(feature = "postgres"),
        allow(dead_code, reason = "refused at start without the postgres feature")
    )]
    Postgres {
        url: String,
        schema: Option<String>,
        pool_size: Option<u32>,
    },
}

/// Who the tenant of a request is.
#[derive(Clone, Debug)]
pub(crate) enum TenantRule {
    /// The value of this header, set by a gateway in front that authenticated
    /// the caller (the proxy trusts it).
    Header(String),
    /// A digest of this header's value (a credential): callers with different
    /// credentials are different tenants; the credential itself is never stored.
    DigestOf(String),
    /// Every request belongs to this tenant.
    Fixed(String),
}

/// One idempotent route.
#[derive(Clone, Debug)]
pub(crate) struct Route {
    pub(crate) method: http::Method,
    pub(crate) path: String,
    pub(crate) operation: String,
    pub(crate) effect: EffectKind,
    pub(crate) required: bool,
    pub(crate) spec: FingerprintSpec,
    pub(crate) policy: Policy,
    pub(crate) forward_key: bool,
    pub(crate) upstream_timeout: Duration,
    pub(crate) max_execution: Option<Duration>,
    pub(crate) max_stored_response_bytes: Option<usize>,
    pub(crate) replayed_headers: Option<ReplayedHeaders>,
    pub(crate) body_limit: Option<usize>,
    pub(crate) store_retry_after: Option<Duration>,
    pub(crate) on_disconnect: OnDisconnect,
}

/// The whole, checked configuration.
#[derive(Clone, Debug)]
pub(crate) struct ProxyConfig {
    pub(crate) listen: String,
    pub(crate) upstream: http::Uri,
    pub(crate) admin: Option<String>,
    pub(crate) admin_token: Option<String>,
    pub(crate) upstream_timeout: Duration,
    pub(crate) gc_interval: Duration,
    pub(crate) workers: Option<usize>,
    pub(crate) store: StoreChoice,
    pub(crate) tenant: TenantRule,
    pub(crate) routes: Vec<Route>,
}

/// The default wait for an upstream answer.
const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// How often GC runs by default.
const DEFAULT_GC_INTERVAL: Duration = Duration::from_secs(60);

struct Source<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Source<'_> {
    fn line_of(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text.get(..end).map_or(1, |before| {
            before.bytes().filter(|&b| b == b'\n').count() + 1
        })
    }

    fn at(&self, span: Option<Range<usize>>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            line: span.map(|s| self.line_of(&s)),
            message: message.into(),
        }
    }
}

/// Reads and checks `file`; `listen` and `upstream` override the file's.
pub(crate) fn load(
    file: &Path,
    listen: Option<&str>,
    upstream: Option<&str>,
) -> Result<ProxyConfig, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
        file: file.to_owned(),
        line: None,
        message: format!("cannot read the file: {e}"),
    })?;
    parse(file, &text, listen, upstream)
}

/// [`load`] on text already read.
pub(crate) fn parse(
    file: &Path,
    text: &str,
    listen: Option<&str>,
    upstream: Option<&str>,
) -> Result<ProxyConfig, ConfigError> {
    let src = Source { file, text };
    let raw: FileConfig =
        toml::from_str(text).map_err(|e| src.at(e.span(), e.message().trim().to_owned()))?;

    let listen = match (listen, &raw.listen) {
        (Some(l), _) => l.to_owned(),
        (None, Some(l)) => l.get_ref().clone(),
        (None, None) => {
            return Err(src.at(
                None,
                "missing `listen` (the address to serve on), or pass --listen",
            ));
        }
    };
    check_addr(
        &src,
        &listen,
        raw.listen.as_ref().map(Spanned::span),
        "listen",
    )?;
    let upstream_text = match (upstream, &raw.upstream) {
        (Some(u), _) => u.to_owned(),
        (None, Some(u)) => u.get_ref().clone(),
        (None, None) => {
            return Err(src.at(
                None,
                "missing `upstream` (the API behind the proxy, e.g. \"http://127.0.0.1:9000\"), or pass --upstream",
            ));
        }
    };
    let upstream_span = raw.upstream.as_ref().map(Spanned::span);
    let upstream_uri: http::Uri = upstream_text.parse().map_err(|e| {
        src.at(
            upstream_span.clone(),
            format!("upstream {upstream_text:?}: {e}"),
        )
    })?;
    if upstream_uri.scheme_str() != Some("http") || upstream_uri.authority().is_none() {
        return Err(src.at(
            upstream_span,
            format!("upstream {upstream_text:?}: expected http://host:port (TLS to the upstream is not supported)"),
        ));
    }
    if let Some(admin) = &raw.admin {
        check_addr(&src, admin.get_ref(), Some(admin.span()), "admin")?;
    }

    let store_span = raw.store.span();
    let store = match raw.store.into_inner() {
        StoreSection {
            path: Some(path),
            postgres: None,
            schema: None,
            pool_size: None,
        } => StoreChoice::Redb(path),
        StoreSection {
            path: None,
            postgres: Some(url),
            schema,
            pool_size,
        } => StoreChoice::Postgres {
            url,
            schema,
            pool_size,
        },
        _ => {
            return Err(src.at(
                Some(store_span),
                "[store] needs exactly one of `path` (an embedded redb file) or `postgres` (a URL; \
                 with it, optionally `schema` and `pool_size`)",
            ));
        }
    };
    let tenant_span = raw.tenant.span();
    let tenant = match raw.tenant.into_inner() {
        TenantSection {
            header: Some(h),
            from: None,
            fixed: None,
        } => TenantRule::Header(header_name(&src, &h, &tenant_span)?),
        TenantSection {
            header: None,
            from: Some(h),
            fixed: None,
        } => TenantRule::DigestOf(header_name(&src, &h, &tenant_span)?),
        TenantSection {
            header: None,
            from: None,
            fixed: Some(t),
        } if !t.is_empty() => TenantRule::Fixed(t),
        _ => {
            return Err(src.at(
                Some(tenant_span),
                "[tenant] needs exactly one of `header` (set by a gateway), `from` (a credential header, digested) or `fixed`",
            ));
        }
    };

    let workers = match &raw.workers {
        Some(w) if *w.get_ref() == 0 || *w.get_ref() > 256 => {
            return Err(src.at(Some(w.span()), "workers: expected 1 to 256"));
        }
        Some(w) => Some(*w.get_ref()),
        None => None,
    };
    let upstream_timeout = raw
        .upstream_timeout_ms
        .map_or(DEFAULT_UPSTREAM_TIMEOUT, Duration::from_millis);
    let mut routes = Vec::new();
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for spanned in raw.routes {
        let line = src.line_of(&spanned.span());
        let route = route(&src, spanned.into_inner(), upstream_timeout)?;
        let id = (route.method.to_string(), route.path.clone());
        if let Some(first) = seen.insert(id, line) {
            return Err(src.at(
                Some(spanned_line_span(text, line)),
                format!(
                    "route {} {} is configured twice (first at line {first})",
                    route.method, route.path
                ),
            ));
        }
        routes.push(route);
    }
    Ok(ProxyConfig {
        listen,
        upstream: upstream_uri,
        admin: raw.admin.map(Spanned::into_inner),
        admin_token: raw.admin_token.filter(|t| !t.is_empty()),
        upstream_timeout,
        gc_interval: raw
            .gc_interval_ms
            .map_or(DEFAULT_GC_INTERVAL, Duration::from_millis),
        workers,
        store,
        tenant,
        routes,
    })
}

/// A span at the start of `line` (1-based), for refusals found after parsing.
fn spanned_line_span(text: &str, line: usize) -> Range<usize> {
    let start = text
        .match_indices('\n')
        .nth(line.saturating_sub(2))
        .map_or(0, |(i, _)| if line <= 1 { 0 } else { i + 1 });
    start..start
}

fn check_addr(
    src: &Source<'_>,
    addr: &str,
    span: Option<Range<usize>>,
    what: &str,
) -> Result<(), ConfigError> {
    addr.parse::<std::net::SocketAddr>().map(drop).map_err(|_| {
        src.at(
            span,
            format!("{what} {addr:?}: expected ip:port, e.g. \"127.0.0.1:8081\""),
        )
    })
}

fn header_name(src: &Source<'_>, name: &str, span: &Range<usize>) -> Result<String, ConfigError> {
    http::HeaderName::from_bytes(name.as_bytes())
        .map(|h| h.as_str().to_owned())
        .map_err(|_| {
            src.at(
                Some(span.clone()),
                format!("[tenant] {name:?} is not a header name"),
            )
        })
}

fn route(
    src: &Source<'_>,
    r: RouteSection,
    default_timeout: Duration,
) -> Result<Route, ConfigError> {
    let method_span = r.method.span();
    let method = http::Method::from_bytes(r.method.get_ref().as_bytes())
        .ok()
        .filter(|m| axum::routing::MethodFilter::try_from(m.clone()).is_ok())
        .ok_or_else(|| {
            src.at(
                Some(method_span),
                format!(
                    "method {:?}: expected GET, POST, PUT, PATCH, DELETE, …",
                    r.method.get_ref()
                ),
            )
        })?;
    check_template(r.path.get_ref()).map_err(|why| {
        src.at(
            Some(r.path.span()),
            format!("path template {:?}: {why}", r.path.get_ref()),
        )
    })?;
    if r.operation.get_ref().is_empty() {
        return Err(src.at(Some(r.operation.span()), "operation must not be empty"));
    }
    let effect = match r.effect.get_ref().as_str() {
        "local" => EffectKind::Local,
        "external" => EffectKind::External,
        other => {
            return Err(src.at(
                Some(r.effect.span()),
                format!("effect {other:?}: expected \"local\" or \"external\""),
            ));
        }
    };
    let mut spec = FingerprintSpec::new(ContentKind::Json);
    for (list, include) in [(&r.include, true), (&r.exclude, false)] {
        for pointer in list.iter().flatten() {
            let next = if include {
                spec.clone().include(pointer.get_ref())
            } else {
                spec.clone().exclude(pointer.get_ref())
            };
            spec = next.map_err(|e| {
                src.at(
                    Some(pointer.span()),
                    format!(
                        "{} pointer {e} [{}]",
                        if include { "include" } else { "exclude" },
                        e.code()
                    ),
                )
            })?;
        }
    }
    for name in r.ignore_query_params.iter().flatten() {
        spec = spec.ignore_query_param(name);
    }
    if r.ignore_query == Some(true) {
        spec = spec.ignore_query();
    }
    let mut policy = Policy::default().with_effect(effect);
    if let Some(ms) = r.lease_ms {
        policy = policy.with_lease(Duration::from_millis(ms));
    }
    if let Some(ms) = r.replay_window_ms {
        policy = policy.with_replay_window(Duration::from_millis(ms));
    }
    if let Some(ms) = r.record_window_ms {
        policy = policy.with_record_window(Duration::from_millis(ms));
    }
    if let Some(status) = &r.mismatch_status {
        policy = policy.with_mismatch(match status.get_ref() {
            422 => MismatchStatus::UnprocessableEntity,
            409 => MismatchStatus::Conflict,
            other => {
                return Err(src.at(
                    Some(status.span()),
                    format!("mismatch_status {other}: expected 422 or 409"),
                ));
            }
        });
    }
    if let Some(store) = &r.store_policy {
        policy = policy.with_store(match store.get_ref().as_str() {
            "definitive" => StorePolicy::Definitive,
            "everything" => StorePolicy::StoreEverything,
            other => {
                return Err(src.at(
                    Some(store.span()),
                    format!("store_policy {other:?}: expected \"definitive\" or \"everything\""),
                ));
            }
        });
    }
    let on_disconnect = match r
        .on_disconnect
        .as_ref()
        .map(|v| (v.get_ref().as_str(), v.span()))
    {
        None | Some(("finish", _)) => OnDisconnect::Finish,
        Some(("cancel", _)) => OnDisconnect::Cancel,
        Some((other, span)) => {
            return Err(src.at(
                Some(span),
                format!("on_disconnect {other:?}: expected \"finish\" or \"cancel\""),
            ));
        }
    };
    let replayed_headers = match &r.replayed_headers {
        Some(names) => Some(
            ReplayedHeaders::new(names.get_ref())
                .map_err(|e| src.at(Some(names.span()), format!("replayed_headers: {e}")))?,
        ),
        None => None,
    };
    Ok(Route {
        method,
        path: r.path.into_inner(),
        operation: r.operation.into_inner(),
        effect,
        required: r.required.unwrap_or(true),
        spec,
        policy,
        forward_key: r.forward_key.unwrap_or(true),
        upstream_timeout: r
            .upstream_timeout_ms
            .map_or(default_timeout, Duration::from_millis),
        max_execution: r.max_execution_ms.map(Duration::from_millis),
        max_stored_response_bytes: r.max_stored_response_bytes,
        replayed_headers,
        body_limit: r.body_limit_bytes,
        store_retry_after: r.store_retry_after_ms.map(Duration::from_millis),
        on_disconnect,
    })
}

/// A path template: `/` segments, each literal, `{name}` or (last) `{*name}`.
fn check_template(path: &str) -> Result<(), String> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err("must start with `/`".into());
    };
    let segments: Vec<&str> = rest.split('/').collect();
    let mut names = Vec::new();
    for (i, segment) in segments.iter().enumerate() {
        if let Some(inner) = segment.strip_prefix('{') {
            let Some(name) = inner.strip_suffix('}') else {
                return Err(format!(
                    "segment {segment:?}: a parameter is a whole segment, `{{name}}`"
                ));
            };
            let (name, catch_all) = match name.strip_prefix('*') {
                Some(n) => (n, true),
                None => (name, false),
            };
            if catch_all && i + 1 != segments.len() {
                return Err(format!("`{{*{name}}}` must be the last segment"));
            }
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!("parameter name {name:?}: letters, digits and `_`"));
            }
            if names.contains(&name) {
                return Err(format!("parameter {name:?} appears twice"));
            }
            names.push(name);
        } else if segment.contains(['{', '}']) {
            return Err(format!(
                "segment {segment:?}: `{{` and `}}` only around a whole segment"
            ));
        } else if segment.is_empty() && i + 1 != segments.len() {
            return Err("empty segment (`//`)".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(text: &str) -> String {
        parse(Path::new("proxy.toml"), text, None, None)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    }

    const BASE: &str = r#"
listen = "127.0.0.1:8081"
upstream = "http://127.0.0.1:9000"
[store]
path = "proxy.redb"
[tenant]
header = "X-Tenant-Id"
"#;

    #[test]
    fn the_minimal_file_parses() {
        let c = parse(Path::new("proxy.toml"), BASE, None, None).unwrap();
        assert_eq!(c.listen, "127.0.0.1:8081");
        assert!(c.routes.is_empty());
        let c = parse(
            Path::new("p.toml"),
            BASE,
            Some("127.0.0.1:1"),
            Some("http://10.0.0.1:80"),
        )
        .unwrap();
        assert_eq!(
            (c.listen.as_str(), c.upstream.to_string().as_str()),
            ("127.0.0.1:1", "http://10.0.0.1:80/")
        );
    }

    #[test]
    fn the_example_config_loads() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/proxy.toml");
        let c = load(&file, None, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.routes.len(), 2);
        assert_eq!(c.routes[0].path, "/accounts/{account}/withdraw");
        assert_eq!(c.routes[0].effect, EffectKind::External);
        assert_eq!(c.routes[1].effect, EffectKind::Local);
        assert!(matches!(c.tenant, TenantRule::DigestOf(ref h) if h == "authorization"));
        assert_eq!(c.admin_token.as_deref(), Some("change-me"));
        assert_eq!(c.routes[0].on_disconnect, OnDisconnect::Finish);
        assert_eq!(c.routes[0].store_retry_after, Some(Duration::from_secs(1)));
    }

    #[test]
    fn templates() {
        for ok in [
            "/a",
            "/accounts/{account}/withdraw",
            "/files/{*rest}",
            "/",
            "/a/",
        ] {
            assert_eq!(check_template(ok), Ok(()), "{ok}");
        }
        for bad in [
            "a", "/a/{", "/a/{x}y", "/{*r}/x", "/{1x}", "/{a}/{a}", "/a//b", "/a}",
        ] {
            assert!(check_template(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_refusal_names_the_file_the_line_and_what() {
        let unknown = refusal(&format!("{BASE}colour = \"blue\"\n"));
        assert!(unknown.starts_with("proxy.toml:8: "), "{unknown}");
        assert!(unknown.contains("colour"), "{unknown}");

        let route = |extra: &str| {
            format!(
                "{BASE}\n[[routes]]\nmethod = \"POST\"\npath = \"/a/{{id}}\"\noperation = \"a.b\"\neffect = \"external\"\n{extra}"
            )
        };
        let bad_template = refusal(&route("").replace("/a/{id}", "/a/{id"));
        assert!(
            bad_template.starts_with("proxy.toml:11: path template"),
            "{bad_template}"
        );
        let bad_pointer = refusal(&route("exclude = [\"request_id\"]\n"));
        assert!(
            bad_pointer.starts_with("proxy.toml:14: exclude pointer"),
            "{bad_pointer}"
        );
        assert!(
            bad_pointer.contains("pointer-missing-leading-slash"),
            "{bad_pointer}"
        );
        let bad_effect = refusal(&route("").replace("\"external\"", "\"remote\""));
        assert!(
            bad_effect.starts_with("proxy.toml:13: effect"),
            "{bad_effect}"
        );
        let bad_key = refusal(&route("lease = 5\n"));
        assert!(bad_key.starts_with("proxy.toml:14: "), "{bad_key}");
        assert!(bad_key.contains("lease"), "{bad_key}");
        let twice = refusal(&format!("{}{}", route(""), &route("")[BASE.len()..]));
        assert!(twice.contains("configured twice"), "{twice}");

        let no_upstream = refusal(&BASE.replace("upstream = \"http://127.0.0.1:9000\"\n", ""));
        assert_eq!(
            no_upstream,
            "proxy.toml: missing `upstream` (the API behind the proxy, e.g. \"http://127.0.0.1:9000\"), or pass --upstream"
        );
        let tls = refusal(&BASE.replace("http://127.0.0.1:9000", "https://api.example.com"));
        assert!(tls.starts_with("proxy.toml:3: upstream"), "{tls}");
        let two_stores = refusal(&BASE.replace(
            "path = \"proxy.redb\"",
            "path = \"a\"\npostgres = \"postgres://x\"",
        ));
        assert!(
            two_stores.contains("[store] needs exactly one"),
            "{two_stores}"
        );
        let cookie = refusal(&route(
            "replayed_headers = [\"content-type\", \"Set-Cookie\"]\n",
        ));
        assert!(
            cookie.starts_with("proxy.toml:14: replayed_headers: "),
            "{cookie}"
        );
        assert!(cookie.contains("\"set-cookie\""), "{cookie}");
        let syntax = refusal("listen = \n");
        assert!(syntax.starts_with("proxy.toml:1: "), "{syntax}");
    }
}
