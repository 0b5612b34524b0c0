//! TLS to PostgreSQL, as the URL's `sslmode` and `sslrootcert` ask for it.
//!
//! The test turns TLS on in the shared server (a certificate for `localhost`,
//! issued by a CA made here), runs a store in each mode, and turns it off again:
//! `require` and `verify-ca` encrypt, `verify-full` checks the host's name too
//! (`localhost` passes, `127.0.0.1` is not in the certificate), and a CA the
//! server's certificate does not chain to is refused with a connection error
//! that names the certificate. Both the pool's connections and the listener's
//! are checked for encryption on the server's side (`pg_stat_ssl`).
//!
//! Client certificates (`sslcert`, `sslkey`): the server is made to log one
//! role in by certificate alone (`cert` in `pg_hba.conf`, CA in
//! `ssl_ca_file`), and a store logs in with the CA's certificate for it; the
//! same role without a certificate, or with one from another CA, is refused.

#![cfg(feature = "postgres")]

use crate::support::certificates::ca;
use crate::support::pg as pg_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use idemkit::adapters::postgres::{PgOptions, PostgresAdapter};
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey};
use rcgen::{CertificateParams, KeyPair};

/// A CA and the server certificate it issued, in `dir`; client certificates
/// for [`CERT_ROLE`] from that CA and from another.
struct Certificates {
    ca: PathBuf,
    other_ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client: (PathBuf, PathBuf),
    other_client: (PathBuf, PathBuf),
}

/// The role the server logs in by client certificate only.
const CERT_ROLE: &str = "idemkit_cert";

fn certificates(dir: &Path) -> Certificates {
    let (ca_cert, ca_key) = ca("idemkit test CA");
    let (other_cert, other_key) = ca("another CA");
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
        client: client_certificate(dir, "client", &ca_cert, &ca_key),
        other_client: client_certificate(dir, "other-client", &other_cert, &other_key),
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

/// A certificate whose common name is [`CERT_ROLE`], issued by `issuer`, and
/// its key (readable by its owner only, as libpq and idemkit require).
fn client_certificate(
    dir: &Path,
    name: &str,
    issuer: &rcgen::Certificate,
    issuer_key: &KeyPair,
) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, CERT_ROLE);
    let cert = params.signed_by(&key, issuer, issuer_key).unwrap();
    let files = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&files.0, cert.pem()).unwrap();
    std::fs::write(&files.1, key.serialize_pem()).unwrap();
    std::fs::set_permissions(&files.1, std::fs::Permissions::from_mode(0o600)).unwrap();
    files
}

fn admin() -> postgres::Client {
    postgres::Client::connect(&pg_support::url(), postgres::NoTls).unwrap()
}

/// TLS on in the server until dropped.
struct ServerTls;

impl ServerTls {
    fn on(files: &Certificates) -> ServerTls {
        ServerTls::with(files, None)
    }

    /// TLS on, checking client certificates against `client_ca`.
    fn with(files: &Certificates, client_ca: Option<&Path>) -> ServerTls {
        let mut admin = admin();
        let ca = client_ca.map(|ca| ("ssl_ca_file", ca.display().to_string()));
        for (name, value) in [
            ("ssl_cert_file", files.cert.display().to_string()),
            ("ssl_key_file", files.key.display().to_string()),
            ("ssl", "on".to_owned()),
        ]
        .into_iter()
        .chain(ca)
        {
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
        for name in ["ssl", "ssl_cert_file", "ssl_key_file", "ssl_ca_file"] {
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

/// Lines put first in the server's `pg_hba.conf` until dropped (the file as
/// it was is written back, and the server reloads both times).
struct HbaLines {
    file: PathBuf,
    before: String,
}

impl HbaLines {
    fn first(lines: &str) -> HbaLines {
        let mut admin = admin();
        let file = PathBuf::from(
            admin
                .query_one("SHOW hba_file", &[])
                .unwrap()
                .get::<_, String>(0),
        );
        // The test edits the server's own file: a server of its own, as
        // scripts/with-postgres.sh starts, on this machine.
        let before = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; this test rewrites the server's pg_hba.conf, so it needs the \
                 server scripts/with-postgres.sh starts",
                file.display()
            )
        });
        std::fs::write(&file, format!("{lines}\n{before}")).unwrap();
        let hba = HbaLines { file, before };
        admin.batch_execute("SELECT pg_reload_conf()").unwrap();
        let errors: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_hba_file_rules WHERE error IS NOT NULL",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(errors, 0, "the server refused the lines:\n{lines}");
        hba
    }
}

impl Drop for HbaLines {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.file, &self.before);
        let _ = admin().batch_execute("SELECT pg_reload_conf()");
    }
}

