//! The two Secrets a plugin Service names, as the operator reads them: the
//! server Secret's `tls.crt` (trusted, its names verified), the client
//! Secret's `tls.crt` and `tls.key` (presented); and what the plugin's Pod
//! serves and trusts, against them.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

use super::{
    certs::{self, Purpose, Source},
    finding::{Finding, Object},
    service::{PluginService, annotation_field},
};

/// A certificate chain, leaf first.
pub(crate) type Chain = Vec<CertificateDer<'static>>;

/// The annotation cert-manager writes on the Secrets it manages.
const CERTIFICATE_NAME: &str = "cert-manager.io/certificate-name";

/// Where the key `key` of `secret` comes from, for findings.
pub(crate) fn source(plugin: &str, secret: &Secret, key: &str) -> Source {
    Source {
        plugin: plugin.to_owned(),
        secret: Object::secret(&secret.namespace().unwrap_or_default(), &secret.name_any()),
        key: key.to_owned(),
        certificate: secret.annotations().get(CERTIFICATE_NAME).cloned(),
    }
}

/// The bytes of `key`, or a finding naming the missing key.
pub(crate) fn data<'a>(plugin: &str, secret: &'a Secret, key: &str, what: &str) -> Result<&'a [u8], Box<Finding>> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.as_slice())
        .filter(|b| !b.is_empty())
        .ok_or_else(|| {
            let source = source(plugin, secret, key);
            Box::new(
                Finding::error(
                    "secret.key",
                    source.secret.clone(),
                    Some(&format!("data[\"{key}\"]")),
                    format!("is missing or empty: the operator reads {what} there"),
                    format!("store {what} under {key} (a kubernetes.io/tls Secret, as cert-manager writes it)"),
                )
                .for_plugin(plugin),
            )
        })
}

/// The finding for a Secret the Service names that does not exist.
pub(crate) fn missing(service: &PluginService, annotation: &str, name: &str, what: &str) -> Finding {
    Finding::error(
        "secret.missing",
        service.object(),
        Some(&annotation_field(annotation)),
        format!(
            "names the Secret {name}, which does not exist in namespace {}: the operator cannot {what}",
            service.namespace
        ),
        format!(
            "create the Secret {name} in {} (e.g. a cert-manager Certificate with secretName: {name}), or name an existing one",
            service.namespace
        ),
    )
    .for_plugin(&service.plugin)
}

/// The server Secret: its `tls.crt` (every certificate, the operator's
/// trust) with the leaf checked for the Service's server name; its
/// `tls.key`, when present, the leaf's (the plugin serves with it).
pub(crate) fn check_server_secret(
    service: &PluginService,
    secret: &Secret,
    now: UnixTime,
) -> (Option<Chain>, Vec<Finding>) {
    let mut findings = Vec::new();
    let plugin = &service.plugin;
    let crt = match data(
        plugin,
        secret,
        "tls.crt",
        "the plugin's server certificate, which it trusts",
    ) {
        Ok(crt) => crt,
        Err(finding) => return (None, vec![*finding]),
    };
    let at = source(plugin, secret, "tls.crt");
    let chain = match certs::parse_chain(crt, &at) {
        Ok(chain) => chain,
        Err(finding) => return (None, vec![*finding]),
    };
    findings.extend(certs::check_leaf(
        &chain[0],
        Purpose::Server,
        Some(&service.server_name),
        now,
        &at,
    ));
    if let Some(key) = secret.data.as_ref().and_then(|d| d.get("tls.key")) {
        findings.extend(check_key(&chain, &key.0, &source(plugin, secret, "tls.key")));
    }
    (Some(chain), findings)
}

