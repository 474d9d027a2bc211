//! TLS on both listening addresses, with certificates the tests make (a
//! test certificate authority, rcgen): curl over `https://` with the
//! authority as its only root, a gRPC client over TLS, a renewed
//! certificate served to new connections while a stream opened before
//! goes on, and the start-up errors of an expired, mismatched or missing
//! certificate, each naming its file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use access::keys::KeysFile;
use proto::venue_l1_gateway_client::VenueL1GatewayClient;
use proto::{ListFeedsRequest, StreamRequest};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

use crate::server::access_support::Gate;
use crate::server::harness::with_key;

/// A certificate authority of the tests'.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Authority {
    /// A new authority named `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A server certificate for `localhost` and 127.0.0.1, valid from
    /// `from` to `until` days around now, and its key, as PEM.
    pub fn server(&self, from_days: i64, until_days: i64) -> (String, String) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now + time::Duration::days(from_days);
        params.not_after = now + time::Duration::days(until_days);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// The authority's certificate written to `dir/name`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, &self.pem).unwrap();
        path
    }
}

/// What a TLS test starts from: an authority and a server certificate it
/// signed (valid from yesterday for 30 days), written as `ca.pem`,
/// `server.pem` and `server.key` in a directory of their own.
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: Authority,
    /// The authority's certificate: a CA bundle.
    pub ca_file: PathBuf,
    /// The server's certificate and key files.
    pub files: edge::tls::TlsFiles,
}

impl Pki {
    /// A fresh one, the authority named `name`.
    pub fn new(name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = Authority::new(name);
        let ca_file = ca.write(dir.path(), "ca.pem");
        let (cert, key) = install(dir.path(), &ca.server(-1, 30));
        Self {
            dir,
            ca,
            ca_file,
            files: edge::tls::TlsFiles { cert, key },
        }
    }
}

/// Writes a certificate and key as the server's files.
pub fn install(dir: &Path, (cert, key): &(String, String)) -> (PathBuf, PathBuf) {
    let (cert_path, key_path) = (dir.join("server.pem"), dir.join("server.key"));
    // Written beside and renamed over, as a renewal tool does.
    for (path, text) in [(&cert_path, cert), (&key_path, key)] {
        let partial = path.with_extension("partial");
        std::fs::write(&partial, text).unwrap();
        std::fs::rename(&partial, path).unwrap();
    }
    (cert_path, key_path)
}

/// The capture's fills from its first block: a record per block to read
/// before and after a renewal.
fn from_the_first_block() -> StreamRequest {
    StreamRequest {
        position: Some(proto::Position {
            kind: Some(proto::position::Kind::BlockNumber(985_148_182)),
        }),
        filter: None,
    }
}

async fn start(dir: &Path, keys: KeysFile) -> Gate {
    let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
    Gate::start(keys, move |args| {
        args.tls_cert_file = Some(cert);
        args.tls_key_file = Some(key);
    })
    .await
}

async fn grpc(
    gate: &Gate,
    ca: &str,
) -> Result<VenueL1GatewayClient<Channel>, tonic::transport::Error> {
    let url = format!("https://localhost:{}", gate.running.grpc_addr.port());
    let channel = Channel::from_shared(url)
        .unwrap()
        .tls_config(
            ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca))
                .domain_name("localhost"),
        )?
        .connect()
        .await?;
    Ok(VenueL1GatewayClient::new(channel))
}

/// The body curl gets from `url` with `ca` as its only root.
fn curl_body(url: &str, ca: &Path) -> String {
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "10", "--cacert"])
        .arg(ca)
        .arg(url)
        .output()
        .expect("curl (Debian package curl) must be installed for the TLS tests");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// curl's status code for `url` with `ca` as its only root (000: no
