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
//! `sslrootcert`: [`split`] takes what is ours out of the URL and hands the rest
//! on, with `verify-*` turned into `require` (the verification is the
//! connector's).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
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
}

/// Splits `url` into what the driver parses and the TLS settings it cannot.
/// Takes both forms: `postgres://…?sslmode=verify-full&sslrootcert=/ca.pem` and
/// `host=db sslmode=verify-full sslrootcert=/ca.pem`.
pub(crate) fn split(url: &str) -> Result<(String, Tls), PgError> {
    let mut tls = Tls {
        verify: Verify::Nothing,
        roots: None,
    };
    let mut take = |key: &str, value: &str| -> Result<Option<String>, PgError> {
        match key {
            "sslrootcert" => {
                tls.roots = (value != "system").then(|| PathBuf::from(value));
                Ok(None)
            }
            "sslmode" => {
                let (verify, driver) = match value {
                    "verify-ca" => (Verify::Chain, "require"),
                    "verify-full" => (Verify::ChainAndName, "require"),
                    // The driver checks the others (disable, prefer, require).
                    other => (Verify::Nothing, other),
                };
                tls.verify = verify;
                Ok(Some(driver.to_owned()))
            }
            "sslcert" | "sslkey" | "sslpassword" | "sslcrl" => Err(PgError::Config {
                detail: format!(
                    "bad PostgreSQL URL: `{key}` (client certificates, revocation lists) is not supported; \
                     the server can authenticate the client by password over TLS"
                ),
            }),
            _ => Ok(Some(value.to_owned())),
        }
    };
    let rest = if let Some(uri) = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme).map(|rest| (*scheme, rest)))
    {
        split_uri(uri.0, uri.1, &mut take)?
    } else {
        split_key_values(url, &mut take)?
    };
    Ok((rest, tls))
}

type Take<'a> = dyn FnMut(&str, &str) -> Result<Option<String>, PgError> + 'a;

/// The URI form: the query's parameters, each percent-decoded.
fn split_uri(scheme: &str, rest: &str, take: &mut Take<'_>) -> Result<String, PgError> {
    let Some((base, query)) = rest.split_once('?') else {
        return Ok(format!("{scheme}{rest}"));
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decoded = percent_decode(value).ok_or_else(|| PgError::Config {
            detail: format!(
                "bad PostgreSQL URL: the value of `{key}` is not valid percent-encoded UTF-8"
            ),
        })?;
        match take(key, &decoded)? {
            Some(v) if v == decoded => kept.push(pair.to_owned()),
            Some(v) => kept.push(format!("{key}={v}")),
            None => {}
        }
    }
    Ok(if kept.is_empty() {
        format!("{scheme}{base}")
    } else {
        format!("{scheme}{base}?{}", kept.join("&"))
    })
}

/// The key=value form (values may be single-quoted, with `\` escapes), written
/// back with every value quoted.
fn split_key_values(text: &str, take: &mut Take<'_>) -> Result<String, PgError> {
    let bad = |what: &str| PgError::Config {
        detail: format!("bad PostgreSQL connection string: {what}"),
    };
    let mut kept = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(bad(&format!("`{key}` has no `=`")));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(bad(&format!("the value of `{key}` has no closing quote"))),
                    Some('\'') => break,
                    Some('\\') => {
                        value.push(chars.next().ok_or_else(|| bad("a `\\` ends the text"))?)
                    }
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(chars.next().ok_or_else(|| bad("a `\\` ends the text"))?);
                } else {
                    value.push(c);
                }
            }
        }
        if let Some(v) = take(&key, &value)? {
            kept.push(format!(
                "{key}='{}'",
                v.replace('\\', "\\\\").replace('\'', "\\'")
            ));
        }
    }
    Ok(kept.join(" "))
}

/// `%XX` decoded (and `+` kept: only the query's `&` and `=` are special here).
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            // Two hex digits exactly (`from_str_radix` alone would take `%+F`).
            let digit = |k: usize| bytes.get(k).and_then(|&h| char::from(h).to_digit(16));
            let (hi, lo) = (digit(i + 1)?, digit(i + 2)?);
            out.push(u8::try_from(hi * 16 + lo).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
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
    WebPkiServerVerifier::builder_with_provider(Arc::new(root_store(roots)?), provider)
        .build()
        .map_err(|e| PgError::Config {
            detail: format!("TLS: the roots to verify the server with: {e}"),
        })
}

