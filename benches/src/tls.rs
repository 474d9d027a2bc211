//! Certificates for the harnesses' TLS runs: an authority of their own and
//! a `localhost` certificate it signed, and the client side that trusts it.

use std::path::Path;

/// A certificate authority and a `localhost` certificate it signed, written
/// into `dir`: the files the TLS server serves, and the authority's PEM
/// for the client.
///
/// # Errors
/// When the certificate cannot be made or written.
pub fn test_certificate(dir: &Path) -> anyhow::Result<(edge::tls::TlsFiles, String)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate()?;
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["localhost".to_owned()])?.signed_by(&key, &issuer)?;
    let files = edge::tls::TlsFiles {
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    };
    std::fs::write(&files.cert, cert.pem())?;
    std::fs::write(&files.key, key.serialize_pem())?;
    Ok((files, ca_pem))
}

/// A rustls client configuration (ring, the safe default protocol versions)
/// trusting only the certificates of `ca` (PEM), as the harnesses' TLS
/// clients use it.
///
/// # Errors
/// When `ca` holds no usable certificate.
pub fn client_config(ca: &str) -> anyhow::Result<tokio_rustls::rustls::ClientConfig> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(certificate?)?;
    }
    Ok(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}
