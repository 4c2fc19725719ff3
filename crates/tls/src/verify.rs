//! Certificate verifiers for the CNPG-I trust model.
//!
//! Both sides of a CNPG-I connection are configured with *pinned*
//! certificates: the operator pins the plugin's server certificate, the
//! plugin pins the operator's client certificate. A peer is trusted when the
//! certificate it presents
//!
//! * is byte-identical to a pinned certificate and currently valid (the
//!   self-signed leaves of cert-manager's `selfSigned` issuer, and leaves
//!   issued by a CA that is not itself pinned, as Go's `crypto/tls` accepts), or
//! * chains to a pinned certificate acting as a CA, per the Web PKI rules.
//!
//! Only a pinned certificate marked as a CA (`basicConstraints CA:TRUE`) can
//! be an issuer: webpki checks neither the dates, nor the extended key usage,
//! nor the CA flag of a trust anchor, so a pinned leaf placed among the anchors
//! would let anyone holding its key sign new certificates, even when the leaf
//! is expired or restricted to another purpose. Go's `x509.Verify` refuses
//! such chains ("parent certificate cannot sign this kind of certificate"), and
//! so does this module: pinned leaves are trusted as themselves only. For the
//! same reason, a pinned CA outside its validity period issues nothing (Go
//! checks every certificate's dates, the root's included).
//!
//! Any other certificate is refused. The name a server presents is always
//! checked against the name the client expects.

use std::sync::Arc;

use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, Error, RootCertStore, SignatureScheme,
    client::{
        WebPkiServerVerifier,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
    crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature},
    server::{
        ParsedCertificate, WebPkiClientVerifier,
        danger::{ClientCertVerified, ClientCertVerifier},
    },
};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use x509_parser::{certificate::X509Certificate, prelude::FromDer, time::ASN1Time};

use crate::{TlsError, crypto_provider};

/// Which side of the connection a certificate authenticates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Server,
    Client,
}

/// Builds chain verification (`V`) to some pinned CAs.
type BuildChain<V> = fn(&[PinnedCa], &Arc<CryptoProvider>) -> Result<Arc<V>, TlsError>;

/// What both verifiers hold: the pinned certificates, trusted as they are,
/// and chain verification (`V`, webpki's) to the CAs among them.
#[derive(Debug)]
struct Pins<V: ?Sized> {
    pinned: Vec<CertificateDer<'static>>,
    /// The pinned CAs and chain verification to them; `None` when none is a CA.
    chain: Option<(Vec<PinnedCa>, Arc<V>)>,
    provider: Arc<CryptoProvider>,
    /// Builds chain verification to some CAs.
    build: BuildChain<V>,
}

impl<V: ?Sized> Pins<V> {
    fn new(pinned: Vec<CertificateDer<'static>>, build: BuildChain<V>) -> Result<Self, TlsError> {
        let provider = crypto_provider();
        let cas = pinned_cas(&pinned)?;
        let chain = if cas.is_empty() {
            None
        } else {
            let verifier = build(&cas, &provider)?;
            Some((cas, verifier))
        };
        Ok(Self {
            pinned,
            chain,
            provider,
            build,
        })
    }

    /// The chain verifier to use at `now` ([`current`]); an unknown issuer
    /// when no pinned certificate is a CA.
    fn chain_at(&self, now: UnixTime) -> Result<Arc<V>, Error> {
        match &self.chain {
            Some(chain) => current(chain, now, |cas| (self.build)(cas, &self.provider)),
            None => Err(Error::InvalidCertificate(CertificateError::UnknownIssuer)),
        }
    }
}

