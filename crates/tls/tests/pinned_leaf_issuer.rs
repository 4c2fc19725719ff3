//! A pinned leaf is trusted as itself, never as an issuer (issue 13, point 2).
//!
//! Go's `x509.Verify` refuses a chain whose parent is a certificate without
//! `basicConstraints CA:TRUE` ("parent certificate cannot sign this kind of
//! certificate"). These tests run real TLS 1.3 handshakes over loopback TCP
//! on both sides: the plugin server verifying a client, the operator's
//! client verifying a server.

#![allow(clippy::unwrap_used)]

use std::{fs, sync::Arc};

use cnpgi_tls::testing::TestCert as Made;
use cnpgi_tls::{
    client::{client_config, server_name},
    server::ServerTlsFiles,
    verify::PinnedServerVerifier,
};
use rcgen::ExtendedKeyUsagePurpose;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use tokio_rustls::TlsConnector;

#[derive(Clone, Copy)]
enum Validity {
    Current,
    Expired,
}

fn self_signed(name: &str, eku: &[ExtendedKeyUsagePurpose], validity: Validity, ca: bool) -> Made {
    let mut builder = Made::builder(&[name]).usages(eku);
    if let Validity::Expired = validity {
        builder = builder.expired();
    }
    if ca {
        builder = builder.ca();
    }
    builder.self_signed()
}

fn signed_by(name: &str, eku: &[ExtendedKeyUsagePurpose], issuer: &Made) -> Made {
    Made::builder(&[name]).usages(eku).signed_by(issuer)
}

const BOTH: &[ExtendedKeyUsagePurpose] = &[ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
const SERVER: &[ExtendedKeyUsagePurpose] = &[ExtendedKeyUsagePurpose::ServerAuth];
const CLIENT: &[ExtendedKeyUsagePurpose] = &[ExtendedKeyUsagePurpose::ClientAuth];

/// Runs one handshake plus a one-byte exchange: a plugin-like server trusting
/// `pinned_client` (as its `--client-cert` file), a client presenting `client`
/// (with `chain` as intermediates) and trusting `pinned_server`, the server
/// presenting `server` (with `server_chain`). Returns (server side, client side).
async fn handshake(
    server: &Made,
    server_chain: &[&Made],
    pinned_client: &[&Made],
    client: &Made,
    client_chain: &[&Made],
    pinned_server: &[&Made],
) -> (Result<(), String>, Result<(), String>) {
    let dir = tempfile::tempdir().unwrap();
    let (server_cert, server_key) = server.write(dir.path(), "server").unwrap();
    let mut pem = fs::read_to_string(&server_cert).unwrap();
    for c in server_chain {
        pem.push_str(&c.cert_pem());
    }
    fs::write(&server_cert, pem).unwrap();
    let client_ca = dir.path().join("client-ca.crt");
    fs::write(
        &client_ca,
        pinned_client.iter().map(|c| c.cert_pem()).collect::<String>(),
    )
    .unwrap();
    let config = ServerTlsFiles {
        cert: server_cert,
        key: server_key,
        client_ca: Some(client_ca),
    }
    .load()
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server_side = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let mut tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
        tls.write_all(b"k").await.map_err(|e| e.to_string())?;
        tls.flush().await.map_err(|e| e.to_string())?;
        Ok::<(), String>(())
    });

    let verifier = PinnedServerVerifier::new(pinned_server.iter().map(|c| c.cert_der()).collect()).unwrap();
    let mut presented = vec![client.cert_der()];
    presented.extend(client_chain.iter().map(|c| c.cert_der()));
    let config = client_config(presented, client.key_der(), verifier).unwrap();
    let connector = TlsConnector::from(Arc::new(config));
    let client_side = async {
        let tcp = TcpStream::connect(address).await.map_err(|e| e.to_string())?;
        let mut tls = connector
            .connect(server_name("plugin").unwrap(), tcp)
            .await
            .map_err(|e| e.to_string())?;
        // With TLS 1.3 the server judges the client's certificate after the
        // client finished: read the server's byte to learn its verdict.
        let mut byte = [0u8; 1];
        tls.read_exact(&mut byte).await.map_err(|e| e.to_string())?;
        Ok::<(), String>(())
    }
    .await;
    let server_side = server_side.await.unwrap();
    (server_side, client_side)
}