/// The roots in `file` (PEM), or Mozilla's.
fn root_store(file: Option<&Path>) -> Result<RootCertStore, PgError> {
    let mut store = RootCertStore::empty();
    let Some(file) = file else {
        store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        return Ok(store);
    };
    let bad = |what: String| PgError::Config {
        detail: format!("sslrootcert {}: {what}", file.display()),
    };
    let certificates = CertificateDer::pem_file_iter(file)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certificates.is_empty() {
        return Err(bad("holds no PEM certificate".to_owned()));
    }
    for certificate in certificates {
        store
            .add(certificate)
            .map_err(|e| bad(format!("a certificate that is not a usable root: {e}")))?;
    }
    Ok(store)
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

    /// `url` splits into `rest` for the driver and the TLS settings given.
    fn assert_split(url: &str, rest: &str, verify: Verify, roots: Option<&str>) {
        let split = split(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        let tls = Tls {
            verify,
            roots: roots.map(PathBuf::from),
        };
        assert_eq!(split, (rest.to_owned(), tls), "{url}");
    }

    #[test]
    fn verify_modes_become_require_for_the_driver_and_the_roots_file_is_taken_out() {
        assert_split(
            "postgres://u:p@db.example:5432/app?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
            "postgres://u:p@db.example:5432/app?sslmode=require&application_name=x",
            Verify::ChainAndName,
            Some("/etc/ca.pem"),
        );
        assert_split(
            "postgresql://db/app?sslrootcert=system&sslmode=verify-ca",
            "postgresql://db/app?sslmode=require",
            Verify::Chain,
            None,
        );
    }

    #[test]
    fn the_driver_s_own_modes_pass_through_unchecked_certificates() {
        for mode in ["disable", "prefer", "require"] {
            let url = format!("postgres://db/app?sslmode={mode}");
            assert_split(&url, &url, Verify::Nothing, None);
        }
        assert_split(
            "postgres://db/app",
            "postgres://db/app",
            Verify::Nothing,
            None,
        );
    }

    #[test]
    fn the_key_value_form_is_split_and_written_back_quoted() {
        let url = "host=db.example  port = 5432 password='it\\'s secret' sslmode=verify-full sslrootcert='/etc/my ca.pem'";
        let rest = "host='db.example' port='5432' password='it\\'s secret' sslmode='require'";
        assert_split(url, rest, Verify::ChainAndName, Some("/etc/my ca.pem"));
        // What is written back parses as the same settings.
        let config: postgres::Config = rest.parse().unwrap();
        assert_eq!(config.get_password(), Some(&b"it's secret"[..]));
    }

    #[test]
    fn client_certificates_and_malformed_strings_are_refused_with_what_is_wrong() {
        let e = split("postgres://db/app?sslmode=verify-full&sslcert=/c.pem").unwrap_err();
        assert!(e.to_string().contains("`sslcert`"), "{e}");
        let e = split("host=db password='open").unwrap_err();
        assert!(e.to_string().contains("no closing quote"), "{e}");
        let e = split("host").unwrap_err();
        assert!(e.to_string().contains("`host` has no `=`"), "{e}");
        let e = split("postgres://db/app?sslrootcert=%ZZ").unwrap_err();
        assert!(e.to_string().contains("sslrootcert"), "{e}");
        let e = split("postgres://db/app?sslrootcert=%+F").unwrap_err();
        assert!(e.to_string().contains("sslrootcert"), "{e}");
    }

    proptest::proptest! {
        /// What the key=value form is written back as parses to the same values,
        /// whatever quotes, backslashes and spaces they hold.
        #[test]
        fn key_values_written_back_keep_every_value(
            user in "[a-z][a-z0-9_]{0,8}",
            password in "[ -~]{0,24}",
            dbname in "[ -~]{1,16}",
            mode in proptest::sample::select(vec!["disable", "prefer", "require", "verify-ca", "verify-full"]),
        ) {
            let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
            let url = format!(
                "user={user} password={} dbname={} sslmode={mode} sslrootcert={}",
                quote(&password), quote(&dbname), quote("/etc/ca dir/ca.pem"),
            );
            let (rest, tls) = split(&url).unwrap();
            let config: postgres::Config = rest.parse().unwrap();
            proptest::prop_assert_eq!(config.get_user(), Some(user.as_str()));
            proptest::prop_assert_eq!(config.get_password(), Some(password.as_bytes()));
            proptest::prop_assert_eq!(config.get_dbname(), Some(dbname.as_str()));
            proptest::prop_assert_eq!(tls.roots.as_deref(), Some(Path::new("/etc/ca dir/ca.pem")));
            let verify = match mode {
                "verify-ca" => Verify::Chain,
                "verify-full" => Verify::ChainAndName,
                _ => Verify::Nothing,
            };
            proptest::prop_assert_eq!(tls.verify, verify);
        }
    }

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
