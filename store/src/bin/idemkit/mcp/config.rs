//! The gateway's TOML configuration: the proxy's keys (`listen`, `upstream`,
//! `[store]`, `[tenant]`, `admin`) plus `[[tools]]`, parsed with serde (unknown
//! keys refused) and checked, every refusal naming the file, the line and what
//! is wrong.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use idemkit::core::http::defaults;
use idemkit::core::http::prefer::WaitRule;
use idemkit::core::machine::{Policy, StorePolicy};
use idemkit::core::record::EffectKind;
use idemkit::store::WaitLimits;
use serde::Deserialize;
use toml::Spanned;

use crate::listen_tls::ListenTls;
use crate::proxy::access_log::Target as AccessLogTarget;
use crate::proxy::config::{
    AdminKeys, AdminListener, ConfigError, DEFAULT_GC_INTERVAL, Env, Source, StoreChoice,
    StoreSection, TenantRule, TenantSection, admin_listener, audit_log, check_addr, store_choice,
    tenant_rule,
};
use crate::proxy::upstream_tls::UpstreamTls;

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
    /// One JSON line per answered HTTP request: a file, or `-` for stdout.
    access_log: Option<Spanned<PathBuf>>,
    /// How long a request other than a protected `tools/call` waits for the
    /// upstream's answer to begin.
    upstream_timeout_ms: Option<u64>,
    /// How long a protected `tools/call` waits for its result (default for
    /// every tool).
    call_timeout_ms: Option<u64>,
    /// How long a client may take to send a request's head.
    header_read_timeout_ms: Option<Spanned<u64>>,
    /// Calls waiting for a running key's result, in all and per key.
    max_waiters: Option<Spanned<usize>>,
    max_waiters_per_key: Option<Spanned<usize>>,
    gc_interval_ms: Option<u64>,
    /// Worker threads (default: one per CPU).
    workers: Option<Spanned<usize>>,
    /// The largest JSON-RPC message read from a client, in bytes.
    body_limit_bytes: Option<usize>,
    store: Spanned<StoreSection>,
    tenant: Spanned<TenantSection>,
    #[serde(default)]
    tools: Vec<Spanned<ToolSection>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolSection {
    name: Spanned<String>,
    /// `false`: the gateway never claims this tool's calls.
    protected: Option<bool>,
    effect: Option<Spanned<String>>,
    derive: Option<Spanned<String>>,
    derive_window_ms: Option<Spanned<u64>>,
    lease_ms: Option<u64>,
    replay_window_ms: Option<u64>,
    record_window_ms: Option<u64>,
    max_execution_ms: Option<u64>,
    /// How long a retry of a running call waits when it asks nothing.
    wait_ms: Option<u64>,
    /// The longest a retry may wait (`_meta["io.idemkit/wait"]` is capped by it).
    max_wait_ms: Option<u64>,
    max_stored_result_bytes: Option<usize>,
    call_timeout_ms: Option<u64>,
    store_policy: Option<Spanned<String>>,
    /// What the model is told to check when the outcome is unknown.
    check: Option<String>,
}

/// How a call without a key is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyRule {
    /// Refused, with an error that says how to send a key.
    Required,
    /// Derived from the tenant, the tool and the canonical arguments: a repeat
    /// with the same arguments less than `window` after a call is that call.
    FromArguments { window: Duration },
}

/// One configured tool.
#[derive(Clone, Debug)]
pub(crate) struct Tool {
    pub(crate) name: String,
    pub(crate) protected: bool,
    pub(crate) policy: Policy,
    pub(crate) key: KeyRule,
    pub(crate) max_execution: Duration,
    /// How a retry of a running call waits for its result.
    pub(crate) wait: WaitRule,
    pub(crate) max_stored_result_bytes: usize,
    pub(crate) call_timeout: Duration,
    pub(crate) check: String,
}

