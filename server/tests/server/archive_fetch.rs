//! `l1gate archive fetch` against a real S3-compatible server: moto's
//! (pinned, from PyPI, in a virtual environment of its own), started here on
//! a free loopback port and killed by its PID when the test ends.
//!
//! moto checks signatures once its first three requests have passed
//! (`INITIAL_NO_AUTH_ACTION_COUNT=3`): the setup script spends them on an
//! IAM user, its access key and its policy, and signs everything after with
//! that key, so every request of `l1gate` is verified by moto's own SigV4
//! check. moto does not enforce requester pays, so the test puts a
//! recording proxy between `l1gate` and moto and asserts that every request
//! carried `x-amz-request-payer: requester` and signed it; the proxy also
//! breaks off one transfer mid-body, which must be retried and resumed.
//! A second moto, behind TLS with a certificate made for the test, serves
//! the `https://` path.
//!
//! The bucket holds LZ4-framed hour files of 2025-07-27 20h to 2025-07-28
//! 3h with 23h missing; the range asked is 22h to 2h (across midnight), so
//! 21h and 2h come as spill-over hours and 20h and 3h stay in the bucket.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::harness::free_port;
use super::python;

const L1GATE: &str = env!("CARGO_BIN_EXE_l1gate");

/// moto's S3 server with boto3 to fill it and an LZ4 frame encoder, pinned.
const MOTO: [&str; 3] = ["moto[server]==5.2.5", "boto3==1.44.8", "lz4==4.4.5"];
/// Their environment under `target/`, apart from the other Python tests'.
const MOTO_VENV: &str = "python-moto";

const BUCKET: &str = "hl-archive-test";

/// Keys put in the bucket and the lines (blocks) of each.
const OBJECTS: [(&str, usize); 8] = [
    ("node_fills_by_block/hourly/20250727/20.lz4", 20),
    ("node_fills_by_block/hourly/20250727/21.lz4", 40),
    ("node_fills_by_block/hourly/20250727/22.lz4", 3_000),
    ("node_fills_by_block/hourly/20250728/0.lz4", 120),
    ("node_fills_by_block/hourly/20250728/1.lz4", 60),
    ("node_fills_by_block/hourly/20250728/2.lz4", 30),
    ("node_fills_by_block/hourly/20250728/3.lz4", 10),
    ("node_fills/hourly/20250727/22.lz4", 10),
];

/// The keys the range (with its spill-over hours) fetches.
const WANTED: [&str; 5] = [
    "node_fills_by_block/hourly/20250727/21.lz4",
    "node_fills_by_block/hourly/20250727/22.lz4",
    "node_fills_by_block/hourly/20250728/0.lz4",
    "node_fills_by_block/hourly/20250728/1.lz4",
    "node_fills_by_block/hourly/20250728/2.lz4",
];

const SETUP: &str = r#"
import json, os, random, sys
import boto3, lz4.frame

