//! TLS to an `https://` upstream (the proxy's, and the MCP gateway's).
//!
//! rustls with ring. The upstream's certificate must chain to Mozilla's roots,
//! or to the PEM bundle `upstream_ca_file` names, and name the upstream's host;
//! there is no switch to skip that check. ALPN offers HTTP/1.1 alone (what the
//! forwarder speaks), and no request is ever sent as TLS 1.3 early data: the
//! network may replay early data, the very thing the proxy exists to prevent.
//!
//! A handshake is part of connecting: it runs within the connect timeout, and
//! a handshake that fails (an unknown issuer, a name the certificate does not
//! hold) has sent nothing, so the request's record is released as for a
//! refused connection.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;

/// How to open TLS to one upstream: the client configuration and the name its
/// certificate must hold. Cheap to clone (each worker's pool holds one).
#[derive(Clone)]
pub(crate) struct UpstreamTls {
    pub(crate) config: Arc<ClientConfig>,
    pub(crate) name: ServerName<'static>,
}

impl fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTls")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl UpstreamTls {
    /// TLS for `uri` when its scheme is `https` (`None` for `http`), trusting
    /// the certificates of `ca_file` (PEM) or, without one, Mozilla's roots.
    pub(crate) fn for_upstream(
        uri: &http::Uri,
        ca_file: Option<&Path>,
    ) -> Result<Option<UpstreamTls>, String> {
        if uri.scheme_str() != Some("https") {
            return match ca_file {
                Some(file) => Err(format!(
                    "upstream_ca_file {}: the upstream {uri} is not https://, so no certificate is checked",
                    file.display()
                )),
                None => Ok(None),
            };
        }
        let host = uri.host().unwrap_or_default();
        // An IPv6 literal comes bracketed, as in the URL.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(bare.to_owned())
            .map_err(|e| format!("upstream {uri}: {host:?} is not a name TLS can check: {e}"))?;
        let roots = crate::tls_files::pem_or_mozilla(ca_file, "upstream_ca_file")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS to the upstream: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config.enable_early_data = false;
        Ok(Some(UpstreamTls {
            config: Arc::new(config),
            name,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(text: &str) -> http::Uri {
        text.parse().unwrap()
    }

    #[test]
    fn plain_http_needs_no_tls_and_refuses_a_ca_file() {
        assert!(
            UpstreamTls::for_upstream(&uri("http://127.0.0.1:9000"), None)
                .unwrap()
                .is_none()
        );
        let e =
            UpstreamTls::for_upstream(&uri("http://api"), Some(Path::new("/ca.pem"))).unwrap_err();
        assert!(e.contains("not https://"), "{e}");
    }

    #[test]
    fn https_checks_the_host_s_name_or_address() {
        let tls = UpstreamTls::for_upstream(&uri("https://api.example.com"), None)
            .unwrap()
            .unwrap();
        assert_eq!(
            tls.name,
            ServerName::try_from("api.example.com").unwrap().to_owned()
        );
        assert_eq!(tls.config.alpn_protocols, [b"http/1.1".to_vec()]);
        assert!(!tls.config.enable_early_data);
        let tls = UpstreamTls::for_upstream(&uri("https://[::1]:8443/mcp"), None)
            .unwrap()
            .unwrap();
        assert!(
            matches!(tls.name, ServerName::IpAddress(_)),
            "{:?}",
            tls.name
        );
    }

    #[test]
    fn a_ca_file_that_is_missing_or_holds_no_certificate_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = UpstreamTls::for_upstream(&uri("https://api"), Some(&empty)).unwrap_err();
        assert!(
            e.contains("empty.pem") && e.contains("no PEM certificate"),
            "{e}"
        );
        let missing = dir.path().join("missing.pem");
        let e = UpstreamTls::for_upstream(&uri("https://api"), Some(&missing)).unwrap_err();
        assert!(e.contains("missing.pem"), "{e}");
    }
}
