//! The proxy's TOML configuration: parsed with serde (unknown keys refused), then
//! checked (templates, pointers, methods, windows), every refusal naming the
//! file, the line and what is wrong.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::upstream_tls::UpstreamTls;
use crate::listen_tls::ListenTls;
use idemkit::core::fingerprint::{ContentKind, FingerprintSpec};
use idemkit::core::http::ReplayedHeaders;
use idemkit::core::machine::{MismatchStatus, Policy, StorePolicy};
use idemkit::core::record::EffectKind;
use idemkit::http::OnDisconnect;
use idemkit::store::WaitLimits;
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
    /// Serve HTTPS with this certificate chain and key (PEM); both or neither.
    tls_cert_file: Option<Spanned<PathBuf>>,
    tls_key_file: Option<Spanned<PathBuf>>,
    upstream: Option<Spanned<String>>,
    /// The PEM roots an `https://` upstream's certificate must chain to
    /// (default: Mozilla's).
    upstream_ca_file: Option<Spanned<PathBuf>>,
    admin: Option<Spanned<String>>,
    admin_token: Option<Spanned<String>>,
    admin_token_file: Option<Spanned<PathBuf>>,
    admin_insecure_no_token: Option<Spanned<bool>>,
    /// Serve the admin listener over HTTPS with this chain and key (PEM).
    admin_tls_cert_file: Option<Spanned<PathBuf>>,
    admin_tls_key_file: Option<Spanned<PathBuf>>,
    /// Where operators' resolves are recorded (default: beside a redb store).
    audit_log: Option<PathBuf>,
    /// One JSON line per answered request: a file, or `-` for stdout.
    access_log: Option<PathBuf>,
    /// Pass-through requests (and routes without their own) wait this long.
    upstream_timeout_ms: Option<u64>,
    upstream_connect_timeout_ms: Option<u64>,
    upstream_body_idle_timeout_ms: Option<u64>,
    request_body_idle_timeout_ms: Option<u64>,
    /// How long a client may take to send a request's head.
    header_read_timeout_ms: Option<Spanned<u64>>,
    max_connections: Option<Spanned<usize>>,
    /// Requests waiting for a running key's answer, in all and per key.
    max_waiters: Option<Spanned<usize>>,
    max_waiters_per_key: Option<Spanned<usize>>,
    shutdown_grace_ms: Option<u64>,
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
pub(crate) struct StoreSection {
    path: Option<PathBuf>,
    postgres: Option<String>,
    /// PostgreSQL only: the schema holding idemkit's tables.
    schema: Option<String>,
    /// PostgreSQL only: connections in the pool.
    pool_size: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TenantSection {
    header: Option<String>,
    from: Option<String>,
    fixed: Option<String>,
    /// With `from`: the key of the credential's digest.
    secret: Option<Spanned<String>>,
    secret_file: Option<Spanned<PathBuf>>,
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
    fingerprint: Option<Spanned<String>>,
    path_variants: Option<Spanned<String>>,
    case_sensitive: Option<bool>,
    forward_key: Option<bool>,
    upstream_timeout_ms: Option<u64>,
    upstream_connect_timeout_ms: Option<u64>,
    upstream_body_idle_timeout_ms: Option<u64>,
    lease_ms: Option<u64>,
    replay_window_ms: Option<u64>,
    record_window_ms: Option<u64>,
    max_execution_ms: Option<u64>,
    /// How long a retry of a running key waits when it asks nothing.
    wait_ms: Option<u64>,
    /// The longest a retry may wait (`Prefer: wait=N` is capped by it).
    max_wait_ms: Option<u64>,
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
    /// A digest of this header's value (a credential), keyed with the
    /// configured secret: callers with different credentials are different
    /// tenants; the credential itself is never stored, and without the secret
    /// the digest cannot be tested against guesses.
    DigestOf {
        header: String,
        /// blake3 key derived from the secret.
        key: [u8; 32],
    },
    /// Every request belongs to this tenant.
    Fixed(String),
}

/// What a route does with a request whose path is a variant of its own
/// (`/accounts/A/withdraw/`, `/Accounts/A/./withdraw;x=1`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PathVariants {
    /// The default: the variant is this route, claimed and forwarded under the
    /// normalized path, so a retry through any spelling replays.
    Normalize,
    /// The variant is refused (400), never forwarded.
    Refuse,
}

