//! Shared by the `idemkit proxy` tests: an upstream with no idempotency of its
//! own that counts its calls, and the proxy process in front of it.

#![allow(dead_code, reason = "each test file uses a part of this module")]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};

use crate::support::{Reply, request};

/// What the upstream saw.
#[derive(Default)]
pub(crate) struct Seen {
    /// Calls per account.
    pub(crate) calls: BTreeMap<String, usize>,
    /// The headers of every call, in order.
    pub(crate) headers: Vec<Vec<(String, String)>>,
    /// The method and path of every request, in order, as they arrived.
    pub(crate) requests: Vec<String>,
}

/// What the upstream's handlers share: what it saw, and how long a withdrawal takes.
type Shared = (Arc<Mutex<Seen>>, Duration);

/// Counts a call under `name` and keeps its headers; the number of calls so far.
fn count(seen: &Mutex<Seen>, name: &str, headers: &HeaderMap) -> usize {
    let mut seen = seen.lock().unwrap();
    seen.headers.push(
        headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
    );
    *seen.calls.entry(name.to_owned()).or_default() += 1;
    seen.calls.values().sum::<usize>()
}

/// `POST /accounts/{account}/withdraw` (and `…/notes`): 201 with a fresh id
/// after the upstream's delay (the account `slow`: 3 s), counted per account.
async fn withdraw(
    State((seen, delay)): State<Shared>,
    UrlPath(account): UrlPath<String>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let n = count(&seen, &account, &headers);
    let wait = if account == "slow" {
        Duration::from_secs(3)
    } else {
        delay
    };
    tokio::time::sleep(wait).await;
    (
        StatusCode::CREATED,
        [("content-type", "application/json")],
        format!(r#"{{"id":"w_{n}","account":"{account}"}}"#),
    )
}

/// `GET /accounts/{account}`: the number of its withdrawals.
async fn withdrawals(State((seen, _)): State<Shared>, UrlPath(account): UrlPath<String>) -> String {
    let count = seen.lock().unwrap().calls.get(&account).copied();
    format!("{}", count.unwrap_or(0))
}

/// `POST /exports/{mib}`: 200 with a body of `mib` MiB, made as it is sent
/// (64 KiB chunks of `x`), counted as `exports`.
async fn export(
    State((seen, _)): State<Shared>,
    UrlPath(mib): UrlPath<usize>,
    headers: HeaderMap,
) -> impl IntoResponse {
    count(&seen, "exports", &headers);
    let chunk = axum::body::Bytes::from(vec![b'x'; 64 * 1024]);
    let chunks = mib * 16;
    let body = Repeated {
        left: chunks,
        chunk,
    };
    (
        StatusCode::OK,
        [
            ("content-type", "application/octet-stream".to_owned()),
            ("content-length", (mib << 20).to_string()),
        ],
        Body::new(body),
    )
}

/// `POST /stall`: 200 whose body sends 10 bytes and then nothing for a
/// minute, counted as `stall`.
async fn stall(State((seen, _)): State<Shared>, headers: HeaderMap) -> impl IntoResponse {
    count(&seen, "stall", &headers);
    (
        StatusCode::OK,
        [("content-length", "20")],
        Body::new(Stalling {
            sent: false,
            sleep: None,
        }),
    )
}

/// `POST /flaky/{kind}/{id}`: 503 the first time for each id (its
/// transaction rolled back), 201 after; counted per id.
async fn flaky(
    State((seen, _)): State<Shared>,
    UrlPath((_, id)): UrlPath<(String, String)>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let first = !seen.lock().unwrap().calls.contains_key(&id);
    let n = count(&seen, &id, &headers);
    if first {
        (StatusCode::SERVICE_UNAVAILABLE, "rolled back".to_owned())
    } else {
        (StatusCode::CREATED, format!("done {id} ({n})"))
    }
}

/// Any other `POST`: 201, counted under its path as it arrived. A lenient
/// router (Express, Spring) sends variants of a route's path to its handler;
/// this stands in for that handler.
async fn lenient(
    State((seen, _)): State<Shared>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> impl IntoResponse {
    let n = count(&seen, uri.path(), &headers);
    (
        StatusCode::CREATED,
        [("content-type", "application/json")],
        format!(r#"{{"id":"w_{n}","path":"{}"}}"#, uri.path()),
    )
}

/// Notes the method and path of every request.
async fn note_request(
    State((seen, _)): State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let line = format!("{} {}", request.method(), request.uri().path());
    seen.lock().unwrap().requests.push(line);
    next.run(request).await
}

/// `POST /orders/{order}/cancel`: 200 `cancelled`, counted per order.
async fn cancel(
    State((seen, _)): State<Shared>,
    UrlPath(order): UrlPath<String>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let n = count(&seen, &order, &headers);
    (StatusCode::OK, format!("cancelled {order} ({n})"))
}

/// `left` more copies of `chunk`, one per poll.
struct Repeated {
    left: usize,
    chunk: axum::body::Bytes,
}

impl http_body::Body for Repeated {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        self.left -= 1;
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(self.chunk.clone()))))
    }
}