/// The whole, checked configuration.
#[derive(Clone, Debug)]
pub(crate) struct McpConfig {
    pub(crate) listen: String,
    /// `tls_cert_file` and `tls_key_file`: the listener serves HTTPS.
    pub(crate) listen_tls: Option<ListenTls>,
    /// The MCP server's Streamable HTTP endpoint; `None` for stdio, where the
    /// server is a child process.
    pub(crate) upstream: Option<http::Uri>,
    /// For an `https://` upstream: how its connections are encrypted and its
    /// certificate checked.
    pub(crate) upstream_tls: Option<UpstreamTls>,
    pub(crate) admin: Option<String>,
    /// `admin_tls_cert_file` and `admin_tls_key_file`: the admin listener
    /// serves HTTPS.
    pub(crate) admin_tls: Option<ListenTls>,
    pub(crate) admin_token: Option<String>,
    /// The audit log of operators' resolves (`audit_log`, or beside a redb
    /// store); `None`: the console shows records but resolves none.
    pub(crate) audit_log: Option<PathBuf>,
    /// Where each answered HTTP request's line goes (`access_log`).
    pub(crate) access_log: Option<AccessLogTarget>,
    pub(crate) upstream_timeout: Duration,
    /// A request's head (line and headers) not complete within this closes
    /// the connection.
    pub(crate) header_read_timeout: Duration,
    /// `max_waiters` and `max_waiters_per_key`.
    pub(crate) wait_limits: WaitLimits,
    pub(crate) gc_interval: Duration,
    pub(crate) workers: Option<usize>,
    pub(crate) body_limit: usize,
    pub(crate) store: StoreChoice,
    pub(crate) tenant: TenantRule,
    /// Configured tools by name; every other tool follows [`McpConfig::default_tool`].
    pub(crate) tools: BTreeMap<String, Tool>,
    /// What an unlisted tool gets when it is protected (its annotations do not
    /// say `readOnlyHint`).
    pub(crate) default_tool: Tool,
}

impl McpConfig {
    /// The configured entry for `name`, if any.
    pub(crate) fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }
}

const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(300);
const DEFAULT_MAX_EXECUTION: Duration = defaults::DEFAULT_MAX_EXECUTION;
const DEFAULT_BODY_LIMIT: usize = 4 << 20;
const DEFAULT_MAX_STORED_RESULT: usize = defaults::DEFAULT_MAX_STORED_RESPONSE_BYTES;

/// What the model is told to check when a tool's outcome is unknown, unless
/// the tool's `check` says more.
pub(crate) const DEFAULT_CHECK: &str = "Do not call this tool again for this action. \
     Look up whether the action took effect (for example with a read-only tool that lists \
     what exists) and tell the user; an operator settles the outcome.";

/// Reads and checks `file`; `listen` and `upstream` override the file's.
/// `stdio`: the server is a child process (no `upstream`, no headers for a
/// tenant rule).
pub(crate) fn load(
    file: &Path,
    listen: Option<&str>,
    upstream: Option<&str>,
    stdio: bool,
) -> Result<McpConfig, ConfigError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Source { file, text: "" }.at(None, format!("cannot read the file: {e}")))?;
    parse(file, &text, listen, upstream, stdio, &|name| {
        std::env::var(name).ok()
    })
}

