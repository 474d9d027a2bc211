//! Ledger info (`GET /v1`) cached per network: one upstream request per
//! window however many callers ask, and the freshness verdict `/healthz`
//! reports (a `ledger_timestamp` more than 30 s behind real time means the
//! node is not in sync).
//!
//! Callers in the same window share one answer, whatever it was: a node
//! error or an unreachable node is also kept for the window, so an outage
//! costs the node one request per window, not one per caller. Concurrent
//! callers of an expired window wait for the one request in flight.

use std::sync::Arc;
use std::time::{Duration, Instant};

use edge::upstream::{UpstreamError, UpstreamResponse};

/// Shortest and longest cache window: fresh enough for a freshness
/// check, long enough that a crowd of callers costs the node little.
pub const WINDOW_RANGE: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(5));

/// A `ledger_timestamp` further behind than this marks the network stale.
pub const STALE_AFTER: Duration = Duration::from_secs(30);

/// One answer, as callers receive it.
pub type Answer = Result<Arc<UpstreamResponse>, UpstreamError>;

/// A network's ledger info cache.
#[derive(Debug)]
pub struct LedgerCache {
    window: Duration,
    slot: tokio::sync::Mutex<Option<(Instant, Answer)>>,
    requests: std::sync::atomic::AtomicU64,
}

/// What `/healthz` says about a network.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// `ok`, `stale` (ledger behind), `error` (the node answered an error
    /// status) or `unreachable`.
    pub status: &'static str,
    /// `chain_id` of the ledger info.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain_id: Option<u64>,
    /// `ledger_version`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_version: Option<String>,
    /// How far `ledger_timestamp` is behind the wall clock, in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ledger_age_ms: Option<i64>,
    /// Why it is not `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl LedgerCache {
    /// A cache keeping each answer for `window`.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            slot: tokio::sync::Mutex::new(None),
            requests: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many upstream requests the cache made.
    pub fn requests(&self) -> u64 {
        self.requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The window's answer, asking `fetch` when the window has passed.
    pub async fn get<F>(&self, fetch: F) -> Answer
    where
        F: std::future::Future<Output = Result<UpstreamResponse, UpstreamError>>,
    {
        let mut slot = self.slot.lock().await;
        if let Some((at, answer)) = slot.as_ref()
            && at.elapsed() < self.window
        {
            return answer.clone();
        }
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let answer = fetch.await.map(Arc::new);
        *slot = Some((Instant::now(), answer.clone()));
        answer
    }
}

/// The verdict on `answer` at `now_ms` (Unix ms).
pub fn verdict(answer: &Answer, now_ms: i64) -> Verdict {
    let mut verdict = Verdict {
        status: "ok",
        chain_id: None,
        ledger_version: None,
        ledger_age_ms: None,
        problem: None,
    };
    let response = match answer {
        Ok(response) => response,
        Err(failure) => {
            verdict.status = "unreachable";
            verdict.problem = Some(failure.to_string());
            return verdict;
        }
    };
    if !response.status.is_success() {
        verdict.status = "error";
        verdict.problem = Some(format!("GET /v1 answered {}", response.status));
        return verdict;
    }
    let info: serde_json::Value = serde_json::from_slice(&response.body).unwrap_or_default();
    verdict.chain_id = info["chain_id"].as_u64();
    verdict.ledger_version = info["ledger_version"].as_str().map(str::to_owned);
    let timestamp_us = info["ledger_timestamp"]
        .as_str()
        .and_then(|t| t.parse::<i64>().ok());
    let Some(timestamp_us) = timestamp_us else {
        verdict.status = "error";
        verdict.problem = Some("ledger info has no ledger_timestamp".to_owned());
        return verdict;
    };
    let age = now_ms - timestamp_us / 1000;
    verdict.ledger_age_ms = Some(age);
    if age > i64::try_from(STALE_AFTER.as_millis()).unwrap_or(i64::MAX) {
        verdict.status = "stale";
        verdict.problem = Some(format!(
            "ledger_timestamp is {} s behind (more than {} s: the node is not in sync)",
            age / 1000,
            STALE_AFTER.as_secs()
        ));
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, StatusCode};
    use bytes::Bytes;

    fn info(timestamp_us: i64) -> UpstreamResponse {
        UpstreamResponse {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Bytes::from(format!(
                r#"{{"chain_id":1,"ledger_version":"9","ledger_timestamp":"{timestamp_us}"}}"#
            )),
        }
    }

    #[tokio::test]
    async fn one_request_per_window_for_any_number_of_callers() {
        let cache = Arc::new(LedgerCache::new(Duration::from_millis(300)));
        let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let cache = cache.clone();
            let calls = calls.clone();
            tasks.push(tokio::spawn(async move {
                cache
                    .get(async {
                        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        Ok(info(1))
                    })
                    .await
            }));
        }
        for task in tasks {
            assert!(task.await.unwrap().is_ok());
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(350)).await;
        let again = cache
            .get(async { Err(UpstreamError::Unreachable("down".into())) })
            .await;
        assert!(again.is_err());
        // The failure is kept for the window too.
        let kept = cache.get(async { Ok(info(1)) }).await;
        assert!(kept.is_err());
        assert_eq!(cache.requests(), 2);
    }

    #[test]
    fn a_ledger_more_than_30_s_behind_is_stale() {
        let now_ms = 1_700_000_000_000;
        let fresh = verdict(&Ok(Arc::new(info((now_ms - 4_000) * 1000))), now_ms);
        assert_eq!(fresh.status, "ok");
        assert_eq!(fresh.ledger_age_ms, Some(4_000));
        assert_eq!(fresh.chain_id, Some(1));
        let stale = verdict(&Ok(Arc::new(info((now_ms - 31_000) * 1000))), now_ms);
        assert_eq!(stale.status, "stale");
        let down = verdict(&Err(UpstreamError::Timeout(5)), now_ms);
        assert_eq!(down.status, "unreachable");
    }
}
