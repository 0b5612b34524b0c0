//! Who the tenant of a request is, by the configured rule ([tenant] in the
//! config). Shared by every front end that applies the contract to HTTP
//! requests.

use http::HeaderMap;
use http::request::Parts;

use super::config::TenantRule;

/// The tenant of a request, by `rule`; `None` (→ 401) when the request
/// carries no usable value.
pub(crate) fn principal(
    rule: &TenantRule,
) -> impl Fn(&Parts) -> Option<String> + Send + Sync + 'static {
    let rule = rule.clone();
    move |parts: &Parts| of(&rule, &parts.headers)
}

/// The tenant `headers` name under `rule`.
pub(crate) fn of(rule: &TenantRule, headers: &HeaderMap) -> Option<String> {
    match rule {
        TenantRule::Header(name) => headers
            .get(name.as_str())
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned),
        TenantRule::DigestOf { header, key } => headers
            .get(header.as_str())
            .filter(|v| !v.is_empty())
            .map(|v| digest(key, v.as_bytes())),
        TenantRule::Fixed(tenant) => Some(tenant.clone()),
    }
}

/// The tenant of a credential: a digest keyed with the configured secret, so
/// the store holds nothing a guess of the credential can be checked against
/// without the secret.
fn digest(key: &[u8; 32], credential: &[u8]) -> String {
    let hash = blake3::keyed_hash(key, credential);
    let short = hash.as_bytes().get(..16).unwrap_or_default();
    format!("cred-{}", idemkit_core::hex::Lower(short))
}

/// Whether the tenant's header comes more than once: the proxy would pick one
/// value and the upstream (or a gateway in front) perhaps another, so such a
/// request is refused (400) rather than guessed.
pub(crate) fn repeated(rule: &TenantRule, headers: &HeaderMap) -> bool {
    let name = match rule {
        TenantRule::Header(name) | TenantRule::DigestOf { header: name, .. } => name,
        TenantRule::Fixed(_) => return false,
    };
    headers.get_all(name.as_str()).iter().nth(1).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn a_credentials_tenant_depends_on_the_secret_and_never_holds_the_credential() {
        let rule = |secret: &[u8]| TenantRule::DigestOf {
            header: "authorization".to_owned(),
            key: blake3::derive_key("test", secret),
        };
        let request = headers(&[("Authorization", "Bearer t1")]);
        let a = of(&rule(b"one secret"), &request).unwrap();
        let b = of(&rule(b"another secret"), &request).unwrap();
        assert_ne!(a, b, "the secret keys the digest");
        assert!(a.starts_with("cred-") && a.len() == 37, "{a}");
        assert!(!a.contains("t1"));
        // The digest the proxy used before it was keyed: anyone could compute it.
        let public = blake3::derive_key("idemkit proxy tenant credential v1", b"Bearer t1");
        assert_ne!(
            a,
            format!("cred-{}", idemkit_core::hex::lower(&public[..16]))
        );
        let other = of(
            &rule(b"one secret"),
            &headers(&[("Authorization", "Bearer t2")]),
        );
        assert_ne!(Some(a), other);
    }

    #[test]
    fn a_tenant_header_given_twice_is_told() {
        let rule = TenantRule::Header("x-tenant-id".to_owned());
        assert!(!repeated(&rule, &headers(&[("X-Tenant-Id", "acme")])));
        assert!(repeated(
            &rule,
            &headers(&[("X-Tenant-Id", "acme"), ("x-tenant-id", "globex")])
        ));
        assert!(!repeated(
            &TenantRule::Fixed("acme".to_owned()),
            &headers(&[])
        ));
    }
}