/// [`load`] on text already read, with `env` as the environment (a digested
/// credential's secret may come from it, as the proxy's).
pub(crate) fn parse(
    file: &Path,
    text: &str,
    listen: Option<&str>,
    upstream: Option<&str>,
    stdio: bool,
    env: Env<'_>,
) -> Result<McpConfig, ConfigError> {
    let src = Source { file, text };
    let raw: FileConfig =
        toml::from_str(text).map_err(|e| src.at(e.span(), e.message().trim().to_owned()))?;

    let listen = match (listen, &raw.listen) {
        (Some(l), _) => l.to_owned(),
        (None, Some(l)) => l.get_ref().clone(),
        (None, None) if stdio => String::new(),
        (None, None) => {
            return Err(src.at(
                None,
                "missing `listen` (the address to serve on), or pass --listen",
            ));
        }
    };
    if !stdio {
        check_addr(
            &src,
            &listen,
            raw.listen.as_ref().map(Spanned::span),
            "listen",
        )?;
    }
    let upstream = if stdio {
        None
    } else {
        Some(upstream_uri(&src, upstream, raw.upstream.as_ref())?)
    };
    let ca_file = raw.upstream_ca_file.as_ref();
    let upstream_tls = match (&upstream, ca_file) {
        (Some(uri), _) => UpstreamTls::for_upstream(uri, ca_file.map(|f| f.get_ref().as_path()))
            .map_err(|e| {
                let span = ca_file.map(Spanned::span);
                src.at(span.or_else(|| raw.upstream.as_ref().map(Spanned::span)), e)
            })?,
        (None, Some(file)) => {
            return Err(src.at(
                Some(file.span()),
                "upstream_ca_file: over stdio the server is a child process, with no TLS to check",
            ));
        }
        (None, None) => None,
    };
    let tls_span = raw
        .tls_cert_file
        .as_ref()
        .or(raw.tls_key_file.as_ref())
        .map(Spanned::span);
    if stdio && tls_span.is_some() {
        return Err(src.at(
            tls_span,
            "tls_cert_file, tls_key_file: over stdio the gateway has no listener to serve TLS on",
        ));
    }
    let access_log = raw.access_log;
    if stdio && let Some(file) = &access_log {
        return Err(src.at(
            Some(file.span()),
            "access_log: over stdio the gateway answers no HTTP requests to log",
        ));
    }
    let listen_tls = crate::listen_tls::from_settings(
        crate::listen_tls::LISTENER,
        raw.tls_cert_file.as_ref().map(|f| f.get_ref().as_path()),
        raw.tls_key_file.as_ref().map(|f| f.get_ref().as_path()),
    )
    .map_err(|e| src.at(tls_span, e))?;
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
    let tenant_span = raw.tenant.span();
    let tenant = tenant_rule(&src, raw.tenant, env)?;
    if stdio && !matches!(tenant, TenantRule::Fixed(_)) {
        return Err(src.at(
            Some(tenant_span),
            "over stdio there are no request headers: name the tenant with [tenant] fixed",
        ));
    }
    let workers = match &raw.workers {
        Some(w) if *w.get_ref() == 0 || *w.get_ref() > 256 => {
            return Err(src.at(Some(w.span()), "workers: expected 1 to 256"));
        }
        Some(w) => Some(*w.get_ref()),
        None => None,
    };
    let call_timeout = raw
        .call_timeout_ms
        .map_or(DEFAULT_CALL_TIMEOUT, Duration::from_millis);
    let default_tool = Tool {
        name: String::new(),
        protected: true,
        policy: Policy::default().with_effect(EffectKind::External),
        key: KeyRule::Required,
        max_execution: DEFAULT_MAX_EXECUTION,
        wait: WaitRule::default(),
        max_stored_result_bytes: DEFAULT_MAX_STORED_RESULT,
        call_timeout,
        check: DEFAULT_CHECK.to_owned(),
    };
    let mut tools = BTreeMap::new();
    let mut lines: BTreeMap<String, usize> = BTreeMap::new();
    for spanned in raw.tools {
        let line = src.line_of(&spanned.span());
        let span = spanned.span();
        let tool = tool(&src, spanned.into_inner(), &default_tool)?;
        if let Some(first) = lines.insert(tool.name.clone(), line) {
            return Err(src.at(
                Some(span),
                format!(
                    "tool {:?} is configured twice (first at line {first})",
                    tool.name
                ),
            ));
        }
        tools.insert(tool.name.clone(), tool);
    }
    let header_read_timeout =
        crate::proxy::config::header_read_timeout(&src, raw.header_read_timeout_ms.as_ref())?;
    let wait_limits = crate::proxy::config::wait_limits(
        &src,
        raw.max_waiters.as_ref(),
        raw.max_waiters_per_key.as_ref(),
    )?;
    Ok(McpConfig {
        listen,
        listen_tls,
        upstream,
        upstream_tls,
        admin: raw.admin.map(Spanned::into_inner),
        admin_tls,
        admin_token,
        audit_log: audit_log(raw.audit_log, &store),
        access_log: access_log.map(|file| AccessLogTarget::of(file.get_ref())),
        upstream_timeout: raw
            .upstream_timeout_ms
            .map_or(DEFAULT_UPSTREAM_TIMEOUT, Duration::from_millis),
        header_read_timeout,
        wait_limits,
        gc_interval: raw
            .gc_interval_ms
            .map_or(DEFAULT_GC_INTERVAL, Duration::from_millis),
        workers,
        body_limit: raw.body_limit_bytes.unwrap_or(DEFAULT_BODY_LIMIT),
        store,
        tenant,
        tools,
        default_tool,
    })
}

