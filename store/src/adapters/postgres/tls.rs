//! TLS to the server, asked for in the URL with libpq's parameters.
//!
//! `sslmode`:
//!
//! - `disable`: plain TCP.
//! - `prefer` (the default, as in libpq): TLS when the server offers it, plain
//!   otherwise; the server's certificate is not checked.
//! - `require`: TLS or no connection; the certificate is not checked either
//!   (libpq's meaning: encryption, not authentication).
//! - `verify-ca`: TLS, and the certificate chains to a trusted root.
//! - `verify-full`: `verify-ca`, and the certificate names the host connected
//!   to. The mode that keeps a man in the middle out.
//!
//! `sslrootcert`: the PEM file of the roots `verify-ca` and `verify-full` trust
//! (a managed database's CA bundle); `system`, or no `sslrootcert`: Mozilla's
//! root set, compiled in.
//!
//! `sslcert` and `sslkey`: the PEM files of a client certificate (its chain,
//! leaf first) and its private key, presented when the server asks for one
//! (`cert` authentication, or `clientcert=verify-ca|verify-full` in
//! `pg_hba.conf`). As libpq does, a key its owner's group or others can read
//! is refused (root may let its group read it), and libpq's default files
//! under `~/.postgresql` are never read: both settings are given or neither.
//!
//! The driver knows only `disable`, `prefer` and `require`, and no
//! `sslrootcert`: `url.rs` takes what is ours out of the URL and hands the rest
//! on, with `verify-*` turned into `require` (the verification is the
//! connector's).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WantsClientCert, WebPkiServerVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, ConfigBuilder, DigitallySignedStruct, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::PgError;

/// What is checked of the server's certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Nothing (`prefer`, `require`): the connection is encrypted.
    Nothing,
    /// Its chain to a trusted root (`verify-ca`).
    Chain,
    /// Its chain and the host's name (`verify-full`).
    ChainAndName,
}

/// A URL's TLS settings, taken out of it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Tls {
    pub(crate) verify: Verify,
    /// `sslrootcert`'s file; `None`: Mozilla's roots.
    pub(crate) roots: Option<PathBuf>,
    /// `sslcert` and `sslkey`; `None`: no client certificate.
    pub(crate) client: Option<ClientCertificate>,
}

/// The files of the certificate the client presents when the server asks.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ClientCertificate {
    /// `sslcert`: the chain, PEM, the client's own certificate first.
    pub(crate) chain: PathBuf,
    /// `sslkey`: its private key, PEM (PKCS#8, PKCS#1 or SEC1), unencrypted.
    pub(crate) key: PathBuf,
}

/// The connector that makes every connection of the adapter (the pool's and
/// the listener's) with `tls`.
pub(crate) fn connector(tls: &Tls) -> Result<MakeRustlsConnect, PgError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| PgError::Config {
            detail: format!("TLS: {e}"),
        })?;
    let builder = match tls.verify {
        // The name is checked by rustls's own verifier, as a browser checks it.
        Verify::ChainAndName => {
            builder.with_webpki_verifier(webpki(tls.roots.as_deref(), provider)?)
        }
        Verify::Chain => {
            let chain = Some(webpki(tls.roots.as_deref(), Arc::clone(&provider))?);
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Checked { provider, chain }))
        }
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Checked {
                provider,
                chain: None,
            })),
    };
    let config = match &tls.client {
        None => builder.with_no_client_auth(),
        Some(client) => with_client_certificate(builder, client)?,
    };
    Ok(MakeRustlsConnect::new(config))
}

/// `builder` finished with `client`'s certificate and key, each file checked
/// now, so a fault is a configuration error at start-up that names the
/// setting and the file, not a refused login later.
fn with_client_certificate(
    builder: ConfigBuilder<ClientConfig, WantsClientCert>,
    client: &ClientCertificate,
) -> Result<ClientConfig, PgError> {
    let bad = |detail| PgError::Config { detail };
    let chain = crate::tls_files::certificates(&client.chain, "sslcert").map_err(bad)?;
    key_is_private(&client.key).map_err(|why| PgError::Config {
        detail: format!("sslkey {}: {why}", client.key.display()),
    })?;
    let key = crate::tls_files::private_key(&client.key, "sslkey").map_err(bad)?;
    builder
        .with_client_auth_cert(chain, key)
        .map_err(|e| PgError::Config {
            detail: format!(
                "sslcert {} with sslkey {}: {e}",
                client.chain.display(),
                client.key.display()
            ),
        })
}

/// libpq's rule for a private key file: owned by the user the process runs as,
/// neither its group nor others may read or write it (0600); owned by root,
/// its group may read it (0640), so a key can be shared with a service's group.
#[cfg(unix)]
fn key_is_private(key: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(key).map_err(|e| e.to_string())?;
    let mode = meta.mode() & 0o777;
    let owner = meta.uid();
    let open = if owner == rustix::process::geteuid().as_raw() {
        mode & 0o077
    } else if owner == 0 {
        mode & 0o037
    } else {
        0
    };
    if open == 0 {
        return Ok(());
    }
    Err(format!(
        "has permissions {mode:04o}, so others than its owner may read it; \
         make it 0600 (or 0640 owned by root), as libpq requires"
    ))
}

