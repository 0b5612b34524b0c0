//! `idemkit proxy` serving HTTPS itself (`tls_cert_file`, `tls_key_file`):
//! keys execute once over TLS and the upstream is told the client used it, a
//! client speaking plain HTTP to the port gets no answer and disturbs nothing,
//! one that never begins its handshake does not hold up a stop, and a renewed certificate is served without a restart (a broken one is not,
//! and the one before stays). The admin listener serves HTTPS on its own
//! (`admin_tls_cert_file`, `admin_tls_key_file`), and a console session's
//! cookie is then `Secure`; `idemkit console` does with `--tls-cert-file` and
//! `--tls-key-file`, and warns when it serves plain HTTP beyond loopback.
#![cfg(feature = "cli")]

use crate::support::idemkit_proxy as proxy_support;

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::tls::{Certificates, localhost_certificates, request_over_tls};
use crate::support::{Reply, request};
use proxy_support::{ADMIN_TOKEN, ProxyProcess, Upstream, admin_authorization, config_with};

const BODY: &[u8] = br#"{"amount":10,"request_id":"r-1"}"#;

/// The certificate and key files a proxy serves, in `dir`.
struct Served {
    cert: PathBuf,
    key: PathBuf,
}

impl Served {
    fn write(dir: &Path, certificates: &Certificates) -> Served {
        let served = Served {
            cert: dir.join("proxy.crt"),
            key: dir.join("proxy.key"),
        };
        served.replace_with(certificates);
        served
    }

    /// The files rewritten, as a renewal does: the certificate, then the key.
    fn replace_with(&self, certificates: &Certificates) {
        std::fs::write(&self.cert, &certificates.certificate).unwrap();
        std::fs::write(&self.key, &certificates.key).unwrap();
    }
}

/// A proxy in front of `upstream` serving HTTPS with `served`'s files.
fn tls_proxy(dir: &Path, upstream: &Upstream, served: &Served) -> ProxyProcess {
    let store = format!("path = \"{}\"", dir.join("proxy.redb").display());
    let tls = format!(
        "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
        served.cert.display(),
        served.key.display()
    );
    ProxyProcess::start(&config_with(dir, upstream.addr, &store, &tls, ""))
}

/// Tenant `acme`'s withdrawal from account A under `key`, over TLS to `addr`
/// as `localhost`, trusting only the CA of `ca` (PEM).
fn post_over_tls(addr: SocketAddr, ca: &str, key: &str) -> io::Result<Reply> {
    let headers: [(&str, &[u8]); 3] = [
        ("Content-Type", b"application/json"),
        ("Idempotency-Key", key.as_bytes()),
        ("X-Tenant-Id", b"acme"),
    ];
    request_over_tls(addr, ca, "POST", "/accounts/A/withdraw", &headers, BODY)
}

/// `idemkit console` over the store `ops.redb` in `dir`, listening on
/// `listen`, with the test admin token.
fn console_command(dir: &Path, listen: &str) -> std::process::Command {
    let token_file = dir.join("admin.token");
    std::fs::write(&token_file, format!("{ADMIN_TOKEN}\n")).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_idemkit"));
    command
        .args(["console", "--listen", listen, "--db"])
        .arg(dir.join("ops.redb"))
        .arg("--token-file")
        .arg(token_file);
    command
}

/// The `notAfter` of a PEM certificate, in Unix seconds.
fn not_after(pem: &str) -> u64 {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use x509_cert::der::Decode;
    let der = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    let parsed = x509_cert::Certificate::from_der(der.as_ref()).unwrap();
    parsed
        .tbs_certificate
        .validity
        .not_after
        .to_unix_duration()
        .as_secs()
}

/// The `X-Forwarded-Proto` of every request the upstream saw.
fn forwarded_protos(upstream: &Upstream) -> Vec<String> {
    let seen = upstream.seen.lock().unwrap();
    seen.headers
        .iter()
        .map(|headers| {
            headers
                .iter()
                .find(|(name, _)| name == "x-forwarded-proto")
                .map_or_else(String::new, |(_, value)| value.clone())
        })
        .collect()
}

