//! `idemkit proxy` in front of an upstream that speaks only TLS: the upstream's
//! certificate is checked against `upstream_ca_file` (or Mozilla's roots) and
//! the upstream's host name, and a handshake that fails has sent nothing, so
//! the key is released and executes once the trust is right.
#![cfg(feature = "cli")]

use crate::support::idemkit_proxy as proxy_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::tls::{Certificates, acceptor, localhost_certificates};
use proxy_support::{ProxyProcess, Upstream, config_with, post_withdrawal};

const BODY: &[u8] = br#"{"amount":10,"request_id":"r-1"}"#;

/// The test upstream, serving only TLS with `certificates`.
fn tls_upstream(certificates: &Certificates) -> Upstream {
    let acceptor = acceptor(certificates);
    Upstream::serving(
        "127.0.0.1:0".parse().unwrap(),
        Duration::ZERO,
        |listener, app| async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    // A client that refused the certificate ends here.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(
                            hyper_util::rt::TokioIo::new(tls),
                            hyper_util::service::TowerToHyperService::new(app),
                        )
                        .await;
                });
            }
        },
    )
}

/// A directory for the test, the file of a fresh CA, and an upstream serving
/// only TLS with the `localhost` certificate that CA issued.
fn tls_upstream_and_its_ca() -> (tempfile::TempDir, PathBuf, Upstream) {
    let dir = tempfile::tempdir().unwrap();
    let certificates = localhost_certificates();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &certificates.ca).unwrap();
    (dir, ca_file, tls_upstream(&certificates))
}

/// A proxy in front of `upstream` as `url`, trusting `ca_file` if given.
fn proxy(dir: &Path, upstream: &Upstream, url: &str, ca_file: Option<&Path>) -> ProxyProcess {
    std::fs::create_dir_all(dir).unwrap();
    let store = format!("path = \"{}\"", dir.join("proxy.redb").display());
    let trust = ca_file.map_or(String::new(), |file| {
        format!("upstream_ca_file = \"{}\"", file.display())
    });
    let path = config_with(dir, upstream.addr, &store, &trust, "");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        &format!("upstream = \"http://{}\"", upstream.addr),
        &format!("upstream = \"{url}\""),
    );
    std::fs::write(&path, text).unwrap();
    ProxyProcess::start(&path)
}

#[test]
fn a_key_executes_once_through_tls_to_an_upstream_whose_certificate_is_checked() {
    let (dir, ca_file, upstream) = tls_upstream_and_its_ca();
    let url = format!("https://localhost:{}", upstream.addr.port());
    let proxy = proxy(dir.path(), &upstream, &url, Some(&ca_file));

    let first = post_withdrawal(&proxy, "k-tls", BODY);
    assert_eq!(first.status, 201, "{first:?}");
    let again = post_withdrawal(&proxy, "k-tls", BODY);
    assert_eq!(again.status, 201, "{again:?}");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(upstream.calls("A"), 1);
    // A second key reuses the pooled TLS connection or opens another: either
    // way it reaches the upstream once.
    let other = post_withdrawal(&proxy, "k-tls-2", BODY);
    assert_eq!(other.status, 201, "{other:?}");
    assert_eq!(upstream.calls("A"), 2);
}

#[test]
fn a_certificate_the_proxy_cannot_trust_sends_nothing_and_releases_the_key() {
    let (dir, ca_file, upstream) = tls_upstream_and_its_ca();
    let port = upstream.addr.port();

    // Mozilla's roots do not hold the test CA; the CA is right but the host is
    // not a name the certificate holds.
    let untrusted = proxy(
        &dir.path().join("untrusted"),
        &upstream,
        &format!("https://localhost:{port}"),
        None,
    );
    let wrong_name = proxy(
        &dir.path().join("wrong-name"),
        &upstream,
        &format!("https://127.0.0.1:{port}"),
        Some(&ca_file),
    );
    for (proxy, why) in [
        (&untrusted, "UnknownIssuer"),
        (&wrong_name, "not valid for name"),
    ] {
        for attempt in 0..2 {
            let refused = post_withdrawal(proxy, "k-refused", BODY);
            assert_eq!(
                (refused.status, refused.problem().as_str()),
                (502, "upstream-unavailable"),
                "attempt {attempt}: nothing was sent, so the record was released and the retry \
                 tries again: {refused:?}"
            );
        }
        let log = proxy.stderr();
        assert!(
            log.contains("TLS handshake with") && log.contains(why),
            "the proxy's log names the certificate's fault ({why}): {log}"
        );
    }
    assert_eq!(upstream.calls("A"), 0, "no request reached the upstream");
}
