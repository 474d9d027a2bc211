//! AWS Signature Version 4 (header-based, `AWS4-HMAC-SHA256`), sans-I/O:
//! a request's method, encoded path, query, headers and payload hash in, the
//! `Authorization` header out.
//!
//! Following AWS's public description of the algorithm:
//!
//! 1. the canonical request: method, path (URI-encoded; S3 does not encode
//!    it twice), query (each name and value URI-encoded, `/` included,
//!    sorted by name), each signed header as `name:value` (lower-case name,
//!    value trimmed with inner runs of spaces folded), the signed header
//!    names joined by `;`, and the payload's SHA-256 in hex, one per line;
//! 2. the string to sign: the algorithm, the request time
//!    (`YYYYMMDDTHHMMSSZ`), the scope (`DATE/REGION/SERVICE/aws4_request`)
//!    and the canonical request's SHA-256 in hex;
//! 3. the signing key: HMAC-SHA256 of the date keyed by `AWS4` + the secret
//!    key, then of the region, the service and `aws4_request`, each keyed by
//!    the one before;
//! 4. the signature: HMAC-SHA256 of the string to sign keyed by the signing
//!    key, in hex.
//!
//! The tests pin it to AWS's published S3 examples (GET Object with a
//! `Range`, and a bucket listing with a query).

use hmac::{Hmac, Mac as _};
use sha2::{Digest as _, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The algorithm name of the `Authorization` header and the string to sign.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// SHA-256 of the empty payload, in hex: the payload hash of a GET.
pub const EMPTY_PAYLOAD_SHA256: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// One request, as it is signed.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `GET`, `PUT`, ….
    pub method: &'a str,
    /// The path exactly as sent, already URI-encoded ([`uri_encode`] with
    /// `/` kept).
    pub path: &'a str,
    /// The query parameters, not encoded ([`canonical_query`] encodes and
    /// sorts them; send the same string).
    pub query: &'a [(&'a str, &'a str)],
    /// The headers to sign (every one sent but `Authorization`): names in
    /// any case, values as sent.
    pub headers: &'a [(&'a str, &'a str)],
    /// The payload's SHA-256 in hex, or `UNSIGNED-PAYLOAD`; the same value
    /// as the `x-amz-content-sha256` header.
    pub payload_sha256: &'a str,
}

/// Who signs, for which region and service, and when.
#[derive(Debug, Clone, Copy)]
pub struct Signer<'a> {
    /// The access key id.
    pub access_key_id: &'a str,
    /// The secret access key.
    pub secret_access_key: &'a str,
    /// The region, e.g. `us-east-1`.
    pub region: &'a str,
    /// The service, `s3` here.
    pub service: &'a str,
    /// The request time, `YYYYMMDDTHHMMSSZ` (the `x-amz-date` header).
    pub amz_date: &'a str,
}

impl Signer<'_> {
    /// `YYYYMMDD`, the first eight characters of the request time.
    fn date(&self) -> &str {
        self.amz_date.get(..8).unwrap_or(self.amz_date)
    }

    /// `DATE/REGION/SERVICE/aws4_request`.
    pub fn scope(&self) -> String {
        format!(
            "{}/{}/{}/aws4_request",
            self.date(),
            self.region,
            self.service
        )
    }

    /// The string to sign for a canonical request.
    pub fn string_to_sign(&self, canonical_request: &str) -> String {
        format!(
            "{ALGORITHM}\n{}\n{}\n{}",
            self.amz_date,
            self.scope(),
            hex::encode(Sha256::digest(canonical_request.as_bytes()))
        )
    }

    /// The signing key of the date, region and service.
    pub fn signing_key(&self) -> [u8; 32] {
        let secret = format!("AWS4{}", self.secret_access_key);
        let date = hmac_sha256(secret.as_bytes(), self.date().as_bytes());
        let region = hmac_sha256(&date, self.region.as_bytes());
        let service = hmac_sha256(&region, self.service.as_bytes());
        hmac_sha256(&service, b"aws4_request")
    }

    /// The signature of `request`, in hex.
    pub fn signature(&self, request: &Request<'_>) -> String {
        let string_to_sign = self.string_to_sign(&canonical_request(request));
        hex::encode(hmac_sha256(&self.signing_key(), string_to_sign.as_bytes()))
    }

    /// The `Authorization` header's value for `request`.
    pub fn authorization(&self, request: &Request<'_>) -> String {
        format!(
            "{ALGORITHM} Credential={}/{},SignedHeaders={},Signature={}",
            self.access_key_id,
            self.scope(),
            signed_headers(request.headers),
            self.signature(request)
        )
    }
}

/// The canonical request of `request`.
pub fn canonical_request(request: &Request<'_>) -> String {
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), canonical_value(value)))
        .collect();
    headers.sort();
    let mut out = format!(
        "{}\n{}\n{}\n",
        request.method,
        request.path,
        canonical_query(request.query)
    );
    for (name, value) in &headers {
        out.push_str(name);
        out.push(':');
        out.push_str(value);
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&signed_headers(request.headers));
    out.push('\n');
    out.push_str(request.payload_sha256);
    out
}

