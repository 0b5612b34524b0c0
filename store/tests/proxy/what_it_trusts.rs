//! What `idemkit proxy` trusts, and what it does not (docs/proxy.md, "What the
//! proxy trusts"), over real sockets in front of an upstream with no
//! idempotency of its own (tests/support/idemkit_proxy.rs): a variant of a protected
//! path is the route; once a request is sent only the upstream's answer
//! decides; bodies stream with bounded memory and time; the admin listener
//! never runs open by accident; SIGTERM waits for every execution; a tenant
//! is never guessed; body-less routes can be protected.
#![cfg(feature = "axum")]

use crate::support;
use crate::support::idemkit_proxy as proxy_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use proxy_support::{ADMIN_TOKEN, ProxyProcess, Upstream, config, config_with, post_json};
use support::slow_clients::{closed_by_the_server, connect, kept_alive_after};
use support::{Reply, request};

const BODY: &[u8] = br#"{"amount":10,"request_id":"r-1"}"#;

/// `POST path` for tenant `acme` with the withdraw body and `key`.
fn withdraw(proxy: &ProxyProcess, path: &str, key: Option<&str>) -> Reply {
    post_json(proxy.addr, path, key, Some("acme"), BODY)
}

/// One more `[[routes]]` table: `POST path` as `operation` with `effect`,
/// and `keys` (TOML lines).
fn extra_route(path: &str, operation: &str, effect: &str, keys: &str) -> String {
    format!(
        "\n[[routes]]\nmethod = \"POST\"\npath = \"{path}\"\noperation = \"{operation}\"\neffect = \"{effect}\"\n{keys}\n"
    )
}

fn redb_store(dir: &std::path::Path) -> String {
    format!("path = {:?}", dir.join("proxy.redb"))
}

/// An upstream answering after `delay` and a proxy in front of it (redb store
/// in a fresh directory), with `top` among the config's top-level keys and
/// `routes` after its withdraw route.
fn in_front(
    delay: Duration,
    top: &str,
    routes: &str,
) -> (tempfile::TempDir, Upstream, ProxyProcess) {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(delay);
    let proxy = ProxyProcess::start(&config_with(
        dir.path(),
        upstream.addr,
        &redb_store(dir.path()),
        top,
        routes,
    ));
    (dir, upstream, proxy)
}

