//! The operator status page in a real browser: Debian's Chromium, headless,
//! driven through ChromeDriver (WebDriver over HTTP), both installed by the
//! test with `apt-get` when missing. The page loads against a running
//! server, lists the feeds, and its stream counts move when a stream opens;
//! a screenshot is kept under `target/artifacts/` for a human to look at.
//! Access: an admin key works, a normal key gets 403, no key 401.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use access::keys::{KeysFile, Role};
use serde_json::{Value, json};

use super::harness::{TestServer, real};
use super::revocation::edit_keys;
use super::standin::http;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Chromium and ChromeDriver from Debian's packages, installed when
/// missing (as root, which CI is); otherwise the test fails saying what to
/// install.
fn browser() -> (PathBuf, PathBuf) {
    if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
        super::harness::install_debian_packages(
            &["chromium", "chromium-driver"],
            "the status page test (headless Chromium and ChromeDriver)",
        );
    }
    (PathBuf::from(CHROMIUM), PathBuf::from(CHROMEDRIVER))
}

/// A ChromeDriver process, killed when dropped (the test ends its session
/// first, which makes Chromium quit).
struct Driver {
    child: Child,
    addr: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    async fn start() -> Driver {
        let (chromium, chromedriver) = browser();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let profile = tempfile::tempdir().unwrap();
        let mut driver = Driver {
            child,
            addr,
            session: String::new(),
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The flags a root user on a closed network needs (no sandbox, no
        // background connections to Google's hosts).
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1400,1000",
            &format!("--user-data-dir={}", driver._profile.path().display()),
        ];
        let created = driver
            .call(
                "POST",
                "/session",
                json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {"binary": chromium, "args": args},
                }}}),
            )
            .await;
        driver.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {created}"))
            .to_owned();
        driver
    }

    async fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let host = self.addr.to_string();
        let body = if method == "GET" || method == "DELETE" {
            String::new()
        } else {
            body.to_string()
        };
        let reply = http(
            self.addr,
            method,
            path,
            &[("host", &host), ("content-type", "application/json")],
            &body,
        )
        .await;
        let value = reply.json()["value"].clone();
        assert!(
            reply.status < 300,
            "WebDriver {method} {path}: {}",
            reply.text
        );
        value
    }

    /// Ends the browser session (Chromium quits).
    async fn quit(&self) {
        self.call("DELETE", &format!("/session/{}", self.session), Value::Null)
            .await;
    }

    async fn open(&self, url: &str) {
        self.call(
            "POST",
            &format!("/session/{}/url", self.session),
            json!({ "url": url }),
        )
        .await;
    }

    /// Runs `script` in the page; its return value.
    async fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            &format!("/session/{}/execute/sync", self.session),
            json!({"script": script, "args": []}),
        )
        .await
    }

    /// Waits (up to 20 s) until `script` returns something truthy.
    async fn until(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let value = self.eval(script).await;
            let truthy = match &value {
                Value::Null | Value::Bool(false) => false,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            if truthy {
                return value;
            }
            assert!(Instant::now() < deadline, "the page never showed {what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn screenshot(&self, path: &Path) {
        let data = self
            .call(
                "GET",
                &format!("/session/{}/screenshot", self.session),
                Value::Null,
            )
            .await;
        let png = base64(data.as_str().unwrap());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

/// Decodes standard base64 (WebDriver's screenshot encoding).
fn base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut count) = (0u32, 0);
    for byte in text
        .bytes()
        .filter(|b| *b != b'=' && !b.is_ascii_whitespace())
    {
        let value = ALPHABET.iter().position(|a| *a == byte).expect("base64") as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    out
}

fn artifacts() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
            PathBuf::from,
        )
        .join("artifacts")
}