/// answer, the TLS handshake failed).
fn curl(url: &str, ca: &Path) -> String {
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .arg("--cacert")
        .arg(ca)
        .arg(url)
        .output()
        .expect("curl (Debian package curl) must be installed for the TLS tests");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_addresses_serve_tls_to_clients_that_trust_the_authority() {
    let Pki {
        dir,
        ca,
        ca_file,
        files: _,
    } = Pki::new("l1gate test CA");
    let mut keys = KeysFile::default();
    let (key, _) = keys.add_key("alice", 0).unwrap();
    keys.set_role("alice", access::keys::Role::Admin).unwrap();
    let gate = start(dir.path(), keys).await;
    let http = gate.running.http_addr.port();

    // HTTPS with the authority as the only root; the key in the path.
    assert_eq!(
        curl(
            &format!("https://localhost:{http}/{key}/v1/feeds"),
            &ca_file
        ),
        "200"
    );
    // The status page shows the addresses clients use: https:// and wss://.
    let status = curl_body(
        &format!("https://localhost:{http}/{key}/status.json"),
        &ca_file,
    );
    let status: serde_json::Value =
        serde_json::from_str(&status).unwrap_or_else(|e| panic!("{e}: {status}"));
    let addresses = &status["addresses"];
    assert_eq!(addresses["tls"], true, "{addresses}");
    assert!(
        addresses["grpc"].as_str().unwrap().starts_with("https://")
            && addresses["http"].as_str().unwrap().starts_with("https://")
            && addresses["websocket"]
                .as_str()
                .unwrap()
                .starts_with("wss://"),
        "{addresses}"
    );
    // Plain HTTP to a TLS address gets no HTTP answer.
    assert_eq!(
        curl(&format!("http://localhost:{http}/healthz"), &ca_file),
        "000"
    );
    // A client trusting another authority refuses the certificate.
    let other = Authority::new("another CA").write(dir.path(), "other.pem");
    assert_eq!(
        curl(&format!("https://localhost:{http}/healthz"), &other),
        "000"
    );

    // gRPC over TLS (ALPN h2), the key in the metadata, the client's
    // address still seen by access control.
    let mut client = grpc(&gate, &ca.pem).await.unwrap();
    let feeds = client
        .list_feeds(with_key(ListFeedsRequest {}, &key))
        .await
        .unwrap()
        .into_inner();
    assert!(!feeds.feeds.is_empty());
    let refused = client
        .list_feeds(with_key(ListFeedsRequest {}, "l1g_not_a_key"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_reaches_new_connections_and_open_streams_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let first = Authority::new("first CA");
    install(dir.path(), &first.server(-1, 30));
    let mut keys = KeysFile::default();
    let (key, _) = keys.add_key("alice", 0).unwrap();
    let gate = start(dir.path(), keys).await;

    // A stream opened under the first certificate.
    let mut client = grpc(&gate, &first.pem).await.unwrap();
    let mut stream = client
        .stream_fills(with_key(from_the_first_block(), &key))
        .await
        .unwrap()
        .into_inner();
    let before = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a record within 10 s")
        .unwrap();
    assert!(before.is_some());

    // Renewed under another authority.
    let second = Authority::new("second CA");
    install(dir.path(), &second.server(-1, 60));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut renewed) = grpc(&gate, &second.pem).await
            && renewed
                .list_feeds(with_key(ListFeedsRequest {}, &key))
                .await
                .is_ok()
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "new connections did not get the renewed certificate"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The old authority no longer verifies a new connection.
    let stale = match grpc(&gate, &first.pem).await {
        Ok(mut client) => client
            .list_feeds(with_key(ListFeedsRequest {}, &key))
            .await
            .is_err(),
        Err(_) => true,
    };
    assert!(stale, "a new connection still got the first certificate");
    // The stream opened before goes on over its connection.
    let after = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("the open stream goes on")
        .unwrap();
    assert!(after.is_some());
}

#[tokio::test]
async fn an_unusable_certificate_stops_the_start_naming_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Authority::new("l1gate test CA");
    let expect = |settings: l1gate::config::ServeArgs| async move {
        let settings = settings.resolve().unwrap();
        let error = l1gate::serve::start(&settings)
            .await
            .expect_err("the start is refused");
        error.to_string()
    };
    let args = |cert: &Path, key: &Path| l1gate::config::ServeArgs {
        data: Some(crate::server::harness::real("btc-985148182")),
        allow_no_keys: Some(true),
        grpc_addr: Some("127.0.0.1:0".parse().unwrap()),
        http_addr: Some("127.0.0.1:0".parse().unwrap()),
        state_dir: Some(dir.path().join("state")),
        tls_cert_file: Some(cert.to_owned()),
        tls_key_file: Some(key.to_owned()),
        ..l1gate::config::ServeArgs::default()
    };

    // Expired.
    let (cert, key) = install(dir.path(), &ca.server(-30, -1));
    let message = expect(args(&cert, &key)).await;
    assert!(
        message.contains("server.pem") && message.contains("expired"),
        "{message}"
    );
    // A key of another certificate.
    let (good_cert, _) = ca.server(-1, 30);
    let (_, other_key) = ca.server(-1, 30);
    let (cert, key) = install(dir.path(), &(good_cert, other_key));
    let message = expect(args(&cert, &key)).await;
    assert!(
        message.contains("server.key") && message.contains("does not belong"),
        "{message}"
    );
    // Missing.
    let missing = dir.path().join("nowhere.pem");
    let message = expect(args(&missing, &key)).await;
    assert!(
        message.contains("nowhere.pem") && message.contains("no such file"),
        "{message}"
    );
    // The addresses the listings show are https:// ones.
    let resolved = args(&cert, &key).resolve().unwrap();
    assert!(resolved.public_http_url.starts_with("https://"));
    assert!(resolved.public_grpc_url.starts_with("https://"));
    let routes = l1gate::endpoints::Endpoints::of(&resolved).unwrap();
    assert!(routes.grpc_url.starts_with("https://") && routes.http_url.starts_with("https://"));
    // Half configured: a setting error naming the missing one.
    let half = l1gate::config::ServeArgs {
        tls_key_file: None,
        ..args(&cert, &key)
    };
    let refused = half.resolve().unwrap_err().to_string();
    assert!(refused.contains("tls_key_file"), "{refused}");
}

/// Serves `router` over TLS with `files`, as an upstream of l1gate's
/// would (WebSocket upgrades included); its address.
pub async fn tls_upstream(
    router: axum::Router,
    files: &edge::tls::TlsFiles,
) -> std::net::SocketAddr {
    let acceptor = edge::tls::ServerTls::load(files)
        .unwrap()
        .acceptor(&[b"http/1.1"])
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (acceptor, router) = (acceptor.clone(), router.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(socket).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(router);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    addr
}

/// `/healthz` as JSON.
fn health(gate: &Gate) -> serde_json::Value {
    health_at(gate.running.http_addr)
}

/// `/healthz` of the server at `http` as JSON.
fn health_at(http: std::net::SocketAddr) -> serde_json::Value {
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "10"])
        .arg(format!("http://{http}/healthz"))
        .output()
        .expect("curl (Debian package curl) must be installed for the TLS tests");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `POST /{key}/info` of `body`: status and JSON.
async fn info(gate: &Gate, key: &str, body: &str) -> (u16, serde_json::Value) {
    let out = std::process::Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "--max-time", "10", "-d", body])
        .arg(format!("http://{}/{key}/info", gate.running.http_addr))
        .output()
        .expect("curl (Debian package curl) must be installed for the TLS tests");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (json, status) = text.rsplit_once('\n').unwrap();
    (
        status.parse().unwrap(),
        serde_json::from_str(json).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_info_source_is_verified_against_the_ca_bundle() {
    let Pki {
        dir,
        ca: _ca,
        ca_file,
        files,
    } = Pki::new("upstream CA");
    let fees = serde_json::json!({"userCrossRate": "0.00035", "answered": "upstream"});
    let answer = fees.clone();
    let router = axum::Router::new().route(
        "/info",
        axum::routing::post(move || {
            let answer = answer.clone();
            async move { axum::Json(answer) }
        }),
    );
    let upstream = tls_upstream(router, &files).await;
    let url = format!("https://localhost:{}/info", upstream.port());
    let body = r#"{"type":"userFees","user":"0x0000000000000000000000000000000000000001"}"#;

    // Trusted through the bundle: the upstream's answer.
    let mut keys = KeysFile::default();
    let (api_key, _) = keys.add_key("alice", 0).unwrap();
    let gate = Gate::start(keys.clone(), |args| {
        args.info_url = Some(url.clone());
        args.upstream_ca_file = Some(ca_file.clone());
    })
    .await;
    let (status, answered) = info(&gate, &api_key, body).await;
    assert_eq!((status, &answered), (200, &fees));
    assert_eq!(
        health(&gate)["info_source"]["error"],
        serde_json::Value::Null
    );

    // Without the bundle the certificate is not trusted: 502, saying why,
    // never a fall back to plain text.
    let gate = Gate::start(keys, |args| args.info_url = Some(url.clone())).await;
    let (status, refused) = info(&gate, &api_key, body).await;
    assert_eq!(status, 502, "{refused}");
    let message = refused["message"]
        .as_str()
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(message.contains("certificate"), "{refused}");

    // A bundle that cannot be read is a setting error naming it.
    let broken = l1gate::config::ServeArgs {
        upstream_ca_file: Some(dir.path().join("missing.pem")),
        ..l1gate::config::ServeArgs::default()
    };
    let error = broken.resolve().unwrap_err().to_string();
    assert!(
        error.contains("upstream_ca_file") && error.contains("missing.pem"),
        "{error}"
    );
}

/// A JSON-RPC call over a WebSocket through l1gate's gateway for the
/// network at `host`: the first answer, or the HTTP status of a refusal
/// with its body.
async fn rpc_over_websocket(
    http: std::net::SocketAddr,
    host: &str,
    key: &str,
) -> Result<serde_json::Value, (u16, String)> {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest as _};
    let mut request = format!("ws://{http}/{key}").into_client_request().unwrap();
    request.headers_mut().insert("host", host.parse().unwrap());
    let mut socket = match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => socket,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default());
            return Err((response.status().as_u16(), body.into_owned()));
        }
        Err(other) => panic!("the WebSocket to l1gate: {other}"),
    };
    socket
        .send(Message::Text(
            r#"{"jsonrpc":"2.0","id":3,"method":"eth_blockNumber","params":[]}"#.into(),
        ))
        .await
        .unwrap();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("an answer in time")
            .expect("the connection is open")
            .unwrap();
        if let Message::Text(text) = message {
            return Ok(serde_json::from_str(&text).unwrap());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wss_json_rpc_upstream_is_verified_against_the_ca_bundle() {
    // The directory lives as long as the test: its files are read late.
    let Pki {
        dir: _dir,
        ca: _ca,
        ca_file,
        files,
    } = Pki::new("node CA");
    let node = crate::server::jsonrpc_node::JsonRpcNode::start_tls(&files).await;
    let host = "hyperevm-mainnet.gw.test";
    let chains = crate::server::networks::chains_of(&format!(
        r#"
[[chains]]
id = "hyperevm"
name = "HyperEVM"
ecosystem = "evm"
[[chains.networks]]
id = "mainnet"
name = "HyperEVM Mainnet"
base_url = "https://{host}"
[[chains.networks.nodes]]
id = "hyperevm-tls"
node_type = "full"
jsonrpc_ws = "wss://localhost:{}/"
"#,
        node.port()
    ));

    // Trusted through the bundle: relayed over TLS.
    let trusted = crate::server::harness::TestServer::start(&real_capture(), |args| {
        args.chains = chains.clone();
        args.upstream_ca_file = Some(ca_file.clone());
    })
    .await;
    let answer = rpc_over_websocket(trusted.running.http_addr, host, &trusted.key)
        .await
        .unwrap();
    assert_eq!(answer["id"], 3, "{answer}");
    assert!(
        answer["result"]
            .as_str()
            .is_some_and(|r| r.starts_with("0x")),
        "{answer}"
    );
    assert!(
        node.ws_messages()
            .iter()
            .any(|m| m.contains("eth_blockNumber")),
        "the node saw the call"
    );
    let health = health_at(trusted.running.http_addr);
    assert!(
        health["networks"]["hyperevm/mainnet"]["upstream_errors"]
            .as_object()
            .is_some_and(|e| e.contains_key("jsonrpc_ws") && e["jsonrpc_ws"].is_null()),
        "{health}"
    );
    drop(trusted);

    // Without the bundle the node's certificate does not verify: a 502
    // saying so, never a plain-text fallback.
    let seen = node.ws_messages().len();
    let untrusted = crate::server::harness::TestServer::start(&real_capture(), |args| {
        args.chains = chains.clone();
    })
    .await;
    let (status, body) = rpc_over_websocket(untrusted.running.http_addr, host, &untrusted.key)
        .await
        .unwrap_err();
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("certificate"), "{body}");
    assert_eq!(node.ws_messages().len(), seen);
    // And /healthz says why, for the operator.
    let health = health_at(untrusted.running.http_addr);
    let failure = &health["networks"]["hyperevm/mainnet"]["upstream_errors"]["jsonrpc_ws"];
    assert!(
        failure.as_str().is_some_and(|f| f.contains("certificate")),
        "{health}"
    );
}