fn wait_until(what: &str, within: Duration, done: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `idemkit proxy` on `config`, expecting it to refuse to start: its exit
/// code and stderr (a proxy still running after 10 s fails the test).
fn refused_at_start(config: &std::path::Path) -> (Option<i32>, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .args(["proxy", "--config"])
        .arg(config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the proxy started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.code(), crate::support::stderr_of(&mut child))
}

/// The routers behind a proxy send variants of a path to the same handler:
/// Express ignores a trailing slash and letter case, Spring drops `;`
/// parameters, most routers fold `//` and dot segments, and every one decodes
/// `%41`. One key sent through six variants reached the upstream six times
/// when only the exact path was protected, and a variant without a key passed
/// although the route requires one. Now each variant is the route: a retry
/// through any of them replays, a keyless one is refused, a new key through a
/// variant is claimed and forwarded under the route's own path, and a path
/// routers read differently (an encoded `/`) is refused, never passed.
#[test]
fn six_path_variants_and_a_keyless_variant_make_one_upstream_call() {
    let (_dir, upstream, proxy) = in_front(Duration::ZERO, "", "");
    let first = withdraw(&proxy, "/accounts/A/withdraw", Some("k1"));
    assert_eq!(first.status, 201, "{first:?}");
    for variant in [
        "/accounts/A/withdraw",
        "/accounts/A/withdraw/",
        "//accounts/A/withdraw",
        "/Accounts/A/withdraw",
        "/accounts/A/withdraw;x=1",
        "/accounts/A/./withdraw",
        "/accounts/%41/withdraw",
    ] {
        let retry = withdraw(&proxy, variant, Some("k1"));
        assert_eq!(
            (retry.status, retry.header("idempotent-replayed")),
            (201, Some("true")),
            "{variant}: {retry:?}"
        );
        assert_eq!(retry.body, first.body, "{variant}");
    }
    let keyless = withdraw(&proxy, "/accounts/A/withdraw/", None);
    assert_eq!(
        (keyless.status, keyless.problem().as_str()),
        (400, "missing-idempotency-key")
    );
    let encoded_slash = withdraw(&proxy, "/accounts/A%2Fwithdraw", Some("k2"));
    assert_eq!(
        (encoded_slash.status, encoded_slash.problem().as_str()),
        (400, "ambiguous-path")
    );
    // The same key on another account's path is another request.
    let other = withdraw(&proxy, "/accounts/B/withdraw/", Some("k1"));
    assert_eq!(other.status, 422, "{other:?}");
    assert_eq!(upstream.total_calls(), 1, "{:?}", upstream.requests());

    let fresh = withdraw(&proxy, "/ACCOUNTS/A/./withdraw//", Some("k3"));
    assert_eq!(fresh.status, 201, "{fresh:?}");
    assert_eq!(
        upstream.requests(),
        ["POST /accounts/A/withdraw", "POST /accounts/A/withdraw"],
        "the upstream saw the route's own path only"
    );
}

/// Behind a proxy nobody can see whether the upstream's transaction rolled
/// back: a Local route whose upstream took longer than the route's timeout
/// was released, and every retry executed again while the first attempts
/// were still running and then committed (three retries, three commits).
/// Now a request the proxy sent is Unknown after a timeout, whatever the
/// route's effect: retries get 409 `outcome-uncertain` and the upstream runs
/// the note once.
#[test]
fn a_local_route_whose_upstream_commits_after_the_timeout_is_executed_once() {
    let notes = extra_route(
        "/accounts/{account}/notes",
        "accounts.note",
        "local",
        "upstream_timeout_ms = 400",
    );
    let (_dir, upstream, proxy) = in_front(Duration::ZERO, "", &notes);
    let note = |key: &str| {
        post_json(
            proxy.addr,
            "/accounts/slow/notes",
            Some(key),
            Some("acme"),
            br#"{"text":"call back"}"#,
        )
    };
    let first = note("n-1");
    assert_eq!(
        (first.status, first.problem().as_str()),
        (504, "upstream-timeout")
    );
    for _ in 0..3 {
        let retry = note("n-1");
        assert_eq!(
            (retry.status, retry.problem().as_str()),
            (409, "outcome-uncertain"),
            "{retry:?}"
        );
    }
    // Past the upstream's 3 s: it committed the one note it was sent.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(upstream.calls("slow"), 1, "{:?}", upstream.requests());
}

/// The same for a proxy killed mid-request: its claim's lease expired and a
/// Local route's record was taken over by the retry, which sent the request
/// again while the upstream had perhaps committed it. The proxy records every
/// claim as External, so after the lease the retry gets 409
/// `outcome-uncertain` and the upstream ran it once.
#[test]
fn a_local_route_whose_proxy_was_killed_mid_request_is_never_sent_again() {
    let notes = extra_route(
        "/accounts/{account}/notes",
        "accounts.note",
        "local",
        "lease_ms = 1000",
    );
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(Duration::ZERO);
    let file = config(dir.path(), upstream.addr, &redb_store(dir.path()), &notes);
    let proxy = ProxyProcess::start(&file);
    let addr = proxy.addr;
    // Its answer never comes: the proxy is killed first.
    let client = std::thread::spawn(move || {
        let headers: [(&str, &[u8]); 2] =
            [("Idempotency-Key", b"n-kill"), ("X-Tenant-Id", b"acme")];
        request(addr, "POST", "/accounts/slow/notes", &headers, b"{}")
    });
    wait_until(
        "the upstream got the request",
        Duration::from_secs(10),
        || upstream.calls("slow") == 1,
    );
    proxy.signal("KILL");
    assert!(
        client.join().unwrap().is_err(),
        "no answer from a killed proxy"
    );
    drop(proxy);

    let restarted = ProxyProcess::start(&file);
    std::thread::sleep(Duration::from_millis(1200)); // past the 1 s lease
    let retry = post_json(
        restarted.addr,
        "/accounts/slow/notes",
        Some("n-kill"),
        Some("acme"),
        b"{}",
    );
    assert_eq!(
        (retry.status, retry.problem().as_str()),
        (409, "outcome-uncertain"),
        "{retry:?}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(upstream.calls("slow"), 1, "never sent again");
}

/// What an upstream answers still follows the route's declared effect: a 503
/// it sent on a Local route means its transaction rolled back, so the record
/// is released and the retry executes (and then replays); on an External
/// route the same 503 leaves the outcome unknown.
#[test]
fn an_answer_the_upstream_sent_follows_the_routes_effect() {
    let routes = format!(
        "{}{}",
        extra_route("/flaky/local/{id}", "flaky.local", "local", ""),
        extra_route("/flaky/external/{id}", "flaky.external", "external", ""),
    );
    let (_dir, upstream, proxy) = in_front(Duration::ZERO, "", &routes);
    let send = |path: &str| post_json(proxy.addr, path, Some("k-f"), Some("acme"), b"{}");
    assert_eq!(send("/flaky/local/l-1").status, 503);
    assert_eq!(
        send("/flaky/local/l-1").status,
        201,
        "released: executed again"
    );
    let replay = send("/flaky/local/l-1");
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.calls("l-1"), 2);

    assert_eq!(send("/flaky/external/e-1").status, 503);
    let retry = send("/flaky/external/e-1");
    assert_eq!(
        (retry.status, retry.problem().as_str()),
        (409, "outcome-uncertain")
    );
    assert_eq!(upstream.calls("e-1"), 1);
}

/// A listener whose accept queue is full: the kernel drops new connection
/// attempts (SYNs), so connecting hangs, the way a slow accept does during a
/// deploy. Holds the runtime, the listener and the queued connections.
struct NoAccept {
    addr: SocketAddr,
    _held: (
        tokio::runtime::Runtime,
        tokio::net::TcpListener,
        Vec<TcpStream>,
    ),
}

fn a_port_that_accepts_nothing() -> NoAccept {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        socket.listen(0).unwrap()
    });
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    while let Ok(stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
        queued.push(stream);
        assert!(queued.len() < 16, "the accept queue never filled");
    }
    NoAccept {
        addr,
        _held: (runtime, listener, queued),
    }
}

