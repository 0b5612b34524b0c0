//! The URL, taken apart: what the `postgres` driver parses, and the libpq
//! parameters it does not know or reads differently.
//!
//! - `sslmode=verify-ca|verify-full` and `sslrootcert` (see `tls.rs`): the
//!   driver knows only `disable`, `prefer` and `require`; the verification is
//!   our connector's, and the driver is handed `require`.
//! - `tcp_user_timeout`: milliseconds in libpq, seconds in the driver, so a
//!   URL written for libpq (`tcp_user_timeout=10000`) would wait hours; read
//!   here in milliseconds (see `liveness.rs`).
//! - `sslcert` and `sslkey` (the client's certificate, see `tls.rs`): the
//!   driver has no client certificates; both or neither. `sslpassword`
//!   (encrypted keys) and `sslcrl`/`sslcrldir` (revocation lists): refused by
//!   name.
//!
//! Everything else passes to the driver as written (a value taken out of
//! the key=value form is written back quoted).

use std::path::PathBuf;
use std::time::Duration;

use super::PgError;
use super::tls::{ClientCertificate, Tls, Verify};

/// A URL taken apart by [`split`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Split {
    /// What the driver parses.
    pub(crate) driver_url: String,
    pub(crate) tls: Tls,
    /// `tcp_user_timeout` in libpq's unit, milliseconds (the driver reads
    /// seconds); `Some(ZERO)`: the system's default, as the URL asked.
    pub(crate) tcp_user_timeout: Option<Duration>,
    /// The name of every parameter the URL gives (the query's in the URI
    /// form), ours and the driver's: what the URL set, where the driver's
    /// getters cannot tell a value given from its default.
    pub(crate) named: Vec<String>,
}