/// The client Secret: `tls.crt` and `tls.key`, the pair the operator presents.
pub(crate) fn check_client_secret(
    service: &PluginService,
    secret: &Secret,
    now: UnixTime,
) -> (Option<(Chain, PrivateKeyDer<'static>)>, Vec<Finding>) {
    let plugin = &service.plugin;
    let mut findings = Vec::new();
    let crt = data(plugin, secret, "tls.crt", "the certificate it presents to the plugin");
    let key = data(plugin, secret, "tls.key", "the key of the certificate it presents");
    let (crt, key) = match (crt, key) {
        (Ok(crt), Ok(key)) => (crt, key),
        (crt, key) => {
            findings.extend(crt.err().map(|f| *f));
            findings.extend(key.err().map(|f| *f));
            return (None, findings);
        }
    };
    let at = source(plugin, secret, "tls.crt");
    let chain = match certs::parse_chain(crt, &at) {
        Ok(chain) => chain,
        Err(finding) => return (None, vec![*finding]),
    };
    findings.extend(certs::check_leaf(&chain[0], Purpose::Client, None, now, &at));
    let key_source = source(plugin, secret, "tls.key");
    let key_findings = check_key(&chain, key, &key_source);
    let usable = key_findings.is_empty();
    findings.extend(key_findings);
    let key = cnpgi_tls::pem::parse_private_key(key, std::path::Path::new("tls.key"), "key").ok();
    match key {
        Some(key) if usable => (Some((chain, key)), findings),
        _ => (None, findings),
    }
}

/// The key parses and is the chain's leaf's.
fn check_key(chain: &[CertificateDer<'static>], pem: &[u8], at: &Source) -> Vec<Finding> {
    let finding = |problem: String| {
        Finding::error(
            "secret.key-pair",
            at.secret.clone(),
            Some(&format!("data[\"{}\"]", at.key)),
            problem,
            "store the certificate's own private key (PEM) under tls.key, as cert-manager does".into(),
        )
        .for_plugin(&at.plugin)
    };
    match cnpgi_tls::pem::parse_private_key(pem, std::path::Path::new(&at.key), "key") {
        Err(error) => vec![finding(format!("is not a PEM private key: {error}"))],
        Ok(key) => match certs::key_matches(chain, &key) {
            Ok(()) => Vec::new(),
            Err(reason) => vec![finding(format!("does not go with tls.crt: {reason}"))],
        },
    }
}

#[cfg(test)]
mod tests {
    use cnpgi_host::discovery::kubernetes::SERVER_SECRET_ANNOTATION;
    use cnpgi_tls::testing::{ExtendedKeyUsagePurpose, TestCert};

    use super::*;

    fn secret(name: &str, pairs: &[(&str, Vec<u8>)]) -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "annotations": {CERTIFICATE_NAME: "hello-client"}},
            "data": pairs.iter().map(|(k, v)| ((*k).to_owned(), serde_json::Value::String(base64::Engine::encode(&base64::engine::general_purpose::STANDARD, v)))).collect::<serde_json::Map<_, _>>(),
        }))
        .unwrap()
    }

    fn service() -> PluginService {
        PluginService {
            plugin: "hello.example.com".into(),
            namespace: "ns".into(),
            name: "hello".into(),
            port: Some(9090),
            port_name: String::new(),
            client_secret: Some("client".into()),
            server_secret: Some("server".into()),
            server_name: "hello".into(),
        }
    }

    fn pair(name: &str, eku: ExtendedKeyUsagePurpose) -> (Vec<u8>, Vec<u8>) {
        let cert = TestCert::builder(&[name]).usages(&[eku]).self_signed();
        (cert.cert_pem().into_bytes(), cert.key_pem().into_bytes())
    }

    #[test]
    fn a_good_client_secret_gives_the_pair() {
        let (crt, key) = pair("client", ExtendedKeyUsagePurpose::ClientAuth);
        let (pair, findings) = check_client_secret(
            &service(),
            &secret("client", &[("tls.crt", crt), ("tls.key", key)]),
            UnixTime::now(),
        );
        assert_eq!(findings, []);
        assert!(pair.is_some());
    }

    #[test]
    fn a_missing_key_and_a_foreign_key_are_named_by_their_field() {
        let (crt, _) = pair("client", ExtendedKeyUsagePurpose::ClientAuth);
        let (_, findings) = check_client_secret(
            &service(),
            &secret("client", &[("tls.crt", crt.clone())]),
            UnixTime::now(),
        );
        assert_eq!(findings.len(), 1);
        assert_eq!(
            findings[0].to_string().split(':').next().unwrap(),
            r#"error   Secret/ns/client data["tls.key"]"#
        );
        let (_, other_key) = pair("x", ExtendedKeyUsagePurpose::ClientAuth);
        let (pair, findings) = check_client_secret(
            &service(),
            &secret("client", &[("tls.crt", crt), ("tls.key", other_key)]),
            UnixTime::now(),
        );
        assert!(pair.is_none());
        assert_eq!(findings[0].check, "secret.key-pair");
    }

    #[test]
    fn a_server_secret_for_another_name_and_a_missing_secret() {
        let (crt, key) = pair("other", ExtendedKeyUsagePurpose::ServerAuth);
        let (chain, findings) = check_server_secret(
            &service(),
            &secret("server", &[("tls.crt", crt), ("tls.key", key)]),
            UnixTime::now(),
        );
        assert!(chain.is_some());
        assert_eq!(findings.iter().map(|f| f.check).collect::<Vec<_>>(), ["cert.name"]);
        let finding = missing(&service(), SERVER_SECRET_ANNOTATION, "server", "trust the plugin");
        assert_eq!(
            finding.field.as_deref(),
            Some(r#"metadata.annotations["cnpg.io/pluginServerSecret"]"#)
        );
        assert!(
            finding.problem.contains("does not exist in namespace ns"),
            "{}",
            finding.problem
        );
    }
}