/// How long the proxy waits for the upstream, phase by phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// Connecting (nothing sent yet: a timeout here releases the record).
    pub(crate) connect: Duration,
    /// From writing the request to the answer's head.
    pub(crate) answer: Duration,
    /// Between two chunks of the answer's body.
    pub(crate) body_idle: Duration,
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
    pub(crate) path_variants: PathVariants,
    pub(crate) case_sensitive: bool,
    pub(crate) forward_key: bool,
    pub(crate) timeouts: Timeouts,
    pub(crate) max_execution: Option<Duration>,
    /// `wait_ms`: the wait of a retry that asks nothing (`None`: no wait).
    pub(crate) wait: Option<Duration>,
    /// `max_wait_ms`: the cap on any wait (`None`: the library's 10 s).
    pub(crate) max_wait: Option<Duration>,
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
    /// `tls_cert_file` and `tls_key_file`: the listener serves HTTPS.
    pub(crate) listen_tls: Option<ListenTls>,
    pub(crate) upstream: http::Uri,
    /// For an `https://` upstream: how its connections are encrypted and its
    /// certificate checked.
    pub(crate) upstream_tls: Option<UpstreamTls>,
    pub(crate) admin: Option<String>,
    /// `admin_tls_cert_file` and `admin_tls_key_file`: the admin listener
    /// serves HTTPS.
    pub(crate) admin_tls: Option<ListenTls>,
    /// At least [`MIN_SECRET_BYTES`]; `None` only with `admin_insecure_no_token`
    /// on a loopback address.
    pub(crate) admin_token: Option<String>,
    /// The audit log of operators' resolves (`audit_log`, or beside a redb
    /// store); `None`: the console shows records but resolves none.
    pub(crate) audit_log: Option<PathBuf>,
    /// Where each answered request's line goes (`access_log`); `None`: nowhere.
    pub(crate) access_log: Option<super::access_log::Target>,
    /// Pass-through requests' timeouts (and the routes' defaults).
    pub(crate) timeouts: Timeouts,
    pub(crate) request_body_idle: Duration,
    /// A request's head (line and headers) not complete within this closes
    /// the connection.
    pub(crate) header_read_timeout: Duration,
    pub(crate) max_connections: usize,
    /// `max_waiters` and `max_waiters_per_key`.
    pub(crate) wait_limits: WaitLimits,
    pub(crate) shutdown_grace: Duration,
    pub(crate) gc_interval: Duration,
    pub(crate) workers: Option<usize>,
    pub(crate) store: StoreChoice,
    pub(crate) tenant: TenantRule,
    pub(crate) routes: Vec<Route>,
}

/// The default wait for an upstream answer.
const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// The default wait for a connection to the upstream.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default wait between two chunks of a body, either way.
pub(crate) const DEFAULT_BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Open client connections by default.
const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// How long SIGTERM waits for running executions by default.
const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// The shortest admin token and tenant secret accepted.
pub(crate) const MIN_SECRET_BYTES: usize = 32;
/// Where the admin token comes from when the file names none.
pub(crate) const ADMIN_TOKEN_ENV: &str = "IDEMKIT_ADMIN_TOKEN";
/// Where the tenant digest's secret comes from when the file names none.
pub(crate) const TENANT_SECRET_ENV: &str = "IDEMKIT_TENANT_SECRET";

/// Reads an environment variable (a parameter, so tests choose the environment).
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;
/// How often GC runs by default.
pub(crate) const DEFAULT_GC_INTERVAL: Duration = Duration::from_secs(60);

pub(crate) struct Source<'a> {
    pub(crate) file: &'a Path,
    pub(crate) text: &'a str,
}

impl Source<'_> {
    pub(crate) fn line_of(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.text.len());
        self.text.get(..end).map_or(1, |before| {
            before.bytes().filter(|&b| b == b'\n').count() + 1
        })
    }

    pub(crate) fn at(&self, span: Option<Range<usize>>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.to_owned(),
            line: span.map(|s| self.line_of(&s)),
            message: message.into(),
        }
    }
}

/// Reads and checks `file`; `listen` and `upstream` override the file's; the
/// admin token and the tenant secret may come from the process's environment.
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
    parse(file, &text, listen, upstream, &|name| {
        std::env::var(name).ok()
    })
}