/// Splits `url` into what the driver parses and the parameters it cannot, or
/// reads unlike libpq. Takes both forms:
/// `postgres://…?sslmode=verify-full&sslrootcert=/ca.pem` and
/// `host=db sslmode=verify-full sslrootcert=/ca.pem`.
pub(crate) fn split(url: &str) -> Result<Split, PgError> {
    let mut tls = Tls {
        verify: Verify::Nothing,
        roots: None,
        client: None,
    };
    let mut tcp_user_timeout = None;
    let mut named = Vec::new();
    let (mut sslcert, mut sslkey) = (None, None);
    let mut take = |key: &str, value: &str| -> Result<Option<String>, PgError> {
        named.push(key.to_owned());
        match key {
            "sslrootcert" => {
                tls.roots = (value != "system").then(|| PathBuf::from(value));
                Ok(None)
            }
            // Empty, as in libpq: not given.
            "sslcert" => {
                sslcert = (!value.is_empty()).then(|| PathBuf::from(value));
                Ok(None)
            }
            "sslkey" => {
                sslkey = (!value.is_empty()).then(|| PathBuf::from(value));
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
            "tcp_user_timeout" => {
                let millis = value.trim().parse::<u64>().map_err(|_| PgError::Config {
                    detail: format!(
                        "bad PostgreSQL URL: `tcp_user_timeout` is `{value}`, not a number of milliseconds"
                    ),
                })?;
                tcp_user_timeout = Some(Duration::from_millis(millis));
                Ok(None)
            }
            "sslpassword" => Err(PgError::Config {
                detail: "bad PostgreSQL URL: `sslpassword` (an encrypted private key) is not supported; \
                         give `sslkey` the key without a passphrase (`openssl pkey -in encrypted.key -out client.key`), \
                         readable only by the user idemkit runs as"
                    .to_owned(),
            }),
            "sslcrl" | "sslcrldir" => Err(PgError::Config {
                detail: format!(
                    "bad PostgreSQL URL: `{key}` (certificate revocation lists) is not supported"
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
    tls.client = match (sslcert, sslkey) {
        (None, None) => None,
        (Some(chain), Some(key)) => Some(ClientCertificate { chain, key }),
        // libpq would look for ~/.postgresql/postgresql.{crt,key}; a service
        // reading files nobody named is a surprise, so both are asked for.
        (Some(_), None) => return Err(one_of_the_pair("sslcert", "sslkey")),
        (None, Some(_)) => return Err(one_of_the_pair("sslkey", "sslcert")),
    };
    Ok(Split {
        driver_url: rest,
        tls,
        tcp_user_timeout,
        named,
    })
}

/// `given` without its other half, `missing`.
fn one_of_the_pair(given: &str, missing: &str) -> PgError {
    PgError::Config {
        detail: format!(
            "bad PostgreSQL URL: `{given}` without `{missing}`; a client certificate needs both \
             `sslcert` (the certificate chain, PEM) and `sslkey` (its private key, PEM)"
        ),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// `url` splits into `rest` for the driver and the TLS settings given.
    fn assert_split(url: &str, rest: &str, verify: Verify, roots: Option<&str>) {
        let split = split(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        let tls = Tls {
            verify,
            roots: roots.map(PathBuf::from),
            client: None,
        };
        assert_eq!(
            (split.driver_url, split.tls),
            (rest.to_owned(), tls),
            "{url}"
        );
    }

    #[test]
    fn every_parameter_name_is_reported_in_either_form() {
        let uri = split("postgres://u@db/app?sslmode=verify-full&tcp_user_timeout=30").unwrap();
        assert_eq!(uri.named, ["sslmode", "tcp_user_timeout"]);
        assert_eq!(uri.driver_url, "postgres://u@db/app?sslmode=require");
        let key_values = split("host=db keepalives_idle=60 sslrootcert=/ca.pem").unwrap();
        assert_eq!(key_values.named, ["host", "keepalives_idle", "sslrootcert"]);
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
    fn a_client_certificate_is_taken_out_in_either_form() {
        let client = Some(ClientCertificate {
            chain: PathBuf::from("/etc/idemkit/client.crt"),
            key: PathBuf::from("/etc/idemkit/client key.pem"),
        });
        let uri = split(
            "postgres://idemkit@db/app?sslmode=verify-full&sslcert=%2Fetc%2Fidemkit%2Fclient.crt&sslkey=/etc/idemkit/client%20key.pem",
        )
        .unwrap();
        assert_eq!(uri.driver_url, "postgres://idemkit@db/app?sslmode=require");
        assert_eq!(uri.tls.client, client);
        let key_values =
            split("host=db sslkey='/etc/idemkit/client key.pem' sslcert=/etc/idemkit/client.crt")
                .unwrap();
        assert_eq!(key_values.driver_url, "host='db'");
        assert_eq!(key_values.tls.client, client);
        // Empty, as in libpq, is not given.
        assert_eq!(
            split("host=db sslcert='' sslkey=''").unwrap().tls.client,
            None
        );
    }

    #[test]
    fn client_certificate_settings_that_cannot_work_are_refused_by_name() {
        let e = split("postgres://db/app?sslmode=verify-full&sslcert=/c.pem").unwrap_err();
        assert!(e.to_string().contains("`sslcert` without `sslkey`"), "{e}");
        let e = split("host=db sslkey=/k.pem").unwrap_err();
        assert!(e.to_string().contains("`sslkey` without `sslcert`"), "{e}");
        let e = split("postgres://db/app?sslcert=/c.pem&sslkey=/k.pem&sslpassword=x").unwrap_err();
        assert!(e.to_string().contains("`sslpassword`"), "{e}");
        for crl in ["sslcrl", "sslcrldir"] {
            let e = split(&format!("postgres://db/app?{crl}=/crl")).unwrap_err();
            assert!(e.to_string().contains(&format!("`{crl}`")), "{e}");
        }
    }

    #[test]
    fn malformed_strings_are_refused_with_what_is_wrong() {
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
            let Split { driver_url, tls, .. } = split(&url).unwrap();
            let config: postgres::Config = driver_url.parse().unwrap();
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
    fn tcp_user_timeout_is_read_in_libpq_s_milliseconds() {
        let uri = split("postgres://db/app?tcp_user_timeout=2500").unwrap();
        assert_eq!(uri.tcp_user_timeout, Some(Duration::from_millis(2500)));
        let key_values = split("host=db tcp_user_timeout=0").unwrap();
        assert_eq!(key_values.tcp_user_timeout, Some(Duration::ZERO));
        assert_eq!(key_values.driver_url, "host='db'");
        let e = split("postgres://db/app?tcp_user_timeout=10s").unwrap_err();
        assert!(e.to_string().contains("`tcp_user_timeout` is `10s`"), "{e}");
    }
}
