//! TLS on the gateways' own listeners (`tls_cert_file` and `tls_key_file` in
//! `idemkit proxy`'s and `idemkit mcp`'s configurations) and on their admin
//! listeners (`admin_tls_cert_file` and `admin_tls_key_file`).
//!
//! rustls with ring, TLS 1.2 and 1.3, ALPN `http/1.1` (what the listeners
//! speak), no client certificates, and no TLS 1.3 early data: the network may
//! replay early data, the very thing idempotency keys exist to stop.
//!
//! The certificate chain and its key are PEM files, read at start-up, where a
//! file that cannot be read, holds nothing usable or a key that is not the
//! certificate's is refused by name. They are read again when either file's
//! modification time changes (looked at, at a handshake, at most once a
//! second), so a renewed certificate is served without a restart; a pair that
//! fails to load then is logged, and the pair before it stays in use until
//! the files change again.
//!
//! Observed by a [`Metrics`] ([`ListenTls::observed_by`]), a listener reports
//! when the certificate it serves expires (set at start and at each renewal)
//! and counts the handshakes that failed, labelled `listener` = `listen`,
//! `admin` or `console`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use idemkit::http::Metrics;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How often, at most, a handshake looks at the files' modification times.
const RECHECK: Duration = Duration::from_secs(1);

/// The names of a listener's two settings, as its errors and logs say them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) cert: &'static str,
    pub(crate) key: &'static str,
    /// The `listener` label of its metrics.
    listener: &'static str,
}

/// The gateways' own listeners: `tls_cert_file`, `tls_key_file`.
pub(crate) const LISTENER: Settings = Settings {
    cert: "tls_cert_file",
    key: "tls_key_file",
    listener: "listen",
};

/// The admin listeners: `admin_tls_cert_file`, `admin_tls_key_file`.
pub(crate) const ADMIN: Settings = Settings {
    cert: "admin_tls_cert_file",
    key: "admin_tls_key_file",
    listener: "admin",
};

/// `idemkit console`'s listener: `--tls-cert-file`, `--tls-key-file`.
pub(crate) const CONSOLE: Settings = Settings {
    cert: "--tls-cert-file",
    key: "--tls-key-file",
    listener: "console",
};

/// The listener's TLS: a handshake per accepted connection. Cheap to clone.
#[derive(Clone)]
pub(crate) struct ListenTls {
    acceptor: TlsAcceptor,
    resolver: Arc<Reloading>,
}

impl fmt::Debug for ListenTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListenTls").finish_non_exhaustive()
    }
}

impl ListenTls {
    /// Loads `cert` (the chain, the server's own certificate first) and `key`
    /// (its private key, PKCS#8, PKCS#1 or SEC1), given by the settings
    /// `names`. The error names the setting and the file at fault.
    pub(crate) fn load(names: Settings, cert: &Path, key: &Path) -> Result<ListenTls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let files = Files {
            names,
            cert: cert.to_owned(),
            key: key.to_owned(),
        };
        let current = files.load(&provider)?;
        let resolver = Arc::new(Reloading {
            state: Mutex::new(Loaded {
                current,
                stamp: files.stamp(),
                checked: Instant::now(),
            }),
            files,
            provider: Arc::clone(&provider),
            metrics: OnceLock::new(),
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.max_early_data_size = 0;
        Ok(ListenTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            resolver,
        })
    }

    /// Reports to `metrics` from now on: the certificate's expiry (at once,
    /// and at each renewal) and every failed handshake. The first call
    /// decides; later ones change nothing.
    pub(crate) fn observed_by(&self, metrics: &Arc<Metrics>) {
        if self.resolver.metrics.set(Arc::clone(metrics)).is_ok() {
            let state = self
                .resolver
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.resolver.report(&state.current);
        }
    }

    /// The handshake on `tcp` (for [`idemkit::http::serve_upgraded`]): the
    /// encrypted stream, or `None` when the client did not complete it (it
    /// spoke plain HTTP, refused the certificate, or left).
    pub(crate) fn accept(
        &self,
        tcp: TcpStream,
    ) -> impl Future<Output = Option<TlsStream<TcpStream>>> + Send + 'static {
        let acceptor = self.acceptor.clone();
        let resolver = Arc::clone(&self.resolver);
        async move {
            let peer = tcp.peer_addr().ok();
            match acceptor.accept(tcp).await {
                Ok(stream) => Some(stream),
                Err(e) => {
                    // The client's fault, or its choice: not worth a warning
                    // each (a scanner would fill the log); counted instead.
                    tracing::debug!(?peer, error = %e, "TLS handshake failed");
                    if let Some(metrics) = resolver.metrics.get() {
                        metrics.tls_handshake_failed(resolver.files.names.listener);
                    }
                    None
                }
            }
        }
    }
}