/// The connect phase had no timeout of its own: a slow accept ran into the
/// route's answer timeout and made an External request Unknown although
/// nothing was sent. Now connecting has `upstream_connect_timeout_ms`: past
/// it the caller gets 503 with `Retry-After`, the record is released, and the
/// retry executes once the upstream accepts again.
#[test]
fn a_connect_timeout_sends_nothing_and_the_retry_executes_once() {
    let blocked = a_port_that_accepts_nothing();
    let addr = blocked.addr;
    let dir = tempfile::tempdir().unwrap();
    let proxy = ProxyProcess::start(&config(
        dir.path(),
        addr,
        &redb_store(dir.path()),
        "upstream_connect_timeout_ms = 300",
    ));
    let first = withdraw(&proxy, "/accounts/A/withdraw", Some("k-c"));
    assert_eq!(
        (first.status, first.problem().as_str()),
        (503, "upstream-connect-timeout"),
        "{first:?}"
    );
    assert_eq!(first.header("retry-after"), Some("1"));
    drop(blocked);
    let upstream = Upstream::start_on(addr, Duration::ZERO);
    let retry = withdraw(&proxy, "/accounts/A/withdraw", Some("k-c"));
    assert_eq!(
        retry.status, 201,
        "released, so the retry executes: {retry:?}"
    );
    let again = withdraw(&proxy, "/accounts/A/withdraw", Some("k-c"));
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.calls("A"), 1);
}

/// POSTs `path` with `key` and reads the answer as it comes, without keeping
/// its body: the status, `Idempotent-Replayed`, and the body's length.
fn download(addr: SocketAddr, path: &str, key: &str) -> (u16, Option<String>, u64) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Idempotency-Key: {key}\r\nX-Tenant-Id: acme\r\nContent-Length: 2\r\n\r\n{{}}"
    )
    .unwrap();
    let mut reader = BufReader::with_capacity(256 * 1024, stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut replayed = None;
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("idempotent-replayed")
        {
            replayed = Some(value.trim().to_owned());
        }
    }
    let length = std::io::copy(&mut reader, &mut std::io::sink()).unwrap();
    (status, replayed, length)
}