/// [`load`] on text already read, with `env` as the environment.
pub(crate) fn parse(
    file: &Path,
    text: &str,
    listen: Option<&str>,
    upstream: Option<&str>,
    env: Env<'_>,
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
    let listen_tls = crate::listen_tls::from_settings(
        crate::listen_tls::LISTENER,
        raw.tls_cert_file.as_ref().map(|f| f.get_ref().as_path()),
        raw.tls_key_file.as_ref().map(|f| f.get_ref().as_path()),
    )
    .map_err(|e| {
        let span = raw.tls_cert_file.as_ref().or(raw.tls_key_file.as_ref());
        src.at(span.map(Spanned::span), e)
    })?;
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
    if !matches!(upstream_uri.scheme_str(), Some("http" | "https"))
        || upstream_uri.authority().is_none()
    {
        return Err(src.at(
            upstream_span,
            format!("upstream {upstream_text:?}: expected http://host:port or https://host[:port]"),
        ));
    }
    let upstream_tls = UpstreamTls::for_upstream(
        &upstream_uri,
        raw.upstream_ca_file.as_ref().map(|f| f.get_ref().as_path()),
    )
    .map_err(|e| {
        let span = raw.upstream_ca_file.as_ref().map(Spanned::span);
        src.at(span.or(upstream_span), e)
    })?;
    let AdminListener {
        tls: admin_tls,
        token: admin_token,
    } = admin_listener(
        &src,
        AdminKeys {
            admin: raw.admin.as_ref(),
            admin_token: raw.admin_token.clone(),
            admin_token_file: raw.admin_token_file.clone(),
            admin_insecure_no_token: raw.admin_insecure_no_token.as_ref(),
            admin_tls_cert_file: raw.admin_tls_cert_file.as_ref(),
            admin_tls_key_file: raw.admin_tls_key_file.as_ref(),
        },
        env,
    )?;

    let store = store_choice(&src, raw.store)?;
    let tenant = tenant_rule(&src, raw.tenant, env)?;

    let workers = match &raw.workers {
        Some(w) if *w.get_ref() == 0 || *w.get_ref() > 256 => {
            return Err(src.at(Some(w.span()), "workers: expected 1 to 256"));
        }
        Some(w) => Some(*w.get_ref()),
        None => None,
    };
    let timeouts = Timeouts {
        connect: millis_or(raw.upstream_connect_timeout_ms, DEFAULT_CONNECT_TIMEOUT),
        answer: millis_or(raw.upstream_timeout_ms, DEFAULT_UPSTREAM_TIMEOUT),
        body_idle: millis_or(raw.upstream_body_idle_timeout_ms, DEFAULT_BODY_IDLE_TIMEOUT),
    };
    let max_connections = match &raw.max_connections {
        Some(m) if *m.get_ref() == 0 => {
            return Err(src.at(Some(m.span()), "max_connections: expected at least 1"));
        }
        Some(m) => *m.get_ref(),
        None => DEFAULT_MAX_CONNECTIONS,
    };
    let header_read_timeout = header_read_timeout(&src, raw.header_read_timeout_ms.as_ref())?;
    let wait_limits = wait_limits(
        &src,
        raw.max_waiters.as_ref(),
        raw.max_waiters_per_key.as_ref(),
    )?;
    let mut routes = Vec::new();
    let mut seen: BTreeMap<(String, String), usize> = BTreeMap::new();
    for spanned in raw.routes {
        let line = src.line_of(&spanned.span());
        let route = route(&src, spanned.into_inner(), timeouts)?;
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
        listen_tls,
        upstream: upstream_uri,
        upstream_tls,
        admin: raw.admin.map(Spanned::into_inner),
        admin_tls,
        admin_token,
        audit_log: audit_log(raw.audit_log, &store),
        access_log: raw.access_log.as_deref().map(super::access_log::Target::of),
        timeouts,
        request_body_idle: millis_or(raw.request_body_idle_timeout_ms, DEFAULT_BODY_IDLE_TIMEOUT),
        header_read_timeout,
        max_connections,
        wait_limits,
        shutdown_grace: millis_or(raw.shutdown_grace_ms, DEFAULT_SHUTDOWN_GRACE),
        gc_interval: raw
            .gc_interval_ms
            .map_or(DEFAULT_GC_INTERVAL, Duration::from_millis),
        workers,
        store,
        tenant,
        routes,
    })
}

/// Where operators' resolves are recorded: `audit_log` when given, else
/// beside a redb store (`proxy.redb` → `proxy.audit.jsonl`); a PostgreSQL
/// store has no file to sit beside, so its audit log must be named.
pub(crate) fn audit_log(explicit: Option<PathBuf>, store: &StoreChoice) -> Option<PathBuf> {
    explicit.or_else(|| match store {
        StoreChoice::Redb(path) => Some(path.with_extension("audit.jsonl")),
        StoreChoice::Postgres { .. } => None,
    })
}

/// The `[store]` section: exactly one of an embedded redb file or PostgreSQL.
pub(crate) fn store_choice(
    src: &Source<'_>,
    store: Spanned<StoreSection>,
) -> Result<StoreChoice, ConfigError> {
    let store_span = store.span();
    Ok(match store.into_inner() {
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
    })
}

/// The `[tenant]` section: exactly one rule naming the tenant of a request.
pub(crate) fn tenant_rule(
    src: &Source<'_>,
    tenant: Spanned<TenantSection>,
    env: Env<'_>,
) -> Result<TenantRule, ConfigError> {
    let tenant_span = tenant.span();
    Ok(match tenant.into_inner() {
        TenantSection {
            header: Some(h),
            from: None,
            fixed: None,
            secret: None,
            secret_file: None,
        } => TenantRule::Header(header_name(src, &h, &tenant_span)?),
        TenantSection {
            header: None,
            from: Some(h),
            fixed: None,
            secret,
            secret_file,
        } => TenantRule::DigestOf {
            header: header_name(src, &h, &tenant_span)?,
            key: tenant_key(src, &tenant_span, secret, secret_file, env)?,
        },
        TenantSection {
            header: None,
            from: None,
            fixed: Some(t),
            secret: None,
            secret_file: None,
        } if !t.is_empty() => TenantRule::Fixed(t),
        TenantSection {
            from: None,
            secret: Some(_),
            ..
        }
        | TenantSection {
            from: None,
            secret_file: Some(_),
            ..
        } => {
            return Err(src.at(
                Some(tenant_span),
                "[tenant] `secret` and `secret_file` go with `from` (the digested credential) only",
            ));
        }
        _ => {
            return Err(src.at(
                Some(tenant_span),
                "[tenant] needs exactly one of `header` (set by a gateway), `from` (a credential header, digested) or `fixed`",
            ));
        }
    })
}