/// The server's Streamable HTTP URL: `http://host:port/path`.
fn upstream_uri(
    src: &Source<'_>,
    given: Option<&str>,
    in_file: Option<&Spanned<String>>,
) -> Result<http::Uri, ConfigError> {
    let text = match (given, in_file) {
        (Some(u), _) => u.to_owned(),
        (None, Some(u)) => u.get_ref().clone(),
        (None, None) => {
            return Err(src.at(
                None,
                "missing `upstream` (the MCP server's Streamable HTTP URL, e.g. \
                 \"http://127.0.0.1:3000/mcp\"), or pass --upstream, or give the server's \
                 command after `--` to speak stdio",
            ));
        }
    };
    let span = in_file.map(Spanned::span);
    let uri: http::Uri = text
        .parse()
        .map_err(|e| src.at(span.clone(), format!("upstream {text:?}: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https"))
        || uri.authority().is_none()
        || uri.query().is_some()
    {
        return Err(src.at(
            span,
            format!(
                "upstream {text:?}: expected http://host:port/path or https://host[:port]/path \
                 (no query)"
            ),
        ));
    }
    Ok(uri)
}

fn tool(src: &Source<'_>, t: ToolSection, defaults: &Tool) -> Result<Tool, ConfigError> {
    if t.name.get_ref().is_empty() {
        return Err(src.at(Some(t.name.span()), "tool name must not be empty"));
    }
    let effect = match t.effect.as_ref().map(|e| (e.get_ref().as_str(), e.span())) {
        None | Some(("external", _)) => EffectKind::External,
        Some(("local", _)) => EffectKind::Local,
        Some((other, span)) => {
            return Err(src.at(
                Some(span),
                format!("effect {other:?}: expected \"external\" or \"local\""),
            ));
        }
    };
    let mut policy = Policy::default().with_effect(effect);
    if let Some(ms) = t.lease_ms {
        policy = policy.with_lease(Duration::from_millis(ms));
    }
    if let Some(ms) = t.replay_window_ms {
        policy = policy.with_replay_window(Duration::from_millis(ms));
    }
    if let Some(ms) = t.record_window_ms {
        policy = policy.with_record_window(Duration::from_millis(ms));
    }
    if let Some(store) = &t.store_policy {
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
    let key = match (&t.derive, &t.derive_window_ms) {
        (None, None) => KeyRule::Required,
        (Some(derive), window) if derive.get_ref() == "arguments" => {
            let Some(window) = window else {
                return Err(src.at(
                    Some(derive.span()),
                    "derive = \"arguments\" needs derive_window_ms: how long after a call a \
                     call with the same arguments is taken for a retry of it",
                ));
            };
            if *window.get_ref() == 0 {
                return Err(src.at(Some(window.span()), "derive_window_ms must be above 0"));
            }
            let window = Duration::from_millis(*window.get_ref());
            // A merged call replays the first one's result: keep it that long.
            if policy.replay_window < window {
                policy = policy.with_replay_window(window);
            }
            KeyRule::FromArguments { window }
        }
        (Some(derive), _) => {
            return Err(src.at(
                Some(derive.span()),
                format!(
                    "derive {:?}: expected \"arguments\" (tenant, tool and canonical arguments)",
                    derive.get_ref()
                ),
            ));
        }
        (None, Some(window)) => {
            return Err(src.at(
                Some(window.span()),
                "derive_window_ms without derive = \"arguments\"",
            ));
        }
    };
    Ok(Tool {
        name: t.name.into_inner(),
        protected: t.protected.unwrap_or(true),
        policy,
        key,
        max_execution: t
            .max_execution_ms
            .map_or(defaults.max_execution, Duration::from_millis),
        wait: WaitRule {
            default_wait: t
                .wait_ms
                .map_or(defaults.wait.default_wait, Duration::from_millis),
            max_wait: t
                .max_wait_ms
                .map_or(defaults.wait.max_wait, Duration::from_millis),
        },
        max_stored_result_bytes: t
            .max_stored_result_bytes
            .unwrap_or(defaults.max_stored_result_bytes),
        call_timeout: t
            .call_timeout_ms
            .map_or(defaults.call_timeout, Duration::from_millis),
        check: t.check.unwrap_or_else(|| defaults.check.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
listen = "127.0.0.1:8090"
upstream = "http://127.0.0.1:3000/mcp"
[store]
path = "mcp.redb"
[tenant]
header = "X-Tenant-Id"
"#;

    fn refusal(text: &str, stdio: bool) -> String {
        parse(Path::new("mcp.toml"), text, None, None, stdio, &|_| None)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    }

    /// `top` (first, on line 1), then [`BASE`] for stdio, whose tenant is fixed.
    fn over_stdio(top: &str) -> String {
        format!(
            "{top}\n{}",
            BASE.replace("header = \"X-Tenant-Id\"", "fixed = \"acme\"")
        )
    }

    #[test]
    fn an_https_upstream_is_checked_and_a_ca_file_needs_one() {
        let https = BASE.replace("http://127.0.0.1:3000/mcp", "https://tools.example.com/mcp");
        let config = parse(Path::new("mcp.toml"), &https, None, None, false, &|_| None).unwrap();
        let tls = config.upstream_tls.expect("TLS for an https:// upstream");
        assert_eq!(format!("{:?}", tls.name), "DnsName(\"tools.example.com\")");
        let e = refusal(&BASE.replace("http://", "ftp://"), false);
        assert!(
            e.contains("expected http://host:port/path or https://"),
            "{e}"
        );
        let e = refusal(&over_stdio("upstream_ca_file = \"/etc/ca.pem\""), true);
        assert!(e.starts_with("mcp.toml:1: upstream_ca_file"), "{e}");
    }

    #[test]
    fn tls_on_the_listener_needs_both_files_and_a_listener() {
        let key_alone = refusal(&format!("tls_key_file = \"/etc/mcp.key\"\n{BASE}"), false);
        assert!(
            key_alone.starts_with("mcp.toml:1: tls_key_file without tls_cert_file"),
            "{key_alone}"
        );
        let stdio = over_stdio("tls_cert_file = \"/etc/mcp.crt\"\ntls_key_file = \"/etc/mcp.key\"");
        let e = refusal(&stdio, true);
        assert!(
            e.starts_with("mcp.toml:1: tls_cert_file, tls_key_file: over stdio"),
            "{e}"
        );
    }

    #[test]
    fn an_access_log_is_a_file_or_stdout_and_refused_over_stdio() {
        let parsed = |text: &str| {
            parse(Path::new("mcp.toml"), text, None, None, false, &|_| None)
                .unwrap()
                .access_log
        };
        assert_eq!(parsed(BASE), None);
        assert_eq!(
            parsed(&format!("access_log = \"/var/log/mcp.jsonl\"\n{BASE}")),
            Some(AccessLogTarget::File(PathBuf::from("/var/log/mcp.jsonl")))
        );
        assert_eq!(
            parsed(&format!("access_log = \"-\"\n{BASE}")),
            Some(AccessLogTarget::Stdout)
        );
        let e = refusal(&over_stdio("access_log = \"-\""), true);
        assert!(e.starts_with("mcp.toml:1: access_log: over stdio"), "{e}");
    }

    #[test]
    fn tls_on_the_admin_listener_needs_both_files_and_an_admin_listener() {
        let e = refusal(
            &format!("admin_tls_cert_file = \"/etc/admin.crt\"\n{BASE}"),
            false,
        );
        assert!(
            e.starts_with(
                "mcp.toml:1: admin_tls_cert_file, admin_tls_key_file: there is no admin listener"
            ),
            "{e}"
        );
        let admin =
            "admin = \"127.0.0.1:9092\"\nadmin_token = \"0123456789abcdef0123456789abcdef\"\n";
        let e = refusal(
            &format!("{admin}admin_tls_cert_file = \"/etc/admin.crt\"\n{BASE}"),
            false,
        );
        assert!(
            e.starts_with("mcp.toml:3: admin_tls_cert_file without admin_tls_key_file"),
            "{e}"
        );
    }

    #[test]
    fn a_request_head_deadline_of_zero_is_refused() {
        let e = refusal(&format!("header_read_timeout_ms = 0\n{BASE}"), false);
        assert!(
            e.contains("header_read_timeout_ms: expected at least 1"),
            "{e}"
        );
    }

    #[test]
    fn the_admin_token_comes_from_a_file_the_environment_or_is_waived_on_loopback() {
        const TOKEN: &str = "0123456789abcdef0123456789abcdef";
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("admin-token");
        std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
        let with = |extra: &str, env: Env<'_>| {
            parse(
                Path::new("mcp.toml"),
                &format!("admin = \"127.0.0.1:0\"\n{extra}{BASE}"),
                None,
                None,
                false,
                env,
            )
        };
        let from_file = with(&format!("admin_token_file = {file:?}\n"), &|_| None).unwrap();
        assert_eq!(from_file.admin_token.as_deref(), Some(TOKEN));
        let env = |name: &str| (name == "IDEMKIT_ADMIN_TOKEN").then(|| TOKEN.to_owned());
        assert_eq!(with("", &env).unwrap().admin_token.as_deref(), Some(TOKEN));
        let open = with("admin_insecure_no_token = true\n", &|_| None).unwrap();
        assert_eq!(open.admin_token, None);
        let exposed = parse(
            Path::new("mcp.toml"),
            &format!("admin = \"0.0.0.0:9091\"\nadmin_insecure_no_token = true\n{BASE}"),
            None,
            None,
            false,
            &|_| None,
        )
        .map(|_| ())
        .unwrap_err()
        .to_string();
        assert!(exposed.contains("only for a loopback address"), "{exposed}");
    }

    #[test]
    fn waits_are_set_per_tool_and_bounded_per_gateway() {
        let c = parse(Path::new("mcp.toml"), BASE, None, None, false, &|_| None).unwrap();
        assert_eq!(c.wait_limits, WaitLimits::default());
        assert_eq!(c.default_tool.wait, WaitRule::default());
        let text = format!(
            "max_waiters = 40\nmax_waiters_per_key = 4\n{BASE}\n[[tools]]\nname = \"book\"\n\
             wait_ms = 500\nmax_wait_ms = 30000\n"
        );
        let c = parse(Path::new("mcp.toml"), &text, None, None, false, &|_| None).unwrap();
        assert_eq!(
            c.wait_limits,
            WaitLimits {
                total: 40,
                per_key: 4
            }
        );
        let book = c.tool("book").unwrap();
        assert_eq!(book.wait.default_wait, Duration::from_millis(500));
        assert_eq!(book.wait.max_wait, Duration::from_secs(30));
        let e = refusal(&format!("max_waiters = 0\n{BASE}"), false);
        assert!(e.contains("max_waiters: expected at least 1"), "{e}");
    }

    #[test]
    fn the_minimal_file_parses_and_flags_override_it() {
        let c = parse(Path::new("mcp.toml"), BASE, None, None, false, &|_| None).unwrap();
        assert_eq!(c.upstream.unwrap().path(), "/mcp");
        assert!(c.tools.is_empty());
        assert_eq!(c.default_tool.policy.effect, EffectKind::External);
        let c = parse(
            Path::new("mcp.toml"),
            BASE,
            Some("127.0.0.1:1"),
            Some("http://10.0.0.1:80/rpc"),
            false,
            &|_| None,
        )
        .unwrap();
        assert_eq!(c.listen, "127.0.0.1:1");
        assert_eq!(c.upstream.unwrap().to_string(), "http://10.0.0.1:80/rpc");
    }

    #[test]
    fn the_example_config_loads_with_its_secrets_from_the_environment() {
        use crate::proxy::config::{ADMIN_TOKEN_ENV, TENANT_SECRET_ENV};
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mcp.toml");
        let text = std::fs::read_to_string(&file).unwrap();
        let env = |name: &str| {
            [TENANT_SECRET_ENV, ADMIN_TOKEN_ENV]
                .contains(&name)
                .then(|| "an example secret of at least 32 bytes".to_owned())
        };
        let c = parse(&file, &text, None, None, false, &env).unwrap_or_else(|e| panic!("{e}"));
        assert!(c.admin_token.is_some());
        assert_eq!(c.header_read_timeout, Duration::from_secs(30));
        let book = c.tool("book_appointment").unwrap();
        assert!(book.protected);
        assert_eq!(book.policy.effect, EffectKind::External);
        assert!(!c.tool("list_appointments").unwrap().protected);
    }

    #[test]
    fn tools_take_effect_derivation_and_windows() {
        let text = format!(
            "{BASE}\n[[tools]]\nname = \"note\"\neffect = \"local\"\nderive = \"arguments\"\nderive_window_ms = 60000\nreplay_window_ms = 1000\n"
        );
        let c = parse(Path::new("mcp.toml"), &text, None, None, false, &|_| None).unwrap();
        let note = c.tool("note").unwrap();
        assert_eq!(note.policy.effect, EffectKind::Local);
        assert_eq!(
            note.key,
            KeyRule::FromArguments {
                window: Duration::from_secs(60)
            }
        );
        assert_eq!(note.policy.replay_window, Duration::from_secs(60));
    }

    #[test]
    fn every_refusal_names_the_file_the_line_and_what() {
        let tool = |extra: &str| format!("{BASE}\n[[tools]]\nname = \"book\"\n{extra}");
        let derive = refusal(&tool("derive = \"arguments\"\n"), false);
        assert!(derive.starts_with("mcp.toml:11: derive"), "{derive}");
        assert!(derive.contains("derive_window_ms"), "{derive}");
        let effect = refusal(&tool("effect = \"remote\"\n"), false);
        assert!(effect.starts_with("mcp.toml:11: effect"), "{effect}");
        let twice = refusal(
            &format!("{}{}", tool(""), "\n[[tools]]\nname = \"book\"\n"),
            false,
        );
        assert!(twice.contains("configured twice"), "{twice}");
        let unknown = refusal(&tool("colour = \"blue\"\n"), false);
        assert!(unknown.contains("colour"), "{unknown}");
        let short = refusal(
            &format!("admin = \"127.0.0.1:0\"\nadmin_token = \"short\"\n{BASE}"),
            false,
        );
        assert!(short.starts_with("mcp.toml:2: admin_token"), "{short}");
        let no_token = refusal(&format!("admin = \"127.0.0.1:0\"\n{BASE}"), false);
        assert!(no_token.contains("admin_token_file"), "{no_token}");
        let headers_over_stdio = refusal(BASE, true);
        assert!(
            headers_over_stdio.contains("[tenant] fixed"),
            "{headers_over_stdio}"
        );
        let no_upstream = refusal(
            &BASE.replace("upstream = \"http://127.0.0.1:3000/mcp\"\n", ""),
            false,
        );
        assert!(no_upstream.contains("missing `upstream`"), "{no_upstream}");
    }
}