/// Upstream answers were read whole into memory before anything reached the
/// client (one 400 MB answer took the proxy from 8 MB to 420 MB RSS). Now they
/// stream as they arrive, and only the first `max_stored_response_bytes` are
/// kept for the record: four concurrent 200 MiB answers go through whole, the
/// proxy's peak RSS (VmHWM) stays within a few MiB of its size before them
/// plus the four stored caps, and a retry gets 410 (the answer was too large
/// to replay), never a second export.
#[test]
fn four_concurrent_200_mib_answers_stream_through_with_bounded_memory() {
    let exports = extra_route(
        "/exports/{mib}",
        "exports.create",
        "external",
        "max_stored_response_bytes = 1048576\nupstream_timeout_ms = 30000",
    );
    let (_dir, upstream, proxy) = in_front(Duration::ZERO, "", &exports);
    // Warm: every worker has served an answer and a small export.
    for key in ["warm-1", "warm-2", "warm-3", "warm-4"] {
        assert_eq!(download(proxy.addr, "/exports/1", key).0, 200);
    }
    let before = proxy.peak_rss_kib();
    let started = Instant::now();
    let clients: Vec<_> = (1..=4)
        .map(|i| {
            let addr = proxy.addr;
            std::thread::spawn(move || download(addr, "/exports/200", &format!("big-{i}")))
        })
        .collect();
    for client in clients {
        assert_eq!(client.join().unwrap(), (200, None, 200 << 20));
    }
    let after = proxy.peak_rss_kib();
    let caps = 4 * 1024;
    eprintln!(
        "peak RSS {before} KiB before, {after} KiB after 4 x 200 MiB in {:?}",
        started.elapsed()
    );
    assert!(
        after <= before + caps + 24 * 1024,
        "peak RSS grew from {before} KiB to {after} KiB for four 200 MiB answers"
    );
    let retry = download(proxy.addr, "/exports/200", "big-1");
    assert_eq!(retry.0, 410, "too large to replay");
    assert_eq!(upstream.calls("exports"), 8);
}

