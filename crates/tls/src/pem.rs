//! Reading PEM certificates and keys, with errors that name the file.

use std::path::Path;

use rustls_pki_types::{
    CertificateDer, PrivateKeyDer,
    pem::{self, PemObject},
};

use crate::TlsError;

/// Reads every certificate in a PEM file. An empty file is an error.
pub fn read_certificates(path: &Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path, what)?;
    parse_certificates(&bytes, path, what)
}

/// Reads the first private key (PKCS#8, PKCS#1 or SEC1) of a PEM file.
pub fn read_private_key(path: &Path, what: &'static str) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path, what)?;
    parse_private_key(&bytes, path, what)
}

/// Parses every certificate of PEM text; `path` and `what` only name the source in errors.
pub fn parse_certificates(
    pem_bytes: &[u8],
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem_bytes)
        .collect::<Result<Vec<_>, pem::Error>>()
        .map_err(|e| pem_error(path, what, e.to_string()))?;
    if certs.is_empty() {
        return Err(pem_error(path, what, "no CERTIFICATE block found".into()));
    }
    Ok(certs)
}

/// Parses the first private key of PEM text; `path` and `what` only name the source in errors.
pub fn parse_private_key(
    pem_bytes: &[u8],
    path: &Path,
    what: &'static str,
) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem_bytes).map_err(|e| {
        let reason = match e {
            pem::Error::NoItemsFound => "no PRIVATE KEY block found".to_owned(),
            other => other.to_string(),
        };
        pem_error(path, what, reason)
    })
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

fn pem_error(path: &Path, what: &'static str, reason: String) -> TlsError {
    TlsError::Pem {
        what,
        path: path.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_garbage_files_are_named_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tls.crt");
        std::fs::write(&path, b"not a certificate").unwrap();
        let err = read_certificates(&path, "client certificate").unwrap_err().to_string();
        assert!(err.contains("client certificate"), "{err}");
        assert!(err.contains("tls.crt"), "{err}");
        assert!(err.contains("no CERTIFICATE block"), "{err}");

        let err = read_private_key(&path, "server key").unwrap_err().to_string();
        assert!(err.contains("no PRIVATE KEY block"), "{err}");

        let missing = dir.path().join("missing.crt");
        let err = read_certificates(&missing, "server certificate")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot read server certificate from"), "{err}");
    }

    #[test]
    fn reads_generated_certificate_and_key() {
        let cert = crate::testing::TestCert::builder(&["plugin"]).self_signed();
        let certs = parse_certificates(cert.cert_pem().as_bytes(), Path::new("<memory>"), "cert").unwrap();
        assert_eq!(certs.len(), 1);
        assert_eq!(certs[0], cert.cert_der());
        parse_private_key(cert.key_pem().as_bytes(), Path::new("<memory>"), "key").unwrap();
    }
}