#[test]
fn a_key_executes_once_over_https_and_the_upstream_is_told_so() {
    let dir = tempfile::tempdir().unwrap();
    let certificates = localhost_certificates();
    let served = Served::write(dir.path(), &certificates);
    let upstream = Upstream::start(Duration::ZERO);
    let mut proxy = tls_proxy(dir.path(), &upstream, &served);

    let first = post_over_tls(proxy.addr, &certificates.ca, "k-https").unwrap();
    assert_eq!(first.status, 201, "{first:?}");
    let again = post_over_tls(proxy.addr, &certificates.ca, "k-https").unwrap();
    assert_eq!(again.status, 201, "{again:?}");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, first.body);
    assert_eq!(upstream.calls("A"), 1);
    assert_eq!(forwarded_protos(&upstream), ["https"]);

    // Plain HTTP to the TLS port: no HTTP answer, nothing upstream, and the
    // listener goes on serving TLS.
    let headers: [(&str, &[u8]); 2] = [("Idempotency-Key", b"k-plain"), ("X-Tenant-Id", b"acme")];
    let plain = request(proxy.addr, "POST", "/accounts/A/withdraw", &headers, BODY);
    assert!(plain.is_err(), "a plain request was answered: {plain:?}");
    let after = post_over_tls(proxy.addr, &certificates.ca, "k-https-2").unwrap();
    assert_eq!(after.status, 201, "{after:?}");
    assert_eq!(upstream.calls("A"), 2);

    // That failed handshake is counted, and the served certificate's expiry
    // is reported (`/metrics` on the admin listener).
    let failures = r#"idemkit_tls_handshake_failures_total{listener="listen"} 1"#;
    let expiry = format!(
        r#"idemkit_tls_certificate_expiry_timestamp_seconds{{listener="listen"}} {}"#,
        not_after(&certificates.certificate)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let metrics = String::from_utf8(proxy.admin("GET", "/metrics", b"").body).unwrap();
        if metrics.contains(failures) || Instant::now() > deadline {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(metrics.contains(failures), "{metrics}");
    assert!(metrics.contains(&expiry), "{expiry} not in {metrics}");

    // A client that connects and never starts its handshake does not hold up
    // a stop (the handshake's own deadline is the request head's, 30 s).
    let _silent = std::net::TcpStream::connect(proxy.addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let asked = Instant::now();
    proxy.signal("TERM");
    let (status, stderr) = proxy.wait_exit_with_stderr(Duration::from_secs(20));
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the stop waited {:?} for a handshake that never began",
        asked.elapsed()
    );
}

#[test]
fn a_renewed_certificate_is_served_without_a_restart_and_a_broken_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let old = localhost_certificates();
    let served = Served::write(dir.path(), &old);
    let upstream = Upstream::start(Duration::ZERO);
    let proxy = tls_proxy(dir.path(), &upstream, &served);
    assert_eq!(
        post_over_tls(proxy.addr, &old.ca, "k-old").unwrap().status,
        201
    );

    // Renewed: a certificate from another CA. Within a few seconds new
    // connections get it, and the old CA no longer verifies them.
    let renewed = localhost_certificates();
    served.replace_with(&renewed);
    let started = Instant::now();
    let reply = loop {
        match post_over_tls(proxy.addr, &renewed.ca, "k-renewed") {
            Ok(reply) => break reply,
            Err(e) => assert!(
                started.elapsed() < Duration::from_secs(10),
                "the renewed certificate was not served within 10 s: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(reply.status, 201, "{reply:?}");
    let refused = post_over_tls(proxy.addr, &old.ca, "k-old-ca").unwrap_err();
    // Both CAs have one name, so the old one is found and its signature fails.
    assert!(
        refused.to_string().contains("invalid peer certificate"),
        "{refused}"
    );

    // A renewal that left a broken key: the renewed pair stays in use.
    std::fs::write(&served.key, "not a key\n").unwrap();
    std::thread::sleep(Duration::from_millis(1_200));
    for attempt in 0..3 {
        let reply = post_over_tls(proxy.addr, &renewed.ca, &format!("k-kept-{attempt}")).unwrap();
        assert_eq!(reply.status, 201, "{reply:?}");
    }
    let log = proxy.stderr();
    assert!(
        log.contains("TLS certificate not reloaded") && log.contains("tls_key_file"),
        "the proxy's log says why the files were not taken: {log}"
    );
    assert_eq!(upstream.calls("A"), 5);
}

#[test]
fn the_admin_listener_serves_https_alone_and_its_console_cookie_is_secure() {
    let dir = tempfile::tempdir().unwrap();
    let certificates = localhost_certificates();
    let served = Served::write(dir.path(), &certificates);
    let upstream = Upstream::start(Duration::ZERO);
    let store = format!("path = \"{}\"", dir.path().join("proxy.redb").display());
    let admin_tls = format!(
        "admin_tls_cert_file = \"{}\"\nadmin_tls_key_file = \"{}\"",
        served.cert.display(),
        served.key.display()
    );
    let proxy = ProxyProcess::start(&config_with(
        dir.path(),
        upstream.addr,
        &store,
        &admin_tls,
        "",
    ));
    let ca = &certificates.ca;

    // The proxy's own listener stays plain HTTP.
    let headers: [(&str, &[u8]); 3] = [
        ("Content-Type", b"application/json"),
        ("Idempotency-Key", b"k-admin"),
        ("X-Tenant-Id", b"acme"),
    ];
    let executed = request(proxy.addr, "POST", "/accounts/A/withdraw", &headers, BODY).unwrap();
    assert_eq!(executed.status, 201, "{executed:?}");

    // The admin API over TLS: health without a token, the listing with it.
    let health = request_over_tls(proxy.admin, ca, "GET", "/healthz", &[], b"").unwrap();
    assert_eq!(health.status, 200, "{health:?}");
    let authorization = admin_authorization();
    let listed = request_over_tls(
        proxy.admin,
        ca,
        "GET",
        "/records?state=completed",
        &[("Authorization", &authorization)],
        b"",
    )
    .unwrap();
    assert_eq!(listed.status, 200, "{listed:?}");
    let listed = listed.json();
    assert_eq!(listed["records"][0]["key"], "k-admin", "{listed}");

    // Plain HTTP to the admin port gets no answer, so a token sent that way
    // is never read.
    let plain = request(
        proxy.admin,
        "GET",
        "/records?state=completed",
        &[("Authorization", &authorization)],
        b"",
    );
    assert!(
        plain.is_err(),
        "the admin listener answered plain HTTP: {plain:?}"
    );
    // Counted as the admin listener's failed handshake; its certificate's
    // expiry is reported under its own label.
    let expected = [
        r#"idemkit_tls_handshake_failures_total{listener="admin"} 1"#.to_owned(),
        format!(
            r#"idemkit_tls_certificate_expiry_timestamp_seconds{{listener="admin"}} {}"#,
            not_after(&certificates.certificate)
        ),
    ];
    let deadline = Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let metrics = request_over_tls(
            proxy.admin,
            ca,
            "GET",
            "/metrics",
            &[("Authorization", &authorization)],
            b"",
        )
        .unwrap();
        let metrics = String::from_utf8(metrics.body).unwrap();
        if expected.iter().all(|line| metrics.contains(line)) || Instant::now() > deadline {
            break metrics;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for line in &expected {
        assert!(metrics.contains(line), "{line} not in {metrics}");
    }
    // The proxy's own listener is plain: nothing is reported for it.
    assert!(!metrics.contains(r#"listener="listen""#), "{metrics}");

    // A console login over TLS: the session's cookie is never sent without it.
    let form = format!("name=Sam+Ops&token={ADMIN_TOKEN}");
    let login = request_over_tls(
        proxy.admin,
        ca,
        "POST",
        "/console/login",
        &[("Content-Type", b"application/x-www-form-urlencoded")],
        form.as_bytes(),
    )
    .unwrap();
    assert_eq!(login.status, 303, "{login:?}");
    let cookie = login.header("set-cookie").unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Secure"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(
        !proxy.stderr().contains("plain HTTP beyond this host"),
        "{}",
        proxy.stderr()
    );
}

#[test]
fn idemkit_console_serves_https_with_both_tls_flags_and_refuses_one_alone() {
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let certificates = localhost_certificates();
    let served = Served::write(dir.path(), &certificates);
    let console = || {
        let mut command = console_command(dir.path(), "127.0.0.1:0");
        command.arg("--tls-cert-file").arg(&served.cert);
        command
    };

    let alone = console().output().unwrap();
    assert_eq!(alone.status.code(), Some(64), "{alone:?}");
    let stderr = String::from_utf8_lossy(&alone.stderr);
    assert!(
        stderr.contains("--tls-cert-file without --tls-key-file"),
        "{stderr}"
    );

    let mut child = console()
        .arg("--tls-key-file")
        .arg(&served.key)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let printed = printed_after(&mut child, "idemkit console: https://")
        .map(|url| url.trim_end_matches("/console").to_owned());
    let served_at = printed.map(|addr| addr.parse::<SocketAddr>());
    let health = served_at.as_ref().map(|addr| {
        let addr = *addr.as_ref().unwrap();
        request_over_tls(addr, &certificates.ca, "GET", "/healthz", &[], b"")
    });
    let _ = child.kill();
    let _ = child.wait();
    let health = health
        .expect("idemkit console printed an https:// address")
        .unwrap();
    assert_eq!(health.status, 200, "{health:?}");
}

#[test]
fn an_admin_listener_in_plain_http_beyond_loopback_is_warned_about() {
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    let start = |listen: &str| {
        let mut child = console_command(dir.path(), listen)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Serving once it printed its address: the warning, if any, came first.
        let served = printed_after(&mut child, "idemkit console: http://").is_some();
        let _ = child.kill();
        let _ = child.wait();
        let stderr = crate::support::stderr_of(&mut child);
        assert!(served, "{stderr}");
        stderr
    };
    let warning = "serves plain HTTP beyond this host";
    let beyond = start("0.0.0.0:0");
    assert!(beyond.contains(warning), "{beyond}");
    assert!(
        beyond.contains("--tls-cert-file and --tls-key-file"),
        "{beyond}"
    );
    let loopback = start("127.0.0.1:0");
    assert!(!loopback.contains(warning), "{loopback}");
}

/// The rest of the first line of `child`'s (piped) stdout that starts with
/// `prefix`, such as the address `idemkit console` prints once it serves;
/// `None` when its stdout ends first.
fn printed_after(child: &mut std::process::Child, prefix: &str) -> Option<String> {
    use std::io::BufRead;
    let stdout = child.stdout.take()?;
    std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix(prefix).map(str::to_owned))
}