/// Serves `router` on `listener`, over `tls` when given (plain HTTP
/// otherwise), until `stop`; each request head (and handshake) within
/// `header_read_timeout`.
pub(crate) async fn serve_router(
    tls: Option<ListenTls>,
    listener: tokio::net::TcpListener,
    header_read_timeout: Duration,
    router: axum::Router,
    stop: impl Future<Output = ()> + Send,
) {
    match tls {
        None => idemkit::http::serve_router(listener, header_read_timeout, router, stop).await,
        Some(tls) => {
            let handshake = |tcp| tls.accept(tcp);
            idemkit::http::serve_router_upgraded(
                listener,
                header_read_timeout,
                router,
                handshake,
                stop,
            )
            .await;
        }
    }
}

/// The two settings `names` as a configuration gives them: both (TLS),
/// neither (plain HTTP), or one alone, refused.
pub(crate) fn from_settings(
    names: Settings,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Option<ListenTls>, String> {
    let Settings {
        cert: cert_name,
        key: key_name,
        ..
    } = names;
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => ListenTls::load(names, cert, key).map(Some),
        (Some(_), None) => Err(format!(
            "{cert_name} without {key_name}: serving TLS needs the certificate and its key"
        )),
        (None, Some(_)) => Err(format!(
            "{key_name} without {cert_name}: serving TLS needs the certificate and its key"
        )),
    }
}

/// The two files of a certificate.
#[derive(Debug)]
struct Files {
    names: Settings,
    cert: PathBuf,
    key: PathBuf,
}

/// Both files' modification times (`None` for one that cannot be read).
type Stamp = (Option<SystemTime>, Option<SystemTime>);

impl Files {
    fn stamp(&self) -> Stamp {
        let modified = |file: &Path| std::fs::metadata(file).and_then(|m| m.modified()).ok();
        (modified(&self.cert), modified(&self.key))
    }

    fn load(&self, provider: &CryptoProvider) -> Result<Arc<CertifiedKey>, String> {
        let (cert, key) = (&self.cert, &self.key);
        let chain = crate::tls_files::certificates(cert, self.names.cert)?;
        let private = crate::tls_files::private_key(key, self.names.key)?;
        CertifiedKey::from_der(chain, private, provider)
            .map(Arc::new)
            .map_err(|e| {
                format!(
                    "{} {} with {} {}: {e}",
                    self.names.cert,
                    cert.display(),
                    self.names.key,
                    key.display()
                )
            })
    }
}

/// The certificate in use, and when the files were last looked at.
struct Loaded {
    current: Arc<CertifiedKey>,
    stamp: Stamp,
    checked: Instant,
}

/// Serves the loaded certificate, loading the files again when they change.
struct Reloading {
    files: Files,
    provider: Arc<CryptoProvider>,
    state: Mutex<Loaded>,
    /// Where the certificate's expiry and failed handshakes are reported.
    metrics: OnceLock<Arc<Metrics>>,
}

impl Reloading {
    /// The certificate to serve now: the files are loaded again if either
    /// changed since they were last looked at (at most once per [`RECHECK`]).
    fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.checked.elapsed() >= RECHECK {
            state.checked = Instant::now();
            let stamp = self.files.stamp();
            if stamp != state.stamp {
                // Tried once per change: a pair half-written now is tried
                // again when its other file is written.
                state.stamp = stamp;
                match self.files.load(&self.provider) {
                    Ok(loaded) => {
                        state.current = loaded;
                        self.report(&state.current);
                        tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                    }
                    Err(e) => tracing::warn!(
                        error = %e,
                        "TLS certificate not reloaded; the one loaded before stays in use"
                    ),
                }
            }
        }
        Arc::clone(&state.current)
    }

    /// Sets the expiry metric from `served`'s own certificate.
    fn report(&self, served: &CertifiedKey) {
        let (Some(metrics), Some(not_after)) = (
            self.metrics.get(),
            served.cert.first().and_then(not_after_unix_seconds),
        ) else {
            return;
        };
        metrics.tls_certificate(self.files.names.listener, not_after);
    }
}

/// The `notAfter` of `certificate` (DER), in Unix seconds; `None` if it does
/// not parse as X.509 (rustls served it anyway: the metric is then absent).
fn not_after_unix_seconds(certificate: &CertificateDer<'_>) -> Option<i64> {
    use x509_cert::der::Decode;
    let parsed = x509_cert::Certificate::from_der(certificate.as_ref()).ok()?;
    let not_after = parsed.tbs_certificate.validity.not_after.to_unix_duration();
    i64::try_from(not_after.as_secs()).ok()
}

impl fmt::Debug for Reloading {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloading")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for `localhost` and its key, written to `dir`
    /// under `name`.
    fn write_pair(dir: &Path, name: &str) -> Files {
        write_pair_until(dir, name, (4096, 1, 1))
    }