/// A server whose test account is an admin, and a second, normal key.
async fn server() -> (TestServer, String) {
    let server = TestServer::start(&real("btc-985148182"), |_| {}).await;
    let mut normal = String::new();
    edit_keys(&server, |file: &mut KeysFile| {
        file.set_role("tests", Role::Admin).unwrap();
        normal = file.add_key("viewer", 0).unwrap().0;
    });
    // The keys file is re-read every second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    (server, normal)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_for_admin_accounts_only() {
    let (server, normal) = server().await;
    let addr = server.running.http_addr;
    let admin = http(addr, "GET", &format!("/{}/status", server.key), &[], "").await;
    assert_eq!(admin.status, 200, "{}", admin.text);
    assert!(admin.text.contains("<title>l1gate status</title>"));
    assert_eq!(admin.header("referrer-policy"), Some("no-referrer"));
    let json = http(
        addr,
        "GET",
        "/status.json",
        &[("x-api-key", &server.key)],
        "",
    )
    .await;
    assert_eq!(json.status, 200, "{}", json.text);
    let snapshot = json.json();
    assert!(
        snapshot["feeds"].as_array().unwrap().len() >= 3,
        "{snapshot}"
    );
    // Where clients reach it, in plain text here.
    let addresses = &snapshot["addresses"];
    assert_eq!(addresses["tls"], false, "{addresses}");
    assert!(
        addresses["grpc"].as_str().unwrap().starts_with("http://")
            && addresses["http"].as_str().unwrap().starts_with("http://")
            && addresses["websocket"]
                .as_str()
                .unwrap()
                .starts_with("ws://")
            && addresses["websocket"].as_str().unwrap().ends_with("/<key>"),
        "{addresses}"
    );
    assert!(
        !json.text.contains(&server.key),
        "the page never shows a key"
    );
    let refused = http(addr, "GET", &format!("/{normal}/status"), &[], "").await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert!(
        refused.json()["message"]
            .as_str()
            .unwrap()
            .contains("admin")
    );
    assert_eq!(
        http(addr, "GET", &format!("/{normal}/status/events"), &[], "")
            .await
            .status,
        403
    );
    assert_eq!(http(addr, "GET", "/status", &[], "").await.status, 401);
    assert_eq!(
        http(addr, "GET", "/status/events", &[], "").await.status,
        401
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_browser_renders_the_page_and_its_counts_move() {
    let (server, _) = server().await;
    let driver = Driver::start().await;
    let url = format!(
        "http://127.0.0.1:{}/{}/status",
        server.running.http_addr.port(),
        server.key
    );
    driver.open(&url).await;
    driver
        .until(
            "a first update",
            "return document.getElementById('updated').textContent !== 'never' && document.getElementById('connection').textContent === 'live';",
        )
        .await;
    let feeds = driver
        .eval("return Array.from(document.querySelectorAll('#feeds tbody tr[data-key]')).map(r => r.dataset.key);")
        .await;
    let feeds: Vec<&str> = feeds
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(feeds.contains(&"fills"), "{feeds:?}");
    assert!(
        feeds.contains(&"order_statuses") || feeds.len() >= 3,
        "{feeds:?}"
    );
    let engine = driver
        .until(
            "the engine's block",
            "const dd = document.querySelectorAll('#engine dd'); return dd.length > 1 && dd[1].textContent !== '–' ? dd[1].textContent : '';",
        )
        .await;
    assert!(engine.as_str().unwrap().chars().any(|c| c.is_ascii_digit()));
    // The page's own event stream is the one stream open now.
    let before: u64 = driver
        .eval("return document.getElementById('streams-open').textContent;")
        .await
        .as_str()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap();

    // Open a market stream with the same key: the counts move.
    let channel = server.channel().await;
    let mut client = proto::market_streaming_client::MarketStreamingClient::new(channel);
    let stream = client
        .stream_bbo(super::harness::with_key(
            proto::BboRequest {
                coins: vec!["BTC".into()],
            },
            &server.key,
        ))
        .await
        .unwrap()
        .into_inner();
    let after = driver
        .until(
            "the new stream",
            &format!(
                "const n = Number(document.getElementById('streams-open').textContent.replace(/,/g, '')); \
                 const views = Array.from(document.querySelectorAll('#streams-by-view tbody tr[data-key]')).map(r => r.dataset.key); \
                 return n > {before} && views.some(v => v.includes('bbo')) ? n : 0;"
            ),
        )
        .await;
    assert!(after.as_u64().unwrap() > before);
    let key_row = driver
        .eval("return Array.from(document.querySelectorAll('#keys tbody tr[data-key]')).map(r => r.textContent).join('\\n');")
        .await;
    assert!(key_row.as_str().unwrap().contains("tests"), "{key_row}");
    let html = driver
        .eval("return document.documentElement.outerHTML;")
        .await;
    assert!(
        !html.as_str().unwrap().contains(&server.key),
        "the rendered page never shows a key"
    );
    let shot = artifacts().join("status-page.png");
    driver.screenshot(&shot).await;
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
    drop(stream);
    driver.quit().await;
}
