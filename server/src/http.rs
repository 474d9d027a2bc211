//! The HTTP edge. For now: `/healthz`, a liveness probe naming the node
//! directory each feed is served from.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::Json;
use axum::routing::get;
use feeds::Source;

use crate::live::LiveFeeds;

/// Routes of the HTTP edge.
pub fn router(live: Arc<LiveFeeds>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .with_state(live)
}

/// `{"status":"ok","feeds":{"fills":"node_fills_by_block",...}}`; a feed
/// whose directory has not appeared yet maps to `null`.
async fn healthz(State(live): State<Arc<LiveFeeds>>) -> Json<serde_json::Value> {
    let feeds: serde_json::Map<String, serde_json::Value> = Source::ALL
        .iter()
        .map(|&source| {
            let dir = match source {
                Source::OrderbookSnapshots => Some("l4_snapshots".to_owned()),
                _ => live.feed(source).and_then(|f| f.source_dir_name()),
            };
            (
                source.feed_id().to_owned(),
                dir.map_or(serde_json::Value::Null, Into::into),
            )
        })
        .collect();
    Json(serde_json::json!({ "status": "ok", "feeds": feeds }))
}
