//! The certificates of a plugin's Secrets, checked as the two sides use them.
//!
//! The operator (CloudNativePG's `tls.Config`, cnpgi-operator's
//! `PinnedServerVerifier`) trusts the server Secret's `tls.crt`, verifies the
//! name it dials (`cnpg.io/pluginServerName`, else the Service name) and
//! presents the client Secret's `tls.crt` with its `tls.key`; the plugin
//! trusts what its `--client-cert` file holds. Each certificate is read with
//! x509-parser for what a person can fix (dates, names, key usages); the
//! chains are then verified by `cnpgi_tls::verify`, the verifiers the host
//! and the SDK's server use, so that the doctor and the handshake agree.

use std::time::Duration;

use rustls::{CertificateError, server::ParsedCertificate};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use x509_parser::{certificate::X509Certificate, extensions::GeneralName, prelude::FromDer};

use super::finding::{Finding, Object};

/// A certificate about to expire within this is a warning.
pub(crate) const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 24 * 3600);

/// Which side a certificate authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// The plugin's server certificate.
    Server,
    /// The certificate the operator presents.
    Client,
}

impl Purpose {
    fn eku(self) -> &'static str {
        match self {
            Self::Server => "serverAuth (cert-manager: usages: [server auth])",
            Self::Client => "clientAuth (cert-manager: usages: [client auth])",
        }
    }
}

/// Where a certificate comes from: a key of a Secret, for a plugin.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    /// The plugin it is for.
    pub(crate) plugin: String,
    /// The Secret.
    pub(crate) secret: Object,
    /// The key, `tls.crt`.
    pub(crate) key: String,
    /// The cert-manager Certificate that writes the Secret
    /// (its `cert-manager.io/certificate-name` annotation), if any.
    pub(crate) certificate: Option<String>,
}

impl Source {
    fn field(&self) -> String {
        format!("data[\"{}\"]", self.key)
    }

    fn finding(&self, check: &'static str, problem: String, fix: String) -> Finding {
        Finding::error(check, self.secret.clone(), Some(&self.field()), problem, fix).for_plugin(&self.plugin)
    }

    /// How to get a new certificate into the Secret.
    fn reissue(&self) -> String {
        match &self.certificate {
            Some(name) => format!("renew the cert-manager Certificate {name} (cmctl renew {name}), or fix its spec"),
            None => "write a new certificate into the Secret".to_owned(),
        }
    }
}

/// Every certificate of PEM text; a finding when there is none or one is not PEM.
pub(crate) fn parse_chain(pem: &[u8], source: &Source) -> Result<Vec<CertificateDer<'static>>, Box<Finding>> {
    cnpgi_tls::pem::parse_certificates(pem, std::path::Path::new(&source.key), "certificate").map_err(|error| {
        Box::new(source.finding(
            "cert.parse",
            format!("is not a PEM certificate chain: {error}"),
            format!(
                "store PEM CERTIFICATE blocks under {}: {}",
                source.key,
                source.reissue()
            ),
        ))
    })
}