/// `url` with [`CERT_ROLE`] as its user (the test URL names one: `postgres@`).
fn as_cert_role(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (_, host) = rest.split_once('@').expect("the test URL names its user");
    format!("{scheme}://{CERT_ROLE}@{host}")
}

/// Whether the server saw a connection of `application` since `since` whose
/// client certificate names `dn` (`pg_stat_ssl.client_dn`).
fn logged_in_by_certificate(application: &str, since: &str, dn: &str) -> bool {
    admin()
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1 AND a.backend_start >= $2::text::timestamptz \
             AND a.usename = $3 AND s.client_dn = $4",
            &[&application, &since, &CERT_ROLE, &dn],
        )
        .unwrap()
        .get::<_, i64>(0)
        >= 1
}

#[test]
fn a_client_certificate_logs_in_where_the_server_accepts_nothing_else() {
    let _server = pg_support::alone();
    let url = pg_support::url();
    let dir = tempfile::tempdir().unwrap();
    let files = certificates(dir.path());
    let mut admin = admin();
    let database: String = admin
        .query_one("SELECT current_database()", &[])
        .unwrap()
        .get(0);
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{CERT_ROLE}') \
             THEN CREATE ROLE {CERT_ROLE} LOGIN; END IF; END $$; \
             GRANT CREATE ON DATABASE {database} TO {CERT_ROLE}"
        ))
        .unwrap();
    let _tls = ServerTls::with(&files, Some(&files.ca));
    // The role logs in over TLS with a certificate from the CA, and no other way.
    let _hba = HbaLines::first(&format!(
        "hostssl all {CERT_ROLE} all cert\nhost all {CERT_ROLE} all reject"
    ));
    let ca = files.ca.display().to_string();
    let with_certificate = |(cert, key): &(PathBuf, PathBuf)| {
        with_params(
            &as_cert_role(&url),
            "localhost",
            &format!(
                "sslmode=verify-full&sslrootcert={ca}&sslcert={}&sslkey={}",
                cert.display(),
                key.display()
            ),
        )
    };

    // The pool's connections and the listener's present the certificate.
    let since = server_now();
    let store = claim_and_complete(
        connect(&with_certificate(&files.client), "tls_client_cert").unwrap(),
        "tls-client-certificate",
    );
    pg_support::listening(&store);
    let dn = format!("/CN={CERT_ROLE}");
    assert!(
        logged_in_by_certificate("idemkit", &since, &dn),
        "no pool connection of {CERT_ROLE} logged in with {dn}"
    );
    assert!(
        logged_in_by_certificate("idemkit-listen", &since, &dn),
        "the listener of {CERT_ROLE} did not log in with {dn}"
    );
    drop(store);

    // Refused: no certificate, and a certificate from a CA the server does not trust.
    let without = with_params(
        &as_cert_role(&url),
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    for (url, what, why) in [
        (
            without,
            "without a certificate",
            "FATAL: connection requires a valid client certificate",
        ),
        (
            with_certificate(&files.other_client),
            "with another CA's certificate",
            "received fatal alert: UnknownCA",
        ),
    ] {
        let err = connect(&url, "tls_client_refused")
            .err()
            .unwrap_or_else(|| panic!("{what}: connected"));
        let message = err.to_string();
        assert!(
            err.is_unavailable() && message.contains(why),
            "{what}: {message}"
        );
    }
}