/// The handshake-signature methods both verifier traits require, the same
/// for both: checked with the crypto provider's algorithms (`self.pins`).
macro_rules! handshake_signatures_by_provider {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            verify_tls12_signature(
                message,
                cert,
                dss,
                &self.pins.provider.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            verify_tls13_signature(
                message,
                cert,
                dss,
                &self.pins.provider.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.pins
                .provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    };
}

/// Verifies a server's certificate against pinned certificates (client side).
#[derive(Debug)]
pub struct PinnedServerVerifier {
    pins: Pins<WebPkiServerVerifier>,
}

impl PinnedServerVerifier {
    /// Trusts servers presenting one of `pinned`, or a chain to one of them.
    ///
    /// ```
    /// # let key = rcgen::KeyPair::generate().unwrap();
    /// # let cert = rcgen::CertificateParams::new(vec!["plugin".into()]).unwrap().self_signed(&key).unwrap();
    /// let verifier = cnpgi_tls::verify::PinnedServerVerifier::new(vec![cert.der().clone()])?;
    /// # Ok::<(), cnpgi_tls::TlsError>(())
    /// ```
    pub fn new(pinned: Vec<CertificateDer<'static>>) -> Result<Arc<Self>, TlsError> {
        Ok(Arc::new(Self {
            pins: Pins::new(pinned, server_chain_verifier)?,
        }))
    }
}

fn server_chain_verifier(
    cas: &[PinnedCa],
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, TlsError> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots(cas)?), provider.clone())
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))
}

fn client_chain_verifier(
    cas: &[PinnedCa],
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots(cas)?), provider.clone())
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))
}

/// The verifier to use at `now`: the one built over every pinned CA when
/// they are all within their validity period, else one built over those
/// that are (webpki does not check a trust anchor's dates; Go does).
fn current<V: ?Sized>(
    (cas, all): &(Vec<PinnedCa>, Arc<V>),
    now: UnixTime,
    build: impl FnOnce(&[PinnedCa]) -> Result<Arc<V>, TlsError>,
) -> Result<Arc<V>, Error> {
    let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    if cas.iter().all(|ca| ca.valid_at(now)) {
        return Ok(all.clone());
    }
    let valid: Vec<PinnedCa> = cas.iter().filter(|ca| ca.valid_at(now)).cloned().collect();
    if valid.is_empty() {
        return Err(Error::InvalidCertificate(CertificateError::UnknownIssuer));
    }
    build(&valid).map_err(|e| Error::General(e.to_string()))
}

impl ServerCertVerifier for PinnedServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        if is_pinned(&self.pins.pinned, end_entity) {
            check_pinned_leaf(end_entity, now, Purpose::Server)?;
            let parsed = ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_name(&parsed, server_name)?;
            return Ok(ServerCertVerified::assertion());
        }
        self.pins
            .chain_at(now)?
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    handshake_signatures_by_provider!();
}

/// Verifies a client's certificate against pinned certificates (server side).
/// A client certificate is always required.
#[derive(Debug)]
pub struct PinnedClientVerifier {
    pins: Pins<dyn ClientCertVerifier>,
}

impl PinnedClientVerifier {
    /// Trusts clients presenting one of `pinned`, or a chain to one of them.
    pub fn new(pinned: Vec<CertificateDer<'static>>) -> Result<Arc<Self>, TlsError> {
        Ok(Arc::new(Self {
            pins: Pins::new(pinned, client_chain_verifier)?,
        }))
    }
}

impl ClientCertVerifier for PinnedClientVerifier {
    // No hints: a Go client only sends a certificate whose issuer is among the
    // hinted names, which would hide a pinned CA-issued leaf. With an empty
    // list every client sends the certificate it has.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        if is_pinned(&self.pins.pinned, end_entity) {
            check_pinned_leaf(end_entity, now, Purpose::Client)?;
            return Ok(ClientCertVerified::assertion());
        }
        self.pins
            .chain_at(now)?
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    handshake_signatures_by_provider!();
}

/// A pinned certificate marked as a CA, with its validity period (Unix seconds).
#[derive(Debug, Clone)]
struct PinnedCa {
    der: CertificateDer<'static>,
    not_before: i64,
    not_after: i64,
}

impl PinnedCa {
    fn valid_at(&self, now: i64) -> bool {
        self.not_before <= now && now <= self.not_after
    }
}

