//! The roots a TLS connection of idemkit trusts: the certificates of a PEM
//! file the operator names, or Mozilla's. One module for the PostgreSQL
//! adapter (`sslrootcert`) and the `idemkit` binary's gateways
//! (`upstream_ca_file`), which includes it by path.

use std::path::Path;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

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
    let bad = |why: String| format!("{setting} {}: {why}", file.display());
    let certificates = CertificateDer::pem_file_iter(file)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certificates.is_empty() {
        return Err(bad(
            "holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)".to_owned(),
        ));
    }
    for certificate in certificates {
        store
            .add(certificate)
            .map_err(|e| bad(format!("a certificate that is not a usable root: {e}")))?;
    }
    Ok(store)
}
