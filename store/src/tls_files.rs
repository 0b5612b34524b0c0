//! The PEM files idemkit's TLS reads: the roots a connection trusts (a file
//! the operator names, or Mozilla's), a certificate chain, and a private key.
//! One module for the PostgreSQL adapter (`sslrootcert`, `sslcert`, `sslkey`)
//! and the `idemkit` binary's gateways (`upstream_ca_file`, `tls_cert_file`,
//! `tls_key_file`), which includes it by path. Every error names the setting,
//! the file and what is wrong with it.

use std::path::Path;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// `setting file: why`, the form of every refusal here.
fn refusal(setting: &str, file: &Path, why: impl std::fmt::Display) -> String {
    format!("{setting} {}: {why}", file.display())
}

/// The certificates of the PEM file `file` as roots, or Mozilla's without
/// one. A file that cannot be read, or holds no certificate (it would trust
/// nothing, and every handshake would fail), is refused naming `setting`
/// (`sslrootcert`, `upstream_ca_file`), the file and why.
pub(crate) fn pem_or_mozilla(file: Option<&Path>, setting: &str) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let Some(file) = file else {
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        return Ok(store);
    };
    for certificate in certificates(file, setting)? {
        store.add(certificate).map_err(|e| {
            refusal(
                setting,
                file,
                format!("a certificate that is not a usable root: {e}"),
            )
        })?;
    }
    Ok(store)
}

/// Every certificate of the PEM file `file`, in order (a chain: its owner's
/// first); a file that cannot be read or holds none is refused.
pub(crate) fn certificates(
    file: &Path,
    setting: &str,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_file_iter(file)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| refusal(setting, file, e))?;
    if certificates.is_empty() {
        let why = "holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)";
        return Err(refusal(setting, file, why));
    }
    Ok(certificates)
}

/// The private key of the PEM file `file` (PKCS#8, PKCS#1 or SEC1); a file
/// that cannot be read, holds no key, or holds an encrypted one (rustls reads
/// none) is refused, the last with how to remove the passphrase.
pub(crate) fn private_key(file: &Path, setting: &str) -> Result<PrivateKeyDer<'static>, String> {
    let pem = std::fs::read(file).map_err(|e| refusal(setting, file, e))?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        if pem.windows(b"ENCRYPTED".len()).any(|w| w == b"ENCRYPTED") {
            let why = "is encrypted; give the key without a passphrase \
                       (`openssl pkey -in encrypted.key -out plain.key`)";
            refusal(setting, file, why)
        } else {
            let why = format!(
                "holds no usable PEM private key (found no PEM private key: expected -----BEGIN \
                 PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY): {e}"
            );
            refusal(setting, file, why)
        }
    })
}