#[cfg(not(unix))]
fn key_is_private(_key: &Path) -> Result<(), String> {
    Ok(())
}

/// rustls's verifier of the chain and the name, trusting `roots`.
fn webpki(
    roots: Option<&Path>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, PgError> {
    let store = crate::tls_files::pem_or_mozilla(roots, "sslrootcert")
        .map_err(|detail| PgError::Config { detail })?;
    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
        .build()
        .map_err(|e| PgError::Config {
            detail: format!("TLS: the roots to verify the server with: {e}"),
        })
}

/// Checks the server's certificate as [`Verify`] says: `chain` is `None` for
/// `prefer` and `require` (any certificate), else the WebPKI verifier, whose
/// "not valid for name" is forgiven under `verify-ca`. The handshake's
/// signatures are checked with the certificate presented in every mode (the
/// keys exchanged are the server's).
#[derive(Debug)]
struct Checked {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Checked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_roots_file_without_certificates_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("empty.pem");
        std::fs::write(&file, "not a certificate\n").unwrap();
        let tls = Tls {
            verify: Verify::ChainAndName,
            roots: Some(file.clone()),
            client: None,
        };
        let e = connector(&tls).err().unwrap();
        assert!(
            e.to_string().contains("empty.pem") && e.to_string().contains("no PEM certificate"),
            "{e}"
        );
        let missing = Tls {
            verify: Verify::Chain,
            roots: Some(dir.path().join("missing.pem")),
            client: None,
        };
        let e = connector(&missing).err().unwrap();
        assert!(e.to_string().contains("missing.pem"), "{e}");
        // Mozilla's roots when none is named.
        connector(&Tls {
            verify: Verify::ChainAndName,
            roots: None,
            client: None,
        })
        .unwrap();
    }

    /// A certificate for `name` and its key, written to `dir` (the key 0600).
    fn client_files(dir: &Path, name: &str) -> ClientCertificate {
        use std::os::unix::fs::PermissionsExt;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let files = ClientCertificate {
            chain: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        };
        std::fs::write(&files.chain, cert.pem()).unwrap();
        std::fs::write(&files.key, key.serialize_pem()).unwrap();
        std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600)).unwrap();
        files
    }

    fn with_client(client: ClientCertificate) -> Result<MakeRustlsConnect, PgError> {
        connector(&Tls {
            verify: Verify::ChainAndName,
            roots: None,
            client: Some(client),
        })
    }

    #[test]
    fn a_client_certificate_is_loaded_or_refused_naming_the_setting_and_the_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        with_client(client_files(dir.path(), "idemkit")).unwrap();

        let refused = |client: ClientCertificate, expected: &[&str]| {
            let e = with_client(client).err().expect("refused").to_string();
            for part in expected {
                assert!(e.contains(part), "{part:?} not in {e}");
            }
        };
        let missing = ClientCertificate {
            chain: dir.path().join("absent.crt"),
            ..client_files(dir.path(), "a")
        };
        refused(missing, &["sslcert", "absent.crt"]);
        let no_key = ClientCertificate {
            key: dir.path().join("absent.key"),
            ..client_files(dir.path(), "b")
        };
        refused(no_key, &["sslkey", "absent.key"]);

        // The certificate and key files swapped: neither holds what it should.
        let c = client_files(dir.path(), "c");
        let swapped = ClientCertificate {
            chain: c.key.clone(),
            key: c.chain.clone(),
        };
        std::fs::set_permissions(&swapped.key, std::fs::Permissions::from_mode(0o600)).unwrap();
        refused(swapped, &["sslcert", "c.key", "no PEM certificate"]);
        let d = client_files(dir.path(), "d");
        std::fs::write(&d.key, std::fs::read(&d.chain).unwrap()).unwrap();
        refused(d, &["sslkey", "d.key", "no PEM private key"]);

        // A key others may read, as libpq refuses it.
        let e = client_files(dir.path(), "e");
        std::fs::set_permissions(&e.key, std::fs::Permissions::from_mode(0o644)).unwrap();
        refused(e, &["sslkey", "e.key", "0644", "0600"]);

        // An encrypted key says so.
        let f = client_files(dir.path(), "f");
        std::fs::write(
            &f.key,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        refused(f, &["sslkey", "f.key", "encrypted"]);

        // A key that is not the certificate's.
        let g = client_files(dir.path(), "g");
        let h = client_files(dir.path(), "h");
        let mismatched = ClientCertificate {
            chain: g.chain,
            key: h.key,
        };
        refused(mismatched, &["sslcert", "g.crt", "sslkey", "h.key"]);
    }
}