/// The checks of one certificate (the leaf of a Secret): validity dates,
/// and for `purpose` the extended key usage, the key usage and, for a
/// server, the name the operator verifies.
pub(crate) fn check_leaf(
    der: &CertificateDer<'_>,
    purpose: Purpose,
    server_name: Option<&str>,
    now: UnixTime,
    source: &Source,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let cert = match X509Certificate::from_der(der.as_ref()) {
        Ok((_, cert)) => cert,
        Err(error) => {
            findings.push(source.finding(
                "cert.parse",
                format!("holds a certificate that cannot be parsed: {error}"),
                source.reissue(),
            ));
            return findings;
        }
    };
    let subject = cert.subject().to_string();
    let now_secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let not_before = cert.validity().not_before;
    let not_after = cert.validity().not_after;
    if now_secs < not_before.timestamp() {
        findings.push(source.finding(
            "cert.dates",
            format!("certificate {subject:?} is not valid before {not_before} (notBefore is in the future)"),
            format!("check the clocks; {}", source.reissue()),
        ));
    } else if now_secs > not_after.timestamp() {
        findings.push(source.finding(
            "cert.dates",
            format!("certificate {subject:?} expired at {not_after} (notAfter)"),
            source.reissue(),
        ));
    } else if not_after.timestamp() - now_secs < i64::try_from(EXPIRY_WARNING.as_secs()).unwrap_or(i64::MAX) {
        findings.push(
            source
                .finding(
                    "cert.expiring",
                    format!("certificate {subject:?} expires at {not_after}, in less than 7 days"),
                    source.reissue(),
                )
                .warning(),
        );
    }
    match cert.extended_key_usage() {
        Ok(Some(eku)) => {
            let eku = eku.value;
            let allowed = eku.any
                || match purpose {
                    Purpose::Server => eku.server_auth,
                    Purpose::Client => eku.client_auth,
                };
            if !allowed {
                findings.push(source.finding(
                    "cert.eku",
                    format!(
                        "certificate {subject:?} restricts its extended key usage and does not allow {}",
                        purpose.eku()
                    ),
                    format!("issue it with the extended key usage {}", purpose.eku()),
                ));
            }
        }
        Ok(None) => {}
        Err(error) => findings.push(source.finding(
            "cert.parse",
            format!("certificate {subject:?} has an unreadable extended key usage: {error}"),
            source.reissue(),
        )),
    }
    // A key usage that leaves out digitalSignature forbids the TLS 1.3
    // handshake signature; Go and webpki do not check it, OpenSSL does.
    if let Ok(Some(usage)) = cert.key_usage()
        && !usage.value.digital_signature()
    {
        findings.push(
            source
                .finding(
                    "cert.key-usage",
                    format!(
                        "certificate {subject:?} has a key usage without digitalSignature ({})",
                        usage.value
                    ),
                    "issue it with the key usage digitalSignature (cert-manager's default)".to_owned(),
                )
                .warning(),
        );
    }
    if let Some(name) = server_name {
        match check_name(der, name) {
            Ok(()) => {}
            Err(reason) => {
                let names = dns_names(&cert);
                let shown = if names.is_empty() {
                    "no DNS or IP subjectAltName (the common name is not used)".to_owned()
                } else {
                    format!("the names {}", names.join(", "))
                };
                findings.push(source.finding(
                    "cert.name",
                    format!("certificate {subject:?} has {shown}, not {name:?}, the name the operator verifies ({reason})"),
                    format!(
                        "issue it for {name}{}, or set the Service's annotation cnpg.io/pluginServerName to one of its names",
                        match &source.certificate {
                            Some(certificate) => format!(" (spec.dnsNames of the Certificate {certificate})"),
                            None => String::new(),
                        }
                    ),
                ));
            }
        }
    }
    findings
}

/// rustls' own name check (the one the handshake makes).
fn check_name(der: &CertificateDer<'_>, name: &str) -> Result<(), String> {
    let server_name = cnpgi_tls::client::server_name(name).map_err(|e| e.to_string())?;
    let parsed = ParsedCertificate::try_from(der).map_err(|e| e.to_string())?;
    rustls::client::verify_server_name(&parsed, &server_name).map_err(|e| e.to_string())
}