/// `max_waiters` and `max_waiters_per_key` of the proxy's or the MCP
/// gateway's file: how many requests may wait for running keys' answers
/// (default [`WaitLimits::default`]); zero is refused (a wait that can never
/// be granted is `max_wait_ms = 0` on the routes).
pub(crate) fn wait_limits(
    src: &Source<'_>,
    total: Option<&Spanned<usize>>,
    per_key: Option<&Spanned<usize>>,
) -> Result<WaitLimits, ConfigError> {
    let defaults = WaitLimits::default();
    let read = |value: Option<&Spanned<usize>>, name: &str, default: usize| match value {
        Some(v) if *v.get_ref() == 0 => {
            Err(src.at(Some(v.span()), format!("{name}: expected at least 1")))
        }
        Some(v) => Ok(*v.get_ref()),
        None => Ok(default),
    };
    Ok(WaitLimits {
        total: read(total, "max_waiters", defaults.total)?,
        per_key: read(per_key, "max_waiters_per_key", defaults.per_key)?,
    })
}

/// `header_read_timeout_ms` of the proxy's or the MCP gateway's file: at
/// least 1 ms, [`idemkit::http::DEFAULT_HEADER_READ_TIMEOUT`] when absent.
pub(crate) fn header_read_timeout(
    src: &Source<'_>,
    ms: Option<&Spanned<u64>>,
) -> Result<Duration, ConfigError> {
    match ms {
        Some(ms) if *ms.get_ref() == 0 => Err(src.at(
            Some(ms.span()),
            "header_read_timeout_ms: expected at least 1",
        )),
        Some(ms) => Ok(Duration::from_millis(*ms.get_ref())),
        None => Ok(idemkit::http::DEFAULT_HEADER_READ_TIMEOUT),
    }
}

fn millis_or(ms: Option<u64>, default: Duration) -> Duration {
    ms.map_or(default, Duration::from_millis)
}

/// A secret from the file (`inline`), a file it names (`file`), or the
/// environment variable `env_name`: exactly one, at least [`MIN_SECRET_BYTES`]
/// long. `None` when none is given. A file's trailing line break is not part
/// of the secret.
fn secret(
    src: &Source<'_>,
    what: &str,
    inline: Option<Spanned<String>>,
    file: Option<Spanned<PathBuf>>,
    env_name: &str,
    env: Env<'_>,
) -> Result<Option<String>, ConfigError> {
    let (value, span, origin) = match (inline, file) {
        (Some(_), Some(f)) => {
            return Err(src.at(
                Some(f.span()),
                format!("{what}: give the secret inline or in a file, not both"),
            ));
        }
        (Some(v), None) => {
            let span = v.span();
            (v.into_inner(), Some(span), what.to_owned())
        }
        (None, Some(f)) => {
            let span = f.span();
            let path = f.into_inner();
            let text = std::fs::read_to_string(&path).map_err(|e| {
                src.at(
                    Some(span.clone()),
                    format!("{what}_file {}: {e}", path.display()),
                )
            })?;
            let value = text.trim_end_matches(['\n', '\r']).to_owned();
            (value, Some(span), format!("{what}_file {}", path.display()))
        }
        (None, None) => match env(env_name) {
            Some(v) => (v, None, format!("the environment variable {env_name}")),
            None => return Ok(None),
        },
    };
    if value.len() < MIN_SECRET_BYTES {
        return Err(src.at(
            span,
            format!(
                "{origin}: at least {MIN_SECRET_BYTES} bytes are needed, it has {} \
                 (for example `head -c 32 /dev/urandom | base64`)",
                value.len()
            ),
        ));
    }
    Ok(Some(value))
}

/// The admin listener's keys as a configuration file spells them: the proxy's
/// and the MCP gateway's files take the same six.
pub(crate) struct AdminKeys<'a> {
    pub(crate) admin: Option<&'a Spanned<String>>,
    pub(crate) admin_token: Option<Spanned<String>>,
    pub(crate) admin_token_file: Option<Spanned<PathBuf>>,
    pub(crate) admin_insecure_no_token: Option<&'a Spanned<bool>>,
    pub(crate) admin_tls_cert_file: Option<&'a Spanned<PathBuf>>,
    pub(crate) admin_tls_key_file: Option<&'a Spanned<PathBuf>>,
}

/// The admin listener as configured: its TLS, and its token.
pub(crate) struct AdminListener {
    pub(crate) tls: Option<ListenTls>,
    pub(crate) token: Option<String>,
}

/// Checks the admin listener's keys: its address, its TLS pair, its token.
pub(crate) fn admin_listener(
    src: &Source<'_>,
    keys: AdminKeys<'_>,
    env: Env<'_>,
) -> Result<AdminListener, ConfigError> {
    if let Some(admin) = keys.admin {
        check_addr(src, admin.get_ref(), Some(admin.span()), "admin")?;
    }
    let tls = admin_tls(
        src,
        keys.admin,
        keys.admin_tls_cert_file,
        keys.admin_tls_key_file,
    )?;
    let token = admin_token(src, keys, env)?;
    Ok(AdminListener { tls, token })
}