fn real_capture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/real/btc-985148182")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_transaction_stream_upstream_is_verified_against_the_ca_bundle() {
    use crate::server::transaction_stream::{
        Net, StandIn, TOKEN, aptos, batch, client, collect, from,
    };
    // The directory lives as long as the test: its files are read late.
    let Pki {
        dir: _dir,
        ca: _ca,
        ca_file,
        files,
    } = Pki::new("indexer CA");
    let stand_in = StandIn::start_tls(1, &files).await;
    assert!(stand_in.url.starts_with("https://localhost:"));
    let chains = aptos(&[Net {
        id: "mainnet",
        stream: Some(&stand_in.url),
        token: Some(TOKEN),
    }]);

    // Trusted through the bundle: relayed over HTTP/2 on TLS.
    let trusted = crate::server::harness::TestServer::start(&real_capture(), |args| {
        args.chains = chains.clone();
        args.upstream_ca_file = Some(ca_file.clone());
    })
    .await;
    let mut grpc = client(&trusted, None).await;
    let batches = collect(&mut grpc, trusted.req(from(100, 15, 10)))
        .await
        .unwrap();
    assert_eq!(batches, vec![batch(1, 100..110, 0), batch(1, 110..115, 0)]);
    assert_eq!(stand_in.calls(), 1);
    let health = health_at(trusted.running.http_addr);
    assert!(
        health["networks"]["aptos/mainnet"]["upstream_errors"]
            .as_object()
            .is_some_and(
                |e| e.contains_key("transaction_stream") && e["transaction_stream"].is_null()
            ),
        "{health}"
    );
    drop(trusted);

    // Without the bundle the upstream's certificate does not verify: the
    // call is UNAVAILABLE and never reaches it in plain text.
    let untrusted = crate::server::harness::TestServer::start(&real_capture(), |args| {
        args.chains = chains.clone();
    })
    .await;
    let mut grpc = client(&untrusted, None).await;
    let refused = collect(&mut grpc, untrusted.req(from(100, 15, 10)))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(stand_in.calls(), 1);
    // /healthz says why, for the operator.
    let health = health_at(untrusted.running.http_addr);
    let failure = &health["networks"]["aptos/mainnet"]["upstream_errors"]["transaction_stream"];
    assert!(
        failure.as_str().is_some_and(|f| f.contains("certificate")),
        "{health}"
    );
}
