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
//! The driver knows only `disable`, `prefer` and `require`, and no
//! `sslrootcert`: `url.rs` takes what is ours out of the URL and hands the rest
//! on, with `verify-*` turned into `require` (the verification is the
//! connector's).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};
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
    let config = match tls.verify {
        // The name is checked by rustls's own verifier, as a browser checks it.
        Verify::ChainAndName => builder
            .with_webpki_verifier(webpki(tls.roots.as_deref(), provider)?)
            .with_no_client_auth(),
        Verify::Chain => {
            let chain = Some(webpki(tls.roots.as_deref(), Arc::clone(&provider))?);
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Checked { provider, chain }))
                .with_no_client_auth()
        }
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Checked {
                provider,
                chain: None,
            }))
            .with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// rustls's verifier of the chain and the name, trusting `roots`.
fn webpki(
    roots: Option<&Path>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, PgError> {
    let store = crate::tls_roots::pem_or_mozilla(roots, "sslrootcert")
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
        };
        let e = connector(&tls).err().unwrap();
        assert!(
            e.to_string().contains("empty.pem") && e.to_string().contains("no PEM certificate"),
            "{e}"
        );
        let missing = Tls {
            verify: Verify::Chain,
            roots: Some(dir.path().join("missing.pem")),
        };
        let e = connector(&missing).err().unwrap();
        assert!(e.to_string().contains("missing.pem"), "{e}");
        // Mozilla's roots when none is named.
        connector(&Tls {
            verify: Verify::ChainAndName,
            roots: None,
        })
        .unwrap();
    }
}