/// The admin listener's TLS (`admin_tls_cert_file` and `admin_tls_key_file`):
/// both or neither, and only for an `admin` listener.
fn admin_tls(
    src: &Source<'_>,
    admin: Option<&Spanned<String>>,
    cert: Option<&Spanned<PathBuf>>,
    key: Option<&Spanned<PathBuf>>,
) -> Result<Option<ListenTls>, ConfigError> {
    let span = cert.or(key).map(Spanned::span);
    if admin.is_none() && span.is_some() {
        return Err(src.at(
            span,
            "admin_tls_cert_file, admin_tls_key_file: there is no admin listener (`admin`) \
             to serve TLS on",
        ));
    }
    crate::listen_tls::from_settings(
        crate::listen_tls::ADMIN,
        cert.map(|f| f.get_ref().as_path()),
        key.map(|f| f.get_ref().as_path()),
    )
    .map_err(|e| src.at(span, e))
}

/// The admin listener's token (from `admin_token_file`, `admin_token` or
/// [`ADMIN_TOKEN_ENV`], at least [`MIN_SECRET_BYTES`]): none only when
/// `admin_insecure_no_token` asks for it on a loopback address.
fn admin_token(
    src: &Source<'_>,
    keys: AdminKeys<'_>,
    env: Env<'_>,
) -> Result<Option<String>, ConfigError> {
    let token = secret(
        src,
        "admin_token",
        keys.admin_token,
        keys.admin_token_file,
        ADMIN_TOKEN_ENV,
        env,
    )?;
    let Some(admin) = keys.admin else {
        return Ok(token);
    };
    let insecure = keys.admin_insecure_no_token;
    match (token, insecure.map(|i| (*i.get_ref(), i.span()))) {
        (Some(_), Some((true, span))) => Err(src.at(
            Some(span),
            "admin_insecure_no_token = true with an admin token: remove one of them",
        )),
        (Some(token), _) => Ok(Some(token)),
        (None, Some((true, span))) => {
            let loopback = admin
                .get_ref()
                .parse::<std::net::SocketAddr>()
                .is_ok_and(|a| a.ip().is_loopback());
            if loopback {
                Ok(None)
            } else {
                Err(src.at(
                    Some(span),
                    format!(
                        "admin_insecure_no_token = true is accepted only for a loopback address \
                         (admin is {:?}); give the admin listener a token",
                        admin.get_ref()
                    ),
                ))
            }
        }
        (None, _) => Err(src.at(
            Some(admin.span()),
            format!(
                "admin {:?}: the admin listener lists every tenant's keys and resolves records, \
                 so it needs a token of at least {MIN_SECRET_BYTES} bytes: `admin_token_file = \"PATH\"`, \
                 `admin_token = \"...\"` or the environment variable {ADMIN_TOKEN_ENV} \
                 (on a loopback address only, `admin_insecure_no_token = true` runs it open)",
                admin.get_ref()
            ),
        )),
    }
}

/// The key of the tenant digest, from the configured secret.
fn tenant_key(
    src: &Source<'_>,
    span: &Range<usize>,
    inline: Option<Spanned<String>>,
    file: Option<Spanned<PathBuf>>,
    env: Env<'_>,
) -> Result<[u8; 32], ConfigError> {
    let Some(secret) = secret(src, "[tenant] secret", inline, file, TENANT_SECRET_ENV, env)? else {
        return Err(src.at(
            Some(span.clone()),
            format!(
                "[tenant] `from` needs a secret to key the credential's digest (a public key \
                 would let anyone who reads the store test guesses of a credential): \
                 `secret_file = \"PATH\"`, `secret = \"...\"` or the environment variable \
                 {TENANT_SECRET_ENV}, at least {MIN_SECRET_BYTES} bytes, the same on every proxy \
                 and kept: a new secret makes every caller a new tenant"
            ),
        ));
    };
    Ok(blake3::derive_key(
        "idemkit proxy tenant credential key v2",
        secret.as_bytes(),
    ))
}

/// A span at the start of `line` (1-based), for refusals found after parsing.
fn spanned_line_span(text: &str, line: usize) -> Range<usize> {
    let start = text
        .match_indices('\n')
        .nth(line.saturating_sub(2))
        .map_or(0, |(i, _)| if line <= 1 { 0 } else { i + 1 });
    start..start
}