/// The DNS and IP subjectAltNames of a certificate.
fn dns_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::IpAddr::from(b).to_string()),
                16 => <[u8; 16]>::try_from(*bytes)
                    .ok()
                    .map(|b| std::net::IpAddr::from(b).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The subject of a certificate, for messages.
pub(crate) fn subject(der: &CertificateDer<'_>) -> String {
    X509Certificate::from_der(der.as_ref())
        .map(|(_, cert)| cert.subject().to_string())
        .unwrap_or_else(|_| "(unparsable)".to_owned())
}

/// Whether the server `chain` (leaf first) is what the operator accepts:
/// `pinned` being the server Secret's `tls.crt`, for `server_name`.
pub(crate) fn verify_server(
    chain: &[CertificateDer<'static>],
    pinned: &[CertificateDer<'static>],
    server_name: &str,
    now: UnixTime,
) -> Result<(), String> {
    use rustls::client::danger::ServerCertVerifier as _;
    let (leaf, intermediates) = chain.split_first().ok_or("no certificate")?;
    let verifier = cnpgi_tls::verify::PinnedServerVerifier::new(pinned.to_vec()).map_err(|e| e.to_string())?;
    let name = cnpgi_tls::client::server_name(server_name).map_err(|e| e.to_string())?;
    verifier
        .verify_server_cert(leaf, intermediates, &name, &[], now)
        .map(|_| ())
        .map_err(|e| explain(&e))
}

/// Whether the client `chain` (leaf first) is what the plugin accepts,
/// `trusted` being its `--client-cert` file.
pub(crate) fn verify_client(
    chain: &[CertificateDer<'static>],
    trusted: &[CertificateDer<'static>],
    now: UnixTime,
) -> Result<(), String> {
    use rustls::server::danger::ClientCertVerifier as _;
    let (leaf, intermediates) = chain.split_first().ok_or("no certificate")?;
    let verifier = cnpgi_tls::verify::PinnedClientVerifier::new(trusted.to_vec()).map_err(|e| e.to_string())?;
    verifier
        .verify_client_cert(leaf, intermediates, now)
        .map(|_| ())
        .map_err(|e| explain(&e))
}

/// A verifier's refusal, in words.
fn explain(error: &rustls::Error) -> String {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "it is neither one of the trusted certificates nor issued by a trusted CA certificate (basicConstraints CA:TRUE)"
                .to_owned()
        }
        rustls::Error::InvalidCertificate(CertificateError::BadSignature) => {
            "it names a trusted CA certificate as its issuer, but that CA's key did not sign it (another CA with the same name)"
                .to_owned()
        }
        other => other.to_string(),
    }
}

/// Whether `key` is the private key of `chain`'s leaf (what Go's
/// `tls.X509KeyPair` and rustls check before using them).
pub(crate) fn key_matches(chain: &[CertificateDer<'static>], key: &PrivateKeyDer<'static>) -> Result<(), String> {
    let provider = cnpgi_tls::crypto_provider();
    rustls::sign::CertifiedKey::from_der(chain.to_vec(), key.clone_key(), &provider)
        .map(|_| ())
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => "the key is not the certificate's key".to_owned(),
            other => other.to_string(),
        })
}

/// Whether a certificate is a CA (basicConstraints CA:TRUE).
pub(crate) fn is_ca(der: &CertificateDer<'_>) -> bool {
    X509Certificate::from_der(der.as_ref())
        .ok()
        .and_then(|(_, cert)| cert.basic_constraints().ok().flatten().map(|c| c.value.ca))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use cnpgi_tls::testing::{ExtendedKeyUsagePurpose, TestCert, TestCertBuilder};
    use rcgen::KeyUsagePurpose;

    use super::*;

    fn source(key: &str) -> Source {
        Source {
            plugin: "hello.example.com".into(),
            secret: Object::secret("cnpgi-system", "hello-server-tls"),
            key: key.into(),
            certificate: Some("hello-server".into()),
        }
    }

    struct Made {
        der: CertificateDer<'static>,
        cert: TestCert,
    }

    fn params(names: &[&str], eku: &[ExtendedKeyUsagePurpose]) -> TestCertBuilder {
        TestCert::builder(names).usages(eku)
    }

    fn self_signed(builder: TestCertBuilder) -> Made {
        let cert = builder.self_signed();
        Made {
            der: cert.cert_der(),
            cert,
        }
    }

    fn ca() -> Made {
        self_signed(params(&[], &[]).ca())
    }

    fn issued(builder: TestCertBuilder, ca: &Made) -> Made {
        let cert = builder.signed_by(&ca.cert);
        Made {
            der: cert.cert_der(),
            cert,
        }
    }

    fn checks(findings: &[Finding]) -> Vec<&'static str> {
        findings.iter().map(|f| f.check).collect()
    }

    #[test]
    fn a_good_server_certificate_has_no_finding_and_verifies() {
        let server = self_signed(params(&["hello"], &[ExtendedKeyUsagePurpose::ServerAuth]));
        assert_eq!(
            check_leaf(
                &server.der,
                Purpose::Server,
                Some("hello"),
                UnixTime::now(),
                &source("tls.crt")
            ),
            []
        );
        verify_server(
            std::slice::from_ref(&server.der),
            std::slice::from_ref(&server.der),
            "hello",
            UnixTime::now(),
        )
        .unwrap();
    }

    #[test]
    fn an_expired_certificate_names_its_secret_field_and_certificate() {
        let expired = self_signed(params(&["hello"], &[ExtendedKeyUsagePurpose::ServerAuth]).expired());
        let findings = check_leaf(
            &expired.der,
            Purpose::Server,
            Some("hello"),
            UnixTime::now(),
            &source("tls.crt"),
        );
        assert_eq!(checks(&findings), ["cert.dates"]);
        let line = findings[0].to_string();
        assert!(
            line.starts_with(r#"error   Secret/cnpgi-system/hello-server-tls data["tls.crt"]: certificate"#),
            "{line}"
        );
        assert!(
            line.contains("expired at") && line.contains("cmctl renew hello-server"),
            "{line}"
        );
        // The verifier refuses it too (the handshake would).
        let err = verify_server(
            std::slice::from_ref(&expired.der),
            std::slice::from_ref(&expired.der),
            "hello",
            UnixTime::now(),
        )
        .unwrap_err();
        assert!(err.contains("Expired"), "{err}");
    }

    #[test]
    fn a_certificate_about_to_expire_is_a_warning() {
        let soon = self_signed(params(&["hello"], &[]));
        let (_, cert) = X509Certificate::from_der(soon.der.as_ref()).unwrap();
        let almost = cert.validity().not_after.timestamp() - 3600;
        let at = UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(almost).unwrap()));
        let findings = check_leaf(&soon.der, Purpose::Server, None, at, &source("tls.crt"));
        assert_eq!(checks(&findings), ["cert.expiring"]);
        assert_eq!(findings[0].severity, super::super::finding::Severity::Warning);
    }

    #[test]
    fn a_server_certificate_for_another_name_lists_its_names() {
        let other = self_signed(params(&["other-plugin"], &[ExtendedKeyUsagePurpose::ServerAuth]));
        let findings = check_leaf(
            &other.der,
            Purpose::Server,
            Some("hello"),
            UnixTime::now(),
            &source("tls.crt"),
        );
        assert_eq!(checks(&findings), ["cert.name"]);
        assert!(findings[0].problem.contains("other-plugin"), "{}", findings[0].problem);
        assert!(
            findings[0].fix.contains("cnpg.io/pluginServerName"),
            "{}",
            findings[0].fix
        );
        assert!(
            verify_server(
                std::slice::from_ref(&other.der),
                std::slice::from_ref(&other.der),
                "hello",
                UnixTime::now()
            )
            .is_err()
        );
        // Only the common name: Go and rustls ignore it.
        let cn_only =
            self_signed(params(&[], &[]).with(|p| p.distinguished_name.push(rcgen::DnType::CommonName, "hello")));
        let findings = check_leaf(
            &cn_only.der,
            Purpose::Server,
            Some("hello"),
            UnixTime::now(),
            &source("tls.crt"),
        );
        assert_eq!(checks(&findings), ["cert.name"]);
        assert!(
            findings[0].problem.contains("no DNS or IP subjectAltName"),
            "{}",
            findings[0].problem
        );
    }

    #[test]
    fn a_missing_extended_key_usage_is_named_for_its_side() {
        let client_only = self_signed(params(&["hello"], &[ExtendedKeyUsagePurpose::ClientAuth]));
        let findings = check_leaf(
            &client_only.der,
            Purpose::Server,
            Some("hello"),
            UnixTime::now(),
            &source("tls.crt"),
        );
        assert_eq!(checks(&findings), ["cert.eku"]);
        assert!(findings[0].problem.contains("serverAuth"), "{}", findings[0].problem);
        let server_only = self_signed(params(&["c"], &[ExtendedKeyUsagePurpose::ServerAuth]));
        let findings = check_leaf(
            &server_only.der,
            Purpose::Client,
            None,
            UnixTime::now(),
            &source("tls.crt"),
        );
        assert_eq!(checks(&findings), ["cert.eku"]);
        assert!(findings[0].problem.contains("clientAuth"), "{}", findings[0].problem);
        // No extended key usage at all allows both (as Go and webpki read it).
        let any = self_signed(params(&["hello"], &[]));
        assert_eq!(
            check_leaf(&any.der, Purpose::Client, None, UnixTime::now(), &source("tls.crt")),
            []
        );
    }

    #[test]
    fn a_key_usage_without_digital_signature_is_a_warning() {
        let cert = self_signed(params(&["hello"], &[]).with(|p| p.key_usages = vec![KeyUsagePurpose::KeyEncipherment]));
        let findings = check_leaf(
            &cert.der,
            Purpose::Server,
            Some("hello"),
            UnixTime::now(),
            &source("tls.crt"),
        );
        assert_eq!(checks(&findings), ["cert.key-usage"]);
    }

    #[test]
    fn a_client_certificate_from_another_ca_does_not_chain_to_what_the_plugin_trusts() {
        let trusted_ca = ca();
        let other_ca = ca();
        let good = issued(params(&["client"], &[ExtendedKeyUsagePurpose::ClientAuth]), &trusted_ca);
        let stranger = issued(params(&["client"], &[ExtendedKeyUsagePurpose::ClientAuth]), &other_ca);
        verify_client(
            std::slice::from_ref(&good.der),
            std::slice::from_ref(&trusted_ca.der),
            UnixTime::now(),
        )
        .unwrap();
        let err = verify_client(
            std::slice::from_ref(&stranger.der),
            std::slice::from_ref(&trusted_ca.der),
            UnixTime::now(),
        )
        .unwrap_err();
        assert!(err.contains("trusted CA"), "{err}");
        // Pinned leaves: only the very certificate.
        verify_client(
            std::slice::from_ref(&good.der),
            std::slice::from_ref(&good.der),
            UnixTime::now(),
        )
        .unwrap();
        assert!(
            verify_client(
                std::slice::from_ref(&stranger.der),
                std::slice::from_ref(&good.der),
                UnixTime::now()
            )
            .is_err()
        );
        assert!(is_ca(&trusted_ca.der) && !is_ca(&good.der));
    }

    #[test]
    fn a_server_certificate_from_another_ca_is_refused_by_the_operator() {
        let pinned_ca = ca();
        let other_ca = ca();
        let served = issued(params(&["hello"], &[ExtendedKeyUsagePurpose::ServerAuth]), &other_ca);
        assert!(
            verify_server(
                std::slice::from_ref(&served.der),
                std::slice::from_ref(&pinned_ca.der),
                "hello",
                UnixTime::now()
            )
            .is_err()
        );
        let good = issued(params(&["hello"], &[ExtendedKeyUsagePurpose::ServerAuth]), &pinned_ca);
        verify_server(
            std::slice::from_ref(&good.der),
            std::slice::from_ref(&pinned_ca.der),
            "hello",
            UnixTime::now(),
        )
        .unwrap();
    }

    #[test]
    fn the_key_must_be_the_certificates() {
        let a = self_signed(params(&["a"], &[]));
        let b = self_signed(params(&["b"], &[]));
        let key = |made: &Made| made.cert.key_der();
        key_matches(std::slice::from_ref(&a.der), &key(&a)).unwrap();
        let err = key_matches(std::slice::from_ref(&a.der), &key(&b)).unwrap_err();
        assert!(err.contains("not the certificate's key"), "{err}");
    }

    #[test]
    fn garbage_is_not_a_chain() {
        let finding = parse_chain(b"not PEM", &source("tls.crt")).unwrap_err();
        assert_eq!(finding.check, "cert.parse");
        assert_eq!(finding.field.as_deref(), Some(r#"data["tls.crt"]"#));
    }
}