/// The signed header names: lower-case, sorted, joined by `;`.
pub fn signed_headers(headers: &[(&str, &str)]) -> String {
    let mut names: Vec<String> = headers
        .iter()
        .map(|(name, _)| name.to_ascii_lowercase())
        .collect();
    names.sort();
    names.dedup();
    names.join(";")
}

/// A header value as signed: trimmed, inner runs of spaces folded to one.
fn canonical_value(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The query string as signed and sent: each name and value URI-encoded
/// (`/` too), sorted by name then value, `name=value` joined by `&`.
pub fn canonical_query(query: &[(&str, &str)]) -> String {
    let mut pairs: Vec<(String, String)> = query
        .iter()
        .map(|(name, value)| (uri_encode(name, true), uri_encode(value, true)))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// URI-encodes `text` as AWS signs it: every byte but the unreserved
/// (`A-Z a-z 0-9 - . _ ~`) as `%XX` (upper-case hex), and `/` too when
/// `encode_slash` (query values; object paths keep theirs).
pub fn uri_encode(text: &str, encode_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(byte));
            }
            b'/' if !encode_slash => out.push('/'),
            _ => {
                const HEX: &[u8; 16] = b"0123456789ABCDEF";
                out.push('%');
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
        }
    }
    out
}

/// Unix seconds as a request time, `YYYYMMDDTHHMMSSZ`.
pub fn amz_date(unix_secs: i64) -> String {
    let (year, month, day) = feeds::time::civil_from_days(unix_secs.div_euclid(86_400));
    let in_day = unix_secs.rem_euclid(86_400);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        in_day / 3_600,
        in_day / 60 % 60,
        in_day % 60
    )
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    // HMAC takes a key of any length, so this cannot fail.
    let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
        unreachable!("HMAC-SHA256 accepts keys of any length")
    };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    // AWS's published S3 examples of header-based Signature Version 4
    // ("Examples: Signature calculations", Amazon S3 API reference): this
    // key pair, us-east-1, 2013-05-24 00:00:00 UTC, examplebucket.
    const ACCESS_KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";
    const SECRET_ACCESS_KEY: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    fn signer() -> Signer<'static> {
        Signer {
            access_key_id: ACCESS_KEY_ID,
            secret_access_key: SECRET_ACCESS_KEY,
            region: "us-east-1",
            service: "s3",
            amz_date: "20130524T000000Z",
        }
    }

    #[test]
    fn aws_example_get_object_with_a_range() {
        let headers = [
            ("Host", "examplebucket.s3.amazonaws.com"),
            ("Range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_PAYLOAD_SHA256),
            ("x-amz-date", "20130524T000000Z"),
        ];
        let request = Request {
            method: "GET",
            path: "/test.txt",
            query: &[],
            headers: &headers,
            payload_sha256: EMPTY_PAYLOAD_SHA256,
        };
        let canonical = canonical_request(&request);
        assert_eq!(
            canonical,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n\
             x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n\
             x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            signer().string_to_sign(&canonical),
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n\
             7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
        );
        assert_eq!(
            signer().signature(&request),
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
        assert_eq!(
            signer().authorization(&request),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,\
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,\
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn aws_example_list_objects_with_a_query() {
        let headers = [
            ("Host", "examplebucket.s3.amazonaws.com"),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-content-sha256", EMPTY_PAYLOAD_SHA256),
        ];
        // Given out of order: the canonical query sorts them.
        let request = Request {
            method: "GET",
            path: "/",
            query: &[("prefix", "J"), ("max-keys", "2")],
            headers: &headers,
            payload_sha256: EMPTY_PAYLOAD_SHA256,
        };
        assert!(canonical_request(&request).starts_with("GET\n/\nmax-keys=2&prefix=J\n"));
        assert_eq!(
            signer().string_to_sign(&canonical_request(&request)),
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n\
             df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7"
        );
        assert_eq!(
            signer().signature(&request),
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
        );
    }

    #[test]
    fn query_values_encode_slashes_and_token_characters() {
        assert_eq!(
            canonical_query(&[
                ("prefix", "node_fills_by_block/hourly/20250727/"),
                ("list-type", "2"),
                (
                    "continuation-token",
                    "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
                ),
            ]),
            "continuation-token=1ueGcxLPRx1Tr%2FXYExHnhbYLgveDs2J%2Fwm36Hy4vbOwM%3D&list-type=2&\
             prefix=node_fills_by_block%2Fhourly%2F20250727%2F"
        );
        assert_eq!(
            uri_encode("/bucket/a b+c~é.lz4", false),
            "/bucket/a%20b%2Bc~%C3%A9.lz4"
        );
    }

    #[test]
    fn header_values_are_trimmed_and_folded() {
        let headers = [("X-Amz-Meta", "  a   b  "), ("host", "h")];
        let request = Request {
            method: "GET",
            path: "/",
            query: &[],
            headers: &headers,
            payload_sha256: "UNSIGNED-PAYLOAD",
        };
        assert_eq!(
            canonical_request(&request),
            "GET\n/\n\nhost:h\nx-amz-meta:a b\n\nhost;x-amz-meta\nUNSIGNED-PAYLOAD"
        );
    }

    #[test]
    fn request_times_are_utc_and_compact() {
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(amz_date(1_753_603_810), "20250727T081010Z");
    }
}
