//! Certificates for tests: the one maker every crate's tests use.
//!
//! A test asks for what the case needs (names, key usages, validity, a CA)
//! and gets the certificate and its key as PEM, DER or files, with no
//! `openssl` and no fixture files that expire. Behind the `testing` feature:
//! rcgen is not a dependency of a build that serves.
//!
//! ```
//! use cnpgi_tls::testing::TestCert;
//!
//! // cert-manager's `selfSigned` issuer with `usages: [server auth]`:
//! let server = TestCert::builder(&["plugin.cnpg-system.svc"]).server().self_signed();
//! // A CA, and a client certificate it issues:
//! let ca = TestCert::builder(&[]).ca().self_signed();
//! let client = TestCert::builder(&["cnpgi-operator"]).client().signed_by(&ca);
//! assert!(server.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
//! assert_ne!(client.cert_der(), ca.cert_der());
//! ```

use std::path::{Path, PathBuf};

/// The extended key usages [`TestCertBuilder::usages`] takes (rcgen's).
pub use rcgen::ExtendedKeyUsagePurpose;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, date_time_ymd};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A certificate and its private key, made for a test.
pub struct TestCert {
    cert: rcgen::Certificate,
    key: KeyPair,
    // What it was made from: a CA issues from its own parameters.
    params: CertificateParams,
}

/// What a [`TestCert`] will hold; [`TestCert::builder`] starts one.
///
/// Defaults: the names given as DNS (or IP) subject alternative names, no
/// extended key usage, valid from 2020 to 2100, not a CA.
pub struct TestCertBuilder {
    params: CertificateParams,
}

impl TestCert {
    /// Starts a certificate for `names` (DNS names, or IP addresses written
    /// as such: `127.0.0.1`); the first name is also the common name.
    pub fn builder(names: &[&str]) -> TestCertBuilder {
        let names: Vec<String> = names.iter().map(|name| (*name).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("test certificate names are valid SANs");
        if let Some(first) = names.first() {
            params.distinguished_name.push(DnType::CommonName, first.as_str());
        }
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2100, 1, 1);
        TestCertBuilder { params }
    }

    /// The certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// The private key, PKCS#8 PEM.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// The certificate, DER.
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// The private key, PKCS#8 DER.
    pub fn key_der(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.serialize_der()))
    }

    /// Writes `<stem>.crt` and `<stem>.key` (PEM) into `dir`; returns their
    /// paths, certificate first.
    pub fn write(&self, dir: &Path, stem: &str) -> std::io::Result<(PathBuf, PathBuf)> {
        let cert = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        std::fs::write(&cert, self.cert_pem())?;
        std::fs::write(&key, self.key_pem())?;
        Ok((cert, key))
    }
}

/// A CA and the leaves it signs, written as PEM files (`<stem>.crt`,
/// `<stem>.key`) in a temporary directory removed on drop: for tests that
/// hand certificate files to a process or a server.
///
/// ```
/// use cnpgi_tls::testing::{ExtendedKeyUsagePurpose, TestCa};
///
/// let pki = TestCa::new();
/// let (cert, key) = pki.leaf("server", &["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
/// assert!(cert.exists() && key.exists() && pki.ca_path().exists());
/// ```
pub struct TestCa {
    dir: tempfile::TempDir,
    ca: TestCert,
}

impl TestCa {
    /// A new CA, its certificate written as `ca.crt` (and `ca.key`).
    ///
    /// # Panics
    ///
    /// When the temporary directory cannot be made or written (a test setup error).
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory for test certificates");
        let ca = TestCert::builder(&[]).ca().self_signed();
        ca.write(dir.path(), "ca").expect("the test CA written");
        Self { dir, ca }
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate's file.
    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// A leaf for `names` and `usage`, signed by the CA: its certificate and key files.
    ///
    /// # Panics
    ///
    /// When the files cannot be written (a test setup error).
    pub fn leaf(&self, stem: &str, names: &[&str], usage: ExtendedKeyUsagePurpose) -> (PathBuf, PathBuf) {
        TestCert::builder(names)
            .usages(&[usage])
            .signed_by(&self.ca)
            .write(self.dir.path(), stem)
            .expect("the test certificate written")
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for TestCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key, even in a test's failure output.
        f.debug_struct("TestCert")
            .field("subject_alt_names", &self.params.subject_alt_names)
            .field("is_ca", &matches!(self.params.is_ca, IsCa::Ca(_)))
            .finish_non_exhaustive()
    }
}

impl TestCertBuilder {
    /// Extended key usage `serverAuth` (what a plugin serves with).
    pub fn server(self) -> Self {
        self.usages(&[ExtendedKeyUsagePurpose::ServerAuth])
    }

