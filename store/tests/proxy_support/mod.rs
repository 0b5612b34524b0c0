//! Shared by the `idemkit proxy` tests: an upstream with no idempotency of its
//! own that counts its calls, and the proxy process in front of it.

#![allow(dead_code, reason = "each test file uses a part of this module")]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

use crate::support::{Reply, request};

/// What the upstream saw.
#[derive(Default)]
pub(crate) struct Seen {
    /// Calls per account.
    pub(crate) calls: BTreeMap<String, usize>,
    /// The headers of every call, in order.
    pub(crate) headers: Vec<Vec<(String, String)>>,
}

/// The upstream: `POST /accounts/{account}/withdraw` answers 201 with a fresh
/// id after `delay` (the account `slow` waits 3 s); `GET /accounts/{account}`
/// answers the number of withdrawals (a pass-through route).
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
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let state = (Arc::clone(&seen), delay);
        let app = Router::new()
            .route(
                "/accounts/{account}/withdraw",
                post(
                    |State((seen, delay)): State<(Arc<Mutex<Seen>>, Duration)>,
                     UrlPath(account): UrlPath<String>,
                     headers: HeaderMap| async move {
                        let n = {
                            let mut seen = seen.lock().unwrap();
                            seen.headers.push(
                                headers
                                    .iter()
                                    .map(|(n, v)| {
                                        (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())
                                    })
                                    .collect(),
                            );
                            let count = seen.calls.entry(account.clone()).or_default();
                            *count += 1;
                            seen.calls.values().sum::<usize>()
                        };
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
                    },
                )
                .get(
                    |State((seen, _)): State<(Arc<Mutex<Seen>>, Duration)>,
                     UrlPath(account): UrlPath<String>| async move {
                        let count = seen.lock().unwrap().calls.get(&account).copied();
                        format!("{}", count.unwrap_or(0))
                    },
                ),
            )
            .route(
                "/accounts/{account}",
                axum::routing::get(
                    |State((seen, _)): State<(Arc<Mutex<Seen>>, Duration)>,
                     UrlPath(account): UrlPath<String>| async move {
                        let count = seen.lock().unwrap().calls.get(&account).copied();
                        format!("{}", count.unwrap_or(0))
                    },
                ),
            )
            .with_state(state);
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
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
}

/// A config for a proxy in front of `upstream` (one External withdraw route,
/// tenant from `X-Tenant-Id`), with `extra` appended to the route table.
pub(crate) fn config(dir: &Path, upstream: SocketAddr, store: &str, route_extra: &str) -> PathBuf {
    let text = format!(
        r#"listen = "127.0.0.1:0"
upstream = "http://{upstream}"
admin = "127.0.0.1:0"
admin_token = "secret"

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
}

impl ProxyProcess {
    pub(crate) fn start(config: &Path) -> ProxyProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idemkit"))
            .arg("proxy")
            .arg("--config")
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut admin = None;
        let addr = loop {
            let line = lines
                .next()
                .expect("the proxy printed its address")
                .unwrap();
            let at = |l: &str| -> SocketAddr {
                l.rsplit("http://").next().unwrap().trim().parse().unwrap()
            };
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
        }
    }

    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub(crate) fn wait_exit(mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
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
