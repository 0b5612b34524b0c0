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

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::CryptoProvider;
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
}

/// The gateways' own listeners: `tls_cert_file`, `tls_key_file`.
pub(crate) const LISTENER: Settings = Settings {
    cert: "tls_cert_file",
    key: "tls_key_file",
};

/// The admin listeners: `admin_tls_cert_file`, `admin_tls_key_file`.
pub(crate) const ADMIN: Settings = Settings {
    cert: "admin_tls_cert_file",
    key: "admin_tls_key_file",
};

/// `idemkit console`'s listener: `--tls-cert-file`, `--tls-key-file`.
pub(crate) const CONSOLE: Settings = Settings {
    cert: "--tls-cert-file",
    key: "--tls-key-file",
};

/// The listener's TLS: a handshake per accepted connection. Cheap to clone.
#[derive(Clone)]
pub(crate) struct ListenTls {
    acceptor: TlsAcceptor,
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
        let resolver = Reloading {
            state: Mutex::new(Loaded {
                current,
                stamp: files.stamp(),
                checked: Instant::now(),
            }),
            files,
            provider: Arc::clone(&provider),
        };
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.max_early_data_size = 0;
        Ok(ListenTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// The handshake on `tcp` (for [`idemkit::http::serve_upgraded`]): the
    /// encrypted stream, or `None` when the client did not complete it (it
    /// spoke plain HTTP, refused the certificate, or left).
    pub(crate) fn accept(
        &self,
        tcp: TcpStream,
    ) -> impl Future<Output = Option<TlsStream<TcpStream>>> + Send + 'static {
        let acceptor = self.acceptor.clone();
        async move {
            let peer = tcp.peer_addr().ok();
            match acceptor.accept(tcp).await {
                Ok(stream) => Some(stream),
                Err(e) => {
                    // The client's fault, or its choice: not worth a warning.
                    tracing::debug!(?peer, error = %e, "TLS handshake failed");
                    None
                }
            }
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
                        tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                    }
                    Err(e) => tracing::warn!(
                        error = %e,
                        "TLS certificate not reloaded; the one loaded before stays in use"
                    ),
                }
            }
        }
        Some(Arc::clone(&state.current))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for `localhost` and its key, written to `dir`
    /// under `name`.
    fn write_pair(dir: &Path, name: &str) -> Files {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let files = Files {
            names: LISTENER,
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        files
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
