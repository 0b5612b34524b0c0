//! TLS for the tests of the gateways' `https://` upstreams and their own
//! HTTPS listeners: a private CA with a certificate it issued for
//! `localhost`, a TLS acceptor with it, a TLS front that relays to a plain TCP
//! address, and a client request over TLS.

use std::net::SocketAddr;
use std::sync::Arc;

use rcgen::{CertificateParams, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A CA's certificate, and the certificate for `localhost` it issued with its
/// key, all PEM.
pub(crate) struct Certificates {
    pub(crate) ca: String,
    pub(crate) certificate: String,
    pub(crate) key: String,
}

/// A fresh CA and a certificate for `localhost` only: a connection to
/// 127.0.0.1 does not match it.
pub(crate) fn localhost_certificates() -> Certificates {
    let (ca, ca_key) = super::certificates::ca("idemkit test CA");
    let key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    Certificates {
        ca: ca.pem(),
        certificate: server.pem(),
        key: key.serialize_pem(),
    }
}

/// A server's TLS acceptor presenting `certificates`' `localhost` certificate.
pub(crate) fn acceptor(certificates: &Certificates) -> tokio_rustls::TlsAcceptor {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(certificates.certificate.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(certificates.key.as_bytes()).unwrap(),
        )
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

/// A TLS front on 127.0.0.1 that relays each connection, decrypted, to
/// `backend`; it stops when dropped.
pub(crate) struct Front {
    pub(crate) addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

impl Front {
    pub(crate) fn start(certificates: &Certificates, backend: SocketAddr) -> Front {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = acceptor(certificates);
        runtime.spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that refused the certificate ends here.
                    let Ok(mut client) = acceptor.accept(client).await else {
                        return;
                    };
                    let Ok(mut server) = tokio::net::TcpStream::connect(backend).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        });
        Front {
            addr,
            _runtime: runtime,
        }
    }
}

/// One request over TLS to `addr` as `localhost`, trusting only the CA of
/// `ca` (PEM): see [`super::exchange`]. A refused certificate is the error.
pub(crate) fn request_over_tls(
    addr: SocketAddr,
    ca: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
) -> std::io::Result<super::Reply> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connection =
        rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap())
            .map_err(std::io::Error::other)?;
    let tcp = std::net::TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    let host = format!("localhost:{}", addr.port());
    super::exchange(&mut tls, &host, method, path, headers, body)
}