/// Ten bytes, then a minute of nothing.
struct Stalling {
    sent: bool,
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl http_body::Body for Stalling {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if !self.sent {
            self.sent = true;
            return std::task::Poll::Ready(Some(Ok(http_body::Frame::data(
                axum::body::Bytes::from_static(b"0123456789"),
            ))));
        }
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_secs(60))));
        std::future::Future::poll(sleep.as_mut(), cx).map(|()| None)
    }
}

/// The upstream: `POST /accounts/{account}/withdraw` answers 201 with a fresh id
/// after `delay` (the account `slow` waits 3 s), and so does `POST
/// /accounts/{account}/notes`; `GET /accounts/{account}` answers the number of
/// withdrawals (a pass-through route); `POST /exports/{mib}` streams `mib` MiB;
/// `POST /stall` stalls its body; `POST /orders/{order}/cancel` cancels;
/// `POST /flaky/{kind}/{id}` fails once (503), then succeeds; any
/// other `POST` is counted under its path (a lenient router's handler).
pub(crate) struct Upstream {
    pub(crate) addr: SocketAddr,
    pub(crate) seen: Arc<Mutex<Seen>>,
    _runtime: tokio::runtime::Runtime,
}

impl Upstream {
    pub(crate) fn start(delay: Duration) -> Upstream {
        Upstream::start_on("127.0.0.1:0".parse().unwrap(), delay)
    }

    pub(crate) fn start_on(addr: SocketAddr, delay: Duration) -> Upstream {
        Upstream::serving(addr, delay, |listener, app| async move {
            axum::serve(listener, app).await.unwrap();
        })
    }

    /// The upstream's routes, served by `serve` (a TLS front, say) on a
    /// listener bound to `addr`.
    pub(crate) fn serving<F, Serving>(addr: SocketAddr, delay: Duration, serve: F) -> Upstream
    where
        F: FnOnce(tokio::net::TcpListener, Router) -> Serving,
        Serving: std::future::Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let state: Shared = (Arc::clone(&seen), delay);
        let app = Router::new()
            .route(
                "/accounts/{account}/withdraw",
                post(withdraw).get(withdrawals),
            )
            .route("/accounts/{account}/notes", post(withdraw))
            .route("/accounts/{account}", get(withdrawals))
            .route("/exports/{mib}", post(export))
            .route("/stall", post(stall))
            .route("/orders/{order}/cancel", post(cancel))
            .route("/flaky/{kind}/{id}", post(flaky))
            .fallback(post(lenient))
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                note_request,
            ))
            .with_state(state);
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(serve(listener, app));
        Upstream {
            addr,
            seen,
            _runtime: runtime,
        }
    }

    pub(crate) fn calls(&self, account: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .calls
            .get(account)
            .copied()
            .unwrap_or(0)
    }

    pub(crate) fn total_calls(&self) -> usize {
        self.seen.lock().unwrap().calls.values().sum()
    }

    /// The method and path of every request so far.
    pub(crate) fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().requests.clone()
    }
}

