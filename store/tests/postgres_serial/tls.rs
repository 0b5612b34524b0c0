//! TLS to PostgreSQL, as the URL's `sslmode` and `sslrootcert` ask for it.
//!
//! The test turns TLS on in the shared server (a certificate for `localhost`,
//! issued by a CA made here), runs a store in each mode, and turns it off again:
//! `require` and `verify-ca` encrypt, `verify-full` checks the host's name too
//! (`localhost` passes, `127.0.0.1` is not in the certificate), and a CA the
//! server's certificate does not chain to is refused with a connection error
//! that names the certificate. Both the pool's connections and the listener's
//! are checked for encryption on the server's side (`pg_stat_ssl`).

#![cfg(feature = "postgres")]

use crate::support::pg as pg_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idemkit::adapters::postgres::{PgOptions, PostgresAdapter};
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

/// A CA and the server certificate it issued, in `dir`.
struct Certificates {
    ca: PathBuf,
    other_ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    (params.self_signed(&key).unwrap(), key)
}

fn certificates(dir: &Path) -> Certificates {
    let (ca_cert, ca_key) = ca("idemkit test CA");
    let (other_cert, _) = ca("another CA");
    let server_key = KeyPair::generate().unwrap();
    // Named for `localhost` only: a connection to 127.0.0.1 does not match it.
    let server = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&server_key, &ca_cert, &ca_key)
        .unwrap();
    let files = Certificates {
        ca: dir.join("ca.pem"),
        other_ca: dir.join("other-ca.pem"),
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
    };
    std::fs::write(&files.ca, ca_cert.pem()).unwrap();
    std::fs::write(&files.other_ca, other_cert.pem()).unwrap();
    std::fs::write(&files.cert, server.pem()).unwrap();
    std::fs::write(&files.key, server_key.serialize_pem()).unwrap();
    // The server reads its key as its own user, and refuses a key others can read.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600)).unwrap();
    if let Ok(user) = std::env::var("IDEMKIT_TEST_PG_RUNAS") {
        let status = std::process::Command::new("chown")
            .arg("-R")
            .arg(&user)
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "chown {user} {}", dir.display());
    }
    files
}

fn admin() -> postgres::Client {
    postgres::Client::connect(&pg_support::url(), postgres::NoTls).unwrap()
}

/// TLS on in the server until dropped.
struct ServerTls;

impl ServerTls {
    fn on(files: &Certificates) -> ServerTls {
        let mut admin = admin();
        for (name, value) in [
            ("ssl_cert_file", files.cert.display().to_string()),
            ("ssl_key_file", files.key.display().to_string()),
            ("ssl", "on".to_owned()),
        ] {
            // ALTER SYSTEM takes no parameters; the paths are ours.
            admin
                .batch_execute(&format!("ALTER SYSTEM SET {name} = '{value}'"))
                .unwrap();
        }
        admin.batch_execute("SELECT pg_reload_conf()").unwrap();
        assert!(
            ssl_becomes("on"),
            "the server did not turn TLS on within 10 s"
        );
        ServerTls
    }
}

impl Drop for ServerTls {
    fn drop(&mut self) {
        let mut admin = admin();
        for name in ["ssl", "ssl_cert_file", "ssl_key_file"] {
            let _ = admin.batch_execute(&format!("ALTER SYSTEM RESET {name}"));
        }
        let _ = admin.batch_execute("SELECT pg_reload_conf()");
        // The next test expects a plain server.
        assert!(
            ssl_becomes("off"),
            "the server did not turn TLS off within 10 s"
        );
    }
}

/// Whether a new session sees `ssl` at `value` within 10 s (a reload is
/// asynchronous).
fn ssl_becomes(value: &str) -> bool {
    pg_support::poll_until(Duration::from_secs(10), || {
        admin()
            .query_one("SELECT current_setting('ssl')", &[])
            .is_ok_and(|row| row.get::<_, String>(0) == value)
    })
    .is_some()
}

fn with_params(url: &str, host: &str, params: &str) -> String {
    let url = url.replace("127.0.0.1", host);
    let joiner = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joiner}{params}")
}

fn connect(url: &str, tag: &str) -> Result<PostgresAdapter, idemkit::adapters::postgres::PgError> {
    let schema = pg_support::unique_schema(tag);
    PostgresAdapter::connect_with(
        url,
        PgOptions {
            connect_timeout: Duration::from_secs(2),
            ..pg_support::options(&schema, 2)
        },
    )
}

