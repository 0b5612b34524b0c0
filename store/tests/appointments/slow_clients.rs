//! A client that never finishes its request head, or keeps a connection alive
//! and then sends nothing, must not hold its connection for ever: the service
//! closes it after `--header-read-timeout-ms`, and serves the next client.
#![cfg(feature = "axum")]

use std::io::Write;
use std::time::Duration;

use crate::support;

use support::Service;
use support::slow_clients::{closed_by_the_server, connect, kept_alive_after};

#[test]
fn a_stalled_head_and_an_idle_connection_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &["--header-read-timeout-ms", "300"]);

    let mut stalled = connect(service.addr);
    stalled
        .write_all(b"POST /appointments HTTP/1.1\r\nHost: example\r\nX-Slow: ")
        .unwrap();
    let took = closed_by_the_server(stalled, "a stalled head");
    assert!(took < Duration::from_secs(10), "a stalled head: {took:?}");

    let reader = kept_alive_after(service.addr, "/health");
    // The connection stays open for another request; none comes.
    let took = closed_by_the_server(reader, "an idle keep-alive connection");
    assert!(
        took < Duration::from_secs(10),
        "an idle keep-alive connection: {took:?}"
    );

    // The service still answers.
    assert_eq!(service.get("/health", None).status, 200);
}

/// A flag of 0 would close every connection before its head: refused at start.
#[test]
fn a_zero_header_read_timeout_is_refused() {
    let output = std::process::Command::new(support::example_binary())
        .args(["--header-read-timeout-ms", "0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--header-read-timeout-ms"), "{stderr}");
}