fn refused(result: &Result<(), String>, what: &str) {
    let err = result.as_ref().expect_err(what);
    assert!(
        err.contains("UnknownIssuer") || err.contains("unknown issuer") || err.contains("certificate"),
        "{what}: unexpected error {err}"
    );
}

#[tokio::test]
async fn the_pinned_leaf_itself_and_chains_to_a_pinned_ca_are_accepted() {
    let server = self_signed("plugin", SERVER, Validity::Current, false);
    let client = self_signed("operator", CLIENT, Validity::Current, false);
    let (s, c) = handshake(&server, &[], &[&client], &client, &[], &[&server]).await;
    s.unwrap();
    c.unwrap();

    let ca = self_signed("ca", &[], Validity::Current, true);
    let server = signed_by("plugin", SERVER, &ca);
    let client = signed_by("operator", CLIENT, &ca);
    let (s, c) = handshake(&server, &[], &[&ca], &client, &[], &[&ca]).await;
    s.unwrap();
    c.unwrap();
}

#[tokio::test]
async fn plugin_server_refuses_a_client_signed_by_a_pinned_leaf() {
    let server = self_signed("plugin", SERVER, Validity::Current, false);
    for (case, pinned) in [
        (
            "valid pinned leaf",
            self_signed("operator", BOTH, Validity::Current, false),
        ),
        (
            "expired pinned leaf",
            self_signed("operator", BOTH, Validity::Expired, false),
        ),
        (
            "serverAuth-only pinned leaf",
            self_signed("operator", SERVER, Validity::Current, false),
        ),
    ] {
        let forged = signed_by("operator", CLIENT, &pinned);
        let (s, _) = handshake(&server, &[], &[&pinned], &forged, &[], &[&server]).await;
        refused(
            &s,
            &format!("{case}: a client certificate signed by it must be refused"),
        );
        // Also when the forger sends the pinned leaf along as an intermediate.
        let (s, _) = handshake(&server, &[], &[&pinned], &forged, &[&pinned], &[&server]).await;
        refused(&s, &format!("{case} (sent as intermediate): must be refused"));
    }
}

#[tokio::test]
async fn operator_client_refuses_a_server_signed_by_a_pinned_leaf() {
    let client = self_signed("operator", CLIENT, Validity::Current, false);
    for (case, pinned) in [
        (
            "valid pinned leaf",
            self_signed("plugin", BOTH, Validity::Current, false),
        ),
        (
            "expired pinned leaf",
            self_signed("plugin", BOTH, Validity::Expired, false),
        ),
        (
            "clientAuth-only pinned leaf",
            self_signed("plugin", CLIENT, Validity::Current, false),
        ),
    ] {
        let forged = signed_by("plugin", SERVER, &pinned);
        let (_, c) = handshake(&forged, &[], &[&client], &client, &[], &[&pinned]).await;
        refused(
            &c,
            &format!("{case}: a server certificate signed by it must be refused"),
        );
        let (_, c) = handshake(&forged, &[&pinned], &[&client], &client, &[], &[&pinned]).await;
        refused(&c, &format!("{case} (sent as intermediate): must be refused"));
    }
}

/// A pinned CA outside its validity period issues nothing (Go checks the
/// dates of every certificate of a chain, the root included; webpki does not
/// check a trust anchor's).
#[tokio::test]
async fn an_expired_pinned_ca_is_not_an_issuer() {
    let expired_ca = self_signed("ca", &[], Validity::Expired, true);
    let valid_ca = self_signed("ca", &[], Validity::Current, true);
    let client = self_signed("operator", CLIENT, Validity::Current, false);
    let server = signed_by("plugin", SERVER, &expired_ca);
    let (_, c) = handshake(&server, &[], &[&client], &client, &[], &[&expired_ca]).await;
    refused(&c, "a server issued by an expired pinned CA must be refused");
    // Another, valid, pinned CA still works alongside the expired one.
    let server = signed_by("plugin", SERVER, &valid_ca);
    let (_, c) = handshake(&server, &[], &[&client], &client, &[], &[&expired_ca, &valid_ca]).await;
    c.unwrap();

    let plugin = self_signed("plugin", SERVER, Validity::Current, false);
    let forged = signed_by("operator", CLIENT, &expired_ca);
    let (s, _) = handshake(&plugin, &[], &[&expired_ca], &forged, &[], &[&plugin]).await;
    refused(&s, "a client issued by an expired pinned CA must be refused");
}