    /// Extended key usage `clientAuth` (what an operator presents).
    pub fn client(self) -> Self {
        self.usages(&[ExtendedKeyUsagePurpose::ClientAuth])
    }

    /// Both `serverAuth` and `clientAuth`.
    pub fn server_and_client(self) -> Self {
        self.usages(&[ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth])
    }

    /// Exactly these extended key usages (none: any use, as X.509 reads an
    /// absent extension).
    pub fn usages(mut self, usages: &[ExtendedKeyUsagePurpose]) -> Self {
        self.params.extended_key_usages = usages.to_vec();
        self
    }

    /// A CA: basic constraints `CA:TRUE`, no path length limit.
    pub fn ca(mut self) -> Self {
        self.params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        self
    }

    /// Valid in 2020 only: expired today.
    pub fn expired(self) -> Self {
        self.valid((2020, 1, 1), (2021, 1, 1))
    }

    /// Valid from 2090: not valid yet.
    pub fn not_yet_valid(self) -> Self {
        self.valid((2090, 1, 1), (2100, 1, 1))
    }

    /// Valid between two dates (year, month, day), midnight UTC.
    pub fn valid(mut self, from: (i32, u8, u8), until: (i32, u8, u8)) -> Self {
        self.params.not_before = date_time_ymd(from.0, from.1, from.2);
        self.params.not_after = date_time_ymd(until.0, until.1, until.2);
        self
    }

    /// Any other field of rcgen's parameters.
    pub fn with(mut self, change: impl FnOnce(&mut CertificateParams)) -> Self {
        change(&mut self.params);
        self
    }

    /// Signs it with its own new key.
    pub fn self_signed(self) -> TestCert {
        let key = KeyPair::generate().expect("rcgen generates a key");
        let cert = self.params.self_signed(&key).expect("rcgen signs a test certificate");
        TestCert {
            cert,
            key,
            params: self.params,
        }
    }

    /// Signs it with `issuer`'s key (a new key of its own).
    pub fn signed_by(self, issuer: &TestCert) -> TestCert {
        let key = KeyPair::generate().expect("rcgen generates a key");
        let signer = Issuer::from_params(&issuer.params, &issuer.key);
        let cert = self
            .params
            .signed_by(&key, &signer)
            .expect("rcgen signs a test certificate");
        TestCert {
            cert,
            key,
            params: self.params,
        }
    }
}

#[cfg(test)]
mod tests {
    use x509_parser::prelude::{FromDer, X509Certificate};

    use super::*;

    #[test]
    fn a_ca_issues_a_leaf_that_names_it_as_issuer() {
        let ca = TestCert::builder(&["test-ca"]).ca().self_signed();
        let leaf = TestCert::builder(&["plugin"]).server().signed_by(&ca);
        let ca_der = ca.cert_der();
        let leaf_der = leaf.cert_der();
        let (_, ca_x509) = X509Certificate::from_der(&ca_der).unwrap();
        let (_, leaf_x509) = X509Certificate::from_der(&leaf_der).unwrap();
        assert_eq!(leaf_x509.issuer(), ca_x509.subject());
        assert!(ca_x509.is_ca());
        assert!(!leaf_x509.is_ca());
        // The signature verifies: the leaf chains to the CA when the CA is pinned.
        use rustls::client::danger::ServerCertVerifier;
        let verifier = crate::verify::PinnedServerVerifier::new(vec![ca_der.clone()]).unwrap();
        let name = rustls_pki_types::ServerName::try_from("plugin").unwrap();
        verifier
            .verify_server_cert(&leaf_der, &[], &name, &[], rustls_pki_types::UnixTime::now())
            .unwrap();
    }

    #[test]
    fn validity_and_usages_are_the_ones_asked_for() {
        let expired = TestCert::builder(&["old"]).client().expired().self_signed();
        let der = expired.cert_der();
        let (_, x509) = X509Certificate::from_der(&der).unwrap();
        assert_eq!(x509.validity().not_after.to_datetime().year(), 2021);
        let eku = x509.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
    }

    #[test]
    fn files_hold_the_pem_and_the_key_is_never_debug_printed() {
        let dir = tempfile::tempdir().unwrap();
        let cert = TestCert::builder(&["plugin", "127.0.0.1"]).self_signed();
        let (crt, key) = cert.write(dir.path(), "server").unwrap();
        assert_eq!(std::fs::read_to_string(crt).unwrap(), cert.cert_pem());
        assert_eq!(std::fs::read_to_string(key).unwrap(), cert.key_pem());
        assert!(!format!("{cert:?}").contains("PRIVATE"));
    }
}