/// `upstream_timeout_ms` covered only the answer's head: a body that stalled
/// held the client and the lease for up to 15 minutes. Now a body that sends
/// nothing for `upstream_body_idle_timeout_ms` fails, and since the request
/// was sent, the record is Unknown — on a Local route too.
#[test]
fn an_answer_whose_body_stalls_is_unknown_and_never_sent_again() {
    let stall = extra_route(
        "/stall",
        "stall",
        "local",
        "upstream_body_idle_timeout_ms = 300",
    );
    let (_dir, upstream, proxy) = in_front(Duration::ZERO, "", &stall);
    let started = Instant::now();
    let first = post_json(proxy.addr, "/stall", Some("k-s"), Some("acme"), b"{}");
    assert_eq!(
        (first.status, first.problem().as_str()),
        (409, "outcome-uncertain"),
        "{first:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let retry = post_json(proxy.addr, "/stall", Some("k-s"), Some("acme"), b"{}");
    assert_eq!(
        (retry.status, retry.problem().as_str()),
        (409, "outcome-uncertain")
    );
    assert_eq!(upstream.calls("stall"), 1);
    let unknown = proxy.admin("GET", "/records?state=unknown", b"").json();
    assert_eq!(
        unknown["records"].as_array().map(Vec::len),
        Some(1),
        "{unknown}"
    );
}

/// A client that stops sending its request body held its connection (and,
/// through a pass-through route, an upstream connection) for as long as it
/// liked. Now `request_body_idle_timeout_ms` bounds each wait: a protected
/// route refuses the request without claiming its key, so the client's retry
/// executes once.
#[test]
fn a_client_that_stalls_its_body_is_refused_and_claims_nothing() {
    let (_dir, upstream, proxy) =
        in_front(Duration::ZERO, "request_body_idle_timeout_ms = 300", "");
    let mut stream = TcpStream::connect(proxy.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(
            b"POST /accounts/A/withdraw HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n\
              Idempotency-Key: k-b\r\nX-Tenant-Id: acme\r\nContent-Length: 100\r\n\r\n{\"amount\"",
        )
        .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("idle timeout"), "{answer}");
    assert_eq!(upstream.total_calls(), 0);
    let retry = withdraw(&proxy, "/accounts/A/withdraw", Some("k-b"));
    assert_eq!(retry.status, 201, "nothing was claimed: {retry:?}");
}

/// Open client connections had no cap. Past `max_connections` a new
/// connection gets 503 (`Retry-After`, then closed); once one closes, the
/// next is served.
#[test]
fn connections_past_the_cap_get_503_until_one_closes() {
    let (_dir, _upstream, proxy) = in_front(Duration::ZERO, "max_connections = 2", "");
    let idle: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(proxy.addr).unwrap())
        .collect();
    let get = || request(proxy.addr, "GET", "/accounts/A", &[], b"").unwrap();
    wait_until(
        "the third connection is refused",
        Duration::from_secs(5),
        || get().status == 503,
    );
    let refused = get();
    assert_eq!(
        (refused.status, refused.problem().as_str()),
        (503, "too-many-connections")
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    drop(idle);
    wait_until(
        "a connection is served again",
        Duration::from_secs(5),
        || get().status == 200,
    );
}

/// Once a connection was closed, the only slot of `max_connections = 1`
/// serves a new client again.
fn the_slot_serves_the_next_client(proxy: SocketAddr) {
    wait_until(
        "the slot serves the next client",
        Duration::from_secs(5),
        || {
            request(proxy, "GET", "/accounts/A", &[], b"")
                .unwrap()
                .status
                == 200
        },
    );
}

/// A slow-loris client opens a connection and never finishes its request head.
/// It held its connection, and with `max_connections` a slot, for as long as
/// it liked. Now a head not complete within `header_read_timeout_ms` closes the
/// connection, and the slot serves the next client.
#[test]
fn a_request_head_never_finished_is_cut_off_and_frees_its_slot() {
    let (_dir, _upstream, proxy) = in_front(
        Duration::ZERO,
        "max_connections = 1\nheader_read_timeout_ms = 300",
        "",
    );
    let get = || request(proxy.addr, "GET", "/accounts/A", &[], b"").unwrap();
    assert_eq!(get().status, 200);

    let mut stalled = connect(proxy.addr);
    stalled
        .write_all(b"GET /accounts/A HTTP/1.1\r\nHost: example\r\nX-Slow: ")
        .unwrap();
    closed_by_the_server(stalled, "a stalled head");
    the_slot_serves_the_next_client(proxy.addr);
}

/// A client that keeps its connection alive after an answer and then sends
/// nothing holds a slot just as a stalled head does. The same deadline covers
/// the wait for the next request's head: the idle connection is closed and the
/// slot serves the next client.
#[test]
fn an_idle_keep_alive_connection_is_closed_and_frees_its_slot() {
    let (_dir, _upstream, proxy) = in_front(
        Duration::ZERO,
        "max_connections = 1\nheader_read_timeout_ms = 300",
        "",
    );
    let reader = kept_alive_after(proxy.addr, "/accounts/A");
    // The connection stays open for another request; none comes.
    closed_by_the_server(reader, "an idle keep-alive connection");
    the_slot_serves_the_next_client(proxy.addr);
}

/// With `admin` set and no token, the admin listener served every tenant's
/// raw keys and accepted a forged resolve from anyone who could reach it.
/// Now the proxy refuses to start with an admin listener and no token of at
/// least 32 bytes, unless told to run it open on a loopback address.
#[test]
fn the_admin_listener_without_a_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(
        dir.path(),
        "127.0.0.1:9".parse().unwrap(),
        &redb_store(dir.path()),
        "",
    );
    let without = |replacement: &str| {
        let text = std::fs::read_to_string(&file).unwrap();
        std::fs::write(
            &file,
            text.replace(&format!("admin_token = \"{ADMIN_TOKEN}\""), replacement),
        )
        .unwrap();
    };
    without("");
    let (code, stderr) = refused_at_start(&file);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("needs a token of at least 32 bytes"),
        "{stderr}"
    );

    let file = config(
        dir.path(),
        "127.0.0.1:9".parse().unwrap(),
        &redb_store(dir.path()),
        "",
    );
    without("admin_token = \"change-me\"");
    let (code, stderr) = refused_at_start(&file);
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("admin_token: at least 32 bytes are needed, it has 9"),
        "{stderr}"
    );
}