    /// [`write_pair`] with a certificate valid until `(year, month, day)`.
    fn write_pair_until(dir: &Path, name: &str, (year, month, day): (i32, u8, u8)) -> Files {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        params.not_after = rcgen::date_time_ymd(year, month, day);
        let cert = params.self_signed(&key).unwrap();
        let files = Files {
            names: LISTENER,
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
    }

    /// The expiry metric's line for the `listen` listener, if rendered.
    fn expiry_line(metrics: &Metrics) -> Option<String> {
        metrics
            .render()
            .lines()
            .find(|l| {
                l.starts_with(
                    "idemkit_tls_certificate_expiry_timestamp_seconds{listener=\"listen\"}",
                )
            })
            .map(str::to_owned)
    }

    #[test]
    fn the_served_certificates_expiry_is_reported_at_start_and_after_a_renewal() {
        let dir = tempfile::tempdir().unwrap();
        // 2031-05-17T00:00:00Z and 2032-01-01T00:00:00Z.
        let first = write_pair_until(dir.path(), "first", (2031, 5, 17));
        let tls = ListenTls::load(LISTENER, &first.cert, &first.key).unwrap();
        let metrics = Arc::new(Metrics::new());
        assert_eq!(expiry_line(&metrics), None, "nothing before it is observed");
        tls.observed_by(&metrics);
        assert_eq!(
            expiry_line(&metrics).as_deref(),
            Some(
                "idemkit_tls_certificate_expiry_timestamp_seconds{listener=\"listen\"} 1936742400"
            )
        );

        // A renewal: the files rewritten with a later certificate. The next
        // look at them (at a handshake, at most once a second) loads it.
        let renewed = write_pair_until(dir.path(), "renewed", (2032, 1, 1));
        std::fs::copy(&renewed.cert, &first.cert).unwrap();
        std::fs::copy(&renewed.key, &first.key).unwrap();
        let later = std::time::SystemTime::now() + Duration::from_secs(5);
        for file in [&first.cert, &first.key] {
            let file = std::fs::File::options().write(true).open(file).unwrap();
            file.set_modified(later).unwrap();
        }
        tls.resolver.state.lock().unwrap().checked = Instant::now() - RECHECK;
        let served = tls.resolver.current();
        assert_eq!(
            served.cert.first().and_then(not_after_unix_seconds),
            Some(1_956_528_000)
        );
        assert_eq!(
            expiry_line(&metrics).as_deref(),
            Some(
                "idemkit_tls_certificate_expiry_timestamp_seconds{listener=\"listen\"} 1956528000"
            )
        );
    }

    #[test]
    fn one_file_of_the_pair_alone_is_refused_and_none_is_plain_http() {
        assert!(from_settings(LISTENER, None, None).unwrap().is_none());
        let e = from_settings(LISTENER, Some(Path::new("/c.pem")), None).unwrap_err();
        assert!(e.starts_with("tls_cert_file without tls_key_file"), "{e}");
        let e = from_settings(LISTENER, None, Some(Path::new("/k.pem"))).unwrap_err();
        assert!(e.starts_with("tls_key_file without tls_cert_file"), "{e}");
        let e = from_settings(ADMIN, None, Some(Path::new("/k.pem"))).unwrap_err();
        assert!(
            e.starts_with("admin_tls_key_file without admin_tls_cert_file"),
            "{e}"
        );
    }

    #[test]
    fn a_pair_is_loaded_and_a_faulty_one_refused_naming_the_setting_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let good = write_pair(dir.path(), "good");
        ListenTls::load(LISTENER, &good.cert, &good.key).unwrap();

        let refused = |cert: &Path, key: &Path, expected: &[&str]| {
            let e = ListenTls::load(LISTENER, cert, key).expect_err("refused");
            for part in expected {
                assert!(e.contains(part), "{part:?} not in {e}");
            }
        };
        let absent = dir.path().join("absent.pem");
        refused(&absent, &good.key, &["tls_cert_file", "absent.pem"]);
        refused(&good.cert, &absent, &["tls_key_file", "absent.pem"]);
        // Swapped: the key file as the certificate, the certificate as the key.
        refused(
            &good.key,
            &good.key,
            &["tls_cert_file", "good.key", "no PEM certificate"],
        );
        refused(
            &good.cert,
            &good.cert,
            &["tls_key_file", "good.crt", "no usable PEM private key"],
        );
        let other = write_pair(dir.path(), "other");
        refused(
            &good.cert,
            &other.key,
            &["tls_cert_file", "good.crt", "tls_key_file", "other.key"],
        );
        // The admin listener's files are named by its own settings.
        let e = ListenTls::load(ADMIN, &good.cert, &other.key).expect_err("refused");
        assert!(
            e.starts_with("admin_tls_cert_file ") && e.contains(" with admin_tls_key_file "),
            "{e}"
        );
    }
}