endpoint, bucket, expected = sys.argv[1:4]
bootstrap = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                         aws_access_key_id="AKIDBOOTSTRAP", aws_secret_access_key="bootstrap")
# The three requests moto lets through unsigned.
bootstrap.create_user(UserName="fetcher")
key = bootstrap.create_access_key(UserName="fetcher")["AccessKey"]
bootstrap.put_user_policy(UserName="fetcher", PolicyName="archive", PolicyDocument=json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
s3.create_bucket(Bucket=bucket)
s3.put_bucket_request_payment(Bucket=bucket, RequestPaymentConfiguration={"Payer": "Requester"})

rng = random.Random(7)
block = 676607012
for spec in sys.argv[4:]:
    name, lines = spec.split("=")
    day, hour = name.split("/")[-2], int(name.split("/")[-1].split(".")[0])
    # Each file starts with a block from the end of the hour before: the
    # node's clock cuts the files, not the blocks' times.
    start = (hour * 3600 - 0.15) % 86400
    out = []
    for i in range(int(lines)):
        t = start + i * 0.07
        stamp = "%s-%s-%sT%02d:%02d:%012.9f" % (day[:4], day[4:6], day[6:], t // 3600 % 24, t // 60 % 60, t % 60)
        events = [["0x%040x" % rng.getrandbits(160),
                   {"coin": "BTC", "px": "%d.0" % rng.randrange(60000, 120000), "sz": "0.%05d" % rng.randrange(100000),
                    "hash": "0x%064x" % rng.getrandbits(256), "tid": rng.getrandbits(50)}]
                  for _ in range(rng.randrange(0, 3))]
        out.append(json.dumps({"local_time": stamp, "block_time": stamp, "block_number": block, "events": events},
                              separators=(",", ":")))
        block += 1
    body = lz4.frame.compress(("\n".join(out) + "\n").encode())
    assert body[:4] == b"\x04\x22\x4d\x18"
    s3.put_object(Bucket=bucket, Key=name, Body=body)
    path = os.path.join(expected, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(body)
print(json.dumps({"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}))
"#;

/// moto's server, killed (by its PID, through `kill_on_drop`) when dropped.
struct Moto {
    _child: tokio::process::Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Moto {
    /// Starts `python -m moto.server` with `args` and `env`, logging into
    /// `dir`.
    async fn start(python: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let log = dir.join("moto.log");
        let child = tokio::process::Command::new(python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("moto.out")).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("starting moto's server");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        for _ in 0..300 {
            if TcpStream::connect(addr).await.is_ok() {
                return Self {
                    _child: child,
                    addr,
                    log,
                };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "moto's server did not listen on {addr} within 30 s: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
}

/// What a client sent on one connection.
type Sent = Arc<Mutex<Vec<u8>>>;

/// A TCP proxy in front of moto that keeps every byte the client sent,
/// and can break off one answer.
struct Recorder {
    addr: SocketAddr,
    sent: Arc<Mutex<Vec<Sent>>>,
    cut: Arc<Mutex<Option<Cut>>>,
    task: tokio::task::JoinHandle<()>,
}

/// Break off the next answer to a request whose head contains `request`
/// after `after` bytes, as a dropped connection would.
struct Cut {
    request: String,
    after: usize,
}

impl Recorder {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let connections = Arc::clone(&sent);
        let cut: Arc<Mutex<Option<Cut>>> = Arc::default();
        let armed = Arc::clone(&cut);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let log: Sent = Arc::default();
                connections.lock().unwrap().push(Arc::clone(&log));
                let armed = Arc::clone(&armed);
                tokio::spawn(async move {
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = server.into_split();
                    let up = async {
                        let mut buf = vec![0u8; 64 << 10];
                        while let Ok(n) = from_client.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            log.lock().unwrap().extend_from_slice(&buf[..n]);
                            if to_server.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = to_server.shutdown().await;
                    };
                    let down = async {
                        let mut buf = vec![0u8; 64 << 10];
                        let mut limit: Option<usize> = None;
                        while let Ok(n) = from_server.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            if limit.is_none() {
                                let mut cut = armed.lock().unwrap();
                                let asked =
                                    String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
                                if cut.as_ref().is_some_and(|c| asked.contains(&c.request)) {
                                    limit = cut.take().map(|c| c.after);
                                }
                            }
                            let n = match &mut limit {
                                Some(left) => {
                                    let n = n.min(*left);
                                    *left -= n;
                                    n
                                }
                                None => n,
                            };
                            if to_client.write_all(&buf[..n]).await.is_err() || limit == Some(0) {
                                break;
                            }
                        }
                        let _ = to_client.shutdown().await;
                    };
                    tokio::join!(up, down);
                });
            }
        });
        Self {
            addr,
            sent,
            cut,
            task,
        }
    }

    /// Every request head sent so far: the request line and the headers,
    /// names lower-cased. (`l1gate` sends only GETs, which have no body.)
    fn requests(&self) -> Vec<(String, Vec<(String, String)>)> {
        let mut out = Vec::new();
        for log in self.sent.lock().unwrap().iter() {
            let bytes = log.lock().unwrap().clone();
            let text = String::from_utf8(bytes).unwrap();
            for head in text.split("\r\n\r\n").filter(|h| !h.is_empty()) {
                let mut lines = head.split("\r\n");
                let request_line = lines.next().unwrap().to_owned();
                let headers = lines
                    .map(|line| {
                        let (name, value) = line.split_once(':').unwrap();
                        (name.trim().to_ascii_lowercase(), value.trim().to_owned())
                    })
                    .collect();
                out.push((request_line, headers));
            }
        }
        out
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Keys {
    id: String,
    secret: String,
}

/// Runs `l1gate archive fetch` with `args` through `proxy`, the range
/// 2025-07-27T22:00Z to 2025-07-28T02:00Z, and `keys` in its environment
/// only (no AWS files, no AWS_REGION from this process).
async fn fetch(proxy: SocketAddr, keys: &Keys, home: &Path, args: &[&str]) -> Output {
    fetch_from(&format!("http://{proxy}"), keys, home, args, &[]).await
}

/// [`fetch`] from `endpoint`, with `env` added.
async fn fetch_from(
    endpoint: &str,
    keys: &Keys,
    home: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
) -> Output {
    let run = tokio::process::Command::new(L1GATE)
        .args([
            "archive",
            "fetch",
            "--endpoint",
            endpoint,
            "--region",
            "us-east-1",
        ])
        .args([
            "--from",
            "2025-07-27T22:00:00Z",
            "--to",
            "2025-07-28T02:00:00Z",
        ])
        .args(args)
        .env_clear()
        .env("HOME", home)
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("no-credentials"))
        .env("AWS_CONFIG_FILE", home.join("no-config"))
        .env("AWS_ACCESS_KEY_ID", &keys.id)
        .env("AWS_SECRET_ACCESS_KEY", &keys.secret)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("l1gate archive fetch finished within 120 s")
        .unwrap()
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Every file under `root`, by path relative to it.
fn files(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let name = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    if root.exists() {
        walk(root, root, &mut out);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_fetch_downloads_resumes_and_signs_requester_pays_requests() {
    let python = python::venv_named(MOTO_VENV, &MOTO);
    let dir = tempfile::tempdir().unwrap();
    let moto = Moto::start(
        &python,
        dir.path(),
        &[],
        &[("INITIAL_NO_AUTH_ACTION_COUNT", "3")],
    )
    .await;
    let expected_dir = dir.path().join("expected");
    let mut setup_args = vec![
        format!("http://{}", moto.addr),
        BUCKET.to_owned(),
        expected_dir.display().to_string(),
    ];
    setup_args.extend(OBJECTS.iter().map(|(key, lines)| format!("{key}={lines}")));
    let printed = python::run(&python, SETUP, &setup_args, Duration::from_secs(120)).await;
    let keys: serde_json::Value = serde_json::from_str(printed.trim()).unwrap();
    let keys = Keys {
        id: keys["id"].as_str().unwrap().to_owned(),
        secret: keys["secret"].as_str().unwrap().to_owned(),
    };
    let expected: BTreeMap<String, Vec<u8>> = files(&expected_dir)
        .into_iter()
        .filter(|(key, _)| WANTED.contains(&key.as_str()))
        .collect();
    assert_eq!(expected.len(), WANTED.len());
    let total: usize = expected.values().map(Vec::len).sum();
    let biggest = "node_fills_by_block/hourly/20250727/22.lz4";
    assert!(
        expected[biggest].len() > 200_000,
        "a transfer of many reads"
    );

    let proxy = Recorder::start(moto.addr).await;
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let out = dir.path().join("archive");
    let out_arg = out.display().to_string();
    let bucket = ["--bucket", BUCKET, "--out", &out_arg];

    // The plan alone: counts, bytes, the gap and the spill-over hours;
    // nothing written.
    let dry = fetch(
        proxy.addr,
        &keys,
        &home,
        &[&bucket[..], &["--dry-run"]].concat(),
    )
    .await;
    let (stdout, stderr) = text(&dry);
    assert!(dry.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("to fetch: 5 hour files, {total} bytes")),
        "{stdout}"
    );
    assert!(
        stdout.contains("missing in the bucket: 20250727/23\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("4 hours, and the spill-over hours 20250727/21 and 20250728/2"),
        "{stdout}"
    );
    assert!(stdout.contains("requester pays"), "{stdout}");
    assert!(!out.exists(), "--dry-run wrote {}", out.display());

    // The download: the bucket's layout, byte for byte, and nothing else.
    let first = fetch(proxy.addr, &keys, &home, &bucket).await;
    let (stdout, stderr) = text(&first);
    assert!(first.status.success(), "{stdout}\n{stderr}");
    assert_eq!(files(&out), expected);
    assert!(
        stdout.contains(&format!("fetched 5 hour files, {total} bytes")),
        "{stdout}"
    );
    assert!(
        stdout.contains("missing in the bucket: 20250727/23;"),
        "{stdout}"
    );
    assert!(stdout.contains("failed: 0"), "{stdout}");

    // Again: everything is here, nothing moves.
    let again = fetch(proxy.addr, &keys, &home, &bucket).await;
    let (stdout, stderr) = text(&again);
    assert!(again.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("to fetch: 0 hour files, 0 bytes"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "already complete in {out_arg}: 5 hour files, {total} bytes"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("fetched 0 hour files, 0 bytes"), "{stdout}");
    let gets_before = proxy.requests().len();

    // An interrupted transfer: the first half in the `.part`, finished with
    // a Range request.
    let path = out.join(biggest);
    let whole = std::fs::read(&path).unwrap();
    let half = whole.len() / 2;
    std::fs::remove_file(&path).unwrap();
    let part = out.join(format!("{biggest}.part"));
    std::fs::write(&part, &whole[..half]).unwrap();
    let resumed = fetch(proxy.addr, &keys, &home, &bucket).await;
    let (stdout, stderr) = text(&resumed);
    assert!(resumed.status.success(), "{stdout}\n{stderr}");
    let rest = whole.len() - half;
    assert!(
        stdout.contains(&format!(
            "to fetch: 1 hour file, {rest} bytes ({}), 1 of them resumed from .part files",
            l1gate::archive::fetch::human_bytes(rest as u64)
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("fetched 1 hour file, {rest} bytes")),
        "{stdout}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    assert!(!part.exists());
    assert_eq!(files(&out), expected);
    let ranged: Vec<String> = proxy.requests()[gets_before..]
        .iter()
        .filter_map(|(line, headers)| {
            headers
                .iter()
                .find(|(name, _)| name == "range")
                .map(|(_, value)| format!("{line} {value}"))
        })
        .collect();
    assert_eq!(
        ranged,
        [format!("GET /{BUCKET}/{biggest} HTTP/1.1 bytes={half}-")]
    );

    // A transfer broken off mid-body: retried, resumed where it broke.
    std::fs::remove_file(&path).unwrap();
    *proxy.cut.lock().unwrap() = Some(Cut {
        request: format!("GET /{BUCKET}/{biggest} "),
        after: 100_000,
    });
    let asked_before = proxy.requests().len();
    let broken = fetch(proxy.addr, &keys, &home, &bucket).await;
    let (stdout, stderr) = text(&broken);
    assert!(broken.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("s3://{BUCKET}/{biggest}: reading the body"))
            && stderr.contains("trying again in"),
        "{stderr}"
    );
    assert!(proxy.cut.lock().unwrap().is_none(), "the cut happened");
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    assert_eq!(files(&out), expected);
    let gets: Vec<Option<String>> = proxy.requests()[asked_before..]
        .iter()
        .filter(|(line, _)| line.contains(biggest))
        .map(|(_, headers)| {
            headers
                .iter()
                .find(|(name, _)| name == "range")
                .map(|(_, value)| value.clone())
        })
        .collect();
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert_eq!(gets[0], None);
    let resumed_at: usize = gets[1]
        .as_deref()
        .and_then(|range| range.strip_prefix("bytes="))
        .and_then(|range| range.strip_suffix('-'))
        .and_then(|from| from.parse().ok())
        .unwrap_or_else(|| panic!("{gets:?}"));
    assert!(resumed_at > 0 && resumed_at < 100_000, "{resumed_at}");

    // A bucket that is not there, and keys S3 refuses: clear errors, a
    // failed exit.
    let missing = dir.path().join("elsewhere").display().to_string();
    let nope = fetch(
        proxy.addr,
        &keys,
        &home,
        &["--bucket", "no-such-bucket", "--out", &missing],
    )
    .await;
    let (stdout, stderr) = text(&nope);
    assert!(!nope.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("bucket no-such-bucket does not exist") && stderr.contains("404"),
        "{stderr}"
    );
    let wrong = Keys {
        id: keys.id.clone(),
        secret: "not-the-secret".to_owned(),
    };
    let refused = fetch(
        proxy.addr,
        &wrong,
        &home,
        &["--bucket", BUCKET, "--out", &missing],
    )
    .await;
    let (stdout, stderr) = text(&refused);
    assert!(!refused.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("access denied, HTTP 403")
            && stderr.contains("check the AWS credentials")
            && stderr.contains("requester-pays"),
        "{stderr}"
    );
    assert!(!Path::new(&missing).exists());

    // Every request asked as the requester who pays, and signed it.
    let requests = proxy.requests();
    assert!(requests.len() >= 15, "{} requests", requests.len());
    for (line, headers) in &requests {
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .unwrap_or_else(|| panic!("{line}: no {name} header"))
        };
        assert_eq!(header("x-amz-request-payer"), "requester", "{line}");
        let authorization = header("authorization");
        assert!(
            authorization.starts_with("AWS4-HMAC-SHA256 Credential="),
            "{line}: {authorization}"
        );
        let signed = authorization
            .split("SignedHeaders=")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .unwrap();
        assert!(
            signed.split(';').any(|name| name == "x-amz-request-payer"),
            "{line}: signed {signed}"
        );
    }
    let moto_log = std::fs::read_to_string(&moto.log).unwrap();
    assert!(
        moto_log.contains(" 206 "),
        "moto served the Range request: {moto_log}"
    );
}

/// Writes a self-signed certificate of `localhost` and its key, with
/// `cryptography` (a dependency of moto's).
const CERTIFICATE: &str = r#"
import datetime, sys
from cryptography import x509
from cryptography.x509.oid import NameOID
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

key = ec.generate_private_key(ec.SECP256R1())
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
now = datetime.datetime.now(datetime.timezone.utc)
cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256()))
with open(sys.argv[1], "wb") as f:
    f.write(cert.public_bytes(serialization.Encoding.PEM))
with open(sys.argv[2], "wb") as f:
    f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))
"#;

/// Puts one object (a file's bytes) into a new bucket over HTTPS.
const PUT_ONE: &str = r#"
import sys
import boto3

endpoint, ca, bucket, key, path = sys.argv[1:6]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", verify=ca,
                  aws_access_key_id="AKIDTLS", aws_secret_access_key="tls")
s3.create_bucket(Bucket=bucket)
with open(path, "rb") as f:
    s3.put_object(Bucket=bucket, Key=key, Body=f.read())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_fetch_speaks_tls_to_https_endpoints() {
    let python = python::venv_named(MOTO_VENV, &MOTO);
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let shown = |path: &Path| path.display().to_string();
    python::run(
        &python,
        CERTIFICATE,
        &[shown(&cert), shown(&key)],
        Duration::from_secs(60),
    )
    .await;
    let moto = Moto::start(
        &python,
        dir.path(),
        &["-c", &shown(&cert), "-k", &shown(&key)],
        &[],
    )
    .await;
    let endpoint = format!("https://localhost:{}", moto.addr.port());
    let object = "node_fills_by_block/hourly/20250727/22.lz4";
    let body: Vec<u8> = (0..100_000u32).flat_map(u32::to_le_bytes).collect();
    let body_path = dir.path().join("body");
    std::fs::write(&body_path, &body).unwrap();
    python::run(
        &python,
        PUT_ONE,
        &[
            endpoint.clone(),
            shown(&cert),
            "hl-tls-test".to_owned(),
            object.to_owned(),
            shown(&body_path),
        ],
        Duration::from_secs(60),
    )
    .await;

    let keys = Keys {
        id: "AKIDTLS".to_owned(),
        secret: "tls".to_owned(),
    };
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let out = dir.path().join("archive");
    let out_arg = shown(&out);
    let args = ["--bucket", "hl-tls-test", "--out", &out_arg];
    // The certificate trusted (rustls-native-certs reads SSL_CERT_FILE).
    let trusted = fetch_from(&endpoint, &keys, &home, &args, &[("SSL_CERT_FILE", &cert)]).await;
    let (stdout, stderr) = text(&trusted);
    assert!(trusted.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("fetched 1 hour file, 400000 bytes"),
        "{stdout}"
    );
    assert_eq!(std::fs::read(out.join(object)).unwrap(), body);

    // Not trusted (the roots are another certificate): refused at once,
    // not retried as a failure that may pass.
    let other = dir.path().join("other.pem");
    python::run(
        &python,
        CERTIFICATE,
        &[shown(&other), shown(&dir.path().join("other.key"))],
        Duration::from_secs(60),
    )
    .await;
    std::fs::remove_dir_all(&out).unwrap();
    let started = std::time::Instant::now();
    let untrusted = fetch_from(&endpoint, &keys, &home, &args, &[("SSL_CERT_FILE", &other)]).await;
    let (stdout, stderr) = text(&untrusted);
    assert!(!untrusted.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("TLS with localhost") && stderr.contains("certificate"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}: {stderr}",
        started.elapsed()
    );
    assert!(!out.exists());
}