/// `GET /records` loaded every record, bodies included, into memory and sent
/// them all; a resolve left no trace of who settled what. Now records come in
/// pages (`limit`, `after` = the previous page's `next`) without their stored
/// responses unless `bodies=true`, and every resolve is logged with the log
/// reference, who (`by`, the caller's address) and what.
#[test]
fn records_come_in_pages_without_bodies_and_every_resolve_is_logged() {
    let (_dir, _upstream, proxy) = in_front(Duration::ZERO, "", "");
    for key in ["p-1", "p-2", "p-3", "p-4", "p-5"] {
        assert_eq!(
            withdraw(&proxy, "/accounts/A/withdraw", Some(key)).status,
            201
        );
    }
    let mut keys = Vec::new();
    let mut path = "/records?limit=2".to_owned();
    let mut pages = 0;
    loop {
        let page = proxy.admin("GET", &path, b"").json();
        pages += 1;
        let records = page["records"].as_array().unwrap();
        assert!(records.len() <= 2, "{page}");
        for record in records {
            assert!(
                record.get("response").is_none(),
                "no body unless asked: {record}"
            );
            keys.push(record["key"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(next) => path = format!("/records?limit=2&after={next}"),
            None => break,
        }
    }
    keys.sort();
    assert_eq!(keys, ["p-1", "p-2", "p-3", "p-4", "p-5"]);
    assert!(pages >= 3, "{pages} pages");
    let with_bodies = proxy
        .admin("GET", "/records?state=completed&bodies=true&limit=1", b"")
        .json();
    let stored = &with_bodies["records"][0]["response"];
    assert_eq!(stored["status"], 201, "{with_bodies}");
    assert!(
        stored["body"]
            .as_str()
            .unwrap()
            .contains("\"account\":\"A\""),
        "{with_bodies}"
    );
    let too_many = proxy.admin("GET", "/records?limit=100000", b"");
    assert_eq!(too_many.status, 400);

    // An unknown outcome (the `slow` account outlasts the route's 1 s), settled.
    let timed_out = withdraw(&proxy, "/accounts/slow/withdraw", Some("p-6"));
    assert_eq!(timed_out.status, 504);
    let unknown = proxy.admin("GET", "/records?state=unknown", b"").json();
    let log_ref = unknown["records"][0]["log_ref"]
        .as_str()
        .unwrap()
        .to_owned();
    let resolved = proxy.admin(
        "POST",
        &format!("/records/{log_ref}/resolve"),
        br#"{"applied":true,"status":201,"body":"{}","by":"alice"}"#,
    );
    assert_eq!(resolved.status, 200, "{resolved:?}");
    wait_until("the resolve is logged", Duration::from_secs(5), || {
        proxy.stderr().contains(&format!(
            "resolve {log_ref} (accounts.withdraw, acme) by \"alice\" from 127.0.0.1:"
        ))
    });
    let line = proxy.stderr();
    assert!(
        line.contains("applied, status 201: unknown -> completed"),
        "{line}"
    );
    assert!(!line.contains("p-6"), "never the raw key: {line}");
}

/// Graceful shutdown waited for the connections, not for executions whose
/// client had already left (the default `finish` mode runs them on): SIGTERM
/// exited at once, said they were recorded, and left the record Unknown. Now
/// the proxy waits for every running execution, attached or detached, to
/// record before it exits.
#[test]
fn sigterm_waits_for_a_detached_execution_and_records_it() {
    let dir = tempfile::tempdir().unwrap();
    // The answer takes 800 ms, within the route's 1 s.
    let upstream = Upstream::start(Duration::from_millis(800));
    let file = config(dir.path(), upstream.addr, &redb_store(dir.path()), "");
    let mut proxy = ProxyProcess::start(&file);
    let mut client = TcpStream::connect(proxy.addr).unwrap();
    write!(
        client,
        "POST /accounts/A/withdraw HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n\
         Idempotency-Key: k-term\r\nX-Tenant-Id: acme\r\nContent-Length: {}\r\n\r\n",
        BODY.len()
    )
    .unwrap();
    client.write_all(BODY).unwrap();
    wait_until(
        "the upstream got the request",
        Duration::from_secs(10),
        || upstream.calls("A") == 1,
    );
    drop(client); // the client leaves; the execution runs on, detached
    std::thread::sleep(Duration::from_millis(100));
    proxy.signal("TERM");
    let (status, stderr) = proxy.wait_exit_with_stderr(Duration::from_secs(10));
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(
        stderr.contains("every running execution recorded its outcome"),
        "{stderr}"
    );
    drop(proxy);

    let restarted = ProxyProcess::start(&file);
    let retry = withdraw(&restarted, "/accounts/A/withdraw", Some("k-term"));
    assert_eq!(
        (retry.status, retry.header("idempotent-replayed")),
        (201, Some("true")),
        "recorded before exit: {retry:?}"
    );
    assert_eq!(upstream.calls("A"), 1);
}

/// What cannot finish within `shutdown_grace_ms` is named by its log
/// reference, the exit message says it is left to its lease's expiry (exit
/// 75), and its record is left Running — not released, not re-run. The next
/// proxy on the same redb file holds it alone, so it settles that record as
/// unknown when it opens the file: the retry is uncertain, never sent again.
#[test]
fn sigterm_past_the_grace_period_names_what_is_left_to_lease_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(Duration::ZERO);
    let file = config_with(
        dir.path(),
        upstream.addr,
        &redb_store(dir.path()),
        "shutdown_grace_ms = 300",
        "",
    );
    let mut proxy = ProxyProcess::start(&file);
    let addr = proxy.addr;
    let client = std::thread::spawn(move || {
        post_json(
            addr,
            "/accounts/slow/withdraw",
            Some("k-grace"),
            Some("acme"),
            BODY,
        )
    });
    wait_until(
        "the upstream got the request",
        Duration::from_secs(10),
        || upstream.calls("slow") == 1,
    );
    let signalled = Instant::now();
    proxy.signal("TERM");
    let (status, stderr) = proxy.wait_exit_with_stderr(Duration::from_secs(10));
    assert_eq!(status.code(), Some(75), "{stderr}");
    assert!(
        signalled.elapsed() < Duration::from_millis(900),
        "{:?}",
        signalled.elapsed()
    );
    assert!(stderr.contains("left to their lease's expiry"), "{stderr}");
    let _ = client.join();
    drop(proxy);

    let restarted = ProxyProcess::start(&file);
    let unknown = restarted.admin("GET", "/records?state=unknown", b"").json();
    let log_ref = unknown["records"][0]["log_ref"]
        .as_str()
        .unwrap_or_else(|| panic!("the left execution is unknown: {unknown}"))
        .to_owned();
    assert!(stderr.contains(&log_ref), "named {log_ref}: {stderr}");
    let retry = withdraw(&restarted, "/accounts/slow/withdraw", Some("k-grace"));
    assert_eq!(
        (retry.status, retry.problem().as_str()),
        (409, "outcome-uncertain"),
        "{retry:?}"
    );
    assert_eq!(upstream.calls("slow"), 1);
}

/// A doubled tenant header silently took its first value, while a gateway in
/// front or the upstream may read the other. Now such a request is refused
/// (400) and never forwarded.
#[test]
fn a_tenant_header_sent_twice_is_refused() {
    let (_dir, upstream, proxy) = in_front(Duration::ZERO, "", "");
    let reply = request(
        proxy.addr,
        "POST",
        "/accounts/A/withdraw",
        &[
            ("Content-Type", b"application/json"),
            ("Idempotency-Key", b"k-t2"),
            ("X-Tenant-Id", b"acme"),
            ("X-Tenant-Id", b"globex"),
        ],
        BODY,
    )
    .unwrap();
    assert_eq!(
        (reply.status, reply.problem().as_str()),
        (400, "ambiguous-tenant")
    );
    assert_eq!(upstream.total_calls(), 0);
}

/// A proxied route could only fingerprint JSON, so an empty `POST …/cancel`
/// was refused with 400 and such a route could not be protected. With
/// `fingerprint = "bytes"` the body's bytes count as they are, an empty body
/// included: the cancel runs once, a retry replays, another body is 422.
#[test]
fn a_route_without_a_json_body_is_protected_by_its_bytes() {
    let cancel = extra_route(
        "/orders/{order}/cancel",
        "orders.cancel",
        "external",
        r#"fingerprint = "bytes""#,
    );
    let (_dir, upstream, proxy) = in_front(Duration::ZERO, "", &cancel);
    let send = |body: &[u8]| {
        request(
            proxy.addr,
            "POST",
            "/orders/o-1/cancel",
            &[("Idempotency-Key", b"k-x"), ("X-Tenant-Id", b"acme")],
            body,
        )
        .unwrap()
    };
    let first = send(b"");
    assert_eq!(first.status, 200, "{first:?}");
    let retry = send(b"");
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, first.body);
    assert_eq!(send(b"reason=late").status, 422);
    assert_eq!(upstream.calls("o-1"), 1);
}
