//! Certificates for the TLS tests, made with rcgen: a certificate authority
//! whose certificates the tests issue and trust.

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

/// A fresh self-signed CA named `name`, and its key.
pub(crate) fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    (params.self_signed(&key).unwrap(), key)
}
