//! The quick starts of README.md, run as a reader would run them: the Rust
//! service's code is the built example (the README must show it verbatim), and
//! each shell snippet runs as written under `sh`, with this build's `idemkit` on
//! `PATH` and the README's addresses replaced by the test's free ports. A snippet
//! that stops working fails here. (The JavaScript quick starts run in the npm
//! suite: wasm/test/node/readme.test.mjs.)
#![cfg(feature = "axum")]

use crate::support;
use crate::support::idemkit_proxy as proxy_support;

use std::path::Path;
use std::process::Command;

use proxy_support::Upstream;
use support::Service;
use support::mcp::Spawned;
use support::readme::{block, quickstart_binary, replaced, run_sh};

/// The booking the agent and operator quick starts name.
const TENANT: &str = "clinic-a";
const KEY: &str = "7f9c2e1a-book-anna";
const BOOKING: &[u8] = br#"{"customer_id":"anna","slot_id":"2026-12-01T10:00"}"#;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `HOST:PORT` of a process started with [`Spawned`].
fn host_port(process: &Spawned) -> String {
    process.url.trim_start_matches("http://").to_owned()
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

/// The README's axum service is `examples/quickstart.rs` below its header, and
/// its two `curl` commands (the same request twice) get one execution: 201 with
/// `ord_1`, then the same 201 and body with `idempotent-replayed: true`.
#[test]
fn rust_quick_start_replays_the_same_order() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/quickstart.rs");
    let example = std::fs::read_to_string(example).unwrap();
    let (_header, code) = example.split_once("\n\n").expect("a header, then the code");
    let shown = block("Rust: an axum service", "rust", "fn main");
    assert_eq!(
        shown, code,
        "README.md's Rust quick start differs from store/examples/quickstart.rs"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(quickstart_binary());
    command.current_dir(dir.path()).env("LISTEN", "127.0.0.1:0");
    let service = Spawned::start(command);

    let curls = block("Rust: an axum service", "sh", "curl");
    let script = replaced(&curls, &[("localhost:3000", &host_port(&service))]);
    let out = stdout(&run_sh(dir.path(), &script));
    assert_eq!(count(&out, "HTTP/1.1 201 Created"), 2, "{out}");
    assert_eq!(count(&out, r#"{"id":"ord_1","sku":"kettle"}"#), 2, "{out}");
    assert_eq!(count(&out, "idempotent-replayed: true"), 1, "{out}");
}

/// The README's `[dependencies]` for the axum service ask for the versions this
/// workspace builds the example with (idemkit's own, axum's, tokio's and
/// serde_json's), and for the features the example needs; a line that drifts
/// from the workspace fails here.
#[test]
fn rust_quick_start_dependencies_match_the_workspace() {
    let shown: toml::Table = toml::from_str(&block("Rust: an axum service", "toml", "idemkit"))
        .expect("the README's Cargo.toml lines are TOML");
    let deps = shown["dependencies"].as_table().expect("[dependencies]");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let workspace: toml::Table = toml::from_str(&std::fs::read_to_string(root).unwrap()).unwrap();
    let workspace = workspace["workspace"].as_table().unwrap();
    let version_of = |dep: &toml::Value| -> String {
        let v = dep.get("version").unwrap_or(dep);
        v.as_str().expect("a version string").to_owned()
    };
    let features_of = |dep: &toml::Value| -> Vec<String> {
        dep.get("features")
            .and_then(toml::Value::as_array)
            .map(|f| {
                f.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    // A requirement "0.8" or "1" admits the workspace's "0.8" or "1.0".
    let admits = |req: &str, built: &str| built == req || built.starts_with(&format!("{req}."));
    let ours = workspace["package"]["version"].as_str().unwrap();
    assert!(
        admits(&version_of(&deps["idemkit"]), ours),
        "idemkit {ours}: {deps:?}"
    );
    assert!(features_of(&deps["idemkit"]).contains(&"axum".to_owned()));
    for name in ["axum", "tokio", "serde_json"] {
        let built = version_of(&workspace["dependencies"][name]);
        let shown = version_of(&deps[name]);
        assert!(
            admits(&shown, &built),
            "{name}: README {shown}, workspace {built}"
        );
    }
    let tokio = features_of(&deps["tokio"]);
    for needed in ["macros", "rt-multi-thread"] {
        assert!(
            tokio.contains(&needed.to_owned()),
            "tokio needs {needed}: {tokio:?}"
        );
    }
}

/// The README's smallest `proxy.toml` (its two addresses replaced) and its
/// start command run `idemkit proxy` in front of an upstream that counts its
/// calls; the README's two `curl` commands reach the upstream once, and the
/// second is answered with the stored 201 and `idempotent-replayed: true`.
#[test]
fn proxy_quick_start_forwards_once_and_replays() {
    let heading = "Any other stack: `idemkit proxy`";
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(std::time::Duration::ZERO);
    let config = replaced(
        &block(heading, "toml", "[[routes]]"),
        &[
            ("127.0.0.1:8081", "127.0.0.1:0"),
            (
                "http://127.0.0.1:5000",
                &format!("http://{}", upstream.addr),
            ),
        ],
    );
    std::fs::write(dir.path().join("proxy.toml"), config).unwrap();
    let start = block(heading, "sh", "idemkit proxy");
    let proxy = Spawned::start(support::readme::sh(dir.path(), &format!("exec {start}")));

    let curls = block(heading, "sh", "curl");
    let script = replaced(&curls, &[("localhost:8081", &host_port(&proxy))]);
    let out = stdout(&run_sh(dir.path(), &script));
    assert_eq!(count(&out, "HTTP/1.1 201 Created"), 2, "{out}");
    assert_eq!(count(&out, "idempotent-replayed: true"), 1, "{out}");
    assert_eq!(upstream.total_calls(), 1, "the upstream ran once: {out}");
}

/// The README's `idemkit call` against the reference service, run twice as an
/// agent re-runs after a crash: both runs are confirmed under one journalled key,
/// and the service holds one booking.
#[test]
fn agent_quick_start_books_once_across_reruns() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let call = block("An agent: one key per action", "sh", "idemkit call");
    let script = replaced(&call, &[("127.0.0.1:8080", &service.addr.to_string())]);

    let mut keys = Vec::new();
    for run in 1..=2 {
        let out = stdout(&run_sh(dir.path(), &script));
        let report: serde_json::Value = serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("run {run}: not one JSON report ({e}): {out}"));
        assert_eq!(report["status"], "confirmed", "run {run}: {report}");
        keys.push(report["idempotency_key"].clone());
    }
    assert_eq!(keys[0], keys[1], "one key for the action");
    assert_eq!(service.bookings(TENANT).len(), 1);
}

/// A booking whose service crashed right after the calendar provider booked it
/// is unknown; the README's `list --unresolved` shows it and its `resolve`
/// settles it (with the service stopped), after which the restarted service
/// answers the README's `/health` with `writable: true` and replays the resolved
/// 201 to the client's retry.
#[test]
fn operator_quick_start_settles_an_unknown_booking() {
    let heading = "An operator: unknown outcomes";
    let dir = tempfile::tempdir().unwrap();
    let crashing = Service::start(
        dir.path(),
        &["--crash-after-provider", "--lease-ms", "1000"],
    );
    let auth = format!("Bearer {TENANT}");
    let headers: [(&str, &[u8]); 3] = [
        ("Content-Type", b"application/json"),
        ("Idempotency-Key", KEY.as_bytes()),
        ("Authorization", auth.as_bytes()),
    ];
    // The service aborts before it answers.
    let lost = support::request(crashing.addr, "POST", "/appointments", &headers, BOOKING);
    assert!(
        lost.is_err(),
        "the service crashed instead of answering: {lost:?}"
    );
    crashing.wait_exit(std::time::Duration::from_secs(30));
    wait_until_unresolved(&dir.path().join("appointments.redb"));

    let records = block(heading, "sh", "idemkit resolve");
    let out = stdout(&run_sh(dir.path(), &records));
    assert!(out.contains(KEY), "list shows the booking's key: {out}");

    let service = Service::start(dir.path(), &[]);
    let health = block(heading, "sh", "/health");
    let script = replaced(&health, &[("localhost:8080", &service.addr.to_string())]);
    let out = stdout(&run_sh(dir.path(), &script));
    assert!(out.contains(r#""writable":true"#), "{out}");

    let retry = service.post(Some(KEY.as_bytes()), Some(TENANT), BOOKING);
    assert_eq!(retry.status, 201, "the resolved outcome is replayed");
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
}

/// Waits (up to a minute) until `idemkit list --unresolved` shows a record: the
/// crashed execution's lease has run out.
fn wait_until_unresolved(db: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_idemkit"))
            .args(["list", "--json", "--unresolved", "--db"])
            .arg(db)
            .output()
            .unwrap();
        let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if listed.as_array().is_some_and(|records| !records.is_empty()) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the crashed booking never became unresolved: {listed}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