/// The pinned certificates that may issue others (`basicConstraints` with
/// `CA:TRUE`): the trust anchors of chain verification. Empty when every
/// pinned certificate is a leaf, trusted only as itself.
fn pinned_cas(pinned: &[CertificateDer<'static>]) -> Result<Vec<PinnedCa>, TlsError> {
    if pinned.is_empty() {
        return Err(TlsError::Verifier("no pinned certificate given".into()));
    }
    let mut cas = Vec::new();
    for (index, der) in pinned.iter().enumerate() {
        let unparsable = |reason: String| {
            TlsError::Verifier(format!("pinned certificate #{} cannot be parsed: {reason}", index + 1))
        };
        let (_, cert) = X509Certificate::from_der(der.as_ref()).map_err(|e| unparsable(e.to_string()))?;
        let constraints = cert.basic_constraints().map_err(|e| unparsable(e.to_string()))?;
        if constraints.is_some_and(|c| c.value.ca) {
            cas.push(PinnedCa {
                der: der.clone(),
                not_before: cert.validity().not_before.timestamp(),
                not_after: cert.validity().not_after.timestamp(),
            });
        }
    }
    Ok(cas)
}

fn roots(cas: &[PinnedCa]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for ca in cas {
        roots
            .add(ca.der.clone())
            .map_err(|e| TlsError::Verifier(format!("pinned CA certificate cannot be a trust anchor: {e}")))?;
    }
    Ok(roots)
}

fn is_pinned(pinned: &[CertificateDer<'static>], presented: &CertificateDer<'_>) -> bool {
    pinned.iter().any(|p| p.as_ref() == presented.as_ref())
}

/// The checks Go applies to a presented certificate found in its root pool:
/// it must be within its validity period and, when it restricts its extended
/// key usage, allow the purpose it is used for.
fn check_pinned_leaf(der: &CertificateDer<'_>, now: UnixTime, purpose: Purpose) -> Result<(), Error> {
    let (_, cert) = X509Certificate::from_der(der.as_ref())
        .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
    let now = i64::try_from(now.as_secs())
        .ok()
        .and_then(|secs| ASN1Time::from_timestamp(secs).ok())
        .ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))?;
    let validity = cert.validity();
    if now < validity.not_before {
        return Err(Error::InvalidCertificate(CertificateError::NotValidYet));
    }
    if now > validity.not_after {
        return Err(Error::InvalidCertificate(CertificateError::Expired));
    }
    if let Ok(Some(eku)) = cert.extended_key_usage() {
        let eku = eku.value;
        let allowed = eku.any
            || match purpose {
                Purpose::Server => eku.server_auth,
                Purpose::Client => eku.client_auth,
            };
        if !allowed {
            return Err(Error::InvalidCertificate(CertificateError::InvalidPurpose));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::testing::TestCert;

    fn now() -> UnixTime {
        UnixTime::now()
    }

    fn ca() -> TestCert {
        TestCert::builder(&[]).ca().self_signed()
    }

    fn issued(name: &str, ca: &TestCert) -> TestCert {
        TestCert::builder(&[name]).server_and_client().signed_by(ca)
    }

    fn name(n: &str) -> ServerName<'static> {
        ServerName::try_from(n.to_owned()).unwrap()
    }

    #[test]
    fn self_signed_leaf_pinned_as_its_own_root_is_trusted() {
        let cert = TestCert::builder(&["cnpg-i-hello-world"]).server().self_signed();
        let v = PinnedServerVerifier::new(vec![cert.cert_der()]).unwrap();
        v.verify_server_cert(&cert.cert_der(), &[], &name("cnpg-i-hello-world"), &[], now())
            .unwrap();
    }

    #[test]
    fn pinned_leaf_must_match_the_server_name() {
        let cert = TestCert::builder(&["cnpg-i-hello-world"]).server().self_signed();
        let v = PinnedServerVerifier::new(vec![cert.cert_der()]).unwrap();
        let err = v
            .verify_server_cert(&cert.cert_der(), &[], &name("other-plugin"), &[], now())
            .unwrap_err();
        assert!(err.to_string().contains("not valid for name"), "{err}");
    }

    #[test]
    fn ca_issued_leaf_pinned_byte_for_byte_is_trusted_without_its_ca() {
        let authority = ca();
        let cert = issued("plugin.svc", &authority);
        let v = PinnedServerVerifier::new(vec![cert.cert_der()]).unwrap();
        v.verify_server_cert(&cert.cert_der(), &[], &name("plugin.svc"), &[], now())
            .unwrap();
        let c = PinnedClientVerifier::new(vec![cert.cert_der()]).unwrap();
        c.verify_client_cert(&cert.cert_der(), &[], now()).unwrap();
    }

    #[test]
    fn leaf_chaining_to_a_pinned_ca_is_trusted() {
        let authority = ca();
        let cert = issued("plugin.svc", &authority);
        let v = PinnedServerVerifier::new(vec![authority.cert_der()]).unwrap();
        v.verify_server_cert(&cert.cert_der(), &[], &name("plugin.svc"), &[], now())
            .unwrap();
        let c = PinnedClientVerifier::new(vec![authority.cert_der()]).unwrap();
        c.verify_client_cert(&cert.cert_der(), &[], now()).unwrap();
    }

    #[test]
    fn any_other_certificate_is_refused() {
        let pinned = TestCert::builder(&["plugin"]).server().self_signed();
        let stranger = TestCert::builder(&["plugin"]).server().self_signed();
        let other_ca = ca();
        let from_other_ca = issued("plugin", &other_ca);
        let v = PinnedServerVerifier::new(vec![pinned.cert_der()]).unwrap();
        let c = PinnedClientVerifier::new(vec![pinned.cert_der()]).unwrap();
        for presented in [&stranger.cert_der(), &from_other_ca.cert_der()] {
            let err = v
                .verify_server_cert(presented, &[], &name("plugin"), &[], now())
                .unwrap_err();
            assert!(matches!(err, Error::InvalidCertificate(_)), "{err}");
            assert!(c.verify_client_cert(presented, &[], now()).is_err());
        }
    }

    #[test]
    fn expired_or_not_yet_valid_pinned_leaf_is_refused() {
        let cert = TestCert::builder(&["plugin"]).server().self_signed();
        let v = PinnedServerVerifier::new(vec![cert.cert_der()]).unwrap();
        let far_future = UnixTime::since_unix_epoch(
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap()
                + Duration::from_secs(100 * 365 * 24 * 3600),
        );
        let err = v
            .verify_server_cert(&cert.cert_der(), &[], &name("plugin"), &[], far_future)
            .unwrap_err();
        assert_eq!(err, Error::InvalidCertificate(CertificateError::Expired));
        let long_ago = UnixTime::since_unix_epoch(Duration::from_secs(3600));
        let err = v
            .verify_server_cert(&cert.cert_der(), &[], &name("plugin"), &[], long_ago)
            .unwrap_err();
        assert_eq!(err, Error::InvalidCertificate(CertificateError::NotValidYet));
    }

    #[test]
    fn pinned_leaf_restricted_to_another_purpose_is_refused() {
        let client_only = TestCert::builder(&["plugin"]).client().self_signed();
        let v = PinnedServerVerifier::new(vec![client_only.cert_der()]).unwrap();
        let err = v
            .verify_server_cert(&client_only.cert_der(), &[], &name("plugin"), &[], now())
            .unwrap_err();
        assert_eq!(err, Error::InvalidCertificate(CertificateError::InvalidPurpose));
        let c = PinnedClientVerifier::new(vec![client_only.cert_der()]).unwrap();
        c.verify_client_cert(&client_only.cert_der(), &[], now()).unwrap();
    }

    #[test]
    fn no_pinned_certificate_is_a_configuration_error() {
        let err = PinnedServerVerifier::new(vec![]).unwrap_err();
        assert!(err.to_string().contains("no pinned certificate"), "{err}");
    }
}