/// The admin token of [`config`]'s proxies (the proxy wants at least 32 bytes).
pub(crate) const ADMIN_TOKEN: &str = "test-admin-token-of-32-bytes-min";

/// `Authorization` for the admin listener of [`config`]'s proxies.
pub(crate) fn admin_authorization() -> Vec<u8> {
    format!("Bearer {ADMIN_TOKEN}").into_bytes()
}

/// A config for a proxy in front of `upstream` (one External withdraw route,
/// tenant from `X-Tenant-Id`), with `extra` appended to the route table.
pub(crate) fn config(dir: &Path, upstream: SocketAddr, store: &str, route_extra: &str) -> PathBuf {
    config_with(dir, upstream, store, "", route_extra)
}

/// [`config`] with `top_extra` among the file's top-level keys.
pub(crate) fn config_with(
    dir: &Path,
    upstream: SocketAddr,
    store: &str,
    top_extra: &str,
    route_extra: &str,
) -> PathBuf {
    // Top-level keys on lines of their own, the route's lines where they were.
    let top = if top_extra.is_empty() {
        String::new()
    } else {
        format!("{top_extra}\n")
    };
    let text = format!(
        r#"listen = "127.0.0.1:0"
upstream = "http://{upstream}"
admin = "127.0.0.1:0"
admin_token = "{ADMIN_TOKEN}"
{top}
[store]
{store}

[tenant]
header = "X-Tenant-Id"

[[routes]]
method = "POST"
path = "/accounts/{{account}}/withdraw"
operation = "accounts.withdraw"
effect = "external"
exclude = ["/request_id"]
upstream_timeout_ms = 1000
{route_extra}
"#
    );
    let path = dir.join("proxy.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A running `idemkit proxy`; killed when dropped.
pub(crate) struct ProxyProcess {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    pub(crate) admin: SocketAddr,
    /// What it has written to stderr so far, line by line (also echoed).
    stderr: Arc<Mutex<Vec<String>>>,
}

impl ProxyProcess {
    /// `method path` on the admin listener, with [`config`]'s token.
    pub(crate) fn admin(&self, method: &str, path: &str, body: &[u8]) -> Reply {
        let token = admin_authorization();
        request(
            self.admin,
            method,
            path,
            &[
                ("Authorization", token.as_slice()),
                ("Content-Type", b"application/json"),
            ],
            body,
        )
        .unwrap()
    }

    /// A proxy by [`config`] whose route waits up to 10 s for the upstream
    /// (instead of 1 s), for upstreams slow enough that retries wait on them.
    pub(crate) fn start_patient(dir: &Path, upstream: SocketAddr, store: &str) -> ProxyProcess {
        let path = config(dir, upstream, store, "");
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("upstream_timeout_ms = 1000", "upstream_timeout_ms = 10000");
        std::fs::write(&path, text).unwrap();
        ProxyProcess::start(&path)
    }

    pub(crate) fn start(config: &Path) -> ProxyProcess {
        ProxyProcess::start_with_env(config, &[])
    }

    /// Like [`ProxyProcess::start`], with these environment variables set.
    pub(crate) fn start_with_env(config: &Path, env: &[(&str, &str)]) -> ProxyProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idemkit"))
            .arg("proxy")
            .arg("--config")
            .arg(config)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let errors = BufReader::new(child.stderr.take().unwrap());
        let kept = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in errors.lines().map_while(Result::ok) {
                eprintln!("{line}");
                kept.lock().unwrap().push(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut admin = None;
        let addr = loop {
            let line = lines
                .next()
                .expect("the proxy printed its address")
                .unwrap();
            let at =
                |l: &str| -> SocketAddr { l.rsplit("://").next().unwrap().trim().parse().unwrap() };
            if line.contains("admin on") {
                admin = Some(at(&line));
            } else if line.contains("listening on") {
                break at(&line);
            }
        };
        std::thread::spawn(move || for _ in lines {});
        ProxyProcess {
            child,
            addr,
            admin: admin.expect("the admin address was printed first"),
            stderr,
        }
    }

    /// Its stderr so far, one string.
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// The proxy process's peak resident memory so far, in KiB (Linux:
    /// `VmHWM` of /proc/PID/status).
    pub(crate) fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/PID/status")
    }

    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit; its status and its whole stderr.
    pub(crate) fn wait_exit(mut self, within: Duration) -> std::process::ExitStatus {
        self.wait_exit_with_stderr(within).0
    }

    /// [`wait_exit`](Self::wait_exit), with everything it wrote to stderr.
    pub(crate) fn wait_exit_with_stderr(
        &mut self,
        within: Duration,
    ) -> (std::process::ExitStatus, String) {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The reader thread drains what is left of the pipe.
                std::thread::sleep(Duration::from_millis(100));
                return (status, self.stderr());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the proxy did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Tenant `acme`'s `POST /accounts/A/withdraw` of `body` under `key`: the
/// route of [`config`].
pub(crate) fn post_withdrawal(proxy: &ProxyProcess, key: &str, body: &[u8]) -> Reply {
    post_json(
        proxy.addr,
        "/accounts/A/withdraw",
        Some(key),
        Some("acme"),
        body,
    )
}

/// `POST path` with a JSON body, an optional key and an optional tenant
/// (`X-Tenant-Id`), over a fresh connection.
pub(crate) fn post_json(
    addr: SocketAddr,
    path: &str,
    key: Option<&str>,
    tenant: Option<&str>,
    body: &[u8],
) -> Reply {
    let mut headers: Vec<(&str, &[u8])> = vec![("Content-Type", b"application/json")];
    if let Some(key) = key {
        headers.push(("Idempotency-Key", key.as_bytes()));
    }
    if let Some(tenant) = tenant {
        headers.push(("X-Tenant-Id", tenant.as_bytes()));
    }
    request(addr, "POST", path, &headers, body).unwrap()
}

/// `clients` simultaneous withdrawals from account A with one key for tenant
/// `acme`, sent in turn to each of `proxies`, released together by a barrier.
pub(crate) fn simultaneous_withdrawals(
    proxies: &[SocketAddr],
    clients: usize,
    key: &str,
    body: &'static [u8],
) -> Vec<Reply> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(clients));
    (0..clients)
        .map(|i| {
            let barrier = std::sync::Arc::clone(&barrier);
            let addr = proxies[i % proxies.len()];
            let key = key.to_owned();
            std::thread::spawn(move || {
                barrier.wait();
                post_json(addr, "/accounts/A/withdraw", Some(&key), Some("acme"), body)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect()
}

/// A proxy (redb store, a 30 s lease) killed while a POST of `body` under each of `keys`
/// (tenant `acme`, account `slow`) was at the upstream, then restarted: each
/// key's record is Unknown (settled as a crash when the file was opened).
pub(crate) fn killed_mid_request(
    keys: &[&str],
    body: &'static [u8],
) -> (tempfile::TempDir, Upstream, ProxyProcess) {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(Duration::ZERO);
    let file = config(
        dir.path(),
        upstream.addr,
        &format!("path = {:?}", dir.path().join("proxy.redb")),
        "lease_ms = 30000",
    );
    let proxy = ProxyProcess::start(&file);
    let clients: Vec<_> = keys
        .iter()
        .map(|key| {
            let (addr, key) = (proxy.addr, key.to_string());
            std::thread::spawn(move || {
                let headers: Vec<(&str, &[u8])> = vec![
                    ("Content-Type", b"application/json"),
                    ("Idempotency-Key", key.as_bytes()),
                    ("X-Tenant-Id", b"acme"),
                ];
                request(addr, "POST", "/accounts/slow/withdraw", &headers, body)
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while upstream.calls("slow") < keys.len() {
        assert!(
            Instant::now() < deadline,
            "the requests reached the upstream"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    proxy.signal("KILL");
    for client in clients {
        assert!(
            client.join().unwrap().is_err(),
            "no answer from a killed proxy"
        );
    }
    drop(proxy);
    let restarted = ProxyProcess::start(&file);
    (dir, upstream, restarted)
}