pub(crate) fn check_addr(
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

fn route(src: &Source<'_>, r: RouteSection, defaults: Timeouts) -> Result<Route, ConfigError> {
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
    let content = match r
        .fingerprint
        .as_ref()
        .map(|f| (f.get_ref().as_str(), f.span()))
    {
        None | Some(("json", _)) => ContentKind::Json,
        Some(("form", _)) => ContentKind::FormUrlEncoded,
        Some(("bytes", _)) => ContentKind::Raw,
        Some((other, span)) => {
            return Err(src.at(
                Some(span),
                format!("fingerprint {other:?}: expected \"json\", \"form\" or \"bytes\""),
            ));
        }
    };
    if content != ContentKind::Json
        && let Some(pointer) = r.include.iter().chain(&r.exclude).flatten().next()
    {
        return Err(src.at(
            Some(pointer.span()),
            "include and exclude pick JSON fields: they need fingerprint = \"json\"",
        ));
    }
    let mut spec = FingerprintSpec::new(content);
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
    let path_variants = match r
        .path_variants
        .as_ref()
        .map(|v| (v.get_ref().as_str(), v.span()))
    {
        None | Some(("normalize", _)) => PathVariants::Normalize,
        Some(("refuse", _)) => PathVariants::Refuse,
        Some((other, span)) => {
            return Err(src.at(
                Some(span),
                format!("path_variants {other:?}: expected \"normalize\" or \"refuse\""),
            ));
        }
    };
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
        path_variants,
        case_sensitive: r.case_sensitive.unwrap_or(false),
        forward_key: r.forward_key.unwrap_or(true),
        timeouts: Timeouts {
            connect: millis_or(r.upstream_connect_timeout_ms, defaults.connect),
            answer: millis_or(r.upstream_timeout_ms, defaults.answer),
            body_idle: millis_or(r.upstream_body_idle_timeout_ms, defaults.body_idle),
        },
        max_execution: r.max_execution_ms.map(Duration::from_millis),
        wait: r.wait_ms.map(Duration::from_millis),
        max_wait: r.max_wait_ms.map(Duration::from_millis),
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

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parsed(text: &str) -> Result<ProxyConfig, String> {
        parse(Path::new("proxy.toml"), text, None, None, &no_env).map_err(|e| e.to_string())
    }

    fn refusal(text: &str) -> String {
        parsed(text).map(|_| ()).unwrap_err()
    }

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn tls_on_the_admin_listener_needs_both_files_and_an_admin_listener() {
        let without_admin = refusal(&format!(
            "admin_tls_cert_file = \"/etc/admin.crt\"\nadmin_tls_key_file = \"/etc/admin.key\"\n{BASE}"
        ));
        assert!(
            without_admin.starts_with(
                "proxy.toml:1: admin_tls_cert_file, admin_tls_key_file: there is no admin listener"
            ),
            "{without_admin}"
        );
        let admin = format!("admin = \"0.0.0.0:9091\"\nadmin_token = \"{TOKEN}\"\n");
        let key_alone = refusal(&format!(
            "{admin}admin_tls_key_file = \"/etc/admin.key\"\n{BASE}"
        ));
        assert!(
            key_alone.starts_with("proxy.toml:3: admin_tls_key_file without admin_tls_cert_file"),
            "{key_alone}"
        );
        let missing = refusal(&format!(
            "{admin}admin_tls_cert_file = \"/nonexistent/admin.crt\"\nadmin_tls_key_file = \"/nonexistent/admin.key\"\n{BASE}"
        ));
        assert!(
            missing.starts_with("proxy.toml:3: admin_tls_cert_file /nonexistent/admin.crt"),
            "{missing}"
        );

        let plain = parsed(&format!("{admin}{BASE}")).unwrap();
        assert!(plain.admin_tls.is_none() && plain.listen_tls.is_none());
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (cert_file, key_file) = (dir.path().join("admin.crt"), dir.path().join("admin.key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let with_tls = parsed(&format!(
            "{admin}admin_tls_cert_file = {:?}\nadmin_tls_key_file = {:?}\n{BASE}",
            cert_file.display().to_string(),
            key_file.display().to_string()
        ))
        .unwrap();
        // The admin listener's TLS alone: the proxy's own listener stays plain.
        assert!(with_tls.admin_tls.is_some() && with_tls.listen_tls.is_none());
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
    fn an_https_upstream_is_checked_against_mozilla_s_roots_and_its_host_name() {
        let config =
            parsed(&BASE.replace("http://127.0.0.1:9000", "https://api.example.com")).unwrap();
        let tls = config.upstream_tls.expect("TLS for an https:// upstream");
        assert_eq!(format!("{:?}", tls.name), "DnsName(\"api.example.com\")");
        assert!(parsed(BASE).unwrap().upstream_tls.is_none());
    }

    #[test]
    fn the_request_head_deadline_defaults_to_thirty_seconds_and_is_never_zero() {
        assert_eq!(
            parsed(BASE).unwrap().header_read_timeout,
            Duration::from_secs(30)
        );
        let c = parsed(&format!("header_read_timeout_ms = 2500\n{BASE}")).unwrap();
        assert_eq!(c.header_read_timeout, Duration::from_millis(2500));
        let e = refusal(&format!("header_read_timeout_ms = 0\n{BASE}"));
        assert!(
            e.contains("header_read_timeout_ms: expected at least 1"),
            "{e}"
        );
        assert!(e.contains("proxy.toml:1"), "{e}");
    }

    #[test]
    fn waits_are_set_per_route_and_bounded_per_store() {
        let c = parsed(BASE).unwrap();
        assert_eq!(c.wait_limits, WaitLimits::default());
        let text = format!(
            "max_waiters = 50\nmax_waiters_per_key = 5\n{BASE}\n[[routes]]\nmethod = \"POST\"\n\
             path = \"/book\"\noperation = \"book\"\neffect = \"external\"\n\
             wait_ms = 1500\nmax_wait_ms = 20000\n"
        );
        let c = parsed(&text).unwrap();
        assert_eq!(
            c.wait_limits,
            WaitLimits {
                total: 50,
                per_key: 5
            }
        );
        assert_eq!(c.routes[0].wait, Some(Duration::from_millis(1500)));
        assert_eq!(c.routes[0].max_wait, Some(Duration::from_secs(20)));
        let e = refusal(&format!("max_waiters_per_key = 0\n{BASE}"));
        assert!(
            e.contains("max_waiters_per_key: expected at least 1"),
            "{e}"
        );
    }

    #[test]
    fn the_minimal_file_parses() {
        let c = parsed(BASE).unwrap();
        assert_eq!(c.listen, "127.0.0.1:8081");
        assert!(c.routes.is_empty());
        let c = parse(
            Path::new("p.toml"),
            BASE,
            Some("127.0.0.1:1"),
            Some("http://10.0.0.1:80"),
            &no_env,
        )
        .unwrap();
        assert_eq!(
            (c.listen.as_str(), c.upstream.to_string().as_str()),
            ("127.0.0.1:1", "http://10.0.0.1:80/")
        );
    }

    #[test]
    fn the_example_config_loads_with_its_secrets_from_the_environment() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/proxy.toml");
        let text = std::fs::read_to_string(&file).unwrap();
        let env = |name: &str| match name {
            ADMIN_TOKEN_ENV => Some(TOKEN.to_owned()),
            TENANT_SECRET_ENV => Some(TOKEN.replace('0', "z")),
            _ => None,
        };
        let c = parse(&file, &text, None, None, &env).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.routes.len(), 3);
        assert_eq!(c.routes[0].path, "/accounts/{account}/withdraw");
        assert_eq!(c.routes[0].effect, EffectKind::External);
        assert_eq!(c.routes[0].path_variants, PathVariants::Normalize);
        assert!(!c.routes[0].case_sensitive);
        assert_eq!(c.routes[1].effect, EffectKind::Local);
        assert_eq!(c.routes[2].spec.content(), ContentKind::Raw);
        assert!(
            matches!(c.tenant, TenantRule::DigestOf { ref header, .. } if header == "authorization")
        );
        assert_eq!(c.admin_token.as_deref(), Some(TOKEN));
        assert_eq!(c.routes[0].on_disconnect, OnDisconnect::Finish);
        assert_eq!(c.routes[0].store_retry_after, Some(Duration::from_secs(1)));
        assert_eq!(
            c.routes[0].timeouts,
            Timeouts {
                connect: Duration::from_secs(2),
                answer: Duration::from_secs(10),
                body_idle: Duration::from_secs(30)
            }
        );
        assert_eq!(c.max_connections, 4096);
        assert_eq!(c.shutdown_grace, Duration::from_secs(30));
        // Without the environment it names what is missing.
        let missing = parse(&file, &text, None, None, &no_env)
            .unwrap_err()
            .to_string();
        assert!(missing.contains(ADMIN_TOKEN_ENV), "{missing}");
    }

    #[test]
    fn an_admin_listener_needs_a_long_token_unless_told_otherwise_on_loopback() {
        let admin = |extra: &str| format!("admin = \"127.0.0.1:9091\"\n{extra}{BASE}");
        let none = refusal(&admin(""));
        assert!(
            none.starts_with("proxy.toml:1: admin \"127.0.0.1:9091\""),
            "{none}"
        );
        assert!(none.contains("admin_token_file"), "{none}");
        let short = refusal(&admin("admin_token = \"change-me\"\n"));
        assert!(
            short.starts_with("proxy.toml:2: admin_token: at least 32 bytes"),
            "{short}"
        );
        let c = parsed(&admin(&format!("admin_token = \"{TOKEN}\"\n"))).unwrap();
        assert_eq!(c.admin_token.as_deref(), Some(TOKEN));

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
        let from_file = parsed(&admin(&format!("admin_token_file = {file:?}\n"))).unwrap();
        assert_eq!(
            from_file.admin_token.as_deref(),
            Some(TOKEN),
            "the line break is not the token's"
        );
        let absent = refusal(&admin("admin_token_file = \"/nonexistent/token\"\n"));
        assert!(
            absent.contains("admin_token_file /nonexistent/token"),
            "{absent}"
        );
        let env = |name: &str| (name == ADMIN_TOKEN_ENV).then(|| TOKEN.to_owned());
        let from_env = parse(Path::new("p.toml"), &admin(""), None, None, &env).unwrap();
        assert_eq!(from_env.admin_token.as_deref(), Some(TOKEN));

        let open = parsed(&admin("admin_insecure_no_token = true\n")).unwrap();
        assert_eq!(open.admin_token, None);
        let public = refusal(
            &admin("admin_insecure_no_token = true\n").replace("127.0.0.1:9091", "0.0.0.0:9091"),
        );
        assert!(public.contains("only for a loopback address"), "{public}");
        // No admin listener, no token needed.
        assert!(parsed(BASE).is_ok());
    }

    #[test]
    fn a_credential_tenant_needs_a_secret() {
        let from = BASE.replace("header = \"X-Tenant-Id\"", "from = \"authorization\"");
        let none = refusal(&from);
        assert!(
            none.starts_with("proxy.toml:6: [tenant] `from` needs a secret"),
            "{none}"
        );
        let short = refusal(&format!("{from}secret = \"short\"\n"));
        assert!(short.contains("at least 32 bytes"), "{short}");
        let key = |text: &str, env: Env<'_>| match parse(Path::new("p"), text, None, None, env)
            .unwrap()
            .tenant
        {
            TenantRule::DigestOf { key, .. } => key,
            other => panic!("{other:?}"),
        };
        let inline = key(&format!("{from}secret = \"{TOKEN}\"\n"), &no_env);
        let env = |name: &str| (name == TENANT_SECRET_ENV).then(|| TOKEN.to_owned());
        assert_eq!(
            key(&from, &env),
            inline,
            "the same secret from the environment"
        );
        let other = key(
            &format!("{from}secret = \"{}\"\n", TOKEN.to_uppercase()),
            &no_env,
        );
        assert_ne!(other, inline);
        let misplaced = refusal(&format!("{BASE}secret = \"{TOKEN}\"\n"));
        assert!(misplaced.contains("go with `from`"), "{misplaced}");
    }

    #[test]
    fn routes_choose_their_fingerprint_path_variants_and_timeouts() {
        let route = |extra: &str| {
            format!(
                "upstream_connect_timeout_ms = 100\n{BASE}\n[[routes]]\nmethod = \"POST\"\npath = \"/a/{{id}}/cancel\"\noperation = \"a.cancel\"\neffect = \"local\"\n{extra}"
            )
        };
        let c = parsed(&route(
            "fingerprint = \"bytes\"\npath_variants = \"refuse\"\ncase_sensitive = true\nupstream_body_idle_timeout_ms = 5\n",
        ))
        .unwrap();
        let r = &c.routes[0];
        assert_eq!(r.spec.content(), ContentKind::Raw);
        assert_eq!(
            (r.path_variants, r.case_sensitive),
            (PathVariants::Refuse, true)
        );
        assert_eq!(
            r.timeouts,
            Timeouts {
                connect: Duration::from_millis(100),
                answer: DEFAULT_UPSTREAM_TIMEOUT,
                body_idle: Duration::from_millis(5),
            }
        );
        let form = parsed(&route("fingerprint = \"form\"\n")).unwrap();
        assert_eq!(form.routes[0].spec.content(), ContentKind::FormUrlEncoded);
        let bad = refusal(&route("fingerprint = \"xml\"\n"));
        assert!(
            bad.starts_with("proxy.toml:15: fingerprint \"xml\""),
            "{bad}"
        );
        let selection = refusal(&route("fingerprint = \"bytes\"\nexclude = [\"/a\"]\n"));
        assert!(
            selection.contains("need fingerprint = \"json\""),
            "{selection}"
        );
        let variants = refusal(&route("path_variants = \"maybe\"\n"));
        assert!(
            variants.contains("expected \"normalize\" or \"refuse\""),
            "{variants}"
        );
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
        let scheme = refusal(&BASE.replace("http://127.0.0.1:9000", "ftp://api.example.com"));
        assert!(scheme.starts_with("proxy.toml:3: upstream"), "{scheme}");
        // BASE with its upstream line replaced by `lines`.
        let upstream_lines =
            |lines: &str| refusal(&BASE.replace("upstream = \"http://127.0.0.1:9000\"\n", lines));
        let ca_for_plain = upstream_lines(
            "upstream = \"http://127.0.0.1:9000\"\nupstream_ca_file = \"/etc/ca.pem\"\n",
        );
        assert!(
            ca_for_plain.starts_with("proxy.toml:4: upstream_ca_file /etc/ca.pem: the upstream")
                && ca_for_plain.contains("is not https://"),
            "{ca_for_plain}"
        );
        let missing_ca = upstream_lines(
            "upstream = \"https://api.example.com\"\nupstream_ca_file = \"/nonexistent/ca.pem\"\n",
        );
        assert!(
            missing_ca.starts_with("proxy.toml:4: upstream_ca_file /nonexistent/ca.pem"),
            "{missing_ca}"
        );
        let cert_alone = upstream_lines(
            "upstream = \"http://127.0.0.1:9000\"\ntls_cert_file = \"/etc/proxy.crt\"\n",
        );
        assert!(
            cert_alone.starts_with("proxy.toml:4: tls_cert_file without tls_key_file"),
            "{cert_alone}"
        );
        let missing_cert = upstream_lines(
            "upstream = \"http://127.0.0.1:9000\"\ntls_cert_file = \"/nonexistent/proxy.crt\"\ntls_key_file = \"/nonexistent/proxy.key\"\n",
        );
        assert!(
            missing_cert.starts_with("proxy.toml:4: tls_cert_file /nonexistent/proxy.crt"),
            "{missing_cert}"
        );
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