/// A claim and its completion through `adapter`: the store works over it.
fn claim_and_complete(adapter: PostgresAdapter, key: &str) -> Store {
    let store = Store::from(adapter);
    let scope = crate::support::scope();
    let key = IdempotencyKey::new(key).unwrap();
    let policy = Policy::default().with_effect(EffectKind::External);
    let Claim::Execute(guard) = store
        .claim(
            &scope,
            &key,
            Fingerprint::from_bytes([7; 32]),
            "tls-test",
            &policy,
        )
        .unwrap()
    else {
        panic!("a new key executes")
    };
    guard
        .complete(StoredResponse::new(201, b"{}".to_vec()))
        .unwrap();
    store
}

/// Whether every connection named `application` begun since `since` (server
/// time) is encrypted, and how many there are.
fn encrypted(application: &str, since: &str) -> (bool, i64) {
    let row = admin()
        .query_one(
            "SELECT coalesce(bool_and(s.ssl), false), count(*) \
             FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1 AND a.backend_start >= $2::text::timestamptz",
            &[&application, &since],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// Asserts that the connections named `application` begun since `since` are
/// there (the store still holds them) and all encrypted.
fn assert_all_encrypted(application: &str, since: &str, what: &str) {
    let (all, count) = encrypted(application, since);
    assert!(
        count >= 1,
        "{what}: no connection named {application} since {since}"
    );
    assert!(
        all,
        "{what}: a connection named {application} is not encrypted"
    );
}

fn server_now() -> String {
    admin()
        .query_one("SELECT clock_timestamp()::text", &[])
        .unwrap()
        .get(0)
}

#[test]
fn sslmode_encrypts_and_verify_modes_check_the_certificate() {
    let _server = pg_support::alone();
    let url = pg_support::url();
    let dir = tempfile::tempdir().unwrap();
    let files = certificates(dir.path());
    let _tls = ServerTls::on(&files);
    let ca = files.ca.display().to_string();

    // require: encrypted, the certificate (from a CA nobody named) not checked.
    let since = server_now();
    let store = claim_and_complete(
        connect(
            &with_params(&url, "127.0.0.1", "sslmode=require"),
            "tls_require",
        )
        .unwrap(),
        "tls-require",
    );
    assert_all_encrypted("idemkit", &since, "the pool's connections");
    // The listener connects as the pool does.
    pg_support::listening(&store);
    assert_all_encrypted("idemkit-listen", &since, "the listener's connection");
    drop(store);

    // With its CA: verify-full against the name in the certificate, and
    // verify-ca, which checks the chain, not the name (127.0.0.1 passes).
    for (host, mode) in [("localhost", "verify-full"), ("127.0.0.1", "verify-ca")] {
        let since = server_now();
        let verified = with_params(&url, host, &format!("sslmode={mode}&sslrootcert={ca}"));
        let _store = claim_and_complete(
            connect(&verified, "tls_verified").unwrap(),
            &format!("tls-{mode}"),
        );
        assert_all_encrypted("idemkit", &since, mode);
    }

    // Refused, each with the certificate's fault in the error.
    let refusals = [
        (
            with_params(
                &url,
                "127.0.0.1",
                &format!("sslmode=verify-full&sslrootcert={ca}"),
            ),
            "a host the certificate does not name",
            "not valid for name",
        ),
        (
            with_params(
                &url,
                "localhost",
                &format!(
                    "sslmode=verify-full&sslrootcert={}",
                    files.other_ca.display()
                ),
            ),
            "a CA the certificate does not chain to",
            "UnknownIssuer",
        ),
        (
            with_params(&url, "localhost", "sslmode=verify-full"),
            "Mozilla's roots for a private CA",
            "UnknownIssuer",
        ),
    ];
    for (url, what, fault) in refusals {
        let started = Instant::now();
        let err = connect(&url, "tls_refused")
            .err()
            .unwrap_or_else(|| panic!("{what}: connected"));
        let message = err.to_string();
        assert!(err.is_unavailable(), "{what}: {message}");
        assert!(
            message.contains("invalid peer certificate") && message.contains(fault),
            "{what}: {message}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn a_plain_server_still_serves_the_default_mode_and_refuses_require() {
    let _server = pg_support::alone();
    let url = pg_support::url();
    // The default (prefer) falls back to plain TCP on a server without TLS.
    let since = server_now();
    let _store = claim_and_complete(connect(&url, "tls_prefer").unwrap(), "tls-prefer");
    let (all, count) = encrypted("idemkit", &since);
    assert!(!all && count >= 1, "plain connections: {count}");
    let err = connect(
        &with_params(&url, "127.0.0.1", "sslmode=require"),
        "tls_plain",
    )
    .expect_err("require on a server without TLS");
    assert!(err.is_unavailable(), "{err}");
}
